"""Readers: read_uncommitted (every stored copy) and CommittedReader (exactly once).

`CommittedReader` subscribes to one or several partitions, feeds what it reads to a
`Sequencer` and yields the committed messages: duplicates dropped, CONTINUE_TXN messages
held until their ACK_TXN, rolled-back ones never. Other producers are never held back by an
open transaction. Acknowledgements (ACK_TXN messages) are not yielded unless
``include_acks``. A message without the UUID header counts as committed on its own.

The checkpoint contract: `CommittedReader.checkpoint` counts every message yielded so far
as processed. Store it atomically with the results of processing them; a reader built
from it yields exactly the messages after them (replaying an open transaction's range if
it needs to).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import traceback
import uuid as _uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

from liftbridge_client import errors
from liftbridge_client._native import new_slotted
from liftbridge_client._subscribe import SubscribeArgs
from liftbridge_client._tasks import TaskHandle, TaskSupervisor
from liftbridge_client.exactly_once.framing import Framing
from liftbridge_client.exactly_once.publisher import CLOCKS_HEADER, UUID_HEADER
from liftbridge_client.exactly_once.sequencer import (
    Checkpoint,
    Envelope,
    PartitionRef,
    QueueOutcome,
    Sequencer,
)
from liftbridge_client.exactly_once.uuids import is_ack_txn
from liftbridge_client.models import Message
from liftbridge_client.packing import PACKED_HEADER, PackedRow, is_packed, pack, unpack
from liftbridge_client.subscription import Subscription

if TYPE_CHECKING:
    from liftbridge_client.client import Client

__all__ = [
    "CommittedReader",
    "UuidOf",
    "delivered",
    "envelope_of",
    "header_uuid",
    "read_committed",
    "read_range",
    "read_uncommitted",
    "uuid_of",
    "value_uuid",
]

log = logging.getLogger(__name__)

_ZERO = bytes(16)
_DONE = object()
_STOP_WAIT = 2.0  # seconds close() waits for the feeders
_T = TypeVar("_T")


def uuid_of(message: Message) -> _uuid.UUID | None:
    """The UUID a message carries in its header, or None."""
    raw = message.headers.get(UUID_HEADER)
    return _uuid.UUID(bytes=raw) if raw is not None and len(raw) == 16 else None


UuidOf = Callable[[Message], "bytes | None"]
"""Where a reader finds a message's UUID (16 bytes, or None for "has none")."""


def header_uuid(message: Message) -> bytes | None:
    """The UUID in the ``eo-uuid`` header (the default `UuidOf`)."""
    raw = message.headers.get(UUID_HEADER)
    return raw if raw is not None and len(raw) == 16 else None


def value_uuid(framing: Framing) -> UuidOf:
    """A `UuidOf` that decodes the value with ``framing`` and takes its message's ``uuid``
    (Gazette-style self-describing values; `JsonMessage`, `CsvRecord`). Values that do not
    decode count as having no UUID, whatever the decoder raises."""

    def uuid_of_value(message: Message) -> bytes | None:
        # Any Exception: a value is data anyone could have written, and a reader that
        # raised on it would raise again on every resume before it. BaseExceptions
        # (KeyboardInterrupt, CancelledError) still stop the reader.
        try:
            value = getattr(framing.unmarshal(message.value), "uuid", None)
        except Exception:
            return None
        return value.bytes if isinstance(value, _uuid.UUID) else None

    return uuid_of_value


def envelope_of(message: Message, uuid_of: UuidOf = header_uuid) -> Envelope:
    """The Sequencer's envelope of a message. A ``uuid_of`` that raises (an Exception) or
    returns anything but None or 16 bytes gives a message without a UUID, with a warning:
    one such message must not stop a reader for good."""
    ref = PartitionRef(message.stream, message.partition)
    try:
        uuid = uuid_of(message)
    except Exception as exc:
        log.warning(
            "%s offset %d: uuid_of raised %r: read as a message without a UUID",
            ref,
            message.offset,
            exc,
        )
        uuid = None
    if uuid is not None and (type(uuid) is not bytes or len(uuid) != 16):
        log.warning(
            "%s offset %d: uuid_of returned %s, not 16 bytes: read as a message without a UUID",
            ref,
            message.offset,
            type(uuid).__name__,
        )
        uuid = None
    if uuid is None:
        return Envelope(ref, message.offset, message.offset + 1, _ZERO, message)
    offset = message.offset
    # Envelope(...) without the frozen dataclass's __init__ (see _native.new_slotted).
    return new_slotted(Envelope, ref, offset, offset + 1, uuid, message, _clocks(message), 0)


def _clocks(message: Message) -> int:
    return clocks_of(
        message.headers.get(CLOCKS_HEADER), message.stream, message.partition, message.offset
    )


def clocks_of(raw: bytes | None, stream: str, partition: int, offset: int) -> int:
    """How many clock values a message takes, from its ``eo-clocks`` header (1 without
    one, and, with a warning, for one that is not a count)."""
    if raw is None:
        return 1
    if raw.isdigit() and 0 < len(raw) <= 9 and int(raw) > 0:
        return int(raw)
    log.warning(
        "%s/%d offset %d: header %s=%r is not a count: read as one clock value",
        stream,
        partition,
        offset,
        CLOCKS_HEADER,
        raw[:20],
    )
    return 1


def delivered(env: Envelope) -> Message:
    """The message of a committed envelope as it is delivered: a pack whose leading rows
    an earlier copy delivered (``env.skip``) without them. A message that says it takes
    several clock values but is not a pack of that many rows is delivered whole, with a
    warning (its rows may then come twice, never not at all)."""
    message: Message = env.message
    if not env.skip:
        return message
    rows: list[PackedRow] | None = None
    if is_packed(message.headers):
        with contextlib.suppress(errors.FramingError):
            rows = unpack(message.value)
    if rows is None or len(rows) != env.ticks:
        log.warning(
            "%s/%d offset %d takes %d clock values but is not a pack of %d rows: delivered "
            "whole, although %d of its clock values came before",
            message.stream,
            message.partition,
            message.offset,
            env.ticks,
            env.ticks,
            env.skip,
        )
        return message
    rest = rows[env.skip :]
    headers = {
        **message.headers,
        PACKED_HEADER: str(len(rest)).encode(),
        CLOCKS_HEADER: str(len(rest)).encode(),
    }
    return dataclasses.replace(message, value=pack(rest), headers=headers)


async def _stop_offset(client: Client, stream: str, partition: int) -> int:
    info = await client.fetch_partition_metadata(stream, partition)
    return info.newest_offset


async def read_range(
    client: Client, stream: str, partition: int, begin: int, end: int
) -> list[Message]:
    """The messages at offsets ``[begin, end)`` of a partition."""
    if end <= begin:
        return []
    async with client.subscribe(stream, partition, start_offset=begin, stop_offset=end - 1) as sub:
        return [m async for m in sub]


async def read_uncommitted(
    client: Client,
    stream: str,
    partition: int = 0,
    *,
    start_offset: int = 0,
    stop_at_latest: bool = False,
    include_acks: bool = False,
    uuid_of: UuidOf = header_uuid,
) -> AsyncIterator[Message]:
    """Every stored message from ``start_offset`` on: duplicates, uncommitted and
    rolled-back ones included (acknowledgements only with ``include_acks``)."""
    kw: SubscribeArgs = {"start_offset": start_offset}
    if stop_at_latest:
        newest = await _stop_offset(client, stream, partition)
        if newest < start_offset:
            return
        kw["stop_offset"] = newest
    async with client.subscribe(stream, partition, **kw) as sub:
        async for message in sub:
            if include_acks or not is_ack_txn(envelope_of(message, uuid_of).uuid):
                yield message


class CommittedReader:
    """Read-committed messages of ``partitions`` (``(stream, partition)`` pairs).

    ``uuid_of``: where a message's UUID is (default: the ``eo-uuid`` header; `value_uuid`
    reads it from values in a framing). ``checkpoint``: where to resume (from
    `checkpoint`); partitions it does not know start at offset 0. ``stop_at_latest``: end
    once every partition is read up to its newest offset at start (else wait for new
    messages). ``buffer``: the Sequencer's ring size.
    Use ``async with`` (or call `close`) so the subscriptions are closed.
    """

    def __init__(
        self,
        client: Client,
        partitions: Iterable[tuple[str, int]],
        *,
        checkpoint: Checkpoint | None = None,
        stop_at_latest: bool = False,
        include_acks: bool = False,
        buffer: int = 4096,
        queue_size: int = 1024,
        uuid_of: UuidOf = header_uuid,
    ) -> None:
        self._client = client
        self._refs = [PartitionRef(str(s), int(p)) for s, p in partitions]
        if not self._refs:
            raise errors.InvalidInputError("partitions must not be empty")
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise errors.InvalidInputError("checkpoint must be a Checkpoint")
        self._seq = Sequencer(checkpoint, buffer=buffer)
        self._start = dict(checkpoint.offsets) if checkpoint else {}
        self._stop_at_latest = stop_at_latest
        self._include_acks = include_acks
        self._uuid_of = uuid_of
        self._queue: asyncio.Queue[object] = asyncio.Queue(queue_size)
        # One feeder per partition, under an anyio task group like every background task
        # of the client (_tasks).
        self._supervisor = TaskSupervisor("lb-read-committed")
        self._tasks: list[TaskHandle] = []
        self._direct: AsyncGenerator[Message, None] | None = None
        self._started = False
        self._closed = False
        self._subs: list[Subscription] = []
        self._running = 0
        self.replays = 0  # how many replays the Sequencer asked for

    @classmethod
    async def for_stream(cls, client: Client, stream: str, **kw: object) -> CommittedReader:
        """A reader over every partition of ``stream`` (as listed in metadata)."""
        info = (await client.fetch_metadata(stream)).streams.get(stream)
        if info is None:
            raise errors.NotFoundError(f"stream {stream!r} is not in the metadata")
        return cls(client, [(stream, p) for p in sorted(info.partitions)], **kw)  # type: ignore[arg-type]

    def checkpoint(self, prune_horizon_ns: int = 0) -> Checkpoint:
        """Offsets and producer states; every message yielded so far counts as processed."""
        return self._seq.checkpoint(prune_horizon_ns)

    async def __aenter__(self) -> Self:
        await self._start_feeders()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """End iteration cleanly (also from another task) and close the subscriptions."""
        self._closed = True
        for sub in list(self._subs):
            await sub.close()  # a reader blocked in another task sees the end
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            await task.wait(_STOP_WAIT)
        self._tasks.clear()
        await self._supervisor.aclose(_STOP_WAIT)
        while not self._queue.empty():  # unread: an error there would keep this reader alive
            _clear_frames(self._queue.get_nowait())
        with contextlib.suppress(asyncio.QueueFull):  # full: then no reader is blocked on it
            self._queue.put_nowait(_DONE)  # wakes a reader blocked in another task
        if self._direct is not None:
            # Running in another task: that task ends it now that its subscription is closed.
            with contextlib.suppress(RuntimeError):
                await self._direct.aclose()

    async def _start_feeders(self) -> None:
        if self._started:
            return
        self._started = True
        if len(self._refs) == 1:
            # One partition: read it in place, without a task and a queue in between.
            self._direct = self._messages(self._refs[0])
            return
        self._running = len(self._refs)
        await self._supervisor.start()
        self._tasks = [
            self._supervisor.spawn(
                self._feed, ref, name=f"lb-read-committed-{ref.stream}-{ref.partition}"
            )
            for ref in self._refs
        ]

    async def _messages(self, ref: PartitionRef) -> AsyncGenerator[Message, None]:
        kw: SubscribeArgs = {"start_offset": self._start.get(ref, 0)}
        if self._stop_at_latest:
            newest = await _stop_offset(self._client, ref.stream, ref.partition)
            if newest < kw["start_offset"]:
                return
            kw["stop_offset"] = newest
        if self._closed:
            return
        sub = self._client.subscribe(ref.stream, ref.partition, **kw)
        self._subs.append(sub)
        try:
            async with sub:
                async for message in sub:
                    yield message
        finally:
            self._subs.remove(sub)

    async def _feed(self, ref: PartitionRef) -> None:
        try:
            async for message in self._messages(ref):
                await self._queue.put(message)
        except Exception as exc:
            await self._queue.put(exc)  # raised to the reader, which then stops
            return
        await self._queue.put(_DONE)

    async def _next_read(self) -> object:
        if self._direct is not None:
            try:
                return await anext(self._direct, _DONE)
            except Exception as exc:
                _clear_frames(exc)  # as a feeder's error (see _clear_frames)
                raise
        while True:
            if self._closed or (self._running == 0 and self._queue.empty()):
                return _DONE
            item = await self._queue.get()
            if item is not _DONE:
                return item
            self._running -= 1

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        if not self._started:
            await self._start_feeders()
        while True:
            env = self._seq.step()
            if env is not None:
                if self._include_acks or not is_ack_txn(env.uuid):
                    return delivered(env)
                continue
            item = await self._next_read()
            if item is _DONE:
                raise StopAsyncIteration
            if isinstance(item, BaseException):
                error, item = _detached(_clear_frames(item)), None
                try:
                    raise error
                finally:
                    del error  # no cycle: error -> its traceback -> this frame -> error
            assert isinstance(item, Message)
            if self._seq.queue(envelope_of(item, self._uuid_of)) is QueueOutcome.ACK_COMMIT_REPLAY:
                ref, begin, end = self._seq.replay_range()
                self.replays += 1
                replayed = await read_range(self._client, ref.stream, ref.partition, begin, end)
                self._seq.start_replay(envelope_of(m, self._uuid_of) for m in replayed)


def _clear_frames(item: _T) -> _T:
    """A feeder's error with the locals of its traceback's frames cleared (the lines stay).

    Those frames (the feeder's, the subscription's) hold the reader as ``self``, and the
    error is in cycles with them, so an ended reader and its Sequencer ring (thousands of
    messages) would wait for the cyclic garbage collector, which rarely runs in a large
    process: the soak saw 3-4 MiB kept per resumed reader.
    """
    if isinstance(item, BaseException):
        traceback.clear_frames(item.__traceback__)
    return item


def _detached(error: BaseException) -> BaseException:
    """A copy of a feeder's ``error`` to raise to the caller, with its cause and traceback.

    The subscription that raised ``error`` keeps it (its end reason), in a cycle with its
    own frames; raised as is, it would gain this reader's frame, and the cycle would keep
    the reader too. An error that cannot be copied is raised as is.
    """
    try:
        clone = copy.copy(error)
    except Exception:
        return error
    if type(clone) is not type(error) or clone is error:
        return error
    clone.__cause__, clone.__context__ = error.__cause__, error.__context__
    clone.__suppress_context__ = error.__suppress_context__
    return clone.with_traceback(error.__traceback__)


def read_committed(
    client: Client,
    stream: str,
    partition: int = 0,
    *,
    checkpoint: Checkpoint | None = None,
    stop_at_latest: bool = False,
    include_acks: bool = False,
    buffer: int = 4096,
    uuid_of: UuidOf = header_uuid,
) -> CommittedReader:
    """A `CommittedReader` over one partition: ``async with read_committed(...) as r``
    then ``async for message in r``; ``r.checkpoint()`` saves where it stands."""
    return CommittedReader(
        client,
        [(stream, partition)],
        checkpoint=checkpoint,
        stop_at_latest=stop_at_latest,
        include_acks=include_acks,
        buffer=buffer,
        uuid_of=uuid_of,
    )
