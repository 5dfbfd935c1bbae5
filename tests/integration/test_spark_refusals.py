"""The Spark connector's answers to reads that find nothing, options that name nothing,
and writes whose cluster goes away (issue 23), with a real SparkSession and Liftbridge."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import create_stream, once_written, publish, start_spark

from liftbridge_client.testing import Deployment, SingleNode, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    yield from start_spark(tmp_path_factory.mktemp("spark"))


def read(spark: SparkSession, server: Deployment, **options: str) -> Any:
    return spark.read.format("liftbridge").option("brokers", server.addresses[0]).options(**options)


def test_empty_reads_are_empty_dataframes(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames, tmp_path: Path
) -> None:
    (full, full_subject), (empty, empty_subject) = stream_names("full"), stream_names("empty")
    create_stream(liftbridge_server.addresses, full_subject, full, partitions=2)
    create_stream(liftbridge_server.addresses, empty_subject, empty, partitions=2)
    publish(liftbridge_server.addresses, full, [(b"k", b"v%d" % i, i % 2) for i in range(10)])

    assert read(spark, liftbridge_server, stream=empty).load().count() == 0
    assert read(spark, liftbridge_server, stream=full, startingOffsets="latest").load().count() == 0
    same = json.dumps({full: {"0": 3, "1": 3}})
    df = read(spark, liftbridge_server, stream=full, startingOffsets=same, endingOffsets=same)
    assert df.load().collect() == []
    # Still the full schema, and a streaming query over nothing writes nothing.
    assert "value" in read(spark, liftbridge_server, stream=empty).load().columns
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", liftbridge_server.addresses[0])
        .option("stream", empty)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert spark.read.schema(query_schema(spark)).parquet(str(tmp_path / "out")).count() == 0


def query_schema(spark: SparkSession) -> Any:
    from liftbridge_client.spark._schema import read_schema_ddl

    return read_schema_ddl(False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffset": "latest"}, r"(?i)'startingOffset'.*did you mean 'startingOffsets'"),
        ({"startingOffsets": '{"nosuch": {"0": 0}}'}, r"startingOffsets.*'nosuch'"),
        ({"endingOffsets": '{"@STREAM@": {"5": 1}}'}, r"endingOffsets.*\[5\]"),
    ],
)
def test_reads_refuse_options_that_name_nothing(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    options: dict[str, str],
    message: str,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    options = {k: v.replace("@STREAM@", name) for k, v in options.items()}
    with pytest.raises(Exception, match=message):
        read(spark, liftbridge_server, stream=name, **options).load().collect()
    streaming = {k: v for k, v in options.items() if not k.startswith("ending")}
    if streaming:
        with pytest.raises(Exception, match=message):
            (
                spark.readStream.format("liftbridge")
                .option("brokers", liftbridge_server.addresses[0])
                .option("stream", name)
                .options(**streaming)
                .load()
                .writeStream.format("console")
                .start()
                .processAllAvailable()
            )


def test_writes_refuse_a_misspelt_option(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name)
    df = spark.range(3).selectExpr("cast(id AS string) AS value")
    with pytest.raises(Exception, match=r"(?i)'ackPolicies'.*did you mean 'ackPolicy'"):
        (
            df.write.format("liftbridge")
            .option("brokers", liftbridge_server.addresses[0])
            .option("stream", name)
            .option("ackPolicies", "all")
            .mode("append")
            .save()
        )


@pytest.mark.parametrize("mode", ["plain", "idempotent", "exactlyOnce"])
def test_a_write_fails_within_the_delivery_timeout_when_the_server_stops_answering(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    """The server is paused (SIGSTOP) mid-write: every mode fails within a bound set by
    deliveryTimeoutMs (5 s here; 2 attempts per task), not after minutes of retries."""
    with SingleNode(base_dir=tmp_path / "lb") as node:
        create_stream(node.addresses, "bounded", "bounded", partitions=2)
        options = {
            "brokers": node.addresses[0],
            "stream": "bounded",
            "deliveryTimeoutMs": "5000",
            "connectTimeoutMs": "3000",
            "ackTimeoutMs": "3000",
            "writeId": f"bounded-{mode}",
        }
        if mode != "plain":
            options[mode] = "true"
        df = spark.range(5_000_000, numPartitions=2).selectExpr("cast(id AS string) AS value")
        pid = node.node.process.pid
        assert pid is not None
        paused: list[float] = []

        def pause() -> None:  # while the tasks are publishing
            paused.append(time.monotonic())
            os.kill(pid, signal.SIGSTOP)

        # The write runs here (pyspark resolves data sources through the calling thread's
        # session); the pause comes from a watcher thread once the write is under way.
        # The server resumes before the watcher is joined (its client closes then).
        with once_written(node.addresses, "bounded", 0, 2000, pause):
            try:
                with pytest.raises(
                    Exception, match=r"deliveryTimeoutMs|Timeout|UNAVAILABLE|connect"
                ):
                    df.write.format("liftbridge").options(**options).mode("append").save()
                ended = time.monotonic()
            finally:
                os.kill(pid, signal.SIGCONT)
        assert paused, "the write ended before the server was paused: make it longer"
        failed_after = ended - paused[0]
        # Two attempts per task, each bounded by a 5 s step (plus connecting: 3 s).
        assert failed_after < 60, failed_after


def test_a_misspelt_streaming_read_option_is_the_error_users_see(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    """Refused when the read is loaded, with the connector's message last: from inside the
    streaming reader's constructor, pyspark 4.3 buried it under its own UnboundLocalError
    ("cannot access local variable 'reader'")."""
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name)
    with pytest.raises(Exception) as raised:  # noqa: PT011 - pyspark's AnalysisException
        (
            spark.readStream.format("liftbridge")
            .option("brokers", liftbridge_server.addresses[0])
            .option("stream", name)
            .option("maxOffsetPerTrigger", "5")
            .load()
        )
    lines = [line for line in str(raised.value).strip().splitlines() if "SQLSTATE" not in line]
    assert "did you mean 'maxOffsetsPerTrigger'" in lines[-1], lines[-3:]
    assert "UnboundLocalError" not in str(raised.value)
