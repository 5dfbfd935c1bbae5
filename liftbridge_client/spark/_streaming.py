"""Streaming reads and writes: ``spark.readStream.format("liftbridge")`` and ``writeStream``.

The stream reader's offset methods run in one driver-side process for the query's life, so
its client (and event loop) is made on first use there and closed in `stop`; Spark pickles
the reader to executors for `read`, without them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from liftbridge_client.client import Client
from liftbridge_client.errors import FeatureNotSupportedError
from liftbridge_client.spark import _positions
from liftbridge_client.spark._batch import (
    LiftbridgePartition,
    WriteCommit,
    commit_write,
    driver_runtime,
    read_input,
    summarize,
    to_inputs,
    write_task,
)
from liftbridge_client.spark._columns import rows_as_batches
from liftbridge_client.spark._committed_stream import (
    Plan,
    StatesAt,
    ensure_store,
    next_plan,
    split_offsets,
    store_end,
    with_plan,
)
from liftbridge_client.spark._offsets import (
    OffsetMap,
    cap_by_backlog,
    copy_offsets,
    plan_ranges,
)
from liftbridge_client.spark._options import SinkOptions, SourceOptions
from liftbridge_client.spark._read import RangePartition, data_loss
from liftbridge_client.spark._runtime import TaskRuntime

try:  # admission control: pyspark 4.2+
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - older pyspark
    ADMISSION_CONTROL = False

_AvailableNow: Any
# The streaming writer takes Arrow batches from pyspark 4.1 (the batch one from 4.0).
_StreamWriterBase: Any
try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover - pyspark 4.0
    _StreamWriterBase = DataSourceStreamWriter

try:  # Trigger.AvailableNow: pyspark 4.3+
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - older pyspark
    _AvailableNow = None

__all__ = ["StreamReader", "StreamWriter"]

log = logging.getLogger(__name__)


async def _with_new_partitions(
    client: Client, options: SourceOptions, start: OffsetMap, partitions: _positions.Partitions
) -> OffsetMap:
    """``start`` plus partitions it lacks (a stream the pattern matched since), at earliest."""
    new = {s: [p for p in pids if str(p) not in start.get(s, {})] for s, pids in partitions.items()}
    new = {s: pids for s, pids in new.items() if pids}
    if not new:
        return start
    latest = await _positions.latest_offsets(client, new)
    earliest = await _positions.earliest_offsets(client, new, latest, options.poll_timeout)
    merged = copy_offsets(start)
    for stream, offsets in earliest.items():
        merged.setdefault(stream, {}).update(offsets)
    return merged


def _up_to(begin: OffsetMap, end: OffsetMap, target: OffsetMap) -> OffsetMap:
    """``end`` no further than ``target``; partitions ``target`` lacks do not move."""
    capped = copy_offsets(end)
    for stream, ends in capped.items():
        for pid, stop in ends.items():
            limit = target.get(stream, {}).get(pid)
            here = begin.get(stream, {}).get(pid, stop)
            ends[pid] = min(stop, limit) if limit is not None else min(stop, here)
    return capped


class StreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._runtime: TaskRuntime | None = None
        self._last_end: OffsetMap | None = None  # for pyspark < 4.2 (no start given)
        self._target: OffsetMap | None = None  # Trigger.AvailableNow: read up to here
        self._committed = options.isolation == "read_committed"
        self._last_plan: Plan | None = None  # read_committed: the plan at _last_end

    def __getstate__(self) -> dict[str, Any]:
        return {
            "_options": self._options,
            "_runtime": None,
            "_last_end": None,
            "_target": None,
            "_committed": self._committed,
            "_last_plan": None,
        }

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow (pyspark 4.3+): read what is there now, then end."""
        runtime = self._run()
        client = runtime.client

        async def now() -> OffsetMap:
            partitions = await _positions.list_partitions(client, self._options)
            return await _positions.latest_offsets(client, partitions)

        self._target = runtime.run(now())

    def _run(self) -> TaskRuntime:
        if self._runtime is None:
            self._runtime = driver_runtime(self._options)
        return self._runtime

    def initialOffset(self) -> dict[str, Any]:
        runtime = self._run()
        client = runtime.client

        async def initial() -> OffsetMap:
            partitions = await _positions.list_partitions(client, self._options)
            _positions.check_named(partitions, self._options)
            return await _positions.resolve(
                client,
                partitions,
                self._options.starting,
                self._options.starting_timestamp,
                self._options,
            )

        offsets = runtime.run(initial())
        self._last_end = offsets
        if self._committed:
            runtime.run(ensure_store(client, self._options.states_stream))
            self._last_plan = Plan.new(self._options.states_stream, offsets)
            return with_plan(offsets, self._last_plan)
        return offsets

    def getDefaultReadLimit(self) -> Any:
        limit = self._options.max_offsets_per_trigger
        if not ADMISSION_CONTROL:  # pragma: no cover - pyspark < 4.2 never calls this
            raise NotImplementedError
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def latestOffset(
        self, start: Mapping[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: latest offsets, capped by the read limit.

        pyspark < 4.2 passes neither ``start`` nor ``limit``: the start is then the end this
        reader returned last (none after a restart: that first batch is not capped).
        """
        runtime = self._run()
        client = runtime.client
        options = self._options
        known, plan = self._last_end, self._last_plan
        if start is not None:
            known, plan = split_offsets(start)

        async def latest() -> tuple[OffsetMap, OffsetMap | None]:
            partitions = await _positions.list_partitions(client, options)
            ends = await _positions.latest_offsets(client, partitions)
            begin = None
            if known is not None:
                begin = await _with_new_partitions(client, options, known, partitions)
            return ends, begin

        end, begin = runtime.run(latest())
        if begin is not None:
            for stream, ends in end.items():
                for pid, stop in ends.items():
                    was = begin.get(stream, {}).get(pid, stop)
                    if stop < was:
                        data_loss(
                            options,
                            f"{stream}/{pid}: the latest offset {stop} is behind the offset "
                            f"{was} to read next (was the stream deleted and recreated?)",
                        )
            if self._target is not None:
                end = _up_to(begin, end, self._target)
            max_rows = self._max_rows(limit)
            if max_rows is not None:
                end = cap_by_backlog(begin, end, max_rows)
        self._last_end = end
        if not self._committed:
            return end
        if begin is None:
            raise FeatureNotSupportedError(
                "isolation=read_committed on a stream needs pyspark >= 4.2 (Spark must give "
                "the reader a micro-batch's start offsets)",
                feature="exactly_once",
            )
        if plan is None:
            raise FeatureNotSupportedError(
                "isolation=read_committed: this query's checkpoint was started with "
                "read_uncommitted; start it with a new checkpointLocation",
                feature="exactly_once",
            )
        moves = any(
            stop > begin.get(stream, {}).get(pid, stop)
            for stream, ends in end.items()
            for pid, stop in ends.items()
        )
        # Metadata only: where the tasks about to run will append their snapshots.
        store_at = runtime.run(store_end(client, plan.store)) if moves else -1
        self._last_plan = next_plan(plan, begin, end, store_at)
        return with_plan(end, self._last_plan)

    def _max_rows(self, limit: Any) -> int | None:
        if limit is None:  # pyspark < 4.2: the option is applied here
            return self._options.max_offsets_per_trigger
        if ADMISSION_CONTROL and isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        return None  # ReadAllAvailable (e.g. Trigger.AvailableNow), or a limit we cannot honour

    def partitions(
        self, start: Mapping[str, Any], end: Mapping[str, Any]
    ) -> Sequence[InputPartition]:
        begin, plan = split_offsets(start)
        # The end's plan names the run: Spark may call initialOffset again for a first
        # batch's start (a new run id each time), never for an end it logged.
        stop, end_plan = split_offsets(end)
        missing = {
            s: [int(p) for p in pids if p not in begin.get(s, {})] for s, pids in stop.items()
        }
        if any(missing.values()):
            runtime = self._run()
            client = runtime.client
            missing = {s: pids for s, pids in missing.items() if pids}
            begin = runtime.run(_with_new_partitions(client, self._options, begin, missing))
        if self._committed:  # one task per partition, from the states at its start
            if plan is None or end_plan is None:
                raise FeatureNotSupportedError(
                    "isolation=read_committed: these offsets carry no producer states plan; "
                    "start the query with a new checkpointLocation",
                    feature="exactly_once",
                )
            ranges = plan_ranges(begin, stop)
            horizon = self._options.idle_horizon_ns
            return [
                LiftbridgePartition(
                    RangePartition(
                        r,
                        self._options,
                        states_at=StatesAt(
                            end_plan.store,
                            end_plan.run,
                            plan.position(r.stream, r.partition),
                            horizon,
                        ),
                    )
                )
                for r in ranges
            ]
        ranges = plan_ranges(
            begin,
            stop,
            min_partitions=self._options.min_partitions,
            max_records=self._options.max_records_per_partition,
        )
        return to_inputs(ranges, self._options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input(partition)

    def commit(self, end: Mapping[str, Any]) -> None:
        """Nothing to do: the checkpoint is the source of truth for what was read."""

    def stop(self) -> None:
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()


if _AvailableNow is not None:  # pyspark 4.3+: Spark checks isinstance
    _AvailableNow.register(StreamReader)


class StreamWriter(_StreamWriterBase):  # type: ignore[misc]
    """Publishes each micro-batch (Arrow batches, on pyspark 4.1+); at-least-once (a
    replayed batch is published again), or idempotent, or exactly once (the tasks' ACK
    intents are written in ``commit``)."""

    def __init__(self, options: SinkOptions, columns: Mapping[str, int]) -> None:
        self._options = options
        self._columns = dict(columns)

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        if _StreamWriterBase is DataSourceStreamWriter:  # pyspark 4.0: Spark rows
            names = {name: i for i, name in enumerate(self._columns)}
            return write_task(rows_as_batches(iterator, self._columns), names, self._options)
        return write_task(iterator, self._columns, self._options)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_write(self._options, messages, batchId, f"liftbridge micro-batch {batchId}")
        total = summarize(messages)
        log.info("liftbridge micro-batch %d committed: %d rows", batchId, total.rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("liftbridge micro-batch %d aborted", batchId)
