"""Sink writes whose task fails UPSTREAM of the writer (issue 23): a Python UDF that raises,
a JVM expression that raises after a shuffle. Spark then ends the writer's input early
instead of raising into it, so the failed attempt looks, from inside the writer, like a
task that wrote everything. No row may be lost: the retry (batch) or the restarted query
(streaming) must publish what the failed attempt did not, in every delivery mode."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import create_stream, publish, read_all, start_spark
from test_spark_exactly_once import read_committed

from liftbridge_client.testing import Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROWS = 30_000  # in 4 Spark partitions: rows 7,500-14,999 are task 1's
FAIL_AT = 14_000  # task 1's attempt 0 has seen 6,500 rows when the UDF raises

# Spark's default Arrow batches (10,000 rows), not the other Spark tests' 200: with those
# the failure reached the writer as an error; with the default the writer saw its input
# end, and 0.2.x lost rows.
DEFAULT_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.execution.pythonUDF.arrow.enabled": "false",  # true needs pandas
}


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    for session in start_spark(tmp_path_factory.mktemp("spark")):
        before = {key: str(session.conf.get(key)) for key in DEFAULT_CONF}
        for key, value in DEFAULT_CONF.items():
            session.conf.set(key, value)
        try:
            yield session
        finally:
            for key, value in before.items():
                session.conf.set(key, value)


def failing_on_first_attempt(flag: Path, kind: str) -> Any:
    """A Python UDF over a row number ``i``, failing at ``FAIL_AT`` on a task's first
    attempt while ``flag`` exists: kind "udf" returns ``i`` and raises there; kind "jvm"
    returns whether to fail there (the caller raises in the JVM)."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    flag_path = str(flag)

    def check(i: int) -> int | bool:
        context = TaskContext.get()
        first = context is not None and context.attemptNumber() == 0
        failing = i == FAIL_AT and first and Path(flag_path).exists()
        if kind == "jvm":
            return failing
        if failing:
            raise RuntimeError(f"injected UDF failure at row {i}")
        return i

    return udf(lambda i: check(i), "boolean" if kind == "jvm" else "long")  # noqa: PLW0108


def batch_rows(spark: SparkSession, flag: Path, kind: str) -> DataFrame:
    from pyspark.sql.functions import col, raise_error, when

    df = spark.range(ROWS, numPartitions=4)
    checked = failing_on_first_attempt(flag, kind)(col("id"))
    if kind == "udf":
        df = df.select(checked.alias("id"))
    else:  # a shuffle between the source and the failing stage, then a JVM failure
        df = df.repartition(4, "id").select(
            when(checked, raise_error("injected JVM failure")).otherwise(col("id")).alias("id")
        )
    return df.selectExpr("concat('row-', id) AS value", "cast(id % 2 AS int) AS partition")


def sink_options(mode: str, stream: str, broker: str) -> dict[str, str]:
    return {"brokers": broker, "stream": stream, mode: "true", "writeId": stream}


def stored(server: Deployment, stream: str, mode: str) -> Counter[bytes]:
    """What a reader of ``stream`` gets: read committed for exactlyOnce, else every message."""
    if mode == "exactlyOnce":
        return Counter(m.value for m in read_committed(server.addresses, stream))
    return Counter(m.value for m in read_all(server.addresses, stream, 2))


@pytest.mark.parametrize(
    ("mode", "kind"),
    [("idempotent", "udf"), ("idempotent", "jvm"), ("exactlyOnce", "udf"), ("exactlyOnce", "jvm")],
)
def test_batch_write_loses_no_row_when_a_task_fails_upstream_of_the_writer(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    mode: str,
    kind: str,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    flag = tmp_path / "fail"
    flag.touch()
    options = sink_options(mode, name, liftbridge_server.addresses[0])

    batch_rows(spark, flag, kind).write.format("liftbridge").options(**options).mode(
        "append"
    ).save()

    counts = stored(liftbridge_server, name, mode)
    assert set(counts) == {b"row-%d" % i for i in range(ROWS)}
    assert max(counts.values()) == 1
    # The failed attempt did publish part of task 1 before failing (else this proves nothing).
    everything = Counter(m.value for m in read_all(liftbridge_server.addresses, name, 2))
    assert everything.total() >= ROWS

    # The same job again with the same writeId (the failure gone) adds nothing.
    flag.unlink()
    batch_rows(spark, flag, kind).write.format("liftbridge").options(**options).mode(
        "append"
    ).save()
    assert stored(liftbridge_server, name, mode) == counts


@pytest.mark.parametrize("mode", ["idempotent", "exactlyOnce"])
def test_streaming_write_loses_no_row_when_a_task_fails_upstream_of_the_writer(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    mode: str,
) -> None:
    (src, src_subject), (dst, dst_subject) = stream_names("src"), stream_names("dst")
    create_stream(liftbridge_server.addresses, src_subject, src, partitions=2)
    create_stream(liftbridge_server.addresses, dst_subject, dst, partitions=2)
    # Offsets 0-14,999 on each source partition: partition 1's task fails at offset 6,500.
    publish(liftbridge_server.addresses, src, [(b"k", b"%d" % i, i % 2) for i in range(ROWS)])
    flag = tmp_path / "fail"
    flag.touch()
    broker = liftbridge_server.addresses[0]

    from pyspark.sql.functions import col, when

    checked = failing_on_first_attempt(flag, "udf")

    def start() -> Any:
        # Row number FAIL_AT stands for (partition 1, offset 6,500).
        number = when(col("partition") == 1, col("offset") + 7_500).otherwise(col("offset"))
        return (
            spark.readStream.format("liftbridge")
            .option("brokers", broker)
            .option("stream", src)
            .option("startingOffsets", "earliest")
            .load()
            .where(checked(number) >= 0)  # always true, but raises once
            .selectExpr("concat_ws('-', partition, offset) AS value", "partition")
            .writeStream.format("liftbridge")
            .options(**sink_options(mode, dst, broker))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()  # the first attempt fails upstream, the retry succeeds
    finally:
        query.stop()
    expected = {b"%d-%d" % (i % 2, i // 2) for i in range(ROWS)}
    counts = stored(liftbridge_server, dst, mode)
    assert set(counts) == expected
    assert max(counts.values()) == 1

    flag.unlink()
    query = start()  # restarted on the same checkpoint: nothing is replayed twice
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert stored(liftbridge_server, dst, mode) == counts
