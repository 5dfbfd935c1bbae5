"""Stream administration, metadata and cursor RPCs.

In order: streams (create, delete, pause, read-only, metadata); cursors.

Streams
-------

Create, delete, pause and set read-only streams; the metadata RPCs.

Cursors
-------

Stored consumer positions, routed to the owning ``__cursors`` partition.

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

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from liftbridge_client import _validate, errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._transport.grpc import (
    Stub,
    is_no_metadata_leader,
    map_rpc_error,
    with_retries,
)
from liftbridge_client.models import (
    Metadata,
    PartitionInfo,
    metadata_from_proto,
    partition_from_proto,
)
from liftbridge_client.options import ClientOptions, StreamConfig

__all__ = ["CURSORS_STREAM", "cursor_key", "cursors_partition", "fetch_cursor", "set_cursor"]

log = logging.getLogger(__name__)


# ---- Streams ---------------------------------------------------------------------------


def _check_name(kind: str, value: str) -> None:
    _validate.text(kind, value)


def _check_partitions(partitions: Sequence[int], name: str = "partitions") -> list[int]:
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence):
        raise errors.InvalidInputError(f"{name} must be a sequence of ints, got {partitions!r}")
    return [_validate.int_arg(f"{name} entry", p, 0, _validate.INT32_MAX) for p in partitions]


async def create_stream(
    metadata: MetadataCache,
    options: ClientOptions,
    subject: str,
    name: str,
    config: StreamConfig | None,
    *,
    exist_ok: bool = False,
) -> None:
    if config is None:
        config = StreamConfig()
    elif not isinstance(config, StreamConfig):
        raise errors.InvalidInputError(f"config must be a StreamConfig, got {config!r}")
    _validate.flag("exist_ok", exist_ok)
    # Names and subjects the server cannot handle make it panic (and crash-loop): refuse.
    _validate.stream_subject(subject, partitions=config.partitions or 1)
    _validate.stream_name(name)
    req = config.to_request(subject, name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.create_stream_timeout
    timeout = options.rpc_timeout

    # An attempt that failed with UNAVAILABLE or DEADLINE_EXCEEDED may still have created
    # the stream; the next broker then answers ALREADY_EXISTS for this very call.
    ambiguous = False

    async def send(stub: Stub) -> object:
        nonlocal ambiguous
        try:
            # The server needs a deadline to wait for a metadata leader at all.
            return await stub.CreateStream(req, timeout=timeout)
        except grpc.RpcError as exc:
            if isinstance(
                map_rpc_error(exc), errors.UnavailableError | errors.DeadlineExceededError
            ):
                ambiguous = True
            raise

    async def attempt() -> None:
        await metadata.call_any("CreateStream", send)

    try:
        await with_retries(
            attempt,
            options.retry,
            what="CreateStream",
            retry_if=lambda e: (
                is_no_metadata_leader(e) or isinstance(e, errors.NoBrokerAvailableError)
            ),
            deadline=deadline,
        )
    except errors.AlreadyExistsError as exc:
        if not (ambiguous or exist_ok):
            raise
        differences = await _differences(metadata, req)
        if differences:
            if exist_ok:
                raise errors.AlreadyExistsError(
                    f"stream {name!r} exists with {'; '.join(differences)}",
                    details=exc.details,
                ) from exc
            raise
        log.debug("CreateStream %s: exists already, as asked", name)
    metadata.stream_created(name)
    await _wait_visible(metadata, name, min(deadline, loop.time() + _VISIBLE_WAIT))


async def _differences(metadata: MetadataCache, req: api_pb2.CreateStreamRequest) -> list[str]:
    """How the existing stream differs from what ``req`` asked for, each as "<what it has>,
    not <what was asked>"; empty when it is the stream asked for.

    The subject and the partition count are what the metadata shows of a stream's
    settings; the others (retention, replication...) cannot be compared from here.
    """
    info = (await metadata.refresh()).streams.get(req.name)
    if info is None:  # deleted again meanwhile: nothing to compare with
        return ["settings that could not be read (it is not in the metadata)"]
    found: list[str] = []
    if info.subject != req.subject:
        found.append(f"subject {info.subject!r}, not {req.subject!r}")
    has, asked = len(info.partitions), max(req.partitions, 1)
    if has != asked:
        found.append(f"{_partitions(has)}, not {asked}")
    return found


def _partitions(count: int) -> str:
    return f"{count} partition{'' if count == 1 else 's'}"


# The server answers CreateStream once the metadata leader applied it; other brokers learn
# of it a moment later. Waiting here lets "create, then publish" work on any broker.
_VISIBLE_WAIT = 5.0
_VISIBLE_POLL = 0.05


async def _wait_visible(metadata: MetadataCache, name: str, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        info = (await metadata.refresh()).streams.get(name)
        if info is not None and info.partitions and all(p.leader for p in info.partitions.values()):
            return
        if loop.time() + _VISIBLE_POLL > deadline:
            log.warning("stream %s created but not yet visible in metadata", name)
            return
        await asyncio.sleep(_VISIBLE_POLL)


async def delete_stream(metadata: MetadataCache, options: ClientOptions, name: str) -> None:
    _check_name("name", name)
    req = api_pb2.DeleteStreamRequest(name=name)
    timeout = options.rpc_timeout
    await metadata.call_any("DeleteStream", lambda s: s.DeleteStream(req, timeout=timeout))
    metadata.forget_stream(name)


async def pause_stream(
    metadata: MetadataCache,
    options: ClientOptions,
    name: str,
    partitions: Sequence[int],
    resume_all: bool,
) -> None:
    _check_name("name", name)
    req = api_pb2.PauseStreamRequest(
        name=name,
        partitions=_check_partitions(partitions),
        resumeAll=_validate.flag("resume_all", resume_all),
    )
    timeout = options.rpc_timeout
    await metadata.call_any("PauseStream", lambda s: s.PauseStream(req, timeout=timeout))


async def set_stream_readonly(
    metadata: MetadataCache,
    options: ClientOptions,
    name: str,
    partitions: Sequence[int],
    readonly: bool,
) -> None:
    _check_name("name", name)
    req = api_pb2.SetStreamReadonlyRequest(
        name=name,
        partitions=_check_partitions(partitions),
        readonly=_validate.flag("readonly", readonly),
    )
    timeout = options.rpc_timeout
    await metadata.call_any(
        "SetStreamReadonly", lambda s: s.SetStreamReadonly(req, timeout=timeout)
    )


async def fetch_metadata(
    metadata: MetadataCache, streams: Sequence[str], groups: Sequence[str] = ()
) -> Metadata:
    if isinstance(groups, str):
        raise errors.InvalidInputError(f"groups must be a sequence of ids, got {groups!r}")
    for stream in streams:
        _check_name("stream", stream)
    for group in groups:
        _check_name("groups", group)
    if not streams and not groups:
        return await metadata.refresh()
    return metadata_from_proto(await metadata.fetch(streams, groups))


async def fetch_partition_metadata(
    metadata: MetadataCache, options: ClientOptions, stream: str, partition: int
) -> PartitionInfo:
    _check_name("stream", stream)
    _validate.int_arg("partition", partition, 0, _validate.INT32_MAX)
    req = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)
    timeout = options.rpc_timeout
    resp = await metadata.call_leader(
        "FetchPartitionMetadata",
        stream,
        partition,
        lambda s: s.FetchPartitionMetadata(req, timeout=timeout),
    )
    return partition_from_proto(stream, resp.metadata)


# ---- Cursors ---------------------------------------------------------------------------

CURSORS_STREAM = "__cursors"

_DISABLED_TEXT = "Cursors stream does not exist"

T = TypeVar("T")


def cursor_key(cursor_id: str, stream: str, partition: int) -> bytes:
    """The key the server stores a cursor under."""
    return f"{cursor_id},{stream},{partition}".encode()


def cursors_partition(key: bytes, partitions: int) -> int:
    """The ``__cursors`` partition owning ``key``: unsigned CRC-32 (IEEE) modulo the count."""
    return zlib.crc32(key) % partitions


def check_cursor(cursor_id: str, stream: str, partition: int) -> None:
    """Refuse a cursor id, stream or partition the server would misread or refuse."""
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
        if exc.retriable:  # a broker that restarted, not disabled cursors
            raise
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
    check_cursor(cursor_id, stream, partition)
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
    check_cursor(cursor_id, stream, partition)
    req = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)
    timeout = options.rpc_timeout
    resp = await _call_owner(
        metadata,
        "FetchCursor",
        cursor_key(cursor_id, stream, partition),
        lambda s: s.FetchCursor(req, timeout=timeout),
    )
    return resp.offset
