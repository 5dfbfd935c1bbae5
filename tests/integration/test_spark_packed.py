"""Packed exactly-once writes (option ``packRows``): many rows per Liftbridge message, one
UUID per pack. Every guarantee of the exactly-once sink must hold as without packing: a
task retry, a failure upstream of the writer, a rerun with the same writeId, and a leader
kill mid-write on a 3-node cluster; the Spark source unpacks the rows, read committed or
not. Real SparkSession, real Liftbridge v1.9.0."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import create_stream, leader_killed_at, read_all, start_spark
from test_spark_write import flaky_rows

from liftbridge_client.packing import PACKED_HEADER, unpack
from liftbridge_client.testing import Cluster, Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    yield from start_spark(tmp_path_factory.mktemp("spark"))


def spark_rows(
    spark: SparkSession, addresses: Sequence[str], stream: str, isolation: str
) -> Counter[str]:
    df = (
        spark.read.format("liftbridge")
        .option("brokers", ",".join(addresses))
        .option("stream", stream)
        .option("isolation", isolation)
        .load()
    )
    return Counter(row.v for row in df.selectExpr("cast(value AS string) AS v").collect())


def eo_write(df: Any, addresses: Sequence[str], stream: str, **options: str) -> None:
    (
        df.write.format("liftbridge")
        # Every node as a seed: the driver's commit must connect whichever node was killed.
        .option("brokers", ",".join(addresses))
        .option("stream", stream)
        .option("exactlyOnce", "true")
        .options(**options)
        .mode("append")
        .save()
    )


@pytest.mark.parametrize("producers", [1, 3])
def test_packed_write_with_a_task_retry_commits_each_row_once(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    producers: int,
) -> None:
    name, subject = stream_names()
    addresses = liftbridge_server.addresses
    create_stream(addresses, subject, name, partitions=2)
    flag = tmp_path / "fail"
    flag.touch()
    # Task 0 (rows 0-2999, all to partition 0) fails at row 2500 on its first attempt (its
    # partition 99 does not exist), after 8 packs of 300 rows were published.
    df = flaky_rows(spark, 6000, fail_at=2500, flag=flag)
    lanes = {"producersPerPartition": str(producers)}  # packs per producer
    eo_write(df, addresses, name, writeId=name, packRows="300", **lanes)

    stored = read_all(addresses, name, 2)
    packed = [m for m in stored if PACKED_HEADER in m.headers]
    assert packed, "nothing was packed"
    assert all(len(unpack(m.value)) <= 300 for m in packed)
    assert len(stored) < 6000 // 100  # far fewer messages than rows
    expected = Counter(f"row-{i}" for i in range(6000))
    assert spark_rows(spark, addresses, name, "read_committed") == expected
    # Read uncommitted: whatever packs the failed attempt got out (under producers of its
    # own, never committed) besides every row, and the ACK intents (empty values, one per
    # producer) are rows too.
    uncommitted = spark_rows(spark, addresses, name, "read_uncommitted")
    assert uncommitted.pop("") == 2 * producers  # an ACK intent per producer
    assert set(uncommitted) == set(expected)
    assert uncommitted.total() >= 6000

    flag.unlink()  # the job again, same writeId: its packs are copies, dropped
    rerun = flaky_rows(spark, 6000, 2500, flag)
    eo_write(rerun, addresses, name, writeId=name, packRows="300", **lanes)
    assert spark_rows(spark, addresses, name, "read_committed") == expected


def test_packed_rows_keep_keys_headers_and_their_message_s_offset(
    spark: SparkSession, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    addresses = liftbridge_server.addresses
    create_stream(addresses, subject, name)
    df = spark.range(50, numPartitions=1).selectExpr(
        "cast(id AS string) AS value",
        "CASE WHEN id % 2 = 0 THEN cast(concat('k', id) AS binary) END AS key",
        "array(named_struct('key', 'n', 'value', cast(cast(id AS string) AS binary))) AS headers",
    )
    eo_write(df, addresses, name, packRows="20")
    rows = (
        spark.read.format("liftbridge")
        .option("brokers", addresses[0])
        .option("stream", name)
        .option("isolation", "read_committed")
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    assert sorted(int(r.value) for r in rows) == list(range(50))
    for r in rows:
        i = int(r.value)
        assert r.key == (b"k%d" % i if i % 2 == 0 else None)
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("n", b"%d" % i)]
    # 50 rows in packs of 20: three messages (offsets 0-2), then the ACK intent.
    assert Counter(r.offset for r in rows) == {0: 20, 1: 20, 2: 10}


@pytest.fixture
def cluster_stream(liftbridge_cluster: Cluster, stream_names: StreamNames) -> tuple[str, str]:
    return stream_names()


def test_packed_write_survives_a_leader_kill(
    spark: SparkSession, liftbridge_cluster: Cluster, cluster_stream: tuple[str, str]
) -> None:
    """A leader SIGKILLed mid-write on the 3-node cluster: the publishers retry through
    the failover (the same UUIDs), and read committed yields each row once."""
    name, subject = cluster_stream
    addresses = liftbridge_cluster.addresses
    create_stream(addresses, subject, name, partitions=2, replication_factor=3)
    rows = 400_000
    # The leader of partition 0 killed as soon as 20 packs are stored there.
    with leader_killed_at(liftbridge_cluster, name, 0, high_watermark=20) as killed:
        df = spark.range(rows, numPartitions=2).selectExpr(
            "concat('row-', id) AS value", "cast(id % 2 AS int) AS partition"
        )
        eo_write(df, addresses, name, writeId=name, packRows="200", ackPolicy="all")
        killed_mid_write = killed.is_set()
    assert killed_mid_write, "the write ended before the kill: make it longer"
    liftbridge_cluster.ensure_all_running()
    got = spark_rows(spark, addresses, name, "read_committed")
    assert got.total() == rows
    assert set(got) == {f"row-{i}" for i in range(rows)}


@pytest.mark.parametrize(
    ("pack_rows", "producers", "shuffle", "rows", "arrow_batch"),
    [
        ("64", "1", False, 20_000, "500"),
        ("16", "3", False, 20_000, "500"),
        # 500-row Arrow batches would cut it on a 50-row pack boundary
        ("50", "1", True, 32_000, "137"),
    ],
)
def test_a_pack_cut_short_by_an_upstream_failure_loses_no_row(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
    pack_rows: str,
    producers: str,
    shuffle: bool,
    rows: int,
    arrow_batch: str,
) -> None:
    """Issue 29: a UDF raising on the first attempt of task 1 at its 7,500th row ends the
    writer's input there (not an error): the attempt published its partial last pack,
    and the retry's full pack with the same first row must still deliver the rest.
    bce26d0 lost 40 rows here (ids 17000-17039 with 500-row Arrow batches), and again
    on a rerun."""
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    name, subject = stream_names()
    addresses = liftbridge_server.addresses
    create_stream(addresses, subject, name)
    flag = tmp_path / "fail"
    flag.touch()
    flag_path = str(flag)

    seen: Counter[int] = Counter()  # rows per task attempt, in each Python worker

    def check(i: int) -> int:
        # At the 7,500th row the first attempt of Spark partition 1 sees.
        context = TaskContext.get()
        if context is None or context.partitionId() != 1 or context.attemptNumber() != 0:
            return i
        seen[context.taskAttemptId()] += 1
        if seen[context.taskAttemptId()] == 7_500 and Path(flag_path).exists():
            raise RuntimeError(f"injected UDF failure at row {i}")
        return i

    failing = udf(lambda i: check(i), "long")  # noqa: PLW0108
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = str(spark.conf.get(key))
    spark.conf.set(key, arrow_batch)
    try:
        for _ in range(2):  # the job, then a rerun with the same writeId
            df = spark.range(0, rows, 1, 2)
            if shuffle:
                df = df.repartition(4)
            df = df.select(failing(col("id")).alias("id")).selectExpr("cast(id AS string) AS value")
            eo_write(
                df,
                addresses,
                name,
                writeId=name,
                packRows=pack_rows,
                producersPerPartition=producers,
            )
            counts = spark_rows(spark, addresses, name, "read_committed")
            expected = Counter(str(i) for i in range(rows))
            assert counts == expected, sorted(set(expected) - set(counts), key=int)[:40]
    finally:
        spark.conf.set(key, before)
    # The failed attempt did publish a cut-short pack (else this proves nothing): two
    # stored packs start on the same row and end on different ones.
    ends: dict[bytes, set[bytes]] = {}
    for m in read_all(addresses, name):
        if PACKED_HEADER in m.headers:
            packed = unpack(m.value)
            ends.setdefault(packed[0].value, set()).add(packed[-1].value)
    assert any(len(last) > 1 for last in ends.values()), "no pack was cut short"
