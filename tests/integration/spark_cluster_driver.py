"""Driver programs for tests/integration/test_spark_cluster.py, one Spark application each,
run as ``python spark_cluster_driver.py <scenario> <master URL> <JSON arguments>`` in a
process of their own (spark_cluster_support.StandaloneCluster.run_driver). The last line
starting with ``RESULT `` is the scenario's JSON result.

Not a test module: it holds the SparkSession the pytest process must not (the other Spark
modules share a local one there).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from liftbridge_client import Client, ClientOptions, Transport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULT_PREFIX = "RESULT "
EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def session(master: str, name: str) -> SparkSession:
    from pyspark.sql import SparkSession

    from liftbridge_client.spark import register

    scratch = Path(tempfile.mkdtemp(prefix="driver-", dir="."))
    spark = (
        SparkSession.builder.master(master)
        .appName(f"liftbridge-cluster-{name}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(scratch))
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        # A task lost with its executor is retried; Spark's default on a cluster, made
        # explicit: the kill scenario needs at least one retry, and the other scenarios must
        # survive a slow machine.
        .config("spark.task.maxFailures", "4")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch / 'derby'}")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    wait_for_executors(spark, 2)
    return spark


def wait_for_executors(spark: SparkSession, count: int, timeout: float = 60.0) -> None:
    """Until ``count`` executors registered, so that both workers take tasks from the start."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while len(tracker.getExecutorInfos()) < count + 1:  # the driver is listed too
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} executors registered within {timeout} s")
        time.sleep(0.2)


def batch_read(spark: SparkSession, args: dict[str, Any]) -> dict[str, Any]:
    df = (
        spark.read.format("liftbridge")
        .option("brokers", args["broker"])
        .option("stream", args["stream"])
        .load()
    )
    rows = df.selectExpr(
        "partition", "offset", "cast(key AS string) AS k", "cast(value AS string) AS v"
    ).collect()
    return {
        "spark_partitions": df.rdd.getNumPartitions(),
        "rows": [[r.partition, r.offset, r.k, r.v] for r in rows],
    }


def stream_to_parquet(spark: SparkSession, args: dict[str, Any]) -> dict[str, Any]:
    """A stream copied into a parquet sink; with ``stop_after_batches``, stopped once that
    many micro-batches completed (a running one is cut short: the restart replays it),
    else run until everything available is in the sink."""
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", args["broker"])
        .option("stream", args["stream"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args["max_offsets_per_trigger"]))
        .load()
        .selectExpr("partition", "offset", "cast(value AS string) AS v")
        .writeStream.format("parquet")
        .option("path", args["out"])
        .option("checkpointLocation", args["checkpoint"])
        .start()
    )
    stop_after = args.get("stop_after_batches")
    try:
        if stop_after is None:
            query.processAllAvailable()
        else:
            deadline = time.monotonic() + 90
            while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < stop_after:
                if query.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the query did not complete {stop_after} batches")
                time.sleep(0.05)
    finally:
        query.stop()
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
    sink = spark.read.parquet(args["out"]).collect()  # through the sink's own log
    return {"batches": batches, "rows": [[r.partition, r.offset, r.v] for r in sink]}


def _executor_jvm() -> tuple[int, bytes]:
    """The pid and command line of the executor JVM this Python worker serves: the nearest
    CoarseGrainedExecutorBackend among its ancestors (its parent is pyspark's daemon)."""
    pid = os.getpid()
    while pid > 1:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        if EXECUTOR_CLASS in argv:
            return pid, argv
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])  # the field after the state
    raise RuntimeError("no executor JVM among this Python worker's ancestors")


def _stored(broker: str, stream: str, partition: int) -> int:
    async def go() -> int:
        options = ClientOptions(transport=Transport.GRPC)
        async with Client([broker], options=options) as client:
            info = await client.fetch_partition_metadata(stream, partition)
            return info.high_watermark + 1

    return asyncio.run(go())


# A Python UDF's results reach the JVM through a 64 KiB buffer: with a few bytes per row
# the writer would get no row before the UDF ended. This much per row (distinct values:
# pickle stores a repeated object once) passes them on in groups of about 300 rows.
PADDING = 200


def killing_rows(args: dict[str, Any]) -> Callable[[int], str]:
    """The UDF of ``exactly_once_write_killed`` (its result is padding): records each task
    attempt's executor pid; at row ``kill_at``, on attempt 0 and while ``flag`` exists,
    waits until the task's target partition holds ``published_before_kill`` messages, then
    SIGKILLs its own executor JVM (once: the flag is removed first)."""
    broker, stream = args["broker"], args["stream"]
    kill_at, wait_for = args["kill_at"], args["published_before_kill"]
    flag, record = Path(args["flag"]), Path(args["record"])
    rows_per_task = args["rows"] // 2

    def row(i: int) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        if i % rows_per_task == 0:
            pid, _ = _executor_jvm()
            name = f"attempt-{context.partitionId()}-{context.attemptNumber()}-{pid}"
            (record / name).touch()
        if i != kill_at or context.attemptNumber() != 0 or not flag.exists():
            return f"{i:0{PADDING}d}"
        deadline = time.monotonic() + 60
        # The writer publishes what this UDF let through before this row (in chunks of
        # 1000 rows); killed after that, the executor dies mid-write.
        while _stored(broker, stream, context.partitionId()) < wait_for:
            if time.monotonic() > deadline:
                break  # killed anyway; the test reports how much was published
            time.sleep(0.1)
        flag.unlink()
        pid, argv = _executor_jvm()
        (record / "killed.json").write_text(
            json.dumps({"pid": pid, "argv": argv.decode(errors="replace").split("\0")})
        )
        os.kill(pid, signal.SIGKILL)
        time.sleep(120)  # pyspark's daemon ends this worker when it sees the JVM gone
        raise RuntimeError("the executor JVM outlived SIGKILL")

    return row


def exactly_once_write_killed(spark: SparkSession, args: dict[str, Any]) -> dict[str, Any]:
    """``rows`` rows in 2 Spark partitions written with exactlyOnce into a 2-partition
    stream (Spark partition N to stream partition N), the first attempt of task 0 killing
    its executor at row ``kill_at``."""
    from pyspark.sql.functions import col, concat, lit, spark_partition_id, udf

    kill = udf(killing_rows(args), "string")
    df = spark.range(args["rows"], numPartitions=2).select(
        concat(lit("row-"), col("id")).alias("value"),
        spark_partition_id().alias("partition"),
        kill("id").alias("ignored"),  # evaluated: the sink ignores other columns
    )
    started = time.monotonic()
    (
        df.write.format("liftbridge")
        .option("brokers", args["broker"])
        .option("stream", args["stream"])
        .option("exactlyOnce", "true")
        .option("writeId", args["stream"])
        .mode("append")
        .save()
    )
    return {
        "app_id": spark.sparkContext.applicationId,
        "write_s": time.monotonic() - started,
    }


SCENARIOS: dict[str, Callable[[SparkSession, dict[str, Any]], dict[str, Any]]] = {
    "batch_read": batch_read,
    "stream_to_parquet": stream_to_parquet,
    "exactly_once_write_killed": exactly_once_write_killed,
}


def main() -> None:
    scenario, master, raw = sys.argv[1:4]
    spark = session(master, scenario)
    try:
        result = SCENARIOS[scenario](spark, cast("dict[str, Any]", json.loads(raw)))
    finally:
        spark.stop()
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
