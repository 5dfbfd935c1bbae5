"""A local SparkSession for the connector's tests (loopback only, UI off), and helpers.

Java is required: without it the fixture fails with a message saying so (never skips).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from replication_support import wait_for_full_isr

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    Message,
    StopPosition,
    StreamConfig,
    Transport,
)
from liftbridge_client.testing import Cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OPTIONS = ClientOptions(transport=Transport.GRPC)

log = logging.getLogger(__name__)


def java_or_fail() -> None:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        pytest.fail(
            "the Spark connector tests need Java 17+ (PySpark starts a JVM): install a JDK "
            "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME",
            pytrace=False,
        )


def start_spark(tmp: Path) -> Iterator[SparkSession]:
    """A local session (2 cores; a failed task is retried once) bound to 127.0.0.1, with the
    "liftbridge" format registered."""
    java_or_fail()
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[var] = sys.executable  # workers must run this venv's python
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from liftbridge_client.spark import register

    builder = (
        SparkSession.builder.master("local[2,2]")  # 2 cores, 2 attempts per task
        .appName("liftbridge-client-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={tmp / 'derby'}")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # Plain Python UDFs in the tests (the Arrow-optimized ones want pandas).
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        # Rows reach a Python sink in Arrow batches of this size: small, so a task failing
        # mid-way has already published some (the retry tests need that).
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    )
    spark = get_or_create(builder)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    # Not stopped here: the next test module gets the same session from getOrCreate (one
    # JVM start per pytest run); pyspark kills its JVM when the interpreter exits.
    yield spark


def get_or_create(builder: Any, attempts: int = 3, pause: float = 1.0) -> SparkSession:
    """``getOrCreate``, starting the JVM again if its launch died (up to ``attempts``).

    In two of about ten full runs the JVM's launcher exited before it reported its port:
    it was forked while grpcio threads of earlier tests were busy ("skipping fork()
    handlers"). PySpark then leaves its pipe to the dead launcher behind; it is closed
    here, quietly, not in whatever test the garbage collector happens to run next.
    """
    from pyspark.errors import PySparkRuntimeError

    for attempt in range(1, attempts + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                return cast("SparkSession", builder.getOrCreate())
            except PySparkRuntimeError as exc:
                if attempt == attempts or exc.getCondition() != "JAVA_GATEWAY_EXITED":
                    raise
                failure = str(exc)
            # Out of the except block: the exception's frames, which hold PySpark's pipe to
            # the dead launcher, are gone now, so the pipe is closed here (inside the
            # catch_warnings), not by a later collection in some other test's setup.
            gc.collect()
        log.warning("Spark's JVM did not start (%s): starting it again", failure)
        time.sleep(pause)
    raise AssertionError("unreachable")


async def _publish(
    addresses: Sequence[str], stream: str, messages: Sequence[tuple[bytes, bytes, int]]
) -> None:
    async with Client(addresses, options=OPTIONS) as client:
        futures = [
            await client.send(stream, value, key=key, partition=p, ack_policy=AckPolicy.ALL)
            for key, value, p in messages
        ]
        await asyncio.gather(*futures)


def publish(
    addresses: Sequence[str], stream: str, messages: Sequence[tuple[bytes, bytes, int]]
) -> None:
    """Publish ``(key, value, partition)`` messages and wait for every ack."""
    asyncio.run(_publish(addresses, stream, messages))


def create_stream(
    addresses: Sequence[str],
    subject: str,
    name: str,
    config: StreamConfig | None = None,
    **settings: Any,
) -> None:
    """Create a stream; ``settings`` are `StreamConfig` fields (or pass ``config``)."""

    async def go() -> None:
        async with Client(addresses, options=OPTIONS) as client:
            await client.create_stream(subject, name, config or StreamConfig(**settings))

    asyncio.run(go())


async def _read_all(addresses: Sequence[str], stream: str, partitions: int) -> list[Message]:
    out: list[Message] = []
    async with Client(addresses, options=OPTIONS) as client:
        for p in range(partitions):
            info = await client.fetch_partition_metadata(stream, p)
            if info.high_watermark < 0:
                continue
            async with client.subscribe(stream, p, start_offset=0, stop=StopPosition.LATEST) as sub:
                out.extend([m async for m in sub])
    return out


def read_all(addresses: Sequence[str], stream: str, partitions: int = 1) -> list[Message]:
    """Every message of the stream, as the plain client reads it."""
    return asyncio.run(_read_all(addresses, stream, partitions))


def copy_query_failing_while(
    spark: SparkSession,
    broker: str,
    src: str,
    dst: str,
    *,
    checkpoint: Path,
    flag: Path,
    fail_at: int,
    sink_option: str,
) -> Callable[[], Any]:
    """``start()`` of a streaming copy of ``src`` into ``dst`` through the sink mode
    ``sink_option`` ("idempotent" or "exactlyOnce"): values "partition-offset", same partition.

    While ``flag`` exists the row at offset ``fail_at`` of partition 0 goes to partition 99,
    which does not exist: every attempt of that task fails there, after publishing the rows
    before it, so the query stops mid-batch.
    """
    from pyspark.sql.functions import concat_ws, udf

    flag_path = str(flag)

    def target(partition: int, offset: int) -> int:
        failing = partition == 0 and offset == fail_at and Path(flag_path).exists()
        return 99 if failing else partition

    targets = udf(lambda p, o: target(p, o), "int")  # noqa: PLW0108

    def start() -> Any:
        return (
            spark.readStream.format("liftbridge")
            .option("brokers", broker)
            .option("stream", src)
            .option("startingOffsets", "earliest")
            .load()
            .select(
                concat_ws("-", "partition", "offset").alias("value"),
                targets("partition", "offset").alias("partition"),
            )
            .writeStream.format("liftbridge")
            .option("brokers", broker)
            .option("stream", dst)
            .option(sink_option, "true")
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    return start


@contextlib.contextmanager
def once_written(
    addresses: Sequence[str],
    stream: str,
    partition: int,
    high_watermark: int,
    action: Callable[[], object],
) -> Iterator[threading.Event]:
    """Within the block, call ``action`` (from a thread) once the high watermark of
    ``stream``/``partition`` reaches ``high_watermark`` (mid-write); the event says whether
    it happened."""
    acted, done = threading.Event(), threading.Event()

    async def act_once_written() -> None:
        async with Client(addresses, options=OPTIONS) as client:
            while not done.is_set():
                info = await client.fetch_partition_metadata(stream, partition)
                if info.high_watermark >= high_watermark:
                    await asyncio.to_thread(action)
                    acted.set()
                    return
                await asyncio.sleep(0.02)

    watcher = threading.Thread(target=lambda: asyncio.run(act_once_written()))
    watcher.start()
    try:
        yield acted
    finally:
        done.set()
        watcher.join()


@contextlib.contextmanager
def leader_killed_at(
    cluster: Cluster, stream: str, partition: int, high_watermark: int
) -> Iterator[threading.Event]:
    """Within the block, SIGKILL the leader of ``stream``/``partition`` once its high
    watermark reaches ``high_watermark`` (mid-write); the event says whether it happened."""
    addresses = cluster.addresses

    async def leader() -> str:
        async with Client(addresses, options=OPTIONS) as client:
            return (await wait_for_full_isr(client, stream, partition, timeout=60)).leader

    node = cluster.node(asyncio.run(leader()))
    with once_written(addresses, stream, partition, high_watermark, node.kill) as killed:
        yield killed
