"""The activity stream: what happened to the cluster's streams and groups, as typed events.

With ``activity.stream.enabled: true`` in its configuration, the metadata leader
publishes an event to the internal stream ``__activity`` (one partition) for each
stream created, deleted, paused, resumed or made read-only, and for each consumer group
join and leave, in the order they were committed to the metadata log, at least once.
`Client.activity` reads it: an `ActivityStream` of events, each carrying its stream
``offset`` so a reader can stop and later resume with ``start_offset=event.offset + 1``.

Decoding (`decode_event`) is pure; `ActivityStream` only wraps a `Subscription`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, Self

from google.protobuf.message import DecodeError

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client.models import Message
from liftbridge_client.subscription import Subscription

__all__ = [
    "ACTIVITY_STREAM",
    "ActivityEvent",
    "ActivityOp",
    "ActivityStream",
    "GroupJoined",
    "GroupLeft",
    "StreamCreated",
    "StreamDeleted",
    "StreamPaused",
    "StreamReadonlyChanged",
    "StreamResumed",
    "UnknownActivity",
    "decode_event",
]

ACTIVITY_STREAM = "__activity"
FEATURE = "activity_stream"


class ActivityOp(enum.IntEnum):
    """What an event is about (``ActivityStreamOp`` on the wire)."""

    CREATE_STREAM = api_pb2.CREATE_STREAM
    DELETE_STREAM = api_pb2.DELETE_STREAM
    PAUSE_STREAM = api_pb2.PAUSE_STREAM
    RESUME_STREAM = api_pb2.RESUME_STREAM
    SET_STREAM_READONLY = api_pb2.SET_STREAM_READONLY
    JOIN_CONSUMER_GROUP = api_pb2.JOIN_CONSUMER_GROUP
    LEAVE_CONSUMER_GROUP = api_pb2.LEAVE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True, kw_only=True)
class _Event:
    # ``id`` is the server's event id (the index of the operation in the metadata Raft
    # log: it grows, with gaps). ``offset`` and ``timestamp_ns`` are the message's in
    # ``__activity``: resume after an event with ``start_offset=event.offset + 1``.
    id: int
    offset: int
    timestamp_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCreated(_Event):
    stream: str
    partitions: tuple[int, ...]
    op: ClassVar[ActivityOp] = ActivityOp.CREATE_STREAM


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamDeleted(_Event):
    stream: str
    op: ClassVar[ActivityOp] = ActivityOp.DELETE_STREAM


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPaused(_Event):
    stream: str
    partitions: tuple[int, ...]
    resume_all: bool  # a publish to any partition resumes them all
    op: ClassVar[ActivityOp] = ActivityOp.PAUSE_STREAM


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamResumed(_Event):
    stream: str
    partitions: tuple[int, ...]
    op: ClassVar[ActivityOp] = ActivityOp.RESUME_STREAM


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamReadonlyChanged(_Event):
    stream: str
    partitions: tuple[int, ...]
    readonly: bool
    op: ClassVar[ActivityOp] = ActivityOp.SET_STREAM_READONLY


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupJoined(_Event):
    group_id: str
    consumer_id: str
    streams: tuple[str, ...]
    op: ClassVar[ActivityOp] = ActivityOp.JOIN_CONSUMER_GROUP


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupLeft(_Event):
    group_id: str
    consumer_id: str
    expired: bool  # removed by the coordinator for going silent, not by a leave
    op: ClassVar[ActivityOp] = ActivityOp.LEAVE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownActivity(_Event):
    """An operation this client does not know (a newer server): kept, not dropped."""

    op: int  # the wire code (not an ActivityOp member)
    raw: bytes


ActivityEvent = (
    StreamCreated
    | StreamDeleted
    | StreamPaused
    | StreamResumed
    | StreamReadonlyChanged
    | GroupJoined
    | GroupLeft
    | UnknownActivity
)
"""Any event of the activity stream."""


def decode_event(msg: Message) -> ActivityEvent:
    """The typed event a message of ``__activity`` holds (`PayloadDecodeError` if none)."""
    pb = api_pb2.ActivityStreamEvent()
    try:
        pb.ParseFromString(msg.value)
    except DecodeError as exc:
        raise errors.PayloadDecodeError(
            f"offset {msg.offset} of {ACTIVITY_STREAM} is not an activity event: {exc}"
        ) from exc
    i, offset, ts = pb.id, msg.offset, msg.timestamp_ns
    op = pb.op
    if op == api_pb2.CREATE_STREAM:
        c = pb.createStreamOp
        return StreamCreated(
            id=i, offset=offset, timestamp_ns=ts, stream=c.stream, partitions=tuple(c.partitions)
        )
    if op == api_pb2.DELETE_STREAM:
        return StreamDeleted(id=i, offset=offset, timestamp_ns=ts, stream=pb.deleteStreamOp.stream)
    if op == api_pb2.PAUSE_STREAM:
        p = pb.pauseStreamOp
        return StreamPaused(
            id=i,
            offset=offset,
            timestamp_ns=ts,
            stream=p.stream,
            partitions=tuple(p.partitions),
            resume_all=p.resumeAll,
        )
    if op == api_pb2.RESUME_STREAM:
        r = pb.resumeStreamOp
        return StreamResumed(
            id=i, offset=offset, timestamp_ns=ts, stream=r.stream, partitions=tuple(r.partitions)
        )
    if op == api_pb2.SET_STREAM_READONLY:
        s = pb.setStreamReadonlyOp
        return StreamReadonlyChanged(
            id=i,
            offset=offset,
            timestamp_ns=ts,
            stream=s.stream,
            partitions=tuple(s.partitions),
            readonly=s.readonly,
        )
    if op == api_pb2.JOIN_CONSUMER_GROUP:
        j = pb.joinConsumerGroupOp
        return GroupJoined(
            id=i,
            offset=offset,
            timestamp_ns=ts,
            group_id=j.groupId,
            consumer_id=j.consumerId,
            streams=tuple(j.streams),
        )
    if op == api_pb2.LEAVE_CONSUMER_GROUP:
        g = pb.leaveConsumerGroupOp
        return GroupLeft(
            id=i,
            offset=offset,
            timestamp_ns=ts,
            group_id=g.groupId,
            consumer_id=g.consumerId,
            expired=g.expired,
        )
    return UnknownActivity(id=i, offset=offset, timestamp_ns=ts, op=int(op), raw=msg.value)


def _disabled(cause: BaseException | None) -> errors.FeatureNotSupportedError:
    err = errors.FeatureNotSupportedError(
        f"the server does not publish its activity stream (no {ACTIVITY_STREAM} stream): "
        "set activity.stream.enabled: true in its configuration",
        feature=FEATURE,
    )
    err.__cause__ = cause
    return err


class ActivityStream:
    """Activity events in order: ``async with`` it and ``async for`` over it.

    Created by `Client.activity`, which takes the `Client.subscribe` start and stop
    options (``start_offset=last.offset + 1`` resumes). A server without the activity
    stream raises `FeatureNotSupportedError` (``feature == "activity_stream"``) on
    ``async with`` or the first read. The events are at-least-once: after a metadata
    leader failover an event may come twice (with the same ``id``).
    """

    def __init__(self, metadata: MetadataCache, subscription: Subscription) -> None:
        self._metadata = metadata
        self._sub = subscription
        self._checked = False

    def __repr__(self) -> str:
        return f"<ActivityStream {self._sub!r}>"

    @property
    def subscription(self) -> Subscription:
        """The underlying subscription to ``__activity`` (offsets, broker, end reason)."""
        return self._sub

    async def _check(self) -> None:
        if self._checked:
            return
        try:
            await self._metadata.stream(ACTIVITY_STREAM)
        except errors.NotFoundError as exc:
            if exc.retriable:  # a broker that restarted, not a disabled feature
                raise
            raise _disabled(exc) from exc
        self._checked = True

    async def __aenter__(self) -> Self:
        await self._check()
        try:
            await self._sub.__aenter__()
        except errors.NotFoundError as exc:
            if exc.retriable:  # a broker that restarted, not a disabled feature
                raise
            raise _disabled(exc) from exc
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._sub.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ActivityEvent:
        await self._check()
        try:
            msg = await self._sub.__anext__()
        except errors.NotFoundError as exc:
            if exc.retriable:  # a broker that restarted, not a disabled feature
                raise
            raise _disabled(exc) from exc
        return decode_event(msg)

    async def next(self, timeout: float | None = None) -> ActivityEvent:
        """The next event within ``timeout`` seconds (`LiftbridgeTimeoutError` if none)."""
        await self._check()
        return decode_event(await self._sub.next(timeout))
