"""Frozen, validated option objects. Times are float seconds everywhere.

Validation happens at construction, so a bad value fails where it was written,
with an `InvalidInputError` naming the field.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal, TypedDict

from liftbridge_client._proto import api_pb2
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.partitioning import KeyPartitioner, Partitioner

__all__ = [
    "ClientOptions",
    "NatsAuth",
    "RetryPolicy",
    "StreamConfig",
    "StreamSettings",
    "StreamTransport",
    "TLSConfig",
    "Transport",
]


class Transport(enum.Enum):
    """How a message is published."""

    NATS = "nats"  # an enveloped Message on the partition's NATS subject
    GRPC = "grpc"  # the PublishAsync gRPC stream to the partition leader


def _positive(name: str, value: float | None, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InvalidInputError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidInputError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """TLS for the gRPC connections. Paths are read when the client connects.

    ``cert_file`` and ``key_file`` together present a client certificate
    (mutual TLS, needed for the server's authorization).
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None  # override the name checked in the server's certificate

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidInputError("TLSConfig needs both cert_file and key_file, or neither")

    def __repr__(self) -> str:
        # Paths only; never key material.
        return (
            f"TLSConfig(ca_file={self.ca_file!s}, cert_file={self.cert_file!s}, "
            f"key_file={'<set>' if self.key_file else None}, server_name={self.server_name!r})"
        )


@dataclass(frozen=True, slots=True)
class NatsAuth:
    """Credentials for the NATS connection. The password never appears in a repr."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries for retriable RPC failures: exponential backoff with a cap."""

    attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 1.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise InvalidInputError(f"attempts must be >= 1, got {self.attempts}")
        _positive("initial_backoff", self.initial_backoff, allow_zero=True)
        _positive("max_backoff", self.max_backoff, allow_zero=True)
        if self.multiplier < 1:
            raise InvalidInputError(f"multiplier must be >= 1, got {self.multiplier}")

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based)."""
        return min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))


KEEPALIVE_DEFAULT = 330.0

StreamTransport = Literal["grpc", "h2"]
STREAM_TRANSPORTS: Final = ("grpc", "h2")


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How a `Client` connects, publishes and retries.

    ``address_overrides`` maps a broker's advertised ``host:port`` to the one
    this client can reach (containers, pods, NAT).

    ``transport`` is how `Client.publish` sends by default; None picks NATS when
    the client has a NATS connection (``nats_servers``) and gRPC otherwise.
    Asking for NATS without a connection fails the publish with
    `InvalidInputError`.
    """

    ack_wait: float = 5.0  # per published message
    rpc_timeout: float = 10.0  # deadline of each unary RPC attempt
    connect_timeout: float = 5.0
    max_inflight: int = 1024  # unacked publishes before publishing waits
    transport: Transport | None = None  # None: NATS if connected to NATS, else gRPC
    envelope_crc: bool = False  # add CRC-32C to enveloped NATS publishes
    metadata_refresh_interval: float | None = 30.0  # None: refresh on errors only
    resubscribe_wait: float = 30.0  # how long a subscription keeps trying to come back
    # gRPC keepalive pings during calls; None disables. The server (grpc-go defaults) closes
    # connections that ping more often than every 5 minutes (GOAWAY "too_many_pings").
    keepalive_time: float | None = KEEPALIVE_DEFAULT
    address_overrides: Mapping[str, str] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    tls: TLSConfig | None = None
    nats_auth: NatsAuth | None = None
    create_stream_timeout: float = 30.0  # retry "no known metadata leader" this long
    # For publishes without partition=: by default the CRC-32 of the key, as Kafka users
    # expect and as go-liftbridge's KeyPartitioner computes it (no key: partition 0).
    # None: partition 0 whatever the key, go-liftbridge's default.
    partitioner: Partitioner | None = field(default_factory=KeyPartitioner)
    # close(): how long pending publishes may take to be acked (drain), then how long
    # stopping connections and tasks may take whatever the servers do.
    drain_timeout: float = 10.0
    close_timeout: float = 1.0
    # How the streaming RPCs (Subscribe, PublishAsync) travel: "grpc" (grpc.aio) or "h2"
    # (asyncio + the h2 library, several times faster per message). Unary RPCs use grpc.aio.
    stream_transport: StreamTransport = "h2"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in {
                "ack_wait",
                "rpc_timeout",
                "connect_timeout",
                "metadata_refresh_interval",
                "resubscribe_wait",
                "keepalive_time",
                "create_stream_timeout",
                "drain_timeout",
                "close_timeout",
            }:
                _positive(f.name, value)
        if not isinstance(self.max_inflight, int) or self.max_inflight < 1:
            raise InvalidInputError(f"max_inflight must be an int >= 1, got {self.max_inflight!r}")
        if self.partitioner is not None and not callable(self.partitioner):
            raise InvalidInputError(f"partitioner must be callable, got {self.partitioner!r}")
        if self.transport is not None and not isinstance(self.transport, Transport):
            raise InvalidInputError(f"transport must be a Transport, got {self.transport!r}")
        if self.stream_transport not in STREAM_TRANSPORTS:
            raise InvalidInputError(
                f"stream_transport must be 'grpc' or 'h2', got {self.stream_transport!r}"
            )
        overrides = dict(self.address_overrides)
        for advertised, reachable in overrides.items():
            for address in (advertised, reachable):
                _split_address(address)
        object.__setattr__(self, "address_overrides", MappingProxyType(overrides))

    def resolve(self, address: str) -> str:
        """The address to dial for an advertised broker address."""
        return self.address_overrides.get(address, address)


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInputError(f"broker address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


# ---------------------------------------------------------------- streams

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Options of a new stream. ``None`` means "not sent": the server's default applies.

    Durations are seconds (sent to the server as milliseconds).
    """

    group: str | None = None
    replication_factor: int | None = None  # -1: every server in the cluster
    partitions: int | None = None
    retention_max_bytes: int | None = None
    retention_max_messages: int | None = None
    retention_max_age: float | None = None
    cleaner_interval: float | None = None
    segment_max_bytes: int | None = None
    segment_max_age: float | None = None
    compact_enabled: bool | None = None
    compact_max_goroutines: int | None = None
    auto_pause_time: float | None = None
    auto_pause_disable_if_subscribers: bool | None = None
    min_isr: int | None = None
    optimistic_concurrency_control: bool | None = None
    encryption: bool | None = None

    def __post_init__(self) -> None:
        # Negative partition counts crash the server: never let one through.
        if self.partitions is not None and not 1 <= self.partitions <= _INT32_MAX:
            raise InvalidInputError(f"partitions must be >= 1, got {self.partitions}")
        rf = self.replication_factor
        if rf is not None and not (rf == -1 or 1 <= rf <= _INT32_MAX):
            raise InvalidInputError(f"replication_factor must be -1 or >= 1, got {rf}")
        for name in ("retention_max_bytes", "retention_max_messages", "segment_max_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidInputError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("retention_max_age", "cleaner_interval", "segment_max_age", "auto_pause_time"):
            _positive(name, getattr(self, name), allow_zero=True)
        for name in ("compact_max_goroutines", "min_isr"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= _INT32_MAX:
                raise InvalidInputError(f"{name} must be >= 1, got {value!r}")

    def to_request(self, subject: str, name: str) -> api_pb2.CreateStreamRequest:
        """The CreateStreamRequest carrying only what was set."""
        req = api_pb2.CreateStreamRequest(subject=subject, name=name)
        if self.group is not None:
            req.group = self.group
        if self.replication_factor is not None:
            req.replicationFactor = self.replication_factor
        if self.partitions is not None:
            req.partitions = self.partitions
        for attr, pb_name in (
            ("retention_max_bytes", "retentionMaxBytes"),
            ("retention_max_messages", "retentionMaxMessages"),
            ("segment_max_bytes", "segmentMaxBytes"),
        ):
            if (value := getattr(self, attr)) is not None:
                getattr(req, pb_name).value = value
        for attr, pb_name in (
            ("retention_max_age", "retentionMaxAge"),
            ("cleaner_interval", "cleanerInterval"),
            ("segment_max_age", "segmentMaxAge"),
            ("auto_pause_time", "autoPauseTime"),
        ):
            if (value := getattr(self, attr)) is not None:
                getattr(req, pb_name).value = round(value * 1000)
        for attr, pb_name in (
            ("compact_enabled", "compactEnabled"),
            ("auto_pause_disable_if_subscribers", "autoPauseDisableIfSubscribers"),
            ("optimistic_concurrency_control", "optimisticConcurrencyControl"),
            ("encryption", "encryption"),
            ("compact_max_goroutines", "compactMaxGoroutines"),
            ("min_isr", "minIsr"),
        ):
            if (value := getattr(self, attr)) is not None:
                getattr(req, pb_name).value = value
        return req


class StreamSettings(TypedDict, total=False):
    """`Client.create_stream` keyword settings: the fields of `StreamConfig`."""

    group: str | None
    replication_factor: int | None
    partitions: int | None
    retention_max_bytes: int | None
    retention_max_messages: int | None
    retention_max_age: float | None
    cleaner_interval: float | None
    segment_max_bytes: int | None
    segment_max_age: float | None
    compact_enabled: bool | None
    compact_max_goroutines: int | None
    auto_pause_time: float | None
    auto_pause_disable_if_subscribers: bool | None
    min_isr: int | None
    optimistic_concurrency_control: bool | None
    encryption: bool | None
