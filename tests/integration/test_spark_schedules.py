"""The Spark sinks against generated failure schedules on a real node (the real profile).

Each schedule is drawn from a seed (`draw`): the data (rows, Spark partitions, some of them
empty, keys none, all or some), the sink (exactlyOnce with or without packRows and
producersPerPartition, idempotent, plain), the target's partitions, the Arrow batch size,
batch or streaming, and where a task's first attempt fails: at any row (first, last, off
pack and Arrow-batch boundaries alike), in a Python UDF before the writer, in a JVM
expression after a shuffle, or in the writer's own publish. Sometimes the job runs again
with the same writeId. The oracle: exactlyOnce read committed yields every row once,
idempotent read plainly yields every row once, plain yields every row at least once; with
keys and no shuffle, one key's rows of one task stay in order.

``SPARK_SCHEDULES`` (default 16) sets how many; each runs with seed ``base + i``, where
the base is ``SPARK_SCHEDULE_SEED`` or drawn (and printed). A failure names its seed:
``SPARK_SCHEDULE_SEED=<seed> SPARK_SCHEDULES=1 pytest tests/integration/test_spark_schedules.py``
replays it. The fast profile (hundreds of schedules, in process) is
tests/unit/test_sink_schedules.py.
"""

from __future__ import annotations

import os
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import create_stream, publish, read_all, start_spark
from test_spark_exactly_once import read_committed

from liftbridge_client.models import Message
from liftbridge_client.packing import is_packed, unpack
from liftbridge_client.testing import Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

COUNT = int(os.environ.get("SPARK_SCHEDULES", "16"))
BASE = int(os.environ.get("SPARK_SCHEDULE_SEED", str(random.SystemRandom().randrange(10**6))))


@dataclass(frozen=True)
class SparkSchedule:
    seed: int
    rows: int
    tasks: int
    mode: str  # exactlyOnce, idempotent, plain
    pack_rows: int
    lanes: int
    keys: str  # none, all, mixed
    partitions: int  # of the target stream
    arrow_batch: int
    streaming: bool
    source: str  # where the first attempt fails: udf, shuffle, publish, none
    fail_at: int  # the row id (-1: none)
    rerun: bool

    def __str__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in vars(self).items())
        return f"SparkSchedule({fields}); replay: SPARK_SCHEDULE_SEED={self.seed} SPARK_SCHEDULES=1"


def task_rows(rows: int, tasks: int, task: int) -> tuple[int, int]:
    """The ids ``[start, end)`` that ``spark.range(rows, numPartitions=tasks)`` gives a task."""
    return task * rows // tasks, (task + 1) * rows // tasks


def draw(seed: int) -> SparkSchedule:
    rng = random.Random(seed)
    mode = rng.choice(["exactlyOnce"] * 4 + ["idempotent", "plain"])
    rows = rng.choices(
        [0, 1, rng.randrange(2, 200), rng.randrange(200, 6000)], weights=[1, 1, 6, 12]
    )[0]
    tasks = rng.randint(1, 3)
    streaming = rng.random() < 0.25
    sources = ["udf"] * 4 + ["shuffle"] * 3 + ["none"]
    if mode == "exactlyOnce" and not streaming:
        sources.append("publish")  # a row to a partition that does not exist
    source = rng.choice(sources) if rows else "none"
    fail_at = -1
    if source != "none":
        # Any row: often the first or last of a task, else anywhere.
        first, end = task_rows(rows, tasks, rng.randrange(tasks))
        first, last = (first, end - 1) if end > first else (0, rows - 1)
        fail_at = rng.choice([first, last, rng.randint(first, last), rng.randint(first, last)])
    return SparkSchedule(
        seed=seed,
        rows=rows,
        tasks=tasks,
        mode=mode,
        pack_rows=rng.choice([1, 16, 50, 64, 300]) if mode != "idempotent" else 1,
        lanes=rng.choice([1, 1, 3]) if mode == "exactlyOnce" else 1,
        keys=rng.choice(["none", "all", "mixed"]),
        partitions=rng.randint(1, 3),
        arrow_batch=rng.choice([137, 500, 10_000]),
        streaming=streaming,
        source=source,
        fail_at=fail_at,
        rerun=rng.random() < 0.3,
    )


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    for session in start_spark(tmp_path_factory.mktemp("spark")):
        key = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = str(session.conf.get(key))
        try:
            yield session
        finally:
            session.conf.set(key, before)


def _failing(flag: Path, fail_at: int, jvm: bool) -> Any:
    """A UDF over a row id, true (jvm) or raising (Python) at ``fail_at`` on a task's first
    attempt while ``flag`` exists."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    flag_path = str(flag)

    def check(i: int) -> int | bool:
        context = TaskContext.get()
        failing = (
            i == fail_at
            and context is not None
            and context.attemptNumber() == 0
            and Path(flag_path).exists()
        )
        if jvm:
            return failing
        if failing:
            raise RuntimeError(f"injected UDF failure at row {i}")
        return i

    return udf(lambda i: check(i), "boolean" if jvm else "long")  # noqa: PLW0108


def _shaped(s: SparkSchedule, df: DataFrame, flag: Path) -> DataFrame:
    """``df`` (a column ``id``) through the schedule's failure, as sink columns."""
    from pyspark.sql.functions import col, raise_error, when

    if s.source == "udf":
        df = df.select(_failing(flag, s.fail_at, jvm=False)(col("id")).alias("id"))
    elif s.source == "shuffle":
        df = df.repartition(s.tasks, "id").select(
            when(_failing(flag, s.fail_at, jvm=True)(col("id")), raise_error("injected"))
            .otherwise(col("id"))
            .alias("id")
        )
    columns = ["concat('row-', id) AS value"]
    if s.keys == "all":
        columns.append("cast(concat('k', id % 5) AS binary) AS key")
    elif s.keys == "mixed":
        columns.append("CASE WHEN id % 3 != 1 THEN cast(concat('k', id % 5) AS binary) END AS key")
    if s.source == "publish":
        failing = _failing(flag, s.fail_at, jvm=True)
        df = df.withColumn("bad", failing(col("id")))
        columns.append("CASE WHEN bad THEN 99 END AS partition")  # no such partition
    return df.selectExpr(*columns)


def _options(s: SparkSchedule, stream: str, broker: str) -> dict[str, str]:
    options = {"brokers": broker, "stream": stream, "transport": "grpc", "writeId": stream}
    if s.mode != "plain":
        options[s.mode] = "true"
    if s.pack_rows > 1:
        options["packRows"] = str(s.pack_rows)
    if s.lanes > 1:
        options["producersPerPartition"] = str(s.lanes)
    return options


def _rows_of(messages: list[Message]) -> list[tuple[int, str]]:
    """(partition, value) per row, in stored order, packs unpacked."""
    out: list[tuple[int, str]] = []
    for m in messages:
        if is_packed(m.headers):
            out.extend((m.partition, r.value.decode()) for r in unpack(m.value))
        elif m.value:  # ACK intents have empty values
            out.append((m.partition, m.value.decode()))
    return out


def _stored(s: SparkSchedule, server: Deployment, stream: str) -> list[tuple[int, str]]:
    if s.mode == "exactlyOnce":
        return _rows_of(read_committed(server.addresses, stream))
    return _rows_of(read_all(server.addresses, stream, s.partitions))


def _write(
    s: SparkSchedule, spark: SparkSession, server: Deployment, stream: str, tmp: Path, flag: Path
) -> None:
    broker = server.addresses[0]
    options = _options(s, stream, broker)
    if not s.streaming:
        df = _shaped(s, spark.range(0, s.rows, 1, s.tasks), flag)
        df.write.format("liftbridge").options(**options).mode("append").save()
        return
    source = f"{stream}-src"
    query = (
        _shaped(
            s,
            spark.readStream.format("liftbridge")
            .option("brokers", broker)
            .option("stream", source)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("cast(cast(value AS string) AS long) AS id"),
            flag,
        )
        .writeStream.format("liftbridge")
        .options(**options)
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def _judge(s: SparkSchedule, stored: list[tuple[int, str]]) -> None:
    expected = {f"row-{i}" for i in range(s.rows)}
    counts = Counter(value for _, value in stored)
    missing = sorted(expected - set(counts), key=lambda v: int(v[4:]))
    assert not missing, f"{s}: lost {len(missing)} rows, e.g. {missing[:10]}"
    assert set(counts) <= expected, f"{s}: rows never written: {sorted(set(counts) - expected)[:5]}"
    if s.mode != "plain":
        twice = sorted(v for v, n in counts.items() if n > 1)
        assert not twice, f"{s}: {len(twice)} rows more than once, e.g. {twice[:10]}"
    if s.keys != "none" and s.source != "shuffle" and not s.streaming and s.mode == "exactlyOnce":
        # spark.range gives each task ascending ids: one key's rows of a task keep that order.
        task_of = [k for k in range(s.tasks) for _ in range(*task_rows(s.rows, s.tasks, k))]
        last: dict[tuple[int, int, int], int] = defaultdict(lambda: -1)
        for partition, value in stored:
            i = int(value[4:])
            if s.keys == "mixed" and i % 3 == 1:
                continue
            where = (partition, task_of[i], i % 5)
            assert i > last[where], f"{s}: row {i} stored after row {last[where]} of its key"
            last[where] = i


@pytest.mark.parametrize("number", range(COUNT))
def test_generated_failure_schedule(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    number: int,
) -> None:
    s = draw(BASE + number)
    name, subject = stream_names()
    addresses = liftbridge_server.addresses
    create_stream(addresses, subject, name, partitions=s.partitions)
    if s.streaming:
        source = f"{name}-src"
        create_stream(addresses, f"{subject}-src", source, partitions=1)
        publish(addresses, source, [(b"", str(i).encode(), 0) for i in range(s.rows)])
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(s.arrow_batch))
    flag = tmp_path / "fail"
    flag.touch()
    _write(s, spark, liftbridge_server, name, tmp_path, flag)
    stored = _stored(s, liftbridge_server, name)
    _judge(s, stored)
    if s.rerun:
        flag.unlink()
        _write(s, spark, liftbridge_server, name, tmp_path, flag)
        after = _stored(s, liftbridge_server, name)
        if s.mode != "plain":
            assert Counter(after) == Counter(stored), f"{s}: the rerun changed what is read"
        _judge(s, after)
