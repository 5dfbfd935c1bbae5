"""The consumer-group workload of a fault run: members of one group read the plain stream
through the faults, each from a client of its own, and record what they are handed.

History events (checked by ``fault_checkers.check_group``):

- ``sub`` with ``f`` = ``group``: a message a member was handed (``process`` = the member);
- ``note`` ``group-join`` / ``group-assign``: a member joined, or its epoch or partitions
  changed (``data.epoch``, ``data.partitions``); either starts a new tenure, inside which
  each partition's offsets must follow each other without a gap;
- ``info`` with ``f`` = ``group``: a member failed (it joins again under the same id);
- ``note`` ``group-drained`` and ``group-committed``: after the publishers stopped, how far
  the group got, and the group's cursors (the offset of the last message committed per
  partition), read once every member has left.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from faults.fault_history import Recorder, error_name
from faults.fault_workloads import OPTIONS, retried, within
from liftbridge_client import Client, ConsumerOptions, errors
from liftbridge_client.groups import Consumer, group_cursor_id

MEMBERS = 2


class GroupProgress:
    """The highest offset the group was handed per partition (to know when it drained)."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.moved = asyncio.Event()

    def saw(self, partition: int, offset: int) -> None:
        self.seen[partition] = max(offset, self.seen.get(partition, -1))
        self.moved.set()

    def behind(self, lasts: dict[int, int]) -> dict[int, int]:
        """Partitions whose newest offset the group has not been handed yet."""
        return {p: last for p, last in lasts.items() if self.seen.get(p, -1) < last}


def _assignment(member: Consumer, stream: str) -> tuple[int, list[int]]:
    return member.epoch, sorted(p for s, p in member.assignments if s == stream)


async def group_member(
    addresses: Sequence[str],
    history: Recorder,
    stream: str,
    group: str,
    index: int,
    stop: asyncio.Event,
    progress: GroupProgress,
) -> None:
    """One member with a client of its own, reading until ``stop``, then leaving the group
    normally (so its last position is committed)."""
    process = f"group-{index}"
    # A fixed id: a member that failed and joins again takes its own place.
    options = ConsumerOptions(consumer_id=process, commit_interval=1.0)
    async with Client(list(addresses), options=OPTIONS) as client:
        while not stop.is_set():
            try:
                async with client.consumer(group, [stream], options=options) as member:
                    last = _assignment(member, stream)
                    history.emit(
                        "note",
                        process=process,
                        f="group-join",
                        stream=stream,
                        data={"epoch": last[0], "partitions": last[1]},
                    )
                    while not stop.is_set():
                        try:
                            message = await member.next(timeout=0.5)
                        except errors.LiftbridgeTimeoutError:
                            message = None
                        # Checked after the wait too: a message handed out after a
                        # rebalance belongs to the new tenure.
                        now = _assignment(member, stream)
                        if now != last:
                            last = now
                            history.emit(
                                "note",
                                process=process,
                                f="group-assign",
                                stream=stream,
                                data={"epoch": now[0], "partitions": now[1]},
                            )
                        if message is None:
                            continue
                        history.emit(
                            "sub",
                            process=process,
                            f="group",
                            stream=message.stream,
                            partition=message.partition,
                            offset=message.offset,
                            value=message.value.decode(errors="replace"),
                        )
                        progress.saw(message.partition, message.offset)
            except errors.LiftbridgeError as exc:
                history.emit(
                    "info", process=process, f="group", stream=stream, error=error_name(exc)
                )
                await asyncio.sleep(0.5)


async def drain_group(
    client: Client,
    history: Recorder,
    stream: str,
    partitions: int,
    progress: GroupProgress,
    timeout: float,
) -> None:
    """Wait (at most ``timeout`` s) until the group was handed each partition's newest
    offset; record how far it got."""
    started = time.monotonic()
    lasts: dict[int, int] = {}
    with contextlib.suppress(TimeoutError, errors.LiftbridgeError):
        async with asyncio.timeout(timeout):
            for p in range(partitions):

                async def hwm(p: int = p) -> int:
                    info = await client.fetch_partition_metadata(stream, p)
                    return int(info.high_watermark)

                lasts[p] = await retried("metadata", hwm, timeout)
            while progress.behind(lasts):
                progress.moved.clear()
                await progress.moved.wait()
    history.emit(
        "note",
        f="group-drained",
        stream=stream,
        data={
            "seconds": round(time.monotonic() - started, 2),
            "newest": {str(p): o for p, o in lasts.items()},
            "seen": {str(p): o for p, o in sorted(progress.seen.items())},
            "behind": {str(p): o for p, o in progress.behind(lasts).items()},
        },
    )


async def record_committed(
    client: Client,
    history: Recorder,
    stream: str,
    group: str,
    partitions: int,
    *,
    timeout: float = 60.0,
) -> None:
    """The group's cursors after every member left (``-1``: none committed), all read
    within ``timeout`` s (each partition gets a second at least)."""
    committed: dict[str, int] = {}
    end_by = time.monotonic() + timeout
    for p in range(partitions):

        async def fetch(p: int = p) -> int:
            return await client.fetch_cursor(group_cursor_id(group), stream, partition=p)

        try:
            committed[str(p)] = await retried("cursor", fetch, within(timeout, end_by))
        except (TimeoutError, errors.LiftbridgeError) as exc:
            history.emit(
                "note",
                f="not-recovered",
                stream=stream,
                partition=p,
                error=f"group cursor: {error_name(exc)}",
            )
    history.emit("note", f="group-committed", stream=stream, data={"committed": committed})
