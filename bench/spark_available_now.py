"""Where a Trigger.AvailableNow query's time goes, against the floor of any Python source.

``python -m bench.spark_available_now [--rows N] [--reps R]`` (never part of ``make
test``). One fresh Liftbridge node of the harness, one local[2] SparkSession (UI off,
127.0.0.1). Interleaved, ``reps`` times, to parquet:

- ``batch``: ``spark.read.format("liftbridge")`` of the stream;
- ``available_now``: the same data through ``readStream`` with ``Trigger.AvailableNow``;
- ``floor_batch`` / ``floor_available_now``: the same two queries on a trivial Python data
  source (no IO: one task builds ``rows`` rows of the liftbridge source's columns in
  Arrow batches from memory), so what a Python
  streaming source costs Spark itself (its source process, its planning) shows apart from
  what this connector adds.

Printed per query: wall seconds, the CPU seconds of the Spark side (the driver JVM and
every Python process under it, as bench.spark_kafka counts it), and for streaming queries
Spark's progress durations (summed over the query's micro-batches). The difference
``available_now - batch`` against ``floor_available_now - floor_batch`` is the overhead
this connector adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (  # pyspark 4.3+
    ReadAllAvailable,
    SupportsTriggerAvailableNow,
)

# Nothing of liftbridge_client at module level: Spark's workers import this module for
# the floor source, which must not pay for this project's imports.
from bench.proctree import TreeCpuSampler

FLOOR_SCHEMA = "key binary, value binary, partition int, offset long, timestamp timestamp"
FLOOR_BATCH = 4096  # rows per Arrow batch, as the liftbridge source hands Spark


def _floor_batches(rows: int, partitions: int, index: int) -> Iterator[Any]:
    """Partition ``index``'s share of ``rows`` rows, in the liftbridge source's columns
    (keys ``key-<n>``, 256-byte values), as Arrow batches built from memory."""
    import pyarrow as pa

    share = range(index, rows, partitions)
    value = b"x" * 256
    for lo in range(0, len(share), FLOOR_BATCH):
        ids = share[lo : lo + FLOOR_BATCH]
        n = len(ids)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([b"key-%d" % i for i in ids], pa.binary()),
                pa.array([value] * n, pa.binary()),
                pa.array([index] * n, pa.int32()),
                pa.array(range(lo, lo + n), pa.int64()),
                pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            ],
            names=["key", "value", "partition", "offset", "timestamp"],
        )


class _FloorReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int) -> None:
        self.rows = rows
        self.count = partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _floor_batches(self.rows, self.count, partition.value)


class _FloorStreamReader(DataSourceStreamReader):
    """One micro-batch of ``rows`` rows, then nothing."""

    def __init__(self, rows: int, partitions: int) -> None:
        self.rows = rows
        self.count = partitions

    def initialOffset(self) -> dict[str, int]:
        return {"o": 0}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        return {"o": 1}

    def getDefaultReadLimit(self) -> Any:
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: Any, end: Any) -> list[InputPartition]:
        if start["o"] >= end["o"]:
            return []
        return [InputPartition(i) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _floor_batches(self.rows, self.count, partition.value)


SupportsTriggerAvailableNow.register(_FloorStreamReader)


class FloorSource(DataSource):
    """A Python data source with no IO, in the liftbridge source's columns: the floor of
    any Python source (options ``rows``, ``partitions``, default 1)."""

    @classmethod
    def name(cls) -> str:
        return "floor"

    def schema(self) -> str:
        return FLOOR_SCHEMA

    def _args(self) -> tuple[int, int]:
        return int(self.options["rows"]), int(self.options.get("partitions", "1"))

    def reader(self, schema: Any) -> DataSourceReader:
        return _FloorReader(*self._args())

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _FloorStreamReader(*self._args())


async def _publish(address: str, stream: str, rows: int) -> None:
    from liftbridge_client import Client

    async with Client([address]) as client:
        await client.create_stream(stream, stream)
        value = b"v" * 256
        pending = []
        for i in range(rows):
            pending.append(await client.send(stream, value, key=b"%d" % i))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_available_now")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="batch,available_now,floor_batch,floor_available_now")
    args = parser.parse_args(argv)
    from bench.spark import session  # imports liftbridge_client: not at module level
    from liftbridge_client.testing import SingleNode

    paths = args.only.split(",")
    times: dict[str, list[float]] = {p: [] for p in paths}
    cpus: dict[str, list[float]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory(prefix="bench-an-") as tmp, SingleNode() as node:
        spark = session(2, Path(tmp))  # bench.spark's: local, UI off, 127.0.0.1
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.dataSource.register(FloorSource)
        server = node.node.process.pid
        assert server is not None  # started by the with
        stream = f"an-{os.getpid()}"
        asyncio.run(_publish(node.address, stream, args.rows))
        count = 0

        def source(streaming: bool, floor: bool) -> Any:
            reader = spark.readStream if streaming else spark.read
            if floor:
                return reader.format("floor").option("rows", str(args.rows)).load()
            return (
                reader.format("liftbridge")
                .option("brokers", node.address)
                .option("stream", stream)
                .option("startingOffsets", "earliest")
                .load()
                .select("value", "offset")
            )

        for rep in range(args.reps):
            order = paths if rep % 2 == 0 else list(reversed(paths))
            for path in order:
                count += 1
                out = Path(tmp, f"out-{count}")
                floor = path.startswith("floor_")
                progress: dict[str, float] = {}
                sampler = TreeCpuSampler(os.getpid(), [server]).start()
                t0 = time.monotonic()
                if path.endswith("available_now"):
                    query = (
                        source(True, floor)
                        .writeStream.format("parquet")
                        .option("path", str(out))
                        .option("checkpointLocation", str(Path(tmp, f"cp-{count}")))
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                    for p in query.recentProgress:
                        for key, ms in p["durationMs"].items():
                            progress[key] = progress.get(key, 0) + ms
                else:
                    source(False, floor).write.parquet(str(out))
                seconds = time.monotonic() - t0
                cpu = sampler.stop()
                got = spark.read.parquet(str(out)).count()
                times[path].append(seconds)
                cpus[path].append(cpu)
                record = {
                    "path": path,
                    "rep": rep,
                    "seconds": round(seconds, 3),
                    "client_cpu_s": round(cpu, 3),
                    "rows": got,
                }
                if progress:
                    record["progress_ms"] = progress
                print(json.dumps(record), flush=True)
                if got != args.rows:
                    print(f"WRONG COUNT {got} != {args.rows}", flush=True)
                    return 1
        spark.stop()
    summary = {
        p: {
            "seconds": [round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3)],
            "client_cpu_s": [
                round(statistics.median(cpus[p]), 3),
                round(min(cpus[p]), 3),
                round(max(cpus[p]), 3),
            ],
        }
        for p, v in times.items()
    }
    print(json.dumps({"summary": summary, "load": os.getloadavg()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
