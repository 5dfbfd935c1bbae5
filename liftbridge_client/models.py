"""Public data types, and the one place where protobuf becomes them.

Everything a caller receives is immutable and defined here: frozen dataclasses,
and `Ack`, which reads its fields from the decoded wire message it wraps (as
go-liftbridge's does); protobuf messages never leak out of the package.
Timestamps from the server are Unix nanoseconds (``*_ns`` fields); ``datetime``
views are properties.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError, dataclass, field, fields
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from google.protobuf.message import DecodeError

from liftbridge_client._native import speedups
from liftbridge_client._proto import api_pb2
from liftbridge_client.errors import PayloadDecodeError

__all__ = [
    "Ack",
    "AckPolicy",
    "Broker",
    "ConsumerGroupInfo",
    "EventTimestamps",
    "Message",
    "Metadata",
    "PartitionInfo",
    "PublishStats",
    "StartPosition",
    "StopPosition",
    "StreamInfo",
]

_EMPTY: Mapping[str, bytes] = MappingProxyType({})


class AckPolicy(enum.IntEnum):
    """When the server acknowledges a published message."""

    LEADER = api_pb2.LEADER  # after the partition leader appended it
    ALL = api_pb2.ALL  # after every in-sync replica has it
    NONE = api_pb2.NONE  # never: fire and forget


class StartPosition(enum.IntEnum):
    """Where a subscription starts reading."""

    NEW_ONLY = api_pb2.NEW_ONLY
    OFFSET = api_pb2.OFFSET
    EARLIEST = api_pb2.EARLIEST
    LATEST = api_pb2.LATEST
    TIMESTAMP = api_pb2.TIMESTAMP


class StopPosition(enum.IntEnum):
    """Where a subscription stops reading (ON_CANCEL: never by itself)."""

    ON_CANCEL = api_pb2.STOP_ON_CANCEL
    OFFSET = api_pb2.STOP_OFFSET
    LATEST = api_pb2.STOP_LATEST
    TIMESTAMP = api_pb2.STOP_TIMESTAMP


def _ns_to_datetime(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


class Ack:
    """The server's acknowledgement that a message was committed.

    Immutable, compared and hashed by its fields. As go-liftbridge's Ack does, it
    reads its fields from the wire message when they are asked for: acks arrive by
    the tens of thousands a second, and most are never looked at, so copying nine
    fields into each cost more than anything else per ack. An ack that came over
    gRPC PublishAsync is decoded only when a field is first read; if its bytes
    cannot be decoded (a server bug: it did name the publish it acks), that read
    raises `PayloadDecodeError`.
    """

    __slots__ = ("_decoded", "_offset", "_raw")
    __match_args__ = (
        "stream",
        "partition_subject",
        "msg_subject",
        "offset",
        "ack_inbox",
        "correlation_id",
        "ack_policy",
        "reception_timestamp_ns",
        "commit_timestamp_ns",
    )
    _decoded: api_pb2.Ack | None  # None until the wire bytes are decoded
    _offset: int  # the offset when the scan of the wire bytes read it, else -1
    _raw: bytes  # the encoded api.Ack, while not decoded

    def __init__(
        self,
        stream: str,
        partition_subject: str,
        msg_subject: str,
        offset: int,
        ack_inbox: str,
        correlation_id: str,
        ack_policy: AckPolicy,
        reception_timestamp_ns: int,
        commit_timestamp_ns: int,
    ) -> None:
        pb = api_pb2.Ack(
            stream=stream,
            partitionSubject=partition_subject,
            msgSubject=msg_subject,
            offset=offset,
            ackInbox=ack_inbox,
            correlationId=correlation_id,
            ackPolicy=AckPolicy(ack_policy),  # type: ignore[arg-type]
            receptionTimestamp=reception_timestamp_ns,
            commitTimestamp=commit_timestamp_ns,
        )
        object.__setattr__(self, "_decoded", pb)
        object.__setattr__(self, "_offset", -1)
        object.__setattr__(self, "_raw", b"")

    @property
    def _pb(self) -> api_pb2.Ack:
        pb = self._decoded
        if pb is None:
            pb = _decode_ack(self._raw)
            _set_decoded(self, pb)
            _set_raw(self, b"")
        return pb

    @property
    def stream(self) -> str:
        return self._pb.stream

    @property
    def partition_subject(self) -> str:
        """The NATS subject of the stream's partition 0 (the stream's subject)."""
        return self._pb.partitionSubject

    @property
    def msg_subject(self) -> str:
        """The NATS subject the message was published on (its partition's subject)."""
        return self._pb.msgSubject

    @property
    def offset(self) -> int:
        # The one field writers read from every ack (the exactly-once sink checks the
        # order): known without decoding when the C scan of the ack read it.
        offset = self._offset
        return offset if offset >= 0 else self._pb.offset

    @property
    def ack_inbox(self) -> str:
        return self._pb.ackInbox

    @property
    def correlation_id(self) -> str:
        return self._pb.correlationId

    @property
    def ack_policy(self) -> AckPolicy:
        return _ACK_POLICIES[self._pb.ackPolicy]  # checked when the Ack was made

    @property
    def reception_timestamp_ns(self) -> int:
        return self._pb.receptionTimestamp

    @property
    def commit_timestamp_ns(self) -> int:
        return self._pb.commitTimestamp

    @property
    def commit_time(self) -> datetime:
        return _ns_to_datetime(self.commit_timestamp_ns)

    @property
    def partition(self) -> int:
        """The partition the message was stored in (from the subjects; -1 if unknown).

        Partition 0 is the stream's subject, partition N is ``<subject>.N``.
        """
        msg, base = self.msg_subject, self.partition_subject
        if msg == base:
            return 0 if msg else -1
        suffix = msg[len(base) + 1 :] if msg.startswith(base + ".") else ""
        return int(suffix) if suffix.isdigit() and suffix.isascii() else -1

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Ack)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        try:
            fields = self._fields()
        except PayloadDecodeError:
            return "Ack(<undecodable>)"
        inner = ", ".join(
            f"{name}={value!r}" for name, value in zip(self.__match_args__, fields, strict=True)
        )
        return f"Ack({inner})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type[Ack], tuple[object, ...]]:
        return Ack, self._fields()


@dataclass(frozen=True, slots=True)
class PublishStats:
    """Counters of a client's publisher (`Client.stats`)."""

    pending: int  # publishes waiting for their ack (or write, with ack policy NONE)
    unknown_acks: int  # acks for no pending publish: late after a timeout, duplicates
    undecodable_acks: int  # messages on the NATS ack inbox that were not valid acks
    mismatched_acks: int = 0  # acks whose stream/partition differ from the publish: dropped
    nats_detours: int = 0  # times NATS publishes went over gRPC for a while (nats_detour)


@dataclass(frozen=True, slots=True)
class Message:
    """A message read from a stream partition.

    ``headers`` are the headers the publisher set. The server adds two of its own to
    every message it stores, ``subject`` (the NATS subject it came in on, also in
    ``subject``) and ``reply`` (its NATS reply subject, also in ``reply_subject``);
    ``headers`` leaves them out, `raw_headers` keeps them. The server overwrites headers
    a publisher named ``subject`` or ``reply``: do not use those names.
    """

    stream: str
    partition: int
    offset: int
    value: bytes
    key: bytes = b""
    timestamp_ns: int = 0
    subject: str = ""
    reply_subject: str = ""
    headers: Mapping[str, bytes] = field(default_factory=lambda: _EMPTY)

    @property
    def timestamp(self) -> datetime:
        return _ns_to_datetime(self.timestamp_ns)

    @property
    def raw_headers(self) -> Mapping[str, bytes]:
        """Every header as the server stored it: ``headers`` plus the server's
        ``subject`` and ``reply`` (read-only)."""
        headers = self.headers
        return headers.raw() if type(headers) is _LazyHeaders else headers

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return reduce_read_only(self)


def reduce_read_only(obj: Any) -> tuple[Any, tuple[Any, ...]]:
    """``__reduce__`` of a frozen dataclass holding read-only mappings, for pickling
    and deep copies: a read-only view (``MappingProxyType``, a received message's lazy
    headers) cannot be pickled, so it travels as a dict and comes back read-only."""
    values = tuple(
        dict(v) if isinstance(v, MappingProxyType) else v  # _LazyHeaders pickle themselves
        for v in (getattr(obj, f.name) for f in fields(obj))
    )
    return _restore_read_only, (type(obj), values)


def _restore_read_only(cls: Any, values: tuple[Any, ...]) -> Any:
    return cls(*(MappingProxyType(v) if type(v) is dict else v for v in values))


@dataclass(frozen=True, slots=True)
class Broker:
    """A Liftbridge server as the cluster advertises it."""

    id: str
    host: str
    port: int
    partition_count: int = 0
    leader_count: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class EventTimestamps:
    """When something first and last happened to a partition (Unix ns; 0 = never)."""

    first_ns: int
    latest_ns: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A stream partition: placement, and (from the leader) offsets and state."""

    stream: str
    id: int
    leader: str
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    high_watermark: int = -1
    newest_offset: int = -1
    paused: bool = False
    readonly: bool = False
    messages_received: EventTimestamps | None = None
    pause_changed: EventTimestamps | None = None
    readonly_changed: EventTimestamps | None = None


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream and its partitions, keyed by partition id."""

    name: str
    subject: str
    partitions: Mapping[int, PartitionInfo]
    creation_timestamp_ns: int = 0

    def partition_subject(self, partition: int) -> str:
        """The NATS subject a partition listens on: ``subject`` for 0, ``subject.N`` else."""
        return self.subject if partition == 0 else f"{self.subject}.{partition}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return reduce_read_only(self)


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    """A consumer group as FetchMetadata reports it.

    ``coordinator`` is the id of the broker that assigns the group's partitions;
    ``epoch`` grows with every change of coordinator or membership. The server does
    not report members or assignments in metadata (v1.9.0's wire schema has no field
    for them): a member learns its own assignments from the coordinator.
    """

    group_id: str
    coordinator: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Metadata:
    """A snapshot of the cluster: brokers, and the streams and groups asked for."""

    brokers: tuple[Broker, ...]
    streams: Mapping[str, StreamInfo]
    groups: Mapping[str, ConsumerGroupInfo] = field(default_factory=dict)

    def broker(self, broker_id: str) -> Broker | None:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        return None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return reduce_read_only(self)


# ---------------------------------------------------------------- protobuf -> model

# An instance without its __init__: the hot conversions set slots through their setters.
_new = object.__new__


def ack_from_proto(pb: api_pb2.Ack) -> Ack:
    """The Ack of a decoded wire ack, which it takes over: ``pb`` must not change after.

    ValueError for an ack policy this client does not know.
    """
    if pb.ackPolicy not in _ACK_POLICIES:
        raise ValueError(f"{pb.ackPolicy} is not a valid AckPolicy")
    ack = _new(Ack)
    _set_decoded(ack, pb)
    _set_ack_offset(ack, -1)
    _set_raw(ack, b"")
    return ack


def ack_from_wire(raw: bytes, offset: int = -1) -> Ack:
    """The Ack of an encoded api.Ack, decoded when a field is first read; ``offset``: its
    offset field when the caller read it already (a scan that checked every byte)."""
    ack = _new(Ack)
    _set_decoded(ack, None)
    _set_ack_offset(ack, offset)
    _set_raw(ack, raw)
    return ack


def _decode_ack(raw: bytes) -> api_pb2.Ack:
    try:
        pb = api_pb2.Ack.FromString(raw)
    except DecodeError as exc:
        raise PayloadDecodeError(f"bad ack from the server: {exc}") from None
    if pb.ackPolicy not in _ACK_POLICIES:
        raise PayloadDecodeError(f"bad ack from the server: unknown ack policy {pb.ackPolicy}")
    return pb


# The slots' own setters, past Ack.__setattr__ (which refuses every assignment).
_set_decoded = vars(Ack)["_decoded"].__set__
_set_ack_offset = vars(Ack)["_offset"].__set__
_set_raw = vars(Ack)["_raw"].__set__
_ACK_POLICIES: dict[int, AckPolicy] = {p.value: p for p in AckPolicy}


def message_from_proto(pb: api_pb2.Message) -> Message:
    # On the subscribe hot path: positional arguments (in field order) cost less than
    # keywords, and the headers are filtered only when there are headers.
    return Message(
        pb.stream,
        pb.partition,
        pb.offset,
        pb.value,
        pb.key,
        pb.timestamp,
        pb.subject,
        pb.replySubject,
        _LazyHeaders.copied(pb) if pb.headers else _EMPTY,
    )


class _LazyHeaders(Mapping[str, bytes]):
    """A message's headers without the server's own, copied out of its protobuf on first use.

    The server adds ``subject`` and ``reply`` headers to every stored message, so a
    subscriber would otherwise copy a map per message that most readers never look at.
    The first read copies the map and takes out ``subject`` and ``reply`` where they
    hold the message's subject and reply subject (kept aside for `raw`): the server's
    (it overwrites a publisher's headers of those names). Holding the protobuf until
    then, not its fields, keeps the subscribe hot path at one object per message. Only
    for a protobuf nobody changes afterwards (`owned_message_from_proto`), or the wire
    bytes of one (`message_from_wire`), decoded then.
    """

    __slots__ = ("_dict", "_pb", "_server")

    def __init__(self, pb: api_pb2.Message | bytes) -> None:
        self._pb: api_pb2.Message | bytes | None = pb
        self._dict: dict[str, bytes] | None = None
        # The server's subject and reply headers once filtered out (None: there was none).
        self._server: tuple[bytes | None, bytes | None] = (None, None)

    @classmethod
    def copied(cls, pb: api_pb2.Message) -> _LazyHeaders:
        """Filtered now, from a protobuf the caller may change afterwards."""
        headers = cls(pb)
        headers._get()
        return headers

    @classmethod
    def _restore(
        cls, filtered: dict[str, bytes], server: tuple[bytes | None, bytes | None]
    ) -> _LazyHeaders:
        headers = cls.__new__(cls)
        headers._pb = None
        headers._dict = filtered
        headers._server = server
        return headers

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _LazyHeaders._restore, (self._get(), self._server)

    def _get(self) -> dict[str, bytes]:
        d = self._dict
        if d is None:
            assert self._pb is not None
            d, subject_wire, reply_wire = _header_map(self._pb)
            # Take both out (two pops cost less than a copy), put back what is not the
            # server's; raw() puts them together again, when someone asks.
            subject = d.pop("subject", None)
            reply = d.pop("reply", None)
            if subject is not None and subject != subject_wire:
                d["subject"] = subject
                subject = None
            if reply is not None and reply != reply_wire:
                d["reply"] = reply
                reply = None
            self._server = (subject, reply)
            self._dict = d
            self._pb = None
        return d

    def raw(self) -> Mapping[str, bytes]:
        """Every header, the server's included (read-only)."""
        raw = dict(self._get())
        subject, reply = self._server
        if subject is not None:
            raw["subject"] = subject
        if reply is not None:
            raw["reply"] = reply
        return MappingProxyType(raw)

    def __getitem__(self, key: str) -> bytes:
        return self._get()[key]

    def get(self, key: str, default: Any = None) -> Any:
        # Mapping.get goes through __getitem__ and a KeyError for every missing name:
        # readers look for headers most messages lack (eo-uuid, eo-clocks, lb-packed).
        return self._get().get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __contains__(self, key: object) -> bool:
        return key in self._get()

    def __repr__(self) -> str:
        return repr(self._get())


_headers_of = None if speedups is None else speedups.headers_of


def _header_map(source: api_pb2.Message | bytes) -> tuple[dict[str, bytes], bytes, bytes]:
    """A message's header map, and its subject and reply subject as UTF-8: from its
    protobuf, or from its wire bytes (in C for the plain shape, else decoded)."""
    if type(source) is bytes:
        if _headers_of is not None and (found := _headers_of(source)) is not None:
            return found
        source = api_pb2.Message.FromString(source)
    assert isinstance(source, api_pb2.Message)
    return dict(source.headers), source.subject.encode(), source.replySubject.encode()


def message_headers(pb: api_pb2.Message) -> Mapping[str, bytes]:
    """The headers `Message.headers` gives for ``pb`` (without the server's own), copied
    out now: for readers that take a message's fields without a `Message`."""
    return _LazyHeaders(pb)._get() if pb.headers else _EMPTY


def owned_message_from_proto(pb: api_pb2.Message) -> Message:
    """`message_from_proto` for a protobuf the caller hands over (never changed again).

    The subscribe hot path: headers are copied out only when read, and the fields are
    set with the slots' own setters (the frozen dataclass's ``__init__`` sets each
    through ``object.__setattr__``, which cost twice as much per message).
    """
    headers = pb.headers
    msg = _new(Message)
    _set_stream(msg, pb.stream)
    _set_partition(msg, pb.partition)
    _set_offset(msg, pb.offset)
    _set_value(msg, pb.value)
    _set_key(msg, pb.key)
    _set_timestamp_ns(msg, pb.timestamp)
    _set_subject(msg, pb.subject)
    _set_reply_subject(msg, pb.replySubject)
    _set_headers(msg, _LazyHeaders(pb) if headers else _EMPTY)
    return msg


_message_of = None if speedups is None else speedups.message_of


def message_from_wire(raw: bytes) -> Message:
    """``owned_message_from_proto(api_pb2.Message.FromString(raw))``: a received message.

    The C accelerator makes it straight from the bytes when they are of the plain shape
    (every field protobuf would read, read the same way; headers kept undecoded until
    used): no protobuf object and no Python call per field. Anything else, malformed
    bytes included, goes through protobuf, which raises `DecodeError` as before.
    """
    if _message_of is not None:
        msg = _message_of(raw, Message, _LazyHeaders, _EMPTY)
        if msg is not None:
            return msg
    return owned_message_from_proto(api_pb2.Message.FromString(raw))


_message_setters = {f.name: vars(Message)[f.name].__set__ for f in fields(Message)}
_set_stream = _message_setters.pop("stream")
_set_partition = _message_setters.pop("partition")
_set_offset = _message_setters.pop("offset")
_set_value = _message_setters.pop("value")
_set_key = _message_setters.pop("key")
_set_timestamp_ns = _message_setters.pop("timestamp_ns")
_set_subject = _message_setters.pop("subject")
_set_reply_subject = _message_setters.pop("reply_subject")
_set_headers = _message_setters.pop("headers")
if _message_setters:  # a field added to Message: set it in owned_message_from_proto
    raise TypeError(f"owned_message_from_proto misses {sorted(_message_setters)}")


def _timestamps(pb: api_pb2.PartitionMetadata, name: str) -> EventTimestamps | None:
    if not pb.HasField(name):  # type: ignore[arg-type]
        return None
    ts: api_pb2.PartitionEventTimestamps = getattr(pb, name)
    return EventTimestamps(first_ns=ts.firstTimestamp, latest_ns=ts.latestTimestamp)


def partition_from_proto(stream: str, pb: api_pb2.PartitionMetadata) -> PartitionInfo:
    return PartitionInfo(
        stream=stream,
        id=pb.id,
        leader=pb.leader,
        replicas=tuple(pb.replicas),
        isr=tuple(pb.isr),
        high_watermark=pb.highWatermark,
        newest_offset=pb.newestOffset,
        paused=pb.paused,
        readonly=pb.readonly,
        messages_received=_timestamps(pb, "messagesReceivedTimestamps"),
        pause_changed=_timestamps(pb, "pauseTimestamps"),
        readonly_changed=_timestamps(pb, "readonlyTimestamps"),
    )


def stream_from_proto(pb: api_pb2.StreamMetadata) -> StreamInfo:
    parts = {pid: partition_from_proto(pb.name, p) for pid, p in pb.partitions.items()}
    return StreamInfo(
        name=pb.name,
        subject=pb.subject,
        partitions=MappingProxyType(dict(sorted(parts.items()))),
        creation_timestamp_ns=pb.creationTimestamp,
    )


def metadata_from_proto(pb: api_pb2.FetchMetadataResponse) -> Metadata:
    brokers = tuple(
        Broker(
            id=b.id,
            host=b.host,
            port=b.port,
            partition_count=b.partitionCount,
            leader_count=b.leaderCount,
        )
        for b in pb.brokers
    )
    streams = {
        s.name: stream_from_proto(s)
        for s in pb.streamMetadata
        if s.error == api_pb2.StreamMetadata.OK
    }
    groups = {
        g.groupId: ConsumerGroupInfo(group_id=g.groupId, coordinator=g.coordinator, epoch=g.epoch)
        for g in pb.groupMetadata
        if g.error == api_pb2.ConsumerGroupMetadata.OK
    }
    return Metadata(
        brokers=brokers, streams=MappingProxyType(streams), groups=MappingProxyType(groups)
    )
