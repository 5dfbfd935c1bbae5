"""Streaming ``isolation=read_committed`` at scale, with a real SparkSession (2 cores, one
retry per task) against a real Liftbridge v1.9.0 node: hundreds of producers, transactions
that span micro-batches, restarts from the checkpoint, a failing UDF. The producer states
travel through the states stream (tasks write and read them), so the offsets Spark
checkpoints stay the same size whatever the number of producers, and states of producers
idle beyond ``producerIdleHorizonMs`` leave the snapshots."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_support import OPTIONS, create_stream, start_spark

from liftbridge_client import AckPolicy, Client
from liftbridge_client.exactly_once import UUID_HEADER
from liftbridge_client.exactly_once.sequencer import PartitionRef
from liftbridge_client.exactly_once.uuids import Flags, build_uuid_bytes, unix_ns_to_clock
from liftbridge_client.spark._committed_stream import STATES_KEY, decode_states
from liftbridge_client.testing import Deployment, StreamNames

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PARTITIONS = 4
TICK = 16  # one clock step (clocks carry 4 sequence bits below the 100 ns count)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    yield from start_spark(tmp_path_factory.mktemp("spark"))


class Producers:
    """Producers writing transactions with UUID headers, as ExactlyOncePublisher would,
    at clocks this test chooses (so idleness is set by the clocks, not by waiting)."""

    def __init__(self, stream: str, base_clock: int) -> None:
        self.stream = stream
        self.base = base_clock
        self.clock: dict[int, int] = {}
        self.last_ack: dict[int, int] = {}
        self.open: dict[int, list[bytes]] = {}
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.batch: list[tuple[int, bytes, bytes]] = []  # partition, uuid, value
        self.sent: list[tuple[int, bytes, bytes]] = []

    @staticmethod
    def pid(p: int) -> bytes:
        return (0xAB0000000000 + p).to_bytes(6, "big")

    def _tick(self, p: int) -> int:
        clock = self.clock.get(p, self.base) + TICK
        self.clock[p] = clock
        self.last_ack.setdefault(p, clock - 1)
        return clock

    def write(self, p: int, value: bytes) -> None:
        """A CONTINUE_TXN message of ``p``'s open transaction."""
        clock = self._tick(p)
        self._add(p, build_uuid_bytes(self.pid(p), clock, Flags.CONTINUE_TXN), value)
        self.open.setdefault(p, []).append(value)

    def commit(self, p: int) -> None:
        clock = self._tick(p)
        self.last_ack[p] = clock
        self._add(p, build_uuid_bytes(self.pid(p), clock, Flags.ACK_TXN), b"")
        self.committed += self.open.pop(p, [])

    def single(self, p: int, value: bytes) -> None:
        """An OUTSIDE_TXN message: committed on its own."""
        clock = self._tick(p)
        self.last_ack[p] = clock
        self._add(p, build_uuid_bytes(self.pid(p), clock, Flags.OUTSIDE_TXN), value)
        self.committed.append(value)

    def abort(self, p: int) -> None:
        """An ACK_TXN at the last acknowledged clock: the open span rolls back."""
        self._add(p, build_uuid_bytes(self.pid(p), self.last_ack[p], Flags.ACK_TXN), b"")
        self.aborted += self.open.pop(p, [])

    def resend(self, index: int) -> None:
        """A copy of an earlier message (a publisher's retry): same UUID, same value."""
        self.batch.append(self.sent[index])

    def jump(self, p: int, ticks: int) -> None:
        self.clock[p] = self.clock.get(p, self.base) + ticks

    def _add(self, p: int, uuid: bytes, value: bytes) -> None:
        self.batch.append((p % PARTITIONS, uuid, value))

    def flush(self, addresses: Sequence[str]) -> None:
        batch, self.batch = self.batch, []
        self.sent += batch

        async def go() -> None:
            async with Client(addresses, options=OPTIONS) as client:
                futures = [
                    await client.send(
                        self.stream,
                        value,
                        partition=part,
                        headers={UUID_HEADER: uuid},
                        ack_policy=AckPolicy.ALL,
                    )
                    for part, uuid, value in batch
                ]
                await asyncio.gather(*futures)

        asyncio.run(go())


def run_query(
    spark: SparkSession,
    broker: str,
    stream: str,
    states: str,
    tmp: Path,
    *,
    per_trigger: int,
    horizon_ms: int | None = None,
    transform: Any = None,
    stats: Path | None = None,
) -> None:
    df = (
        spark.readStream.format("liftbridge")
        .option("brokers", broker)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .option("isolation", "read_committed")
        .option("committedStatesStream", states)
        .option("maxOffsetsPerTrigger", str(per_trigger))
    )
    if horizon_ms is not None:
        df = df.option("producerIdleHorizonMs", str(horizon_ms))
    if stats is not None:
        df = df.option("taskStatsFile", str(stats))
    rows = df.load().selectExpr("cast(value AS string) AS v")
    if transform is not None:
        rows = transform(rows)
    query = (
        rows.writeStream.format("parquet")
        .option("path", str(tmp / "out"))
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def output(spark: SparkSession, tmp: Path) -> Counter[str]:
    return Counter(r.v for r in spark.read.parquet(str(tmp / "out")).collect())


def offset_files(tmp: Path) -> dict[int, bytes]:
    folder = tmp / "checkpoint" / "offsets"
    return {int(f.name): f.read_bytes() for f in folder.iterdir() if f.name.isdigit()}


def run_id(tmp: Path) -> str:
    last = offset_files(tmp)
    text = last[max(last)].decode().splitlines()[-1]  # the source's offsets: the last line
    plan = json.loads(json.loads(text)[STATES_KEY])
    return str(plan["run"])


def latest_snapshots(addresses: Sequence[str], states: str, run: str) -> dict[int, int]:
    """Per partition: how many producer states the newest snapshot of ``run`` holds."""

    async def go() -> dict[int, tuple[int, int]]:
        newest: dict[int, tuple[int, int]] = {}
        async with Client(addresses, options=OPTIONS) as client:
            info = await client.fetch_partition_metadata(states, 0)
            async with client.subscribe(
                states, 0, start_offset=0, stop_offset=info.newest_offset
            ) as sub:
                async for m in sub:
                    key_run, _, partition, offset = json.loads(m.key)
                    if key_run != run:
                        continue
                    count = len(decode_states(PartitionRef("s", partition), [m.value]))
                    if partition not in newest or offset >= newest[partition][0]:
                        newest[partition] = (offset, count)
        return newest

    return {p: count for p, (_, count) in asyncio.run(go()).items()}


def test_hundreds_of_producers_exactly_once_with_bounded_offsets_and_pruned_states(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    addresses = liftbridge_server.addresses
    (name, subject), (states, _) = stream_names(), stream_names("states")
    create_stream(addresses, subject, name, partitions=PARTITIONS)
    hour = 3600 * 10_000_000 * TICK  # an hour of clock ticks (100 ns each)
    work = Producers(name, unix_ns_to_clock(time.time_ns()))
    first = range(240)  # 240 producers, 60 per partition
    for p in first:  # one committed transaction, one rolled back, one left open
        for i in range(3):
            work.write(p, b"a%d-c%d" % (p, i))
        work.commit(p)
    for p in first:
        work.single(p, b"a%d-s" % p)
    for p in first:
        for i in range(2):
            work.write(p, b"a%d-x%d" % (p, i))
        work.abort(p)
    for p in first:
        for i in range(3):
            work.write(p, b"a%d-o%d" % (p, i))
    work.flush(addresses)

    # Batches of ~600 offsets: transactions interleave, so most span micro-batches.
    query: dict[str, Any] = {"per_trigger": 600, "horizon_ms": 3600 * 1000}
    run_query(spark, addresses[0], name, states, tmp_path, **query)
    got = output(spark, tmp_path)
    assert set(got) == {v.decode() for v in work.committed}
    assert set(got.values()) == {1}
    phase_one = offset_files(tmp_path)
    assert len(phase_one) >= 4  # several micro-batches
    run = run_id(tmp_path)
    assert sum(latest_snapshots(addresses, states, run).values()) == 240

    # Phase two, read by the query restarted from its checkpoint: the open transactions
    # commit, late copies of acknowledged messages arrive (the restored states drop them),
    # then 240 new producers write two hours later; the first ones go idle and, beyond the
    # one-hour horizon, leave the snapshots.
    for p in first:
        work.commit(p)
    for index in range(0, 240 * 4, 4):  # copies of first-transaction messages
        work.resend(index)
    for index in range(240 * 4, 240 * 5, 2):  # copies of OUTSIDE_TXN (committed) ones
        work.resend(index)
    second = range(1000, 1240)
    for p in second:
        work.jump(p, 2 * hour)
        for i in range(2):
            work.write(p, b"b%d-c%d" % (p, i))
        work.commit(p)
    work.flush(addresses)
    run_query(spark, addresses[0], name, states, tmp_path, **query)
    got = output(spark, tmp_path)
    assert Counter(got) == Counter(v.decode() for v in work.committed)  # each exactly once
    assert not set(got) & {v.decode() for v in work.aborted}
    both = offset_files(tmp_path)
    assert len(both) > len(phase_one)
    # The offsets (what Spark checkpoints) do not grow with producers: a few hundred bytes
    # for 240 and then 480 producers (inline states took about 100 bytes per producer).
    sizes = [len(text.splitlines()[-1]) for text in both.values()]  # the source's line
    assert max(sizes) < 600, sizes
    assert max(sizes) - min(sizes) < 40, sizes
    # The snapshots hold only the producers active within the horizon: the second 240.
    assert latest_snapshots(addresses, states, run) == dict.fromkeys(range(PARTITIONS), 60)


def test_transactions_spanning_micro_batches_are_read_again_only_back_to_their_start(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    """Bytes read per byte stored, counted by the tasks (``taskStatsFile``): at most 1.2.
    Ten producers per partition interleave their transactions, so most span a micro-batch
    boundary and the task after it replays their start; one producer per partition opened
    a transaction at the first offsets and never ends it (it died). Before, every
    micro-batch re-read from that transaction's start: about 3x the bytes stored here,
    and growing with the stream."""
    addresses = liftbridge_server.addresses
    (name, subject), (states, _) = stream_names(), stream_names("states")
    create_stream(addresses, subject, name, partitions=PARTITIONS)
    work = Producers(name, unix_ns_to_clock(time.time_ns()))
    for p in range(2000, 2000 + PARTITIONS):
        work.write(p, b"dead%d" % p)
    live = range(10 * PARTITIONS)
    for t in range(50):
        for i in range(4):
            for p in live:
                work.write(p, b"v%d-%d-%d" % (p, t, i))
        for p in live:
            if (p + t) % 9 == 0:
                work.abort(p)
            else:
                work.commit(p)
    work.flush(addresses)
    stored = len(work.sent)

    stats = tmp_path / "stats.jsonl"
    run_query(spark, addresses[0], name, states, tmp_path, per_trigger=2000, stats=stats)
    got = output(spark, tmp_path)
    assert Counter(got) == Counter(v.decode() for v in work.committed)
    assert len(offset_files(tmp_path)) >= 5  # micro-batches
    tasks = [json.loads(line) for line in stats.read_text().splitlines()]
    assert {t["isolation"] for t in tasks} == {"read_committed"}
    assert sum(t["messages"] for t in tasks) == stored  # each offset in one range
    assert sum(t["reread_messages"] for t in tasks) > 0  # boundaries were crossed
    ranged = sum(t["bytes"] for t in tasks)
    read = ranged + sum(t["reread_bytes"] for t in tasks)
    assert read / ranged <= 1.2, (read, ranged, tasks)


def test_udf_failure_retry_and_a_failed_query_restarted_read_each_committed_row_once(
    spark: SparkSession,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    addresses = liftbridge_server.addresses
    (name, subject), (states, _) = stream_names(), stream_names("states")
    create_stream(addresses, subject, name, partitions=PARTITIONS)
    work = Producers(name, unix_ns_to_clock(time.time_ns()))
    for round_ in range(4):  # 200 producers; transactions interleave across batches
        for p in range(200):
            work.write(p, b"p%d-r%d-0" % (p, round_))
            work.write(p, b"p%d-r%d-1" % (p, round_))
        for p in range(200):
            if (p + round_) % 5 == 0:
                work.abort(p)
            else:
                work.commit(p)
    work.flush(addresses)

    flaky, broken = tmp_path / "flaky", tmp_path / "broken"
    flaky_path, broken_path = str(flaky), str(broken)

    def check(v: str) -> str:
        attempt = TaskContext.get().attemptNumber()  # type: ignore[union-attr]
        if v == "p7-r1-1" and attempt == 0 and Path(flaky_path).exists():
            raise RuntimeError("flaky UDF: first attempt fails")
        if v == "p13-r3-0" and Path(broken_path).exists():
            raise RuntimeError("broken UDF: every attempt fails")
        return v

    checked = udf(lambda v: check(v), "string")  # noqa: PLW0108

    def transform(df: Any) -> Any:
        return df.select(checked(col("v")).alias("v"))

    flaky.touch()
    broken.touch()
    with pytest.raises(Exception, match="every attempt fails"):
        run_query(spark, addresses[0], name, states, tmp_path, per_trigger=500, transform=transform)
    partial = output(spark, tmp_path) if (tmp_path / "out" / "_spark_metadata").exists() else {}
    assert "p7-r1-1" in partial  # the flaky batch committed after its retry
    assert set(partial.values()) <= {1}

    broken.unlink()  # restarted from the checkpoint: the failed batch runs again
    run_query(spark, addresses[0], name, states, tmp_path, per_trigger=500, transform=transform)
    got = output(spark, tmp_path)
    assert Counter(got) == Counter(v.decode() for v in work.committed)
    assert len(got) == len(work.committed) == 200 * 4 * 2 * 4 // 5
