"""The "liftbridge" Spark source, batch and streaming, with a real SparkSession (local[2])
against a real Liftbridge v1.9.0 node."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from compaction_support import compacted_stream, widest_gap
from spark_support import OPTIONS, create_stream, get_or_create, java_or_fail, publish, start_spark

from liftbridge_client import Client, StreamConfig
from liftbridge_client.errors import LiftbridgeTimeoutError
from liftbridge_client.testing import Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    yield from start_spark(tmp_path_factory.mktemp("spark"))


def messages(count: int, partitions: int, tag: str = "") -> list[tuple[bytes, bytes, int]]:
    return [(b"k%d" % i, f"{tag}v{i}".encode(), i % partitions) for i in range(count)]


def source(spark: SparkSession, server: Deployment, stream: str, **options: str) -> Any:
    reader = spark.read.format("liftbridge").option("brokers", server.addresses[0])
    return reader.option("stream", stream).options(**options)


def triples(df: DataFrame) -> set[tuple[int, int, bytes]]:
    return {(r.partition, r.offset, bytes(r.value)) for r in df.collect()}


def test_batch_read_equals_what_was_published(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=3)
    sent = messages(90, 3)
    publish(liftbridge_server.addresses, name, sent)

    df = source(spark, liftbridge_server, name, includeHeaders="true").load()
    rows = df.collect()

    assert df.rdd.getNumPartitions() == 3  # one Spark partition per Liftbridge partition
    assert len(rows) == 90
    got = {(bytes(r.key), bytes(r.value), r.partition) for r in rows}
    assert got == set(sent)
    for p in range(3):
        assert sorted(r.offset for r in rows if r.partition == p) == list(range(30))
    assert {r.stream for r in rows} == {name}
    # The subject a message was stored under: the partition's (``subject.N`` for N > 0).
    assert {(r.partition, r.subject) for r in rows} == {
        (0, subject),
        (1, f"{subject}.1"),
        (2, f"{subject}.2"),
    }
    assert all(r.timestamp is not None for r in rows)
    assert all(isinstance(r.headers, list) for r in rows)


def test_starting_and_ending_offsets_json(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    publish(liftbridge_server.addresses, name, messages(40, 2))  # 20 per partition

    starting = json.dumps({name: {"0": 5, "1": -2}})
    ending = json.dumps({name: {"0": 8, "1": -1}})
    df = source(
        spark, liftbridge_server, name, startingOffsets=starting, endingOffsets=ending
    ).load()
    got = {(p, o) for p, o, _ in triples(df)}
    assert got == {(0, o) for o in range(5, 8)} | {(1, o) for o in range(20)}

    # minPartitions splits the ranges; the rows stay the same.
    split = source(spark, liftbridge_server, name, minPartitions="6").load()
    assert split.rdd.getNumPartitions() >= 6
    assert triples(split) == triples(source(spark, liftbridge_server, name).load())

    bad = source(spark, liftbridge_server, name, startingOffsets='{"x": {"zero": 1}}')
    with pytest.raises(Exception, match="startingOffsets"):
        bad.load().collect()


def test_starting_timestamp(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name)
    publish(liftbridge_server.addresses, name, messages(10, 1, "old"))
    first = source(spark, liftbridge_server, name).load().collect()
    cut_ms = max(r.timestamp for r in first).timestamp() * 1000 + 1
    publish(liftbridge_server.addresses, name, messages(5, 1, "new"))

    df = source(spark, liftbridge_server, name, startingTimestamp=str(int(cut_ms) + 1)).load()
    assert sorted(o for _, o, _ in triples(df)) == list(range(10, 15))


def wait_for_retention(addresses: list[str], stream: str) -> None:
    """Until retention removed offset 0 (polled: the server has no event for it). A read
    from 0 then starts later, or waits (v1.9.0) when retention removed every message."""

    async def go() -> None:
        async with Client(addresses, options=OPTIONS) as client, asyncio.timeout(60):
            while True:
                try:
                    async with client.subscribe(stream, start_offset=0) as sub:
                        if (await sub.next(1.0)).offset > 0:
                            return
                except LiftbridgeTimeoutError:
                    return
                await asyncio.sleep(0.2)

    asyncio.run(go())


def test_fail_on_data_loss_both_ways(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    config = StreamConfig(retention_max_messages=10, segment_max_bytes=512, cleaner_interval=0.2)
    create_stream(liftbridge_server.addresses, subject, name, config=config)
    publish(liftbridge_server.addresses, name, [(b"k", b"x" * 64, 0)] * 100)
    wait_for_retention(liftbridge_server.addresses, name)
    publish(liftbridge_server.addresses, name, [(b"k", b"y" * 64, 0)] * 5)  # 100-104
    wanted = json.dumps({name: {"0": 0}})

    strict = source(spark, liftbridge_server, name, startingOffsets=wanted).load()
    with pytest.raises(Exception, match=r"DataLossError.*offsets 0 to \d+ are gone"):
        strict.collect()

    lenient = source(
        spark, liftbridge_server, name, startingOffsets=wanted, failOnDataLoss="false"
    ).load()
    offsets = sorted(o for _, o, _ in triples(lenient))
    assert offsets[0] > 0  # the lost offsets are skipped...
    assert offsets == list(range(offsets[0], 105))  # ...and what is there is read


def test_compaction_gaps_are_neither_loss_nor_a_wait(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    """Ranges that start, end or lie inside a compaction gap read what is there: no
    DataLossError (retention, not compaction, removes a range's start) and no wait for
    offsets that will never come (each would fail after pollTimeoutMs)."""
    name, subject = stream_names()

    async def make() -> list[int]:
        async with Client(liftbridge_server.addresses, options=OPTIONS) as client:
            return await compacted_stream(client, subject, name)

    kept = asyncio.run(make())
    low, high = widest_gap(kept)
    mid = (low + high) // 2
    latest = kept[-1] + 1
    ranges = [(low + 1, high), (low + 1, high + 1), (low, mid), (mid, high + 1), (0, mid)]
    for start, end in ranges:
        df = source(
            spark,
            liftbridge_server,
            name,
            startingOffsets=json.dumps({name: {"0": start}}),
            endingOffsets=json.dumps({name: {"0": end}}),
            pollTimeoutMs="20000",
        ).load()
        assert sorted(o for _, o, _ in triples(df)) == [o for o in kept if start <= o < end]
    # The whole stream in tasks of 50 offsets: their bounds fall in gaps and beside them.
    df = source(
        spark, liftbridge_server, name, maxRecordsPerPartition="50", pollTimeoutMs="20000"
    ).load()
    assert sorted(o for _, o, _ in triples(df)) == kept
    # A streaming query's micro-batches of 50 offsets likewise.
    query = available_now(
        spark, liftbridge_server, name, tmp_path, maxOffsetsPerTrigger="50", pollTimeoutMs="20000"
    )
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.offset for r in rows) == kept
    assert latest == 400  # every offset published was planned


def run_stream(
    spark: SparkSession,
    server: Deployment,
    stream: str,
    out: Path,
    checkpoint: Path,
    **options: str,
) -> Any:
    df = (
        spark.readStream.format("liftbridge")
        .option("brokers", server.addresses[0])
        .option("stream", stream)
        .options(**options)
        .load()
    )
    return (
        df.selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def test_streaming_read_restarts_from_checkpoint_without_gap_or_duplicate(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    publish(liftbridge_server.addresses, name, messages(20, 2, "a"))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    query = run_stream(spark, liftbridge_server, name, out, checkpoint, startingOffsets="earliest")
    try:
        query.processAllAvailable()
        publish(liftbridge_server.addresses, name, messages(20, 2, "b"))
        query.processAllAvailable()
        batches = {p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0}
    finally:
        query.stop()
    assert len(batches) >= 2

    publish(liftbridge_server.addresses, name, messages(20, 2, "c"))  # while stopped
    query = run_stream(spark, liftbridge_server, name, out, checkpoint)
    try:
        query.processAllAvailable()
        publish(liftbridge_server.addresses, name, messages(20, 2, "d"))
        query.processAllAvailable()
    finally:
        query.stop()

    rows = spark.read.parquet(str(out)).collect()
    keys = sorted((r.partition, r.offset) for r in rows)
    assert keys == sorted((p, o) for p in range(2) for o in range(40))  # no gap, no duplicate
    assert {bytes(r.value)[:1] for r in rows} == {b"a", b"b", b"c", b"d"}


def test_max_offsets_per_trigger(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=3)
    # A skewed backlog: partition 0 has 60 messages, 1 has 25, 2 has 5.
    sent = [(b"k", b"v", 0)] * 60 + [(b"k", b"v", 1)] * 25 + [(b"k", b"v", 2)] * 5
    publish(liftbridge_server.addresses, name, sent)

    query = run_stream(
        spark,
        liftbridge_server,
        name,
        tmp_path / "out",
        tmp_path / "checkpoint",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="20",
    )
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert sum(sizes) == 90
    assert max(sizes) == 20
    assert len(sizes) == 5  # 90 rows, 20 per batch
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert len({(r.partition, r.offset) for r in rows}) == 90


def available_now(
    spark: SparkSession, server: Deployment, stream: str, tmp_path: Path, **options: str
) -> Any:
    """A Trigger.AvailableNow query from the earliest offsets: partition and offset of each
    row to parquet under ``tmp_path / "out"``, started."""
    return (
        spark.readStream.format("liftbridge")
        .option("brokers", server.addresses[0])
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .selectExpr("partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )


def test_trigger_available_now_reads_what_is_there_and_ends(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    publish(liftbridge_server.addresses, name, messages(50, 2))
    query = available_now(spark, liftbridge_server, name, tmp_path, maxOffsetsPerTrigger="20")
    try:
        assert query.awaitTermination(120)  # it ends by itself
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert sizes == [20, 20, 10]  # the read limit still applies
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in range(2) for o in range(25)
    ]


def test_missing_java_is_a_clear_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    with pytest.raises(pytest.fail.Exception, match="need Java 17"):
        java_or_fail()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", "/nonexistent-bin")
    with pytest.raises(pytest.fail.Exception, match="need Java 17"):
        java_or_fail()


def test_stream_pattern_picks_up_a_new_stream_from_its_earliest_offset(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    (a, a_subject), (b, b_subject) = stream_names("pa"), stream_names("pb")
    create_stream(liftbridge_server.addresses, a_subject, a)
    publish(liftbridge_server.addresses, a, messages(10, 1, "a"))
    pattern = re.escape(stream_names.prefix) + "-p[ab]-.*"
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", liftbridge_server.addresses[0])
        .option("streamPattern", pattern)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("stream", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        create_stream(liftbridge_server.addresses, b_subject, b)  # while the query runs
        publish(liftbridge_server.addresses, b, messages(7, 1, "b"))
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.stream, r.offset) for r in rows) == sorted(
        [(a, o) for o in range(10)] + [(b, o) for o in range(7)]
    )


class _Launches:
    """A SparkSession builder whose first JVM launches die, as seen in full runs."""

    def __init__(
        self, failures: int, condition: str = "JAVA_GATEWAY_EXITED", **params: str
    ) -> None:
        self.failures, self.condition, self.params, self.calls = failures, condition, params, 0

    def getOrCreate(self) -> object:
        from pyspark.errors import PySparkRuntimeError

        self.calls += 1
        if self.calls <= self.failures:
            raise PySparkRuntimeError(errorClass=self.condition, messageParameters=self.params)
        return self


def test_a_jvm_launch_that_died_is_retried_and_other_errors_are_not() -> None:
    """No Spark needed: the harness's retry itself (its first real use failed on a
    PySpark deprecation warning, which this run turns into an error)."""
    from pyspark.errors import PySparkRuntimeError

    twice = _Launches(failures=2)
    assert get_or_create(twice, pause=0) is cast(Any, twice)
    assert twice.calls == 3
    always = _Launches(failures=5)
    with pytest.raises(PySparkRuntimeError):
        get_or_create(always, pause=0)
    assert always.calls == 3
    other = _Launches(1, "PYTHON_VERSION_MISMATCH", worker_version="3.12", driver_version="3.11")
    with pytest.raises(PySparkRuntimeError):
        get_or_create(other, pause=0)
    assert other.calls == 1
