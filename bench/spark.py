"""Spark connector throughput: rows per second per executor core, read and write, against
the plain client's subscribe and pipelined publish, on one fresh local node.

``python -m bench.spark [--rows N] [--cores C] [--out docs/spark-benchmarks.md]``. Spark runs
``local[C]`` on 127.0.0.1 with the UI off; every figure excludes the SparkSession start.
A run fails (exit 1) only when a count is wrong, never on the figures. ``--out`` writes (or
replaces) this benchmark's section of the page, between its markers; the page's other
section comes from ``python -m bench.spark_kafka`` (Spark's Kafka connector side by side).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    StopPosition,
    StreamConfig,
    Transport,
)
from liftbridge_client.spark._columns import batch_columns
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._options import SinkOptions, SourceOptions
from liftbridge_client.spark._read import RangePartition, read_range
from liftbridge_client.spark._runtime import run as run_async
from liftbridge_client.spark._write import publish_batches
from liftbridge_client.testing import LIFTBRIDGE_VERSION, SingleNode
from liftbridge_client.testing._config import default_log_level

OPTIONS = ClientOptions(transport=Transport.GRPC)
NATS_OPTIONS = ClientOptions(transport=Transport.NATS)
VALUE_SIZE = 256


@dataclass(frozen=True)
class Result:
    what: str
    rows: int
    seconds: float
    cores: int

    @property
    def per_core(self) -> float:
        return self.rows / self.seconds / self.cores


async def plain_publish(
    address: str, stream: str, rows: int, partitions: int, nats: str | None = None
) -> float:
    value = b"x" * VALUE_SIZE
    options = NATS_OPTIONS if nats else OPTIONS
    async with Client([address], nats_servers=[nats] if nats else None, options=options) as client:
        start = time.perf_counter()
        futures = [
            await client.send(stream, value, partition=i % partitions, ack_policy=AckPolicy.LEADER)
            for i in range(rows)
        ]
        await asyncio.gather(*futures)
        return time.perf_counter() - start


async def plain_subscribe(address: str, stream: str, partitions: int) -> tuple[int, float]:
    async with Client([address], options=OPTIONS) as client:
        start = time.perf_counter()
        count = 0
        for p in range(partitions):
            async with client.subscribe(stream, p, start_offset=0, stop=StopPosition.LATEST) as sub:
                async for _ in sub:
                    count += 1
        return count, time.perf_counter() - start


async def stored(address: str, stream: str, partitions: int) -> int:
    async with Client([address], options=OPTIONS) as client:
        infos = [await client.fetch_partition_metadata(stream, p) for p in range(partitions)]
        return sum(i.high_watermark + 1 for i in infos)


async def create(address: str, name: str, partitions: int) -> None:
    async with Client([address], options=OPTIONS) as client:
        await client.create_stream(f"bench.spark.{name}", name, StreamConfig(partitions=partitions))


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def session(cores: int, tmp: Path) -> Any:
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[var] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from liftbridge_client.spark import register

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={tmp / 'derby'}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def run(rows: int, cores: int) -> list[Result]:
    partitions = cores
    results: list[Result] = []
    # One event loop for the whole run, the connector's (grpc.aio stays bound to the first
    # loop it runs on).
    with tempfile.TemporaryDirectory() as tmp, SingleNode() as node:
        address = node.addresses[0]
        pid = os.getpid()
        plain, plain_nats = f"plain-{pid}", f"plain-nats-{pid}"
        spark_out, spark_nats = f"spark-{pid}", f"spark-nats-{pid}"
        for name in (plain, plain_nats, spark_out, spark_nats):
            run_async(create(address, name, partitions))

        seconds = run_async(plain_publish(address, plain, rows, partitions))
        results.append(Result("publish: client send() pipelined, gRPC", rows, seconds, 1))
        seconds = run_async(plain_publish(address, plain_nats, rows, partitions, node.nats_url))
        results.append(Result("publish: client send() pipelined, NATS", rows, seconds, 1))
        count, seconds = run_async(plain_subscribe(address, plain, partitions))
        assert count == rows, f"plain subscribe read {count} of {rows}"
        results.append(Result("subscribe: client, partitions one after another", count, seconds, 1))

        # The connector's executor-side code in this process, without Spark around it.
        opts = SourceOptions.parse({"brokers": address, "stream": plain}, streaming=False)
        start = time.perf_counter()
        count = sum(
            batch.num_rows
            for p in range(partitions)
            for batch in read_range(RangePartition(PartitionRange(plain, p, 0, rows), opts))
        )
        seconds = time.perf_counter() - start
        assert count == rows, f"read_range read {count} of {rows}"
        results.append(Result("connector read_range() in-process, no Spark", count, seconds, 1))
        direct = f"direct-{pid}"
        run_async(create(address, direct, partitions))
        sink = SinkOptions.parse({"brokers": address, "stream": direct})
        # The rows as Spark's Arrow writer hands them over: batches of 10,000.
        batches = [
            pa.record_batch(
                [
                    pa.array(["x" * VALUE_SIZE] * min(10_000, rows - at)),
                    pa.array([i % partitions for i in range(at, min(at + 10_000, rows))]),
                ],
                names=["value", "partition"],
            )
            for at in range(0, rows, 10_000)
        ]
        columns = {"value": 0, "partition": 1}
        start = time.perf_counter()
        publish_batches((batch_columns(b, columns, direct) for b in batches), sink)
        seconds = time.perf_counter() - start
        written = run_async(stored(address, direct, partitions))
        assert written == rows, f"publish_batches wrote {written} of {rows}"
        results.append(
            Result("connector publish_batches() in-process, no Spark, gRPC", rows, seconds, 1)
        )

        spark = session(cores, Path(tmp))
        source = spark.read.format("liftbridge").option("brokers", address).option("stream", plain)
        source.load().count()  # warm-up: Python workers and imports
        got: list[int] = []
        seconds = timed(lambda: got.append(source.load().count()))
        assert got == [rows], f"Spark read {got} of {rows}"
        results.append(Result(f"Spark batch read, count() (local[{cores}])", rows, seconds, cores))

        df = (
            spark.range(rows, numPartitions=cores)
            .selectExpr(
                f"repeat('x', {VALUE_SIZE}) AS value",
                "cast(id % " + str(partitions) + " AS int) AS partition",
            )
            .cache()
        )
        df.count()
        writer = (
            df.write.format("liftbridge").option("brokers", address).option("stream", spark_out)
        )
        seconds = timed(lambda: writer.mode("append").save())
        written = run_async(stored(address, spark_out, partitions))
        assert written == rows, f"Spark wrote {written} of {rows}"
        results.append(Result(f"Spark batch write, gRPC (local[{cores}])", rows, seconds, cores))
        writer = writer.option("stream", spark_nats).option("natsServers", node.nats_url)
        seconds = timed(lambda: writer.mode("append").save())
        written = run_async(stored(address, spark_nats, partitions))
        assert written == rows, f"Spark wrote {written} of {rows} over NATS"
        results.append(Result(f"Spark batch write, NATS (local[{cores}])", rows, seconds, cores))

        # The exactly-once layer: read-committed reads (plain messages: each committed on
        # its own, so this is the Sequencer's cost) and the exactlyOnce sink.
        committed = source.option("isolation", "read_committed")
        got.clear()
        seconds = timed(lambda: got.append(committed.load().count()))
        assert got == [rows], f"Spark read_committed read {got} of {rows}"
        results.append(
            Result(f"Spark batch read, read_committed (local[{cores}])", rows, seconds, cores)
        )
        spark_eo = f"spark-eo-{pid}"
        run_async(create(address, spark_eo, partitions))
        writer = writer.option("stream", spark_eo).option("exactlyOnce", "true")
        seconds = timed(lambda: writer.mode("append").save())
        counted: list[int] = []
        eo_read = source.option("stream", spark_eo).option("isolation", "read_committed")
        counted.append(eo_read.load().count())
        assert counted == [rows], f"Spark exactlyOnce wrote {counted} of {rows} read-committed"
        results.append(
            Result(f"Spark batch write, exactlyOnce, NATS (local[{cores}])", rows, seconds, cores)
        )
        spark.stop()
    return results


def report(results: list[Result], rows: int, cores: int) -> str:
    try:
        git = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        git = "?"
    import pyspark

    lines = [
        BLOCK_START,
        "## The connector against the plain client",
        "",
        "<!-- Generated by `python -m bench.spark` (bench/spark.py). Do not edit by hand. -->",
        "",
        f"Run {datetime.now(UTC).isoformat(timespec='seconds')}: {rows} rows of {VALUE_SIZE} B "
        f"over {cores} partitions, one fresh Liftbridge {LIFTBRIDGE_VERSION} node (embedded NATS, "
        f"127.0.0.1, log level {default_log_level()}), pyspark {pyspark.__version__} "
        f"local[{cores}], Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs shared with other work (load "
        f"average {os.getloadavg()[0]:.1f} at the end), git {git}.",
        "",
        "Every publish waits for its ack (ack policy leader). "
        "Rows/s per core divides by the Spark cores (the plain client runs on one event loop). "
        "Spark figures are a job's wall time after a warm-up job, without the session start; "
        "they include task scheduling, the Python workers and Arrow conversion.",
        "",
        "| what | rows | seconds | rows/s | rows/s per core |",
        "|---|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {r.what} | {r.rows} | {r.seconds:.2f} | {r.rows / r.seconds:,.0f} | {r.per_core:,.0f} |"
        for r in results
    )
    lines += ["", BLOCK_END]
    return "\n".join(lines)


BLOCK_START = (
    "<!-- spark-connector:start (python -m bench.spark --out docs/spark-benchmarks.md) -->"
)
BLOCK_END = "<!-- spark-connector:end -->"


def splice(doc: str, block: str) -> str:
    """``doc`` with this benchmark's section replaced by ``block`` (appended if absent)."""
    if BLOCK_START in doc and BLOCK_END in doc:
        head, rest = doc.split(BLOCK_START, 1)
        return head + block + rest.split(BLOCK_END, 1)[1]
    return doc.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown page here")
    args = parser.parse_args(argv)
    try:
        results = run(args.rows, args.cores)
    except AssertionError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    text = report(results, args.rows, args.cores)
    print(text)
    if args.out is not None:
        page = args.out.read_text() if args.out.exists() else "# Spark connector benchmarks\n"
        args.out.write_text(splice(page, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
