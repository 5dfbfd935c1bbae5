"""Reading one offset range on an executor, as Arrow record batches.

The subscription asks for ``[start, end)`` (stop offset ``end - 1``). The server starts at
its earliest offset when ``start`` was removed by retention, and sends on past the stop
offset when compaction or retention removed it: anything at or past ``end`` ends the read.
A first offset past ``start`` is data loss when retention removed ``start`` (no message at
or below it is left), and compaction's gap otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from liftbridge_client import errors
from liftbridge_client._native import speedups
from liftbridge_client._proto import api_pb2
from liftbridge_client.models import Message, message_headers, owned_message_from_proto
from liftbridge_client.options import ClientOptions
from liftbridge_client.packing import MAGIC, PackedRow, is_packed, unpack
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._options import SourceOptions
from liftbridge_client.spark._positions import EMPTY_PROBE, first_offset
from liftbridge_client.spark._runtime import TaskRuntime, borrow, give_back
from liftbridge_client.spark._schema import HEADER_TYPE, arrow_schema
from liftbridge_client.spark._stats import ReadStats
from liftbridge_client.subscription import Subscription, WireMessages

if TYPE_CHECKING:  # the exactly-once layer is loaded by read_committed reads only
    from liftbridge_client.client import Client
    from liftbridge_client.exactly_once.sequencer import ProducerState
    from liftbridge_client.spark._committed_stream import StatesAt

__all__ = ["RangePartition", "read_range"]

log = logging.getLogger(__name__)

_message_columns = None if speedups is None else speedups.message_columns

BATCH_ROWS = 4096  # messages per Arrow record batch handed to Spark
# A task reads its range as fast as it can and holds one subscription: a 4 MiB receive
# window costs it a quarter of the flow-control writes of the default 1 MiB.
RECEIVE_WINDOW = 4 * 1024 * 1024
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_NO_HEADERS: Mapping[str, bytes] = {}


@dataclass(frozen=True, slots=True)
class RangePartition:
    """What one Spark task reads (pickled to the executor with the options)."""

    range: PartitionRange
    options: SourceOptions
    # isolation=read_committed: the producer states at ``range.start`` (given), or where a
    # streaming read's task finds them and saves those at ``range.end``
    states: tuple[ProducerState, ...] = ()
    states_at: StatesAt | None = None


def data_loss(options: SourceOptions, what: str) -> None:
    """Fail with `DataLossError`, or only warn with ``failOnDataLoss=false``."""
    if options.fail_on_data_loss:
        raise errors.DataLossError(
            f"{what}; set the option failOnDataLoss=false to skip lost offsets"
        )
    log.warning("%s (skipped: failOnDataLoss=false)", what)


async def _take(
    sub: Subscription, count: int, end: int, timeout: float, wire: bool = False
) -> Chunk:
    """Up to ``count`` messages below ``end``, as protobufs (no `Message` objects: their
    fields go straight into columns), or with ``wire``, where the subscription can, as
    their undecoded bytes (`WireMessages`); fewer when the range (or the stream) ends."""
    parts: list[Chunk] = []
    taken = 0
    try:
        async with asyncio.timeout(timeout):
            while taken < count:
                got = await (sub._next_wire if wire else sub._next_protos)(count - taken)
                if isinstance(got, WireMessages):
                    if got.last < end:
                        parts.append(got)
                        taken += len(got.raws)
                        if got.last == end - 1:
                            break  # the range ends here
                        continue
                    got = _decoded(got)  # past the range (see above): cut below
                if not got:
                    break
                if got[-1].offset >= end - 1:  # offsets ascend: the range ends in here
                    parts.append([pb for pb in got if pb.offset < end])
                    break
                parts.append(got)
                taken += len(got)
    except TimeoutError:
        if parts:  # the next call goes on from here (and times out if nothing more comes)
            return _joined(parts)
        raise errors.LiftbridgeTimeoutError(
            f"reading {sub.stream}/{sub.partition}: no message for {timeout}s below offset "
            f"{end} (option pollTimeoutMs)"
        ) from None
    return _joined(parts)


# What `_take` gives: messages decoded, or (all of them) as their wire bytes.
Chunk = list[api_pb2.Message] | WireMessages


def _decoded(chunk: Chunk) -> list[api_pb2.Message]:
    if isinstance(chunk, WireMessages):
        decode = api_pb2.Message.FromString
        return [decode(raw) for raw in chunk.raws]
    return chunk


def _joined(parts: list[Chunk]) -> Chunk:
    """One chunk of ``parts`` in order: wire bytes when every part is, else decoded."""
    if len(parts) == 1:
        return parts[0]
    wires = [part for part in parts if isinstance(part, WireMessages)]
    if wires and len(wires) == len(parts):
        raws = [raw for part in wires for raw in part.raws]
        return WireMessages(raws, wires[0].first, wires[-1].last)
    return [pb for part in parts for pb in _decoded(part)]


def _first_offset(chunk: Chunk) -> int:
    return chunk.first if isinstance(chunk, WireMessages) else chunk[0].offset


def _last_offset(chunk: Chunk) -> int:
    return chunk.last if isinstance(chunk, WireMessages) else chunk[-1].offset


def _micros(ns: pa.Array) -> pa.Array:
    """Nanoseconds since the epoch (int64) as Spark's timestamps (microseconds, UTC),
    floored."""
    if len(ns) and pc.min(ns).as_py() < 0:  # Arrow truncates toward zero; Python floors
        return pa.array([t // 1000 for t in ns.to_pylist()], pa.int64()).cast(_TIMESTAMP)
    return pc.divide(ns, 1000).cast(_TIMESTAMP)


def _header_column(per_row: list[Mapping[str, bytes]]) -> pa.Array:
    """The headers column from each row's headers (offsets, keys and values built flat)."""
    offsets = [0]
    names: list[str] = []
    values: list[bytes] = []
    total = 0
    for headers in per_row:
        if headers:
            names.extend(headers.keys())
            values.extend(headers.values())
            total += len(headers)
        offsets.append(total)
    entries = pa.StructArray.from_arrays(
        [pa.array(names, pa.string()), pa.array(values, pa.binary())],
        fields=list(HEADER_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=HEADER_TYPE)


def _assemble(
    keys: pa.Array,
    values: pa.Array,
    stream: pa.Array,
    subjects: pa.Array,
    partition: pa.Array,
    offsets: pa.Array,
    nanos: pa.Array,
    headers: list[Mapping[str, bytes]] | None,
) -> pa.RecordBatch:
    columns: list[pa.Array] = [keys, values, stream, subjects, partition, offsets, _micros(nanos)]
    if headers is not None:
        columns.append(_header_column(headers))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(headers is not None))


def _any_magic(values: pa.Array) -> bool:
    return bool(pc.any(pc.starts_with(values, pattern=MAGIC)).as_py())


def _protos_batch(
    pbs: list[api_pb2.Message], stream: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """One Arrow batch straight from the subscription's protobufs, column by column.

    Every message of a subscription is of its stream and partition: those columns are
    repeated constants. A packed message gives each of its rows (see `_rows_of`)."""
    values = pa.array([pb.value for pb in pbs], pa.binary())
    if _any_magic(values):
        return _batch_of([owned_message_from_proto(pb) for pb in pbs], include_headers)
    n = len(pbs)
    return _assemble(
        pa.array([pb.key or None for pb in pbs], pa.binary()),
        values,
        _repeated(stream, pa.string(), n),
        pa.array([pb.subject for pb in pbs], pa.string()),
        _repeated(partition, pa.int32(), n),
        pa.array([pb.offset for pb in pbs], pa.int64()),
        pa.array([pb.timestamp for pb in pbs], pa.int64()),
        [message_headers(pb) for pb in pbs] if include_headers else None,
    )


def _repeated(value: object, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)


def _wire_batch(
    raws: list[bytes], end: int, stream: str, partition: int, *, ordered: bool = True
) -> tuple[pa.RecordBatch, int] | None:
    """`_protos_batch` without headers, made by the accelerator's ``message_columns``
    from the messages' wire bytes (those below ``end``; ``ordered``: their offsets
    ascend), and the bytes of their keys and values; None without the accelerator, or
    for what it leaves to protobuf (a packed message, above all)."""
    if _message_columns is None:
        return None
    columns = _message_columns(raws, end, MAGIC, ordered)
    if columns is None:
        return None
    n, offsets, stamps, value_offsets, values, key_offsets, keys, valid, nulls, subject = columns
    key_buffers = [pa.py_buffer(valid) if nulls else None, pa.py_buffer(key_offsets)]
    batch = _assemble(
        pa.Array.from_buffers(pa.binary(), n, [*key_buffers, pa.py_buffer(keys)], nulls),
        pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)], 0
        ),
        _repeated(stream, pa.string(), n),
        _repeated(subject, pa.string(), n)
        if isinstance(subject, str)
        else pa.array(subject, pa.string()),
        _repeated(partition, pa.int32(), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)], 0),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(stamps)], 0),
        None,
    )
    return batch, len(values) + len(keys)


def _rows_of(m: Message) -> list[PackedRow] | None:
    """The rows of a packed message (`liftbridge_client.packing`); None for a plain one."""
    # The magic first: it is cheap, where reading the headers copies them.
    if m.value[:4] != MAGIC or not is_packed(m.headers):
        return None
    try:
        return unpack(m.value)
    except errors.FramingError as exc:
        raise errors.FramingError(f"{m.stream}/{m.partition} offset {m.offset}: {exc}") from exc


def _batch_of(messages: list[Message], include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch of the messages' rows: a packed message gives each of its rows, with
    the message's stream, subject, partition, offset and timestamp."""
    keys: list[bytes | None] = []
    values: list[bytes] = []
    headers: list[Mapping[str, bytes]] = []
    streams: list[str] = []
    subjects: list[str] = []
    partitions: list[int] = []
    offsets: list[int] = []
    nanos: list[int] = []
    for m in messages:
        rows = _rows_of(m)
        if rows is None:
            keys.append(m.key or None)
            values.append(m.value)
            if include_headers:
                headers.append(m.headers)
            n = 1
        else:
            keys.extend(r.key for r in rows)
            values.extend(r.value for r in rows)
            if include_headers:
                headers.extend(r.headers or _NO_HEADERS for r in rows)
            n = len(rows)
        streams += [m.stream] * n
        subjects += [m.subject] * n
        partitions += [m.partition] * n
        offsets += [m.offset] * n
        nanos += [m.timestamp_ns] * n
    return _assemble(
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(streams, pa.string()),
        pa.array(subjects, pa.string()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(nanos, pa.int64()),
        headers if include_headers else None,
    )


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Messages ``[start, end)`` of one partition; everything is closed however it stops."""
    r, options = part.range, part.options
    stats = ReadStats.of(r, options.isolation) if options.task_stats else None
    for chunk in _chunks(part, None, wire=not options.include_headers):
        if isinstance(chunk, WireMessages):
            made = _wire_batch(chunk.raws, r.end, r.stream, r.partition)
            if made is not None:
                if stats is not None:
                    stats.ranged_count(made[0].num_rows, made[1])
                yield made[0]
                continue
        pbs = _decoded(chunk)
        if stats is not None:
            stats.ranged(pbs)
        yield _protos_batch(pbs, r.stream, r.partition, options.include_headers)
    if stats is not None and options.task_stats:
        stats.write(options.task_stats)


def _runtime_key(options: SourceOptions) -> tuple[object, ...]:
    return ("read", options.brokers, options.nats_servers, options.connect_timeout)


def new_runtime(options: SourceOptions) -> TaskRuntime:
    """A read task's runtime: reused from the task before in this process when it can be
    (`_runtime.borrow`); hand it back with `end_runtime`."""
    return borrow(
        _runtime_key(options),
        options.brokers,
        options.nats_servers,
        ClientOptions(connect_timeout=options.connect_timeout, metadata_refresh_interval=None),
    )


def end_runtime(options: SourceOptions, runtime: TaskRuntime, *, ok: bool) -> None:
    give_back(_runtime_key(options), runtime, ok=ok)


def message_chunks(
    part: RangePartition, runtime: TaskRuntime | None = None
) -> Iterator[list[Message]]:
    """`proto_chunks` as `Message` objects (for readers that need them whole)."""
    for pbs in proto_chunks(part, runtime):
        yield [owned_message_from_proto(pb) for pb in pbs]


def proto_chunks(
    part: RangePartition, runtime: TaskRuntime | None = None
) -> Iterator[list[api_pb2.Message]]:
    """The messages ``[start, end)`` of one partition in chunks of up to `BATCH_ROWS`, as
    protobufs, with the data-loss checks. A given ``runtime`` is left open; else one is
    made and closed."""
    for chunk in _chunks(part, runtime, wire=False):
        yield _decoded(chunk)


async def _earliest(client: Client, r: PartitionRange, timeout: float) -> int:
    """The partition's first offset, or ``r.start + 1`` if it is past ``r.start``."""
    return await first_offset(
        client, r.stream, r.partition, r.start + 1, timeout, start_offset=0, stop_offset=0
    )


def _chunks(part: RangePartition, runtime: TaskRuntime | None, *, wire: bool) -> Iterator[Chunk]:
    """`proto_chunks`, with ``wire`` as `_take` gives them."""
    r, options = part.range, part.options
    if r.start >= r.end:
        return
    own = runtime is None
    task = new_runtime(options) if runtime is None else runtime
    ok = False
    try:
        client = task.client
        sub = client.subscribe(r.stream, r.partition, start_offset=r.start, stop_offset=r.end - 1)
        sub._use_receive_window(RECEIVE_WINDOW)
        task.run(sub.__aenter__())
        try:
            expected = r.start
            probe = min(options.poll_timeout, EMPTY_PROBE)
            while expected < r.end:
                want = min(BATCH_ROWS, r.end - expected)
                silent = False
                if expected == r.start:
                    try:
                        messages = task.run(_take(sub, want, r.end, probe, wire))
                    except errors.LiftbridgeTimeoutError:
                        messages = []  # nothing retained from start on (see EMPTY_PROBE)
                        silent = True
                else:
                    messages = task.run(_take(sub, want, r.end, options.poll_timeout, wire))
                first = _first_offset(messages) if messages else r.end
                if (
                    expected == r.start
                    and first > expected
                    # Retention removed r.start, or compaction left a gap after it?
                    and (silent or task.run(_earliest(client, r, probe)) > r.start)
                ):
                    data_loss(
                        options,
                        f"{r.stream}/{r.partition}: offsets {expected} to {first - 1} are gone "
                        "(removed by retention)",
                    )
                if not messages:
                    break  # the stream ended (stop offset reached) or lost the rest
                yield messages
                expected = _last_offset(messages) + 1
        finally:
            task.run(sub.close())
        ok = True
    finally:
        if own:
            end_runtime(options, task, ok=ok)
