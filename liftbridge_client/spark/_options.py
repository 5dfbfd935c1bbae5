"""Options of the "liftbridge" data source, parsed and checked without IO (or pyspark).

Spark hands a data source its options as a case-insensitive string mapping. The names
follow Spark's Kafka source where one exists (``startingOffsets``, ``endingOffsets``,
``failOnDataLoss``, ``maxOffsetsPerTrigger``, ``minPartitions``, ``includeHeaders``), with
``stream``/``streamPattern`` in place of ``subscribe``/``subscribePattern``. Every bad
value raises `InvalidInputError` naming the option.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from liftbridge_client.errors import InvalidInputError
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import Transport

__all__ = [
    "EARLIEST",
    "LATEST",
    "SINK_OPTIONS",
    "SOURCE_OPTIONS",
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "TimestampSpec",
    "get_option",
]

# In offset JSON, as in the Kafka source: -2 = earliest, -1 = latest.
EARLIEST = -2
LATEST = -1

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

# A position per stream and partition id (string keys, as offsets travel through JSON).
PerPartition = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``, ``latest``, or explicit offsets per stream and partition.

    ``default`` applies to every partition not listed in ``per_partition``: the read's
    default (starting: earliest for batch, latest for streaming; ending: latest).
    """

    default: int  # EARLIEST or LATEST
    per_partition: PerPartition

    def for_partition(self, stream: str, partition: int) -> int:
        return self.per_partition.get(stream, {}).get(str(partition), self.default)


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Unix milliseconds for every partition (``all_ms``) or per stream and partition."""

    all_ms: int | None
    per_partition: PerPartition

    def for_partition(self, stream: str, partition: int) -> int | None:
        if self.all_ms is not None:
            return self.all_ms
        return self.per_partition.get(stream, {}).get(str(partition))


def get_option(options: Mapping[str, str], name: str) -> str | None:
    """``options[name]`` ignoring case (Spark's options mapping is case-insensitive; a
    plain dict given by a caller may not be)."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def _string_list(name: str, raw: str) -> tuple[str, ...]:
    items = tuple(part.strip() for part in raw.split(","))
    if not items or any(not item for item in items):
        raise InvalidInputError(f"option {name!r} must be a comma-separated list, got {raw!r}")
    return items


def _int_option(name: str, raw: str | None, low: int, high: int = _INT64_MAX) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidInputError(f"option {name!r} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise InvalidInputError(f"option {name!r} must be in [{low}, {high}], got {value}")
    return value


def _float_option(name: str, raw: str | None, default: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise InvalidInputError(f"option {name!r} must be a number, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise InvalidInputError(f"option {name!r} must be > 0, got {raw!r}")
    return value


def _bool_option(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in {"true", "false"}:
        raise InvalidInputError(f"option {name!r} must be true or false, got {raw!r}")
    return text == "true"


def _per_partition_json(name: str, raw: str, low: int) -> dict[str, dict[str, int]]:
    """``{"stream": {"0": 12, "1": -2}}``: partition ids as strings, values >= ``low``."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"option {name!r} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidInputError(
            f'option {name!r} must be a JSON object like {{"stream": {{"0": 5}}}}, got {raw!r}'
        )
    result: dict[str, dict[str, int]] = {}
    for stream, partitions in parsed.items():
        if not stream or not isinstance(partitions, dict):
            raise InvalidInputError(
                f"option {name!r}: stream {stream!r} must map partition ids to numbers"
            )
        entry: dict[str, int] = {}
        for pid, value in partitions.items():
            if not (pid.isascii() and pid.isdigit()) or int(pid) > _INT32_MAX:
                raise InvalidInputError(f"option {name!r}: bad partition id {pid!r} in {stream!r}")
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value:
                raise InvalidInputError(
                    f"option {name!r}: {stream}/{pid} must be an integer >= {low}, got {value!r}"
                )
            entry[str(int(pid))] = value
        result[stream] = entry
    return result


def _offset_spec(name: str, raw: str | None, default: int, allowed: frozenset[int]) -> OffsetSpec:
    if raw is None:
        return OffsetSpec(default, {})
    text = raw.strip()
    words = {"earliest": EARLIEST, "latest": LATEST}
    if text.lower() in words:
        value = words[text.lower()]
        if value not in allowed:
            raise InvalidInputError(f"option {name!r} cannot be {text.lower()!r}")
        return OffsetSpec(value, {})
    per_partition = _per_partition_json(name, text, min(allowed))
    for stream, partitions in per_partition.items():
        for pid, value in partitions.items():
            if value < 0 and value not in allowed:
                raise InvalidInputError(f"option {name!r}: {stream}/{pid} cannot be {value}")
    return OffsetSpec(default, per_partition)


def _timestamp_spec(options: Mapping[str, str], prefix: str) -> TimestampSpec | None:
    one, many = f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp"
    raw_one, raw_many = get_option(options, one), get_option(options, many)
    if raw_one is not None and raw_many is not None:
        raise InvalidInputError(f"options {one!r} and {many!r} exclude each other")
    if raw_one is not None:
        return TimestampSpec(_int_option(one, raw_one, 0), {})
    if raw_many is not None:
        return TimestampSpec(None, _per_partition_json(many, raw_many, 0))
    return None


def _connection(options: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    raw = get_option(options, "brokers")
    if raw is None:
        raise InvalidInputError(
            "option 'brokers' is required: Liftbridge gRPC addresses, e.g. 127.0.0.1:9292"
        )
    brokers = _string_list("brokers", raw)
    for address in brokers:
        host, _, port = address.rpartition(":")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise InvalidInputError(f"option 'brokers': {address!r} is not host:port")
    raw_nats = get_option(options, "natsServers")
    nats = _string_list("natsServers", raw_nats) if raw_nats is not None else ()
    return brokers, nats


# Options Spark itself sets or passes through to every data source (a path given to load or
# save, the streaming query's own options).
_SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname"})

_CONNECTION_OPTIONS = ("brokers", "natsServers", "connectTimeoutMs")

SOURCE_OPTIONS = (
    *_CONNECTION_OPTIONS,
    "stream",
    "streamPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "failOnDataLoss",
    "includeHeaders",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "maxRecordsPerPartition",
    "pollTimeoutMs",
    "isolation",
    "committedStatesStream",
    "producerIdleHorizonMs",
    "taskStatsFile",
)

# Each producer is a state in every read-committed reader's checkpoint: bounded.
MAX_PRODUCERS_PER_PARTITION = 64

DEFAULT_STATES_STREAM = "lbspark-read-committed-states"
DEFAULT_IDLE_HORIZON_MS = 7 * 24 * 3600 * 1000  # a week, by the producers' own clocks

SINK_OPTIONS = (
    *_CONNECTION_OPTIONS,
    "stream",
    "ackPolicy",
    "transport",
    "maxInflight",
    "ackTimeoutMs",
    "deliveryTimeoutMs",
    "idempotent",
    "writeId",
    "exactlyOnce",
    "producersPerPartition",
    "packRows",
)


def check_known(options: Mapping[str, str], known: Sequence[str], what: str) -> None:
    """Refuse an option this data source does not know (a typo would be silently ignored,
    e.g. ``startingOffset``), naming it and the closest known name."""
    by_lower = {name.lower(): name for name in known}
    for key in options:
        lowered = key.lower()
        if lowered in by_lower or lowered in _SPARK_OPTIONS:
            continue
        close = difflib.get_close_matches(lowered, list(by_lower), n=1, cutoff=0.6)
        hint = f"; did you mean {by_lower[close[0]]!r}?" if close else ""
        raise InvalidInputError(
            f"unknown option {key!r} for a Liftbridge {what}{hint} "
            f"(known: {', '.join(sorted(known, key=str.lower))})"
        )


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What a read (batch or streaming) should read, and how."""

    brokers: tuple[str, ...]
    nats_servers: tuple[str, ...] = field(repr=False)  # URLs may hold secrets
    streams: tuple[str, ...]  # explicit names; empty when ``pattern`` is set
    pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: TimestampSpec | None
    ending_timestamp: TimestampSpec | None
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    poll_timeout: float  # seconds a read waits for an offset the server said exists
    connect_timeout: float
    isolation: Literal["read_uncommitted", "read_committed"]
    # streaming read_committed: where tasks keep producer states, and after how long a
    # producer idle by its partition's newest clock is forgotten (ns; 0: never)
    states_stream: str = DEFAULT_STATES_STREAM
    idle_horizon_ns: int = DEFAULT_IDLE_HORIZON_MS * 1_000_000
    # a file each read task appends its read counts to (`_stats`); None: not kept
    task_stats: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        check_known(options, SOURCE_OPTIONS, "streaming read" if streaming else "read")
        brokers, nats = _connection(options)
        raw_streams = get_option(options, "stream")
        pattern = get_option(options, "streamPattern")
        if (raw_streams is None) == (pattern is None):
            raise InvalidInputError("set exactly one of the options 'stream' and 'streamPattern'")
        streams = _string_list("stream", raw_streams) if raw_streams is not None else ()
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidInputError(f"option 'streamPattern' is not a regex: {exc}") from None
        starting = _offset_spec(
            "startingOffsets",
            get_option(options, "startingOffsets"),
            LATEST if streaming else EARLIEST,
            frozenset({EARLIEST, LATEST}),
        )
        if streaming and get_option(options, "endingOffsets") is not None:
            raise InvalidInputError("option 'endingOffsets' is for batch reads only")
        ending = _offset_spec(
            "endingOffsets", get_option(options, "endingOffsets"), LATEST, frozenset({LATEST})
        )
        ending_ts = _timestamp_spec(options, "ending")
        if streaming and ending_ts is not None:
            raise InvalidInputError("ending timestamps are for batch reads only")
        max_per_trigger = _int_option(
            "maxOffsetsPerTrigger", get_option(options, "maxOffsetsPerTrigger"), 1
        )
        if not streaming and max_per_trigger is not None:
            raise InvalidInputError("option 'maxOffsetsPerTrigger' is for streaming reads only")
        isolation = (get_option(options, "isolation") or "read_uncommitted").strip().lower()
        if isolation not in {"read_uncommitted", "read_committed"}:
            raise InvalidInputError(
                f"option 'isolation' must be read_uncommitted or read_committed, got {isolation!r}"
            )
        return cls(
            brokers=brokers,
            nats_servers=nats,
            streams=streams,
            pattern=pattern,
            starting=starting,
            ending=ending,
            starting_timestamp=_timestamp_spec(options, "starting"),
            ending_timestamp=ending_ts,
            fail_on_data_loss=_bool_option(
                "failOnDataLoss", get_option(options, "failOnDataLoss"), True
            ),
            include_headers=_bool_option(
                "includeHeaders", get_option(options, "includeHeaders"), False
            ),
            max_offsets_per_trigger=max_per_trigger,
            min_partitions=_int_option(
                "minPartitions", get_option(options, "minPartitions"), 1, _INT32_MAX
            ),
            max_records_per_partition=_int_option(
                "maxRecordsPerPartition", get_option(options, "maxRecordsPerPartition"), 1
            ),
            poll_timeout=_float_option(
                "pollTimeoutMs", get_option(options, "pollTimeoutMs"), 120_000.0
            )
            / 1000.0,
            connect_timeout=_float_option(
                "connectTimeoutMs", get_option(options, "connectTimeoutMs"), 10_000.0
            )
            / 1000.0,
            isolation="read_committed" if isolation == "read_committed" else "read_uncommitted",
            task_stats=_task_stats(get_option(options, "taskStatsFile")),
            **_committed_stream_options(options, streaming, isolation),
        )

    def matches(self, stream: str) -> bool:
        """Whether a stream name is selected (by name, or by the whole pattern)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, stream) is not None
        return stream in self.streams


def _task_stats(raw: str | None) -> str | None:
    if raw is None:
        return None
    path = raw.strip()
    # The executors write it: a relative path would land in each one's working directory.
    if not path.startswith("/"):
        raise InvalidInputError(f"option 'taskStatsFile' must be an absolute path, got {raw!r}")
    return path


def _committed_stream_options(
    options: Mapping[str, str], streaming: bool, isolation: str
) -> dict[str, Any]:
    stream = get_option(options, "committedStatesStream")
    horizon = _int_option("producerIdleHorizonMs", get_option(options, "producerIdleHorizonMs"), 0)
    if (stream is not None or horizon is not None) and not (
        streaming and isolation == "read_committed"
    ):
        raise InvalidInputError(
            "options 'committedStatesStream' and 'producerIdleHorizonMs' are for streaming "
            "reads with isolation=read_committed only"
        )
    out: dict[str, Any] = {}
    if stream is not None:
        if not stream.strip():
            raise InvalidInputError("option 'committedStatesStream' must not be empty")
        out["states_stream"] = stream.strip()
    if horizon is not None:
        out["idle_horizon_ns"] = horizon * 1_000_000
    return out


_ACK_POLICIES = {"leader": AckPolicy.LEADER, "all": AckPolicy.ALL, "none": AckPolicy.NONE}
_TRANSPORTS = {"nats": Transport.NATS, "grpc": Transport.GRPC}


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """How a write (batch or streaming) publishes its rows."""

    brokers: tuple[str, ...]
    nats_servers: tuple[str, ...] = field(repr=False)  # URLs may hold secrets
    stream: str | None  # wins over a ``stream`` column, as the Kafka sink's ``topic``
    ack_policy: AckPolicy
    transport: Transport | None
    max_inflight: int
    ack_timeout: float
    connect_timeout: float
    idempotent: bool = False  # no row published twice by task retries or batch replays
    write_id: str | None = None  # names a batch write (idempotent mode); streams use the query id
    exactly_once: bool = False  # transactional UUIDs, committed by the driver (see _transactional)
    # Bound on any step of a write that makes no progress (publishing a chunk, waiting for
    # acks, retrying through an outage, the driver's commit), as Kafka's delivery.timeout.ms.
    delivery_timeout: float = 120.0
    # Rows per Liftbridge message (liftbridge_client.packing); 1 = one message per row.
    pack_rows: int = 1
    # exactlyOnce: lanes per (task, target partition), each a pipelined producer
    # (see _transactional: rows of one key stay in one lane, so in order).
    producers_per_partition: int = 1
    # exactlyOnce: record the intents in the write's journal before writing them (see
    # _journal); off only for a batch write without ``writeId``, which nothing can replay.
    journal: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
        check_known(options, SINK_OPTIONS, "streaming write" if streaming else "write")
        brokers, nats = _connection(options)
        raw_stream = get_option(options, "stream")
        if raw_stream is not None and (not raw_stream.strip() or "," in raw_stream):
            raise InvalidInputError(f"option 'stream' must name one stream, got {raw_stream!r}")
        ack = (get_option(options, "ackPolicy") or "leader").strip().lower()
        if ack not in _ACK_POLICIES:
            raise InvalidInputError(f"option 'ackPolicy' must be leader, all or none, got {ack!r}")
        raw_transport = get_option(options, "transport")
        transport = None
        if raw_transport is not None:
            key = raw_transport.strip().lower()
            if key not in _TRANSPORTS:
                raise InvalidInputError(
                    f"option 'transport' must be nats or grpc, got {raw_transport!r}"
                )
            transport = _TRANSPORTS[key]
            if transport is Transport.NATS and not nats:
                raise InvalidInputError("option 'transport' is nats but 'natsServers' is not set")
        idempotent = _bool_option("idempotent", get_option(options, "idempotent"), False)
        write_id = get_option(options, "writeId")
        if write_id is not None and (not write_id.strip() or "," in write_id):
            raise InvalidInputError(f"option 'writeId' must be a non-empty name, got {write_id!r}")
        exactly_once = _bool_option("exactlyOnce", get_option(options, "exactlyOnce"), False)
        if exactly_once:
            if idempotent:
                raise InvalidInputError(
                    "set at most one of the options 'exactlyOnce' and 'idempotent'"
                )
            if ack == "none":
                raise InvalidInputError("option 'exactlyOnce' needs ackPolicy leader or all")
        pack_rows = _int_option("packRows", get_option(options, "packRows"), 1, 100_000) or 1
        producers = (
            _int_option(
                "producersPerPartition",
                get_option(options, "producersPerPartition"),
                1,
                MAX_PRODUCERS_PER_PARTITION,
            )
            or 1
        )
        if producers > 1 and not exactly_once:
            raise InvalidInputError(
                "option 'producersPerPartition' works with exactlyOnce=true only (the other "
                "modes pipeline already)"
            )
        if pack_rows > 1 and idempotent:
            raise InvalidInputError(
                "option 'packRows' works with exactlyOnce and plain writes, not 'idempotent'"
            )
        if idempotent:
            if raw_stream is None:
                raise InvalidInputError("option 'idempotent' needs the option 'stream'")
            if ack == "none":
                raise InvalidInputError("option 'idempotent' needs ackPolicy leader or all")
            if not streaming and write_id is None:
                raise InvalidInputError(
                    "option 'idempotent' on a batch write needs the option 'writeId' (a name "
                    "that a rerun of the same job repeats)"
                )
        return cls(
            brokers=brokers,
            nats_servers=nats,
            stream=raw_stream.strip() if raw_stream is not None else None,
            ack_policy=_ACK_POLICIES[ack],
            transport=transport,
            max_inflight=_int_option("maxInflight", get_option(options, "maxInflight"), 1, 1 << 20)
            or 1024,
            ack_timeout=_float_option("ackTimeoutMs", get_option(options, "ackTimeoutMs"), 30_000.0)
            / 1000.0,
            connect_timeout=_float_option(
                "connectTimeoutMs", get_option(options, "connectTimeoutMs"), 10_000.0
            )
            / 1000.0,
            idempotent=idempotent,
            write_id=write_id.strip() if write_id is not None else None,
            exactly_once=exactly_once,
            pack_rows=pack_rows,
            producers_per_partition=producers,
            delivery_timeout=_float_option(
                "deliveryTimeoutMs", get_option(options, "deliveryTimeoutMs"), 120_000.0
            )
            / 1000.0,
        )
