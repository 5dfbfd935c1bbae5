"""Waiting for a condition in tests, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["tasks_left", "wait_until"]

_POLL = 0.002  # seconds between checks: short next to any server round trip


async def wait_until(
    predicate: Callable[[], object], *, timeout: float = 5.0, what: str = "the condition"
) -> None:
    """Return as soon as ``predicate()`` is true; `TimeoutError` naming ``what`` after ``timeout``.

    For state that has no event to await (another library's internals, a server's).
    """
    try:
        async with asyncio.timeout(timeout):
            while not predicate():  # noqa: ASYNC110 - there is no event to wait on
                await asyncio.sleep(_POLL)
    except TimeoutError:
        raise TimeoutError(f"{what} did not happen within {timeout}s") from None


async def tasks_left(before: set[asyncio.Task[object]], *, timeout: float = 0.5) -> set[str]:
    """Names of tasks started since ``before`` still running after ``timeout`` seconds.

    For "nothing is left behind after close()": tasks cancelled by a close end within a few
    loop iterations; grpc.aio's own call tasks may take a little longer on a loaded
    machine, hence the short grace period. ``set()`` means everything ended.
    """

    def running() -> set[asyncio.Task[object]]:
        return {t for t in asyncio.all_tasks() - before if not t.done()}

    try:
        await wait_until(lambda: not running(), timeout=timeout, what="tasks ending")
    except TimeoutError:
        return {f"{t.get_name()}: {t.get_coro()!r}" for t in running()}
    return set()
