"""Frozen, validated option objects. Times are float seconds everywhere.

Durations may be given as numbers of seconds or as `datetime.timedelta`; they read back
as float seconds. Validation happens at construction (`_validate`), so a bad value fails
where it was written, with an `InvalidInputError` naming the field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from liftbridge_client import _validate
from liftbridge_client._proto import api_pb2
from liftbridge_client._validate import OptionalSeconds, Seconds
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.features import parse_version
from liftbridge_client.partitioning import KeyPartitioner, Partitioner

__all__ = [
    "ClientOptions",
    "NatsAuth",
    "RetryPolicy",
    "StreamConfig",
    "StreamTransport",
    "TLSConfig",
    "TracingOptions",
    "Transport",
]


class Transport(enum.Enum):
    """How a message is published."""

    NATS = "nats"  # an enveloped Message on the partition's NATS subject
    GRPC = "grpc"  # the PublishAsync gRPC stream to the partition leader


class StreamTransport(enum.Enum):
    """How the streaming RPCs (Subscribe, PublishAsync) travel; unary RPCs use grpc.aio."""

    H2 = "h2"  # asyncio and the h2 library: several times faster per message
    GRPC = "grpc"  # grpc.aio


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """TLS for the gRPC connections (``ClientOptions.tls``) or the NATS connection
    (``ClientOptions.nats_tls``). Paths are read when the client connects.

    ``cert_file`` and ``key_file`` together present a client certificate
    (mutual TLS, needed for the server's authorization).
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None  # override the name checked in the server's certificate

    def __post_init__(self) -> None:
        for name in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _path(name, value))
        if self.server_name is not None:
            _validate.text("server_name", self.server_name)
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
    """Credentials for the NATS connection. No secret ever appears in a repr.

    One way to authenticate: ``user`` and ``password`` (or a ``token``), an nkey
    (``nkey_seed_file``: a file holding the user's seed, ``SU...``) or a NATS credentials
    file (``creds_file``: a user JWT and its seed, as ``nsc`` writes them). Files are read
    when the client connects; nkeys and credentials files need the ``nkeys`` package
    (``pip install 'liftbridge-client[nkeys]'``).
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    nkey_seed_file: Path | None = None
    creds_file: Path | None = None

    def __post_init__(self) -> None:
        if self.user is not None:
            _validate.text("user", self.user, empty_ok=True)
        for name in ("password", "token"):
            if (value := getattr(self, name)) is not None:
                _validate.text(name, value, empty_ok=True, show=_validate.hidden)
        for name in ("nkey_seed_file", "creds_file"):
            if (value := getattr(self, name)) is not None:
                object.__setattr__(self, name, _path(name, value))
        ways = [
            way
            for way, given in (
                ("user/password/token", {self.user, self.password, self.token} != {None}),
                ("nkey_seed_file", self.nkey_seed_file is not None),
                ("creds_file", self.creds_file is not None),
            )
            if given
        ]
        if len(ways) > 1:
            raise InvalidInputError(f"NatsAuth takes one way to authenticate, got {ways}")


def _path(name: str, value: object) -> Path:
    if isinstance(value, str):
        value = Path(_validate.text(name, value))
    if not isinstance(value, Path):
        raise InvalidInputError(f"{name} must be a path, got {value!r}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries for retriable RPC failures: exponential backoff with a cap."""

    attempts: int = 5
    initial_backoff: Seconds = Seconds(0.05, allow_zero=True)
    max_backoff: Seconds = Seconds(1.0, allow_zero=True)
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        _validate.int_arg("attempts", self.attempts, 1, 1000)
        if (
            isinstance(self.multiplier, bool)
            or not isinstance(self.multiplier, int | float)
            or not 1 <= self.multiplier <= 1000
        ):
            raise InvalidInputError(f"multiplier must be in [1, 1000], got {self.multiplier!r}")

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based)."""
        try:
            return min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        except OverflowError:  # far past the cap: 2.0 ** 1024 is no float
            return self.max_backoff


@dataclass(frozen=True, slots=True)
class TracingOptions:
    """OpenTelemetry trace propagation (install the ``[otel]`` extra), off unless set.

    With ``ClientOptions(tracing=TracingOptions())`` each publish runs in a PRODUCER
    span ``send <stream>`` and carries its context in the message headers
    (``traceparent``, W3C Trace Context, through the propagator); each message a
    subscription yields gets a CONSUMER span ``receive <stream>``, child of the
    producer's context (``receive_spans=False`` turns those off). Attributes follow
    the OpenTelemetry semantic conventions for messaging. `liftbridge_client.tracing`
    extracts the context (or a span link) of any message.

    ``tracer_provider`` and ``propagator`` default to OpenTelemetry's global ones.
    """

    tracer_provider: object | None = None  # an opentelemetry.trace.TracerProvider
    propagator: object | None = None  # an opentelemetry TextMapPropagator
    receive_spans: bool = True

    def __post_init__(self) -> None:
        # The provider and propagator types are checked where OpenTelemetry is imported:
        # when a Client is made with these options.
        _validate.flag("receive_spans", self.receive_spans)


KEEPALIVE_DEFAULT = 330.0


@dataclass(frozen=True)
class ClientOptions:
    """How a `Client` connects, publishes and retries.

    ``address_overrides`` maps a broker's advertised ``host:port`` to the one
    this client can reach (containers, pods, NAT).

    ``transport`` is how `Client.publish` sends by default; None picks NATS when
    the client has a NATS connection (``nats_servers``) and gRPC otherwise.
    Asking for NATS without a connection fails the publish with
    `InvalidInputError`.
    """

    ack_wait: Seconds = Seconds(5.0)  # per published message
    rpc_timeout: Seconds = Seconds(10.0)  # deadline of each unary RPC attempt
    connect_timeout: Seconds = Seconds(5.0)
    # Unacked publishes before publishing waits. Pipelined throughput follows it until the
    # server is busy: 4096 reached go-liftbridge's unbounded PublishAsync over gRPC where
    # 1024 stayed ~10% behind (docs/benchmarks.md); nats.go's async publish allows 4000.
    max_inflight: int = 4096
    transport: Transport | None = None  # None: NATS if connected to NATS, else gRPC
    envelope_crc: bool = False  # add CRC-32C to enveloped NATS publishes
    # When NATS publishes time out while the metadata shows their partitions healthy (the
    # NATS server this client is on cut off from their leaders, as on the minority side of
    # a split), publish over the leaders' gRPC streams for a while (5 s or 2 x ack_wait,
    # doubling up to 60 s while it lasts) and move the NATS connection to another server
    # of the cluster. False keeps NATS publishes on NATS, and failing, until it heals.
    nats_detour: bool = True
    metadata_refresh_interval: OptionalSeconds = OptionalSeconds(30.0)  # None: on errors only
    resubscribe_wait: Seconds = Seconds(30.0)  # how long a subscription keeps trying to come back
    # gRPC keepalive pings during calls; None disables. The server (grpc-go defaults) closes
    # connections that ping more often than every 5 minutes (GOAWAY "too_many_pings").
    keepalive_time: OptionalSeconds = OptionalSeconds(KEEPALIVE_DEFAULT)
    # How long a broker connection of the h2 transport may go unanswered at the TCP level
    # before the kernel drops it (keepalive probes and TCP_USER_TIMEOUT; not HTTP/2 pings,
    # which the server limits): what a subscription whose broker was cut off waits before
    # it resubscribes. None leaves the kernel's defaults (hours for an idle connection).
    dead_peer_timeout: OptionalSeconds = OptionalSeconds(20.0)
    address_overrides: Mapping[str, str] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    tls: TLSConfig | None = None
    nats_auth: NatsAuth | None = None
    create_stream_timeout: Seconds = Seconds(30.0)  # retry "no known metadata leader" this long
    # For publishes without partition=: by default the CRC-32 of the key, as Kafka users
    # expect and as go-liftbridge's KeyPartitioner computes it (no key: partition 0).
    # None: partition 0 whatever the key, go-liftbridge's default.
    partitioner: Partitioner | None = field(default_factory=KeyPartitioner)
    # close(): how long pending publishes may take to be acked (drain), then how long
    # stopping connections and tasks may take whatever the servers do.
    drain_timeout: Seconds = Seconds(10.0)
    close_timeout: Seconds = Seconds(1.0)
    # TLS for the NATS connection (CA, client certificate for servers that verify it,
    # server_name): like ``tls`` for gRPC. None: what the NATS URL and server ask for.
    nats_tls: TLSConfig | None = None
    # Subject prefix of the client's NATS ack inbox (nats-py's inbox_prefix; default
    # "_INBOX"). A prefix per NATS user lets NATS permissions keep other users off the
    # inbox (docs/security.md).
    nats_inbox_prefix: str | None = None
    # Server features (docs/compatibility.md), after librdkafka's api.version.request and
    # broker.version.fallback: with probe_features each broker is probed once, on first
    # need; what probing cannot observe, and everything when probe_features is False, is
    # decided as if the server were server_version_fallback ('v1.9.0', '1.7', 'master').
    probe_features: bool = True
    server_version_fallback: str = "v1.7.1"
    # OpenTelemetry trace propagation through message headers (the [otel] extra); None: off,
    # and then publishing and subscribing do no tracing work at all.
    tracing: TracingOptions | None = None
    # How Subscribe and PublishAsync travel (see StreamTransport); unary RPCs use grpc.aio.
    stream_transport: StreamTransport = StreamTransport.H2

    def __post_init__(self) -> None:
        _validate.int_arg("max_inflight", self.max_inflight, 1, _validate.INT32_MAX)
        _validate.flag("envelope_crc", self.envelope_crc)
        _validate.flag("nats_detour", self.nats_detour)
        if not isinstance(self.retry, RetryPolicy):
            raise InvalidInputError(f"retry must be a RetryPolicy, got {self.retry!r}")
        if self.tls is not None and not isinstance(self.tls, TLSConfig):
            raise InvalidInputError(f"tls must be a TLSConfig, got {self.tls!r}")
        if self.nats_inbox_prefix is not None:
            _validate.publish_subject(self.nats_inbox_prefix, "nats_inbox_prefix")
        if self.nats_tls is not None and not isinstance(self.nats_tls, TLSConfig):
            raise InvalidInputError(f"nats_tls must be a TLSConfig, got {self.nats_tls!r}")
        if self.nats_auth is not None and not isinstance(self.nats_auth, NatsAuth):
            raise InvalidInputError(f"nats_auth must be a NatsAuth, got {self.nats_auth!r}")
        if self.partitioner is not None and not callable(self.partitioner):
            raise InvalidInputError(f"partitioner must be callable, got {self.partitioner!r}")
        if not isinstance(self.probe_features, bool):
            raise InvalidInputError(f"probe_features must be a bool, got {self.probe_features!r}")
        parse_version(self.server_version_fallback, name="server_version_fallback")
        if self.tracing is not None and not isinstance(self.tracing, TracingOptions):
            raise InvalidInputError(f"tracing must be a TracingOptions, got {self.tracing!r}")
        if self.transport is not None and not isinstance(self.transport, Transport):
            raise InvalidInputError(f"transport must be a Transport, got {self.transport!r}")
        if not isinstance(self.stream_transport, StreamTransport):
            # 0.2 took the strings "h2" and "grpc": name the member that replaces one.
            hint = ""
            if self.stream_transport in ("h2", "grpc"):
                hint = f" (use StreamTransport.{str(self.stream_transport).upper()})"
            raise InvalidInputError(
                f"stream_transport must be a StreamTransport, got {self.stream_transport!r}{hint}"
            )
        if not isinstance(self.address_overrides, Mapping):
            raise InvalidInputError(
                f"address_overrides must be a mapping, got {self.address_overrides!r}"
            )
        overrides = dict(self.address_overrides)
        for advertised, reachable in overrides.items():
            _validate.broker_address(advertised, "address_overrides key")
            _validate.broker_address(reachable, f"address_overrides[{advertised!r}]")
        object.__setattr__(self, "address_overrides", MappingProxyType(overrides))

    def resolve(self, address: str) -> str:
        """The address to dial for an advertised broker address."""
        return self.address_overrides.get(address, address)


def _split_address(address: str) -> tuple[str, int]:
    return _validate.broker_address(address)


# ---------------------------------------------------------------- streams

_INT32_MAX = _validate.INT32_MAX
_INT64_MAX = _validate.INT64_MAX


@dataclass(frozen=True)
class StreamConfig:
    """Options of a new stream. ``None`` means "not sent": the server's default applies.

    Durations are seconds or `datetime.timedelta` (sent to the server as milliseconds).
    The stream's name and subject are checked by `Client.create_stream`.
    """

    group: str | None = None
    replication_factor: int | None = None  # -1: every server in the cluster
    partitions: int | None = None
    retention_max_bytes: int | None = None
    retention_max_messages: int | None = None
    retention_max_age: OptionalSeconds = OptionalSeconds(None, allow_zero=True)
    cleaner_interval: OptionalSeconds = OptionalSeconds(None, allow_zero=True)
    segment_max_bytes: int | None = None
    segment_max_age: OptionalSeconds = OptionalSeconds(None, allow_zero=True)
    compact_enabled: bool | None = None
    compact_max_goroutines: int | None = None
    auto_pause_time: OptionalSeconds = OptionalSeconds(None, allow_zero=True)
    auto_pause_disable_if_subscribers: bool | None = None
    min_isr: int | None = None
    optimistic_concurrency_control: bool | None = None
    encryption: bool | None = None

    def __post_init__(self) -> None:
        if self.group is not None:
            _validate.group_name(self.group)
        # Negative partition counts crash the server: never let one through.
        if self.partitions is not None:
            _validate.int_arg("partitions", self.partitions, 1, _INT32_MAX)
        rf = self.replication_factor
        if rf is not None and _validate.int_arg("replication_factor", rf, -1, _INT32_MAX) == 0:
            raise InvalidInputError("replication_factor must be -1 (all servers) or >= 1, got 0")
        for name in ("retention_max_bytes", "retention_max_messages", "segment_max_bytes"):
            if (value := getattr(self, name)) is not None:
                _validate.int_arg(name, value, 0, _INT64_MAX)
        for name in ("compact_max_goroutines", "min_isr"):
            if (value := getattr(self, name)) is not None:
                _validate.int_arg(name, value, 1, _INT32_MAX)
        for name in (
            "compact_enabled",
            "auto_pause_disable_if_subscribers",
            "optimistic_concurrency_control",
            "encryption",
        ):
            if (value := getattr(self, name)) is not None:
                _validate.flag(name, value)

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
