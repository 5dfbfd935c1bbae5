"""Fetching a cursor so that it reads what was set last, on v1.9.0 as on master.

A server answers FetchCursor from a cache of 512 cursors (LRU, emptied when the node
becomes leader of a ``__cursors`` partition, e.g. at a restart). On a miss it reads the
partition: master takes the newest record for the cursor's key, v1.9.0 (and v1.7.1) the
highest offset among them, so a cursor set to 10 and then rewound to 5 (or cleared, -1)
reads 10 there. And after a restart a v1.9.0 node reports the partition's high watermark
as -1 until the next record arrives (acked records hidden); a FetchCursor meanwhile finds
nothing, answers -1, and caches that -1.

`fetch_cursor` works around both, on brokers that do not read backwards themselves (the
servers whose FetchCursor keeps the highest: the reverse read is what master's fix
uses), in three steps:

1. A ``__cursors`` partition whose high watermark is below its newest offset gets a record
   of the client's own (cursor ``WAKE_ID`` on stream ``__cursors``), which brings the
   watermark back, before the server is asked. So does a paused one (servers pause a
   ``__cursors`` partition after a minute without writes by default), which the record
   resumes.
2. The server's answer; -1 is final (no record of the key, or all of them -1; only a
   -1 the server cached while the watermark was hidden, for a FetchCursor from another
   client, stays wrong: docs/compatibility.md).
3. A non-negative answer is checked against the newest record of the key in the log,
   read forward from ``WINDOW`` records before the end and then from ever further back
   (each window to the end, so gaps left by compaction do not matter).

On master only metadata reads are added: step 1's, and one more for a non-negative
answer (the broker's reverse reads are probed once; its watermark is not hidden here).
Where authorization denies any of these steps, the server's answer is taken unchecked.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from liftbridge_client import errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client._cluster.admin import CURSORS_STREAM, cursor_key, cursors_partition
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client.models import Message, StartPosition, StopPosition
from liftbridge_client.options import ClientOptions

__all__ = ["WAKE_ID", "WINDOW", "fetch_cursor", "stored_offset", "wake_target"]

log = logging.getLogger(__name__)

WAKE_ID = "liftbridge-client.wake"
WINDOW = 256  # records read back first; each further window is 8 times longer


class _Features(Protocol):
    async def reverse_native(
        self, address: str, stream: str, partition: int, high_watermark: int
    ) -> bool: ...


# Client.subscribe (typed loosely: _cluster sits below liftbridge_client.subscription).
Subscribe = Callable[..., AbstractAsyncContextManager[AsyncIterator[Any]]]


def stored_offset(value: bytes) -> int:
    """The offset in a ``__cursors`` record's value (the server's Cursor message: the
    offset is field 4, a varint int64; proto3 leaves a 0 out, so absent means 0)."""
    found = 0
    at = 0
    while at < len(value):
        tag, at = _varint(value, at)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            number, at = _varint(value, at)
            if field == 4:
                found = number - (1 << 64) if number >= 1 << 63 else number
        elif wire == 2:
            length, at = _varint(value, at)
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"unexpected wire type {wire} in a cursor record")
    if at != len(value):
        raise ValueError("truncated cursor record")
    return found


def _varint(data: bytes, at: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint in a cursor record")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, at
        shift += 7


def wake_target(owner: int, partitions: int) -> int:
    """The stream partition number under which ``WAKE_ID`` on ``__cursors`` lands in the
    cursors partition ``owner`` (found by trying: CRC-32 spreads them evenly)."""
    for candidate in range(partitions * 1000):
        if cursors_partition(cursor_key(WAKE_ID, CURSORS_STREAM, candidate), partitions) == owner:
            return candidate
    raise AssertionError(f"no wake key for cursors partition {owner} of {partitions}")


async def fetch_cursor(
    metadata: MetadataCache,
    options: ClientOptions,
    features: _Features,
    subscribe: Subscribe,
    cursor_id: str,
    stream: str,
    partition: int,
) -> int:
    """The cursor's offset as last set, or -1 (see the module's docstring)."""
    _admin.check_cursor(cursor_id, stream, partition)
    key = cursor_key(cursor_id, stream, partition)
    try:
        partitions = len((await metadata.stream(CURSORS_STREAM)).partitions)
    except errors.NotFoundError as exc:
        if exc.retriable:  # a broker that restarted, not disabled cursors
            raise
        partitions = 0
    if not partitions:  # cursors disabled: the plain RPC raises the typed error
        return await _admin.fetch_cursor(metadata, options, cursor_id, stream, partition)
    owner = cursors_partition(key, partitions)
    try:
        return await _checked(
            metadata,
            options,
            features,
            subscribe,
            (cursor_id, stream, partition),
            owner,
            partitions,
        )
    except errors.PermissionDeniedError as exc:
        # Without FetchPartitionMetadata, Subscribe or SetCursor on __cursors: the
        # server's answer as it is (right on master; see the module's docstring).
        if not _WARNED:
            _WARNED.append(True)
            log.warning("cursors: the server's answers are taken unchecked: %s", exc)
        return await _admin.fetch_cursor(metadata, options, cursor_id, stream, partition)


_WARNED: list[bool] = []  # the warning above, once per process


async def _checked(
    metadata: MetadataCache,
    options: ClientOptions,
    features: _Features,
    subscribe: Subscribe,
    cursor: tuple[str, str, int],
    owner: int,
    partitions: int,
) -> int:
    cursor_id, stream, partition = cursor
    key = cursor_key(cursor_id, stream, partition)
    try:
        info = await _admin.fetch_partition_metadata(metadata, options, CURSORS_STREAM, owner)
    except errors.NotLeaderError:
        # The partition's leader is known but not leading it: paused. The server pauses
        # a __cursors partition after a minute without writes (cursors.stream.auto.pause
        # .time) and answers FetchPartitionMetadata only where a partition runs; a write
        # resumes it (and, resumed from disk, v1.9.0 hides its watermark as at a restart).
        await _wake(metadata, options, owner, partitions, None)
        info = await _admin.fetch_partition_metadata(metadata, options, CURSORS_STREAM, owner)
    if info.high_watermark < info.newest_offset:
        await _wake(metadata, options, owner, partitions, info.newest_offset)
    offset = await _admin.fetch_cursor(metadata, options, cursor_id, stream, partition)
    if offset < 0:
        return offset
    info = await _admin.fetch_partition_metadata(metadata, options, CURSORS_STREAM, owner)
    address = await metadata.leader_address(CURSORS_STREAM, owner)
    if await features.reverse_native(address, CURSORS_STREAM, owner, info.high_watermark):
        return offset
    newest = await _newest_record(subscribe, owner, key, info.high_watermark)
    if newest is not None and newest != offset:
        log.debug("cursor %r: the server said %d, its newest record %d", key, offset, newest)
    return offset if newest is None else newest


async def _wake(
    metadata: MetadataCache,
    options: ClientOptions,
    owner: int,
    partitions: int,
    newest: int | None,
) -> None:
    """Resume a paused partition (``newest`` None) or bring back a high watermark hidden
    since a restart: a record of our own does both."""
    if newest is None:
        log.info("%s/%d: paused; writing a record to resume it", CURSORS_STREAM, owner)
    else:
        log.info(
            "%s/%d: high watermark below the newest offset %d; writing a record to restore it",
            CURSORS_STREAM,
            owner,
            newest,
        )
    target = wake_target(owner, partitions)
    await _admin.set_cursor(metadata, options, WAKE_ID, CURSORS_STREAM, target, 0)


async def _newest_record(subscribe: Subscribe, owner: int, key: bytes, high: int) -> int | None:
    """The offset stored by the newest record of ``key`` up to ``high``; None if none."""
    if high < 0:
        return None
    size = WINDOW
    while True:
        start = high - size + 1
        where: dict[str, Any] = (
            {"start_offset": start} if start > 0 else {"start": StartPosition.EARLIEST}
        )
        found: int | None = None
        async with subscribe(CURSORS_STREAM, owner, stop=StopPosition.LATEST, **where) as sub:
            async for msg in sub:
                assert isinstance(msg, Message)
                if msg.key == key:
                    found = stored_offset(msg.value)
                if msg.offset >= high:
                    break
        if found is not None or start <= 0:
            return found
        size *= 8
