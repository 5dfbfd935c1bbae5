"""Cursors: stored consumer positions, routed to the owning ``__cursors`` partition.

The server keeps cursors in its internal ``__cursors`` stream (off unless
``cursors.stream.partitions`` >= 1). A cursor lives in partition
``crc32_ieee(b"<cursor_id>,<stream>,<partition>") % N`` of that stream, N being its
partition count, and only that partition's leader answers for it (else
FAILED_PRECONDITION "Server not leader for cursors partition ..."). The server lists
``__cursors`` in FetchMetadata like any stream, which is where N comes from, as in
go-liftbridge. Stale routing is retried through `MetadataCache.call_leader`.

Cursor ids may not contain a comma: the key would then be ambiguous (``"a,b"`` on
stream ``"c"`` and ``"a"`` on stream ``"b,c"`` share one key on the server).
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._transport.grpc import Stub
from liftbridge_client._util import validate as _validate
from liftbridge_client.options import ClientOptions

__all__ = ["CURSORS_STREAM", "cursor_key", "cursors_partition", "fetch_cursor", "set_cursor"]

CURSORS_STREAM = "__cursors"

_DISABLED_TEXT = "Cursors stream does not exist"

T = TypeVar("T")


def cursor_key(cursor_id: str, stream: str, partition: int) -> bytes:
    """The key the server stores a cursor under."""
    return f"{cursor_id},{stream},{partition}".encode()


def cursors_partition(key: bytes, partitions: int) -> int:
    """The ``__cursors`` partition owning ``key``: unsigned CRC-32 (IEEE) modulo the count."""
    return zlib.crc32(key) % partitions


def _check(cursor_id: str, stream: str, partition: int) -> None:
    _validate.text("cursor_id", cursor_id)
    if "," in cursor_id:
        raise errors.InvalidInputError(f"cursor_id must not contain ',', got {cursor_id!r}")
    _validate.text("stream", stream)
    _validate.int_arg("partition", partition, 0, _validate.INT32_MAX)


def _disabled(cause: BaseException | None = None) -> errors.CursorsDisabledError:
    err = errors.CursorsDisabledError(
        "cursors are disabled on the server (it has no __cursors stream): set "
        "cursors.stream.partitions >= 1 in the server configuration",
        details=_DISABLED_TEXT,
    )
    err.__cause__ = cause
    return err


async def _call_owner(
    metadata: MetadataCache, what: str, key: bytes, fn: Callable[[Stub], Awaitable[T]]
) -> T:
    """Run ``fn`` on the leader of the ``__cursors`` partition owning ``key``."""
    try:
        info = await metadata.stream(CURSORS_STREAM)
    except errors.NotFoundError as exc:
        raise _disabled(exc) from exc
    if not info.partitions:
        raise _disabled()
    owner = cursors_partition(key, len(info.partitions))
    try:
        return await metadata.call_leader(what, CURSORS_STREAM, owner, fn)
    except errors.InternalServerError as exc:
        if _DISABLED_TEXT in exc.details:
            raise _disabled(exc) from exc
        raise


async def set_cursor(
    metadata: MetadataCache,
    options: ClientOptions,
    cursor_id: str,
    stream: str,
    partition: int,
    offset: int,
) -> None:
    """Store ``offset`` (-1 clears) as the cursor's position in ``stream``/``partition``."""
    _check(cursor_id, stream, partition)
    _validate.int_arg("offset", offset, -1, _validate.INT64_MAX)
    req = api_pb2.SetCursorRequest(
        stream=stream, partition=partition, cursorId=cursor_id, offset=offset
    )
    timeout = options.rpc_timeout
    await _call_owner(
        metadata,
        "SetCursor",
        cursor_key(cursor_id, stream, partition),
        lambda s: s.SetCursor(req, timeout=timeout),
    )


async def fetch_cursor(
    metadata: MetadataCache, options: ClientOptions, cursor_id: str, stream: str, partition: int
) -> int:
    """The cursor's stored offset, or -1 when it has none."""
    _check(cursor_id, stream, partition)
    req = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)
    timeout = options.rpc_timeout
    resp = await _call_owner(
        metadata,
        "FetchCursor",
        cursor_key(cursor_id, stream, partition),
        lambda s: s.FetchCursor(req, timeout=timeout),
    )
    return resp.offset
