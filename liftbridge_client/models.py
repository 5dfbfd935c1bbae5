"""Public data types, and the one place where protobuf becomes them.

Everything a caller receives is a frozen dataclass defined here; protobuf
messages never leak out of the package. Timestamps from the server are Unix
nanoseconds (``*_ns`` fields); ``datetime`` views are properties.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from liftbridge_client._proto import api_pb2

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


@dataclass(frozen=True, slots=True)
class Ack:
    """The server's acknowledgement that a message was committed."""

    stream: str
    partition_subject: str
    msg_subject: str
    offset: int
    ack_inbox: str
    correlation_id: str
    ack_policy: AckPolicy
    reception_timestamp_ns: int
    commit_timestamp_ns: int

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


@dataclass(frozen=True, slots=True)
class PublishStats:
    """Counters of a client's publisher (`Client.stats`)."""

    pending: int  # publishes waiting for their ack (or write, with ack policy NONE)
    unknown_acks: int  # acks for no pending publish: late after a timeout, duplicates
    undecodable_acks: int  # messages on the NATS ack inbox that were not valid acks
    mismatched_acks: int = 0  # acks whose stream/partition differ from the publish: dropped


@dataclass(frozen=True, slots=True)
class Message:
    """A message read from a stream partition."""

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


# ---------------------------------------------------------------- protobuf -> model


def ack_from_proto(pb: api_pb2.Ack) -> Ack:
    # Hot path (one call per ack): a dict lookup instead of the enum call, positional
    # arguments; an unknown policy still raises ValueError from AckPolicy().
    policy = pb.ackPolicy
    ack_policy = _ACK_POLICIES.get(policy)
    if ack_policy is None:
        ack_policy = AckPolicy(policy)
    return Ack(
        pb.stream,
        pb.partitionSubject,
        pb.msgSubject,
        pb.offset,
        pb.ackInbox,
        pb.correlationId,
        ack_policy,
        pb.receptionTimestamp,
        pb.commitTimestamp,
    )


_ACK_POLICIES: dict[int, AckPolicy] = {p.value: p for p in AckPolicy}


def message_from_proto(pb: api_pb2.Message) -> Message:
    # On the subscribe hot path: positional arguments (in field order) cost less than
    # keywords, and the read-only headers view is built only when there are headers.
    headers = pb.headers
    return Message(
        pb.stream,
        pb.partition,
        pb.offset,
        pb.value,
        pb.key,
        pb.timestamp,
        pb.subject,
        pb.replySubject,
        MappingProxyType(dict(headers)) if headers else _EMPTY,
    )


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
