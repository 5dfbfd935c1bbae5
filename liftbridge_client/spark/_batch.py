"""Batch reads and writes: ``spark.read.format("liftbridge")`` and ``df.write``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.options import ClientOptions
from liftbridge_client.spark import _positions
from liftbridge_client.spark._columns import batch_columns
from liftbridge_client.spark._offsets import OffsetMap, PartitionRange, plan_ranges
from liftbridge_client.spark._options import SinkOptions, SourceOptions
from liftbridge_client.spark._read import RangePartition, read_range
from liftbridge_client.spark._runtime import TaskRuntime, frozen_heap
from liftbridge_client.spark._write import (
    SinkGuard,
    WriteStats,
    bounded,
    publish_batches,
    sink_runtime,
)

if TYPE_CHECKING:
    from liftbridge_client.spark._idempotent import TaskIdentity

# The exactly-once and idempotent modules (and the exactly-once layer under them) are
# imported where used: a plain read's processes (the streaming source's, the tasks') never
# pay for them.

__all__ = [
    "BatchReader",
    "BatchWriter",
    "LiftbridgePartition",
    "WriteCommit",
    "read_input",
    "to_inputs",
]

log = logging.getLogger(__name__)


class LiftbridgePartition(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one Liftbridge partition."""

    def __init__(self, part: RangePartition) -> None:
        super().__init__(part.range)
        self.part = part


def to_inputs(ranges: Sequence[PartitionRange], options: SourceOptions) -> list[InputPartition]:
    return [LiftbridgePartition(RangePartition(r, options)) for r in ranges]


def driver_runtime(options: SourceOptions) -> TaskRuntime:
    return TaskRuntime(
        options.brokers,
        options.nats_servers,
        ClientOptions(connect_timeout=options.connect_timeout),
    )


async def batch_bounds(client: Client, options: SourceOptions) -> tuple[OffsetMap, OffsetMap]:
    """The start and end offsets of a batch read (ends past latest are capped at latest)."""
    partitions = await _positions.list_partitions(client, options)
    _positions.check_named(partitions, options)
    latest = await _positions.latest_offsets(client, partitions)
    start = await _positions.resolve(
        client, partitions, options.starting, options.starting_timestamp, options, latest=latest
    )
    end = await _positions.resolve(
        client, partitions, options.ending, options.ending_timestamp, options, latest=latest
    )
    for stream, ends in end.items():
        for pid, stop in ends.items():
            if stop > latest[stream][pid]:
                log.warning(
                    "endingOffsets %s/%s=%d is past the latest offset %d: reading to latest",
                    stream,
                    pid,
                    stop,
                    latest[stream][pid],
                )
                ends[pid] = latest[stream][pid]
    return start, end


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        runtime = driver_runtime(self._options)
        try:
            start, end = runtime.run(batch_bounds(runtime.client, self._options))
        finally:
            runtime.close()
        committed = self._options.isolation == "read_committed"
        ranges = plan_ranges(
            start,
            end,
            # Read-committed state lives in the task: one task per Liftbridge partition.
            min_partitions=None if committed else self._options.min_partitions,
            max_records=None if committed else self._options.max_records_per_partition,
        )
        return to_inputs(ranges, self._options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input(partition)


def read_input(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one planned partition. Spark plans one ``InputPartition(None)`` when
    `partitions` found nothing to read (an empty stream, a range with start == end): it
    reads as no rows, so an empty read is an empty DataFrame."""
    if not isinstance(partition, LiftbridgePartition):
        if getattr(partition, "value", None) is None:
            return iter(())
        raise InvalidInputError(f"not a Liftbridge input partition: {partition!r}")
    if partition.part.options.isolation == "read_committed":
        from liftbridge_client.spark._committed import read_committed_range

        return _frozen(read_committed_range(partition.part))
    return _frozen(read_range(partition.part))


def _frozen(batches: Iterator[pa.RecordBatch]) -> Generator[pa.RecordBatch, None, None]:
    """A read task's batches, made with the worker's heap frozen (`frozen_heap`): a read
    allocates a few objects per message, so collections come every few hundred rows."""
    with frozen_heap():
        yield from batches


@dataclass
class WriteCommit(WriterCommitMessage):
    """A task's commit message: what it published."""

    rows: int
    per_partition: dict[str, int]
    skipped: int = 0
    intents: str = "[]"  # exactly-once mode: the ACK intents the driver's commit writes
    write_id: str = ""  # idempotent mode: the write whose batch the driver's commit records


def task_identity(options: SinkOptions) -> TaskIdentity | None:
    """The identity of the running task in idempotent mode (None otherwise)."""
    if not (options.idempotent or options.exactly_once):
        return None
    from liftbridge_client.spark._idempotent import TaskIdentity

    context = TaskContext.get()
    if context is None:
        raise InvalidInputError("idempotent and exactly-once writes run inside Spark tasks only")
    query = context.getLocalProperty("sql.streaming.queryId")
    batch = context.getLocalProperty("streaming.sql.batchId")
    write_id = options.write_id or query
    if write_id is None:  # checked with the options for batch writes
        raise InvalidInputError("option 'idempotent' needs the option 'writeId'")
    return TaskIdentity(write_id, int(batch) if batch is not None else 0, context.partitionId())


def write_task(
    batches: Iterator[pa.RecordBatch], columns: Mapping[str, int], options: SinkOptions
) -> WriteCommit:
    """One task of a write: its Arrow batches, column by column (see `_columns`)."""
    with frozen_heap():
        return _write_task(batches, columns, options)


def _write_task(
    batches: Iterator[pa.RecordBatch], columns: Mapping[str, int], options: SinkOptions
) -> WriteCommit:
    publishes = (batch_columns(batch, columns, options.stream) for batch in batches)
    identity = task_identity(options)
    if options.exactly_once:
        from liftbridge_client.spark._transactional import publish_transactional

        assert identity is not None
        done = publish_transactional(publishes, options, identity)
        return WriteCommit(done.stats.rows, done.stats.per_partition, 0, done.intents)
    guard_for = None
    if identity is not None:
        stream = options.stream
        assert stream is not None  # the idempotent mode needs the option (checked with it)

        context = TaskContext.get()
        # Not attemptNumber(): it starts at 0 again in a new stage attempt (a failed
        # shuffle read re-runs the stage), whose tasks must still wait for the old ones.
        attempt = context.taskAttemptId() if context is not None else 0

        def guard_for(client: Client) -> SinkGuard:
            from liftbridge_client.spark._idempotent import WriteGuard

            return WriteGuard(
                client,
                stream,
                identity,
                attempt=attempt,
                timeout=options.ack_timeout,
                wait_for_earlier=options.delivery_timeout,
            )

    stats = publish_batches(publishes, options, guard_for)
    write_id = identity.write_id if identity is not None else ""
    return WriteCommit(stats.rows, stats.per_partition, stats.skipped, write_id=write_id)


def summarize(messages: Sequence[WriterCommitMessage | None]) -> WriteStats:
    total = WriteStats()
    for message in messages:
        if isinstance(message, WriteCommit):
            total.merge(WriteStats(message.rows, dict(message.per_partition), message.skipped))
    return total


def commit_write(
    options: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int, what: str
) -> None:
    """The driver's part of a write Spark decided succeeded: the tasks' ACK intents
    (exactly-once mode), or the batch recorded as done (idempotent mode)."""
    commits = [m for m in messages if isinstance(m, WriteCommit)]
    if options.exactly_once:
        from liftbridge_client.spark._transactional import commit_intents

        commit_intents(options, [m.intents for m in commits], batch_id, what)
    elif options.idempotent:
        stream = options.stream
        assert stream is not None  # the idempotent mode needs the option (checked with it)
        write_ids = sorted({m.write_id for m in commits if m.write_id})
        if not write_ids:  # no task ran: nothing to replay either
            return
        from liftbridge_client.spark._idempotent import commit_done

        runtime = sink_runtime(options)
        try:
            for write_id in write_ids:
                done = commit_done(runtime.client, stream, write_id, batch_id)
                runtime.run(bounded(done, options, "recording the batch as done"))
        except errors.LiftbridgeError:
            log.error("%s: recording the batch as done failed; a replay skips its rows", what)
            raise
        finally:
            runtime.close()


class BatchWriter(DataSourceArrowWriter):
    """Publishes each task's rows, which Spark hands over as Arrow batches; the job is
    at-least-once (see `_write`), or idempotent, or exactly once (see `_transactional`)."""

    def __init__(self, options: SinkOptions, columns: Mapping[str, int]) -> None:
        if options.exactly_once and options.write_id is None:
            # Made once on the driver and pickled to every task (retries included).
            options = replace(options, write_id=f"job-{uuid.uuid4().hex}", journal=False)
        self._options = options
        self._columns = dict(columns)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        return write_task(iterator, self._columns, self._options)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_write(self._options, messages, 0, "liftbridge write")
        total = summarize(messages)
        log.info(
            "liftbridge write committed: %d rows %s (%d skipped: published by earlier attempts)",
            total.rows,
            total.per_partition,
            total.skipped,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total = summarize(messages)
        if self._options.exactly_once:
            log.warning(
                "liftbridge write aborted: %d rows published uncommitted by finished tasks "
                "stay invisible to read_committed readers (no ACK intent is written)",
                total.rows,
            )
            return
        log.warning(
            "liftbridge write aborted: %d rows published by finished tasks stay in the streams",
            total.rows,
        )
