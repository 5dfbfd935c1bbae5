"""The "liftbridge" Spark sink, batch and streaming, at-least-once and idempotent, with a
real SparkSession (2 cores, one retry per task) against a real Liftbridge v1.9.0 node."""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import (
    copy_query_failing_while,
    create_stream,
    publish,
    read_all,
    start_spark,
)

from liftbridge_client.partitioning import key_partition
from liftbridge_client.testing import Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    yield from start_spark(tmp_path_factory.mktemp("spark"))


def sink(df: DataFrame, server: Deployment, **options: str) -> Any:
    return df.write.format("liftbridge").option("brokers", server.addresses[0]).options(**options)


def test_batch_write_publishes_every_row(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    df = spark.range(200, numPartitions=3).selectExpr(
        "concat('v', id) AS value",
        "cast(concat('k', id) AS binary) AS key",
        "cast(id % 2 AS int) AS partition",
        "array(named_struct('key', 'n', 'value', cast(cast(id AS string) AS binary))) AS headers",
        f"'{name}' AS stream",
    )
    sink(df, liftbridge_server).mode("append").save()

    got = read_all(liftbridge_server.addresses, name, 2)
    assert len(got) == 200
    assert {(m.value, m.key, m.partition) for m in got} == {
        (b"v%d" % i, b"k%d" % i, i % 2) for i in range(200)
    }
    assert all(m.headers["n"] == m.value[1:] for m in got)


def test_write_failures_fail_the_job_with_the_typed_error(
    spark: SparkSession, liftbridge_server: Deployment
) -> None:
    df = spark.range(3).selectExpr("cast(id AS string) AS value")
    with pytest.raises(Exception, match="NotFoundError"):
        sink(df, liftbridge_server, stream="no-such-stream").mode("append").save()
    with pytest.raises(Exception, match="value"):  # checked on the driver, before any task
        sink(spark.range(3), liftbridge_server, stream="x").mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        sink(df, liftbridge_server, stream="x").mode("overwrite").save()


def test_bad_rows_fail_the_job_with_invalid_input_and_keyed_rows_pick_their_partition(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    # The Arrow writer checks whole batches: each bad row must still fail the job with the
    # client's typed error, naming what is wrong.
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=3)
    bad = {
        "'value' is null": ["IF(id = 2, NULL, 'v') AS value"],
        "no stream": ["'v' AS value", f"IF(id = 2, NULL, '{name}') AS stream"],
        "header key": ["'v' AS value", "array(named_struct('key', '', 'value', 'x')) AS headers"],
        "partitions 0..2": ["'v' AS value", "cast(id + 1 AS int) AS partition"],
    }
    for message, columns in bad.items():
        df = spark.range(3, numPartitions=1).selectExpr(*columns)
        options = {} if any("stream" in c for c in columns) else {"stream": name}
        with pytest.raises(Exception, match="InvalidInputError") as failed:
            sink(df, liftbridge_server, **options).mode("append").save()
        assert message in str(failed.value)
    # Keyed rows without a partition go where the client's default partitioner puts them.
    df = spark.range(60, numPartitions=2).selectExpr(
        "cast(id AS string) AS value", "concat('k', id) AS key"
    )
    sink(df, liftbridge_server, stream=name).mode("append").save()
    got = [m for m in read_all(liftbridge_server.addresses, name, 3) if m.key]  # no bad job's
    assert len(got) == 60
    assert all(m.partition == key_partition(m.key, 3) for m in got)
    assert {m.key for m in got} == {b"k%d" % i for i in range(60)}


def test_streaming_write_copies_a_stream(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    (src, src_subject), (dst, dst_subject) = stream_names("src"), stream_names("dst")
    create_stream(liftbridge_server.addresses, src_subject, src, partitions=2)
    create_stream(liftbridge_server.addresses, dst_subject, dst)
    publish(liftbridge_server.addresses, src, [(b"k", b"v%d" % i, i % 2) for i in range(50)])

    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", liftbridge_server.addresses[0])
        .option("stream", src)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(cast(value AS string)) AS value")
        .writeStream.format("liftbridge")
        .option("brokers", liftbridge_server.addresses[0])
        .option("stream", dst)
        .option("ackPolicy", "all")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        publish(liftbridge_server.addresses, src, [(b"k", b"w%d" % i, 0) for i in range(10)])
        query.processAllAvailable()
    finally:
        query.stop()
    got = sorted(m.value for m in read_all(liftbridge_server.addresses, dst))
    assert got == sorted([b"V%d" % i for i in range(50)] + [b"W%d" % i for i in range(10)])


def flaky_rows(spark: SparkSession, rows: int, fail_at: int, flag: Path) -> DataFrame:
    """Rows ``row-<i>`` in 2 Spark partitions of ``rows // 2``, for a 2-partition stream.

    While ``flag`` exists, the first attempt of the task holding row ``fail_at`` sends that
    row to partition 99, which does not exist: the publish fails and the task with it,
    after the chunks before it were published and acked.
    """
    from pyspark import TaskContext
    from pyspark.sql.functions import col, concat, lit, udf

    flag_path = str(flag)

    def partition(i: int) -> int | None:
        context = TaskContext.get()
        first = context is not None and context.attemptNumber() == 0
        return 99 if i == fail_at and first and Path(flag_path).exists() else None

    # A lambda: pyspark would inspect the hints of a typed function for a pandas UDF.
    partitions = udf(lambda i: partition(i), "int")  # noqa: PLW0108
    df = spark.range(rows, numPartitions=2)
    return df.select(
        concat(lit("row-"), col("id")).alias("value"), partitions("id").alias("partition")
    )


@pytest.mark.parametrize("idempotent", [True, False])
def test_task_retry_publishes_no_row_twice_when_idempotent(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    idempotent: bool,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    flag = tmp_path / "fail"
    flag.touch()
    df = flaky_rows(spark, 5000, fail_at=2200, flag=flag)  # task 0: rows 0-2499
    options = {"stream": name, "idempotent": str(idempotent).lower(), "writeId": name}
    sink(df, liftbridge_server, **options).mode("append").save()

    counts = Counter(m.value for m in read_all(liftbridge_server.addresses, name, 2))
    assert set(counts) == {b"row-%d" % i for i in range(5000)}
    duplicated = sum(n - 1 for n in counts.values())
    if idempotent:
        assert duplicated == 0
    else:  # at-least-once: the retried task published its first rows again
        # Task 0 failed at row 2200 with at most 1024 publishes in flight: rows before
        # 1176 were acked, and published again by the retry.
        assert duplicated >= 1000

    if idempotent:  # the job run again with the same writeId publishes nothing more
        flag.unlink()
        again = flaky_rows(spark, 5000, 2200, flag)
        sink(again, liftbridge_server, **options).mode("append").save()
        assert len(read_all(liftbridge_server.addresses, name, 2)) == 5000


def test_streaming_query_restarted_mid_batch_publishes_no_row_twice(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    (src, src_subject), (dst, dst_subject) = stream_names("src"), stream_names("dst")
    create_stream(liftbridge_server.addresses, src_subject, src, partitions=2)
    create_stream(liftbridge_server.addresses, dst_subject, dst, partitions=2)
    publish(liftbridge_server.addresses, src, [(b"k", b"%d" % i, i % 2) for i in range(6000)])
    flag = tmp_path / "fail"
    flag.touch()
    start = copy_query_failing_while(
        spark,
        liftbridge_server.addresses[0],
        src,
        dst,
        checkpoint=tmp_path / "checkpoint",
        flag=flag,
        fail_at=2500,
        sink_option="idempotent",
    )

    query = start()
    with pytest.raises(Exception, match="99"):
        query.processAllAvailable()  # both attempts of one task fail: the query stops
    query.stop()
    partial = len(read_all(liftbridge_server.addresses, dst, 2))
    # Written in part: task 0 had 1000+ rows acked when it failed (the window is 1024).
    assert 1000 <= partial < 6000

    flag.unlink()
    query = start()  # the same checkpoint: the uncommitted batch runs again
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    counts = Counter(m.value for m in read_all(liftbridge_server.addresses, dst, 2))
    assert set(counts) == {b"%d-%d" % (i % 2, i // 2) for i in range(6000)}
    assert max(counts.values()) == 1  # read back exactly once


def test_the_spark_pipeline_example(
    spark: SparkSession, liftbridge_server: Deployment, tmp_path: Path
) -> None:
    """examples/spark_pipeline.py, on this session: totals match, each row written once."""
    path = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"
    spec = importlib.util.spec_from_file_location("spark_pipeline", path)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.run_pipeline(spark, liftbridge_server.addresses, tmp_path) is True
