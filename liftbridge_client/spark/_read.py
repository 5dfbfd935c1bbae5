"""Reading one offset range on an executor, as Arrow record batches.

The subscription asks for ``[start, end)`` (stop offset ``end - 1``). The server starts at
its earliest offset when ``start`` was removed by retention, and may then deliver offsets
past the stop offset: the first offset tells whether data was lost, and anything at or past
``end`` ends the read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from liftbridge_client import errors
from liftbridge_client.models import Message
from liftbridge_client.options import ClientOptions
from liftbridge_client.packing import MAGIC, PackedRow, is_packed, unpack
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._options import SourceOptions
from liftbridge_client.spark._runtime import TaskRuntime, borrow, give_back
from liftbridge_client.spark._schema import HEADER_TYPE, arrow_schema
from liftbridge_client.subscription import Subscription

if TYPE_CHECKING:  # the exactly-once layer is loaded by read_committed reads only
    from liftbridge_client.exactly_once.sequencer import ProducerState
    from liftbridge_client.spark._committed_stream import StatesAt

__all__ = ["RangePartition", "read_range"]

log = logging.getLogger(__name__)

BATCH_ROWS = 4096  # messages per Arrow record batch handed to Spark

# Liftbridge (v1.9.0) cannot tell a partition's first offset, and a subscription to a
# partition whose every message was removed by retention waits for the next message, even
# with a stop offset behind it. A subscription that returns no first message within this
# many seconds, for offsets the server committed, finds them gone.
EMPTY_PROBE = 10.0


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


async def _take(sub: Subscription, count: int, end: int, timeout: float) -> list[Message]:
    """Up to ``count`` messages below ``end``; fewer when the range (or the stream) ends."""
    out: list[Message] = []
    try:
        async with asyncio.timeout(timeout):
            async for message in sub:
                if message.offset >= end:
                    break
                out.append(message)
                if message.offset == end - 1 or len(out) >= count:
                    break
    except TimeoutError:
        raise errors.LiftbridgeTimeoutError(
            f"reading {sub.stream}/{sub.partition}: no message for {timeout}s below offset "
            f"{end} (option pollTimeoutMs)"
        ) from None
    return out


def _rows_of(m: Message) -> list[PackedRow] | None:
    """The rows of a packed message (`liftbridge_client.packing`); None for a plain one."""
    # The magic first: it is cheap, where reading the headers copies them.
    if m.value[:4] != MAGIC or not is_packed(m.headers):
        return None
    try:
        return unpack(m.value)
    except errors.FramingError as exc:
        raise errors.FramingError(f"{m.stream}/{m.partition} offset {m.offset}: {exc}") from exc


def _to_batch(messages: list[Message], include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch of the messages' rows: a packed message gives each of its rows, with
    the message's stream, subject, partition, offset and timestamp."""
    if any(m.value[:4] == MAGIC for m in messages):
        return _packed_batch(messages, include_headers)
    columns: list[pa.Array] = [
        pa.array([m.key or None for m in messages], pa.binary()),
        pa.array([m.value for m in messages], pa.binary()),
        pa.array([m.stream for m in messages], pa.string()),
        pa.array([m.subject for m in messages], pa.string()),
        pa.array([m.partition for m in messages], pa.int32()),
        pa.array([m.offset for m in messages], pa.int64()),
        pa.array([m.timestamp_ns // 1000 for m in messages], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        ),
    ]
    if include_headers:
        headers = [[{"key": k, "value": v} for k, v in m.headers.items()] for m in messages]
        columns.append(pa.array(headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _packed_batch(messages: list[Message], include_headers: bool) -> pa.RecordBatch:
    keys: list[bytes | None] = []
    values: list[bytes] = []
    headers: list[list[dict[str, object]]] = []
    streams: list[str] = []
    subjects: list[str] = []
    partitions: list[int] = []
    offsets: list[int] = []
    micros: list[int] = []
    for m in messages:
        rows = _rows_of(m)
        if rows is None:
            keys.append(m.key or None)
            values.append(m.value)
            if include_headers:
                headers.append([{"key": k, "value": v} for k, v in m.headers.items()])
            n = 1
        else:
            keys.extend(r.key for r in rows)
            values.extend(r.value for r in rows)
            if include_headers:
                headers.extend(
                    [{"key": k, "value": v} for k, v in (r.headers or {}).items()] for r in rows
                )
            n = len(rows)
        streams += [m.stream] * n
        subjects += [m.subject] * n
        partitions += [m.partition] * n
        offsets += [m.offset] * n
        micros += [m.timestamp_ns // 1000] * n
    columns: list[pa.Array] = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(streams, pa.string()),
        pa.array(subjects, pa.string()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Messages ``[start, end)`` of one partition; everything is closed however it stops."""
    for messages in message_chunks(part):
        yield _to_batch(messages, part.options.include_headers)


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
    """The messages ``[start, end)`` of one partition in chunks of up to `BATCH_ROWS`, with
    the data-loss checks. A given ``runtime`` is left open; else one is made and closed."""
    r, options = part.range, part.options
    if r.start >= r.end:
        return
    own = runtime is None
    task = new_runtime(options) if runtime is None else runtime
    ok = False
    try:
        client = task.client
        sub = client.subscribe(r.stream, r.partition, start_offset=r.start, stop_offset=r.end - 1)
        task.run(sub.__aenter__())
        try:
            expected = r.start
            while expected < r.end:
                want = min(BATCH_ROWS, r.end - expected)
                if expected == r.start:
                    try:
                        probe = min(options.poll_timeout, EMPTY_PROBE)
                        messages = task.run(_take(sub, want, r.end, probe))
                    except errors.LiftbridgeTimeoutError:
                        messages = []  # nothing retained from start on (see EMPTY_PROBE)
                else:
                    messages = task.run(_take(sub, want, r.end, options.poll_timeout))
                first = messages[0].offset if messages else r.end
                if expected == r.start and first > expected:
                    data_loss(
                        options,
                        f"{r.stream}/{r.partition}: offsets {expected} to {first - 1} are gone "
                        "(removed by retention)",
                    )
                if not messages:
                    break  # the stream ended (stop offset reached) or lost the rest
                yield messages
                expected = messages[-1].offset + 1
        finally:
            task.run(sub.close())
        ok = True
    finally:
        if own:
            end_runtime(options, task, ok=ok)
