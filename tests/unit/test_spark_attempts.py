"""The idempotent sink's hand-over between task attempts (issue 23): a retry waits for
the previous attempt, which may still publish its cut-short input, to end; it stops
waiting when that attempt's heartbeat stops (its executor is gone). Fake cursors, no
server: the timing logic only."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from liftbridge_client.client import Client
from liftbridge_client.spark._idempotent import TaskIdentity, WriteGuard

IDENT = TaskIdentity("w", 3, 1)


class Cursors:
    """fetch_cursor / set_cursor over a dict (partition 0 only)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    async def fetch_cursor(self, cursor_id: str, stream: str, *, partition: int = 0) -> int:
        return self.values.get(cursor_id, -1)

    async def set_cursor(
        self, cursor_id: str, stream: str, offset: int, *, partition: int = 0
    ) -> None:
        self.values[cursor_id] = offset


def guard(cursors: Cursors, attempt: int, ack_timeout: float, wait: float) -> WriteGuard:
    return WriteGuard(
        cast(Client, cursors),
        "s",
        IDENT,
        attempt=attempt,
        timeout=ack_timeout,
        wait_for_earlier=wait,
    )


async def timed(coro: Any) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await coro
    return loop.time() - start


def test_no_wait_when_the_previous_attempt_has_ended() -> None:
    cursors = Cursors()
    cursors.values[IDENT.cursor("ended")] = 7
    retry = guard(cursors, attempt=8, ack_timeout=30, wait=60)
    assert asyncio.run(timed(retry._wait_for_end_of(7))) < 0.1


def test_waits_while_the_previous_attempt_beats_and_until_it_ends() -> None:
    async def scenario() -> float:
        cursors = Cursors()
        zombie = guard(cursors, attempt=7, ack_timeout=30, wait=60)
        cursors.values[IDENT.cursor("owner")] = 7
        zombie._owner = True

        async def publishing() -> None:
            for _ in range(5):  # alive for ~1 s, then done
                await asyncio.sleep(0.2)
                await zombie.beat()
            await zombie.close()

        task = asyncio.ensure_future(publishing())
        waited = await timed(guard(cursors, 8, 30, 60)._wait_for_end_of(7))
        await task
        return waited

    waited = asyncio.run(scenario())
    assert 0.9 <= waited < 3, waited


def test_a_previous_attempt_that_stopped_beating_is_taken_as_gone() -> None:
    cursors = Cursors()
    cursors.values[IDENT.cursor("beat")] = 7_000_003  # its last beat, long ago
    # ackTimeoutMs 0.5 s here: the wait ends 5.5 s after the last change seen.
    waited = asyncio.run(timed(guard(cursors, 8, 0.5, 60)._wait_for_end_of(7)))
    assert 5.4 <= waited < 7, waited


def test_the_wait_never_exceeds_the_delivery_timeout() -> None:
    async def scenario() -> float:
        cursors = Cursors()
        zombie = guard(cursors, attempt=7, ack_timeout=30, wait=60)

        async def beating_forever() -> None:
            while True:
                await asyncio.sleep(0.1)
                await zombie.beat()

        task = asyncio.ensure_future(beating_forever())
        try:
            return await timed(guard(cursors, 8, 30, 1.0)._wait_for_end_of(7))
        finally:
            task.cancel()

    assert 0.9 <= asyncio.run(scenario()) < 2
