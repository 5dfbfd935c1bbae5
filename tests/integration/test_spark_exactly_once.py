"""The Spark connector on the exactly-once layer, with a real SparkSession (2 cores, one
retry per task) against a real Liftbridge v1.9.0 node: batch reads with
``isolation=read_committed`` and the ``exactlyOnce`` sink (task retries, an aborted job,
a streaming query stopped and restarted mid-batch)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import (
    OPTIONS,
    copy_query_failing_while,
    create_stream,
    leader_killed_at,
    publish,
    read_all,
    start_spark,
)
from test_spark_write import flaky_rows

from liftbridge_client import AckPolicy, Client, Message
from liftbridge_client.exactly_once import UUID_HEADER, CommittedReader, ExactlyOncePublisher
from liftbridge_client.exactly_once.uuids import Flags, build_uuid_bytes, new_producer_id
from liftbridge_client.testing import Cluster, Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    yield from start_spark(tmp_path_factory.mktemp("spark"))


async def _committed(addresses: Sequence[str], stream: str) -> list[Message]:
    async with Client(addresses, options=OPTIONS) as client:
        reader = await CommittedReader.for_stream(client, stream, stop_at_latest=True)
        async with reader:
            return [m async for m in reader]


def read_committed(addresses: Sequence[str], stream: str) -> list[Message]:
    """The stream as the exactly-once layer's own reader sees it (not through Spark)."""
    return asyncio.run(_committed(addresses, stream))


def spark_values(spark: SparkSession, server: Deployment, stream: str, isolation: str) -> list[str]:
    df = (
        spark.read.format("liftbridge")
        .option("brokers", server.addresses[0])
        .option("stream", stream)
        .option("isolation", isolation)
        .option("minPartitions", "4")  # ignored by read_committed: state lives in the task
        .load()
    )
    return [row.v for row in df.selectExpr("cast(value AS string) AS v").collect()]


async def _produce_mixed(addresses: Sequence[str], stream: str) -> None:
    """On 2 partitions: committed messages, re-sent copies (same UUID), a committed
    transaction, a rolled-back one, one left open, and plain messages without a UUID."""
    async with Client(addresses, options=OPTIONS) as client:
        publisher = ExactlyOncePublisher(client, ack_policy=AckPolicy.LEADER)
        for p in (0, 1):
            await publisher.publish_committed(stream, b"c%d" % p, partition=p)
            await client.publish(stream, b"plain%d" % p, partition=p)
            await publisher.publish_uncommitted(stream, b"t%d" % p, partition=p)
        await publisher.write_ack_intents(publisher.build_ack_intents())
        # A producer retrying: the same UUID stored twice, read once.
        producer = new_producer_id()
        for clock in (10, 10, 11, 11):
            uuid = build_uuid_bytes(producer, clock, Flags.OUTSIDE_TXN)
            await client.publish(stream, b"r%d" % clock, partition=1, headers={UUID_HEADER: uuid})
        # Rolled back: the ACK at the last acknowledged clock (a writer's recovery).
        rolled = ExactlyOncePublisher(client, ack_policy=AckPolicy.LEADER)
        await rolled.publish_uncommitted(stream, b"first", partition=0)
        intents = rolled.build_ack_intents()
        await rolled.write_ack_intents(intents)
        await rolled.publish_uncommitted(stream, b"rolled-back", partition=0)
        await rolled.write_ack_intents(intents)
        # Open: never acknowledged.
        await ExactlyOncePublisher(client).publish_uncommitted(stream, b"open", partition=1)


def test_batch_read_committed_sees_each_committed_message_once(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    asyncio.run(_produce_mixed(liftbridge_server.addresses, name))

    expected = ["c0", "c1", "plain0", "plain1", "t0", "t1", "r10", "r11", "first"]
    committed = spark_values(spark, liftbridge_server, name, "read_committed")
    assert sorted(committed) == sorted(expected)
    # The same as the layer's own reader, and far from what a plain read returns.
    layer = read_committed(liftbridge_server.addresses, name)
    assert sorted(committed) == sorted(m.value.decode() for m in layer)
    uncommitted = spark_values(spark, liftbridge_server, name, "read_uncommitted")
    assert Counter(uncommitted)["r10"] == 2
    assert {"rolled-back", "open"} <= set(uncommitted)
    assert len(uncommitted) == 17  # 9 + 2 copies + rolled-back + open + 4 ACK messages


def eo_sink(df: Any, server: Deployment, stream: str, **options: str) -> Any:
    return (
        df.write.format("liftbridge")
        .option("brokers", server.addresses[0])
        .option("stream", stream)
        .option("exactlyOnce", "true")
        .options(**options)
        .mode("append")
    )


@pytest.mark.parametrize("producers", [1, 4])
def test_exactly_once_write_with_a_task_retry_commits_each_row_once(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    producers: int,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    flag = tmp_path / "fail"
    flag.touch()
    # Task 0 (rows 0-1199) fails at row 1100 on its first attempt, in its second chunk of
    # 1000 rows: after publishing the first chunk (rows 0-999).
    df = flaky_rows(spark, 2400, fail_at=1100, flag=flag)
    lanes = {"producersPerPartition": str(producers)}
    eo_sink(df, liftbridge_server, name, writeId=name, **lanes).save()

    stored = Counter(m.value for m in read_all(liftbridge_server.addresses, name, 2))
    # The ACK intents: one per producer (each task writes its keyless rows to one partition).
    assert stored.pop(b"") == 2 * producers
    assert sum(n - 1 for n in stored.values()) >= 1000  # the retry re-sent rows 0-999
    committed = [m.value for m in read_committed(liftbridge_server.addresses, name)]
    assert len(committed) == 2400
    assert set(committed) == {b"row-%d" % i for i in range(2400)}
    through_spark = spark_values(spark, liftbridge_server, name, "read_committed")
    assert sorted(through_spark) == sorted(v.decode() for v in committed)

    # The job run again with the same writeId: its copies are stored, and dropped. Its
    # commit finds the batch in the write's journal: it writes the recorded intents again
    # and a rollback for each of its own producers, instead of committing them.
    before = len(read_all(liftbridge_server.addresses, name, 2))
    flag.unlink()
    rerun = flaky_rows(spark, 2400, 1100, flag)
    eo_sink(rerun, liftbridge_server, name, writeId=name, **lanes).save()
    after = Counter(m.value for m in read_all(liftbridge_server.addresses, name, 2))
    assert after.total() == before + 2400 + 2 * producers + 2 * producers
    assert after[b""] == 3 * 2 * producers
    assert len(read_committed(liftbridge_server.addresses, name)) == 2400


def test_an_aborted_exactly_once_write_stays_invisible(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    from pyspark.sql.functions import col, concat, lit, when

    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    # Every attempt of task 1 (rows 1200-2399) fails at row 2300, in its second chunk of
    # 1000 rows (partition 99 does not exist): the job is aborted.
    df = spark.range(2400, numPartitions=2).select(
        concat(lit("row-"), col("id")).alias("value"),
        when(col("id") == 2300, lit(99)).cast("int").alias("partition"),
    )
    with pytest.raises(Exception, match="99"):
        eo_sink(df, liftbridge_server, name).save()
    stored = read_all(liftbridge_server.addresses, name, 2)
    # Each attempt of task 1 published its first chunk (the same UUIDs) before failing.
    assert Counter(m.value for m in stored)[b"row-1200"] == 2
    assert read_committed(liftbridge_server.addresses, name) == []


def test_streaming_query_restarted_mid_batch_commits_each_row_once(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    (src, src_subject), (dst, dst_subject) = stream_names("src"), stream_names("dst")
    create_stream(liftbridge_server.addresses, src_subject, src, partitions=2)
    create_stream(liftbridge_server.addresses, dst_subject, dst, partitions=2)
    publish(liftbridge_server.addresses, src, [(b"k", b"%d" % i, i % 2) for i in range(2400)])
    flag = tmp_path / "fail"
    flag.touch()
    start = copy_query_failing_while(
        spark,
        liftbridge_server.addresses[0],
        src,
        dst,
        checkpoint=tmp_path / "checkpoint",
        flag=flag,
        fail_at=1100,  # in the second chunk of 1000 rows: the first was published
        sink_option="exactlyOnce",
    )

    query = start()
    with pytest.raises(Exception, match="99"):
        query.processAllAvailable()
    query.stop()
    partial = len(read_all(liftbridge_server.addresses, dst, 2))
    assert partial >= 1000  # rows were stored, uncommitted
    assert read_committed(liftbridge_server.addresses, dst) == []

    flag.unlink()
    query = start()  # the same checkpoint: the batch runs again, with the same UUIDs
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(read_all(liftbridge_server.addresses, dst, 2)) > 2400 + 1000  # copies stored
    counts = Counter(m.value for m in read_committed(liftbridge_server.addresses, dst))
    assert set(counts) == {b"%d-%d" % (i % 2, i // 2) for i in range(2400)}
    assert sum(counts.values()) == 2400  # read-committed: each input row exactly once


def test_streaming_read_committed_carries_producer_states_across_batches_and_restarts(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    producer = new_producer_id()

    def resend(client: Client, clock: int) -> Any:
        uuid = build_uuid_bytes(producer, clock, Flags.OUTSIDE_TXN)
        return client.publish(name, b"r%d" % clock, partition=1, headers={UUID_HEADER: uuid})

    async def phase_one() -> list[Any]:
        async with Client(liftbridge_server.addresses, options=OPTIONS) as client:
            txn = ExactlyOncePublisher(client, ack_policy=AckPolicy.LEADER)
            for i in range(3):
                await txn.publish_uncommitted(name, b"t%d" % i, partition=0)
            await client.publish(name, b"plain", partition=0)
            await resend(client, 10)
            await resend(client, 10)
            return txn.build_ack_intents()  # written in phase two

    async def phase_two(intents: list[Any]) -> None:
        async with Client(liftbridge_server.addresses, options=OPTIONS) as client:
            txn = ExactlyOncePublisher(client, ack_policy=AckPolicy.LEADER)
            await txn.write_ack_intents(intents)  # commits a transaction of earlier batches
            await resend(client, 10)  # a late copy: the restored state drops it
            await resend(client, 11)

    def run_query() -> None:
        query = (
            spark.readStream.format("liftbridge")
            .option("brokers", liftbridge_server.addresses[0])
            .option("stream", name)
            .option("startingOffsets", "earliest")
            .option("isolation", "read_committed")
            .option("maxOffsetsPerTrigger", "2")  # transactions span micro-batches
            .load()
            .selectExpr("cast(value AS string) AS v")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    intents = asyncio.run(phase_one())
    run_query()
    first = sorted(r.v for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert first == ["plain", "r10"]  # the transaction is not committed yet
    asyncio.run(phase_two(intents))
    run_query()  # restarted from the checkpoint: the states come from the states stream
    got = sorted(r.v for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert got == ["plain", "r10", "r11", "t0", "t1", "t2"]
    assert sorted(got) == sorted(
        m.value.decode() for m in read_committed(liftbridge_server.addresses, name)
    )


def test_exactly_once_with_many_producers_survives_a_leader_kill_in_key_order(
    spark: SparkSession, liftbridge_cluster: Cluster, stream_names: StreamNames
) -> None:
    """Unpacked rows with keys, 8 producers per (task, partition), ack ALL on the 3-node
    cluster, the leader of partition 0 SIGKILLed mid-write: read committed yields each row
    once, and the rows of each key in the order they were written."""
    name, subject = stream_names()
    addresses = liftbridge_cluster.addresses
    create_stream(addresses, subject, name, partitions=2, replication_factor=3)
    rows = 30_000
    with leader_killed_at(liftbridge_cluster, name, 0, high_watermark=1000) as killed:
        df = spark.range(rows, numPartitions=2).selectExpr(
            "concat('k', cast(id % 40 AS string)) AS key", "concat('row-', id) AS value"
        )
        (
            df.write.format("liftbridge")
            .option("brokers", ",".join(addresses))  # the commit must reach a live node
            .option("stream", name)
            .option("exactlyOnce", "true")
            .option("producersPerPartition", "8")
            .option("ackPolicy", "all")
            .option("writeId", name)
            .mode("append")
            .save()
        )
        killed_mid_write = killed.is_set()
    assert killed_mid_write, "the write ended before the kill: make it longer"
    liftbridge_cluster.ensure_all_running()

    committed = read_committed(addresses, name)
    values = [m.value for m in committed]
    assert len(values) == rows
    assert set(values) == {b"row-%d" % i for i in range(rows)}
    # Each Spark task writes its ids in increasing order; a key's rows share one producer.
    by_key: dict[tuple[int, bytes], list[int]] = {}
    for m in committed:
        assert m.key is not None
        by_key.setdefault((m.partition, m.key), []).append(int(m.value[4:]))
    for ids in by_key.values():
        for task_ids in ([i for i in ids if i < rows // 2], [i for i in ids if i >= rows // 2]):
            assert task_ids == sorted(task_ids)
