"""A Spark pipeline on Liftbridge: order events in, totals per customer out, exactly once.

1. A service publishes order events (JSON, keyed by customer) to a stream, each with an
   exactly-once UUID (header ``eo-uuid``); some publishes are retried after a lost ack
   with the same UUID, so the stream holds those events twice.
2. Spark Structured Streaming reads the stream read-committed (``isolation``), which drops
   the retried copies, sums the amounts per customer and writes the totals of each
   micro-batch to a second stream with the exactly-once sink (``exactlyOnce``: uncommitted
   messages, committed by the driver). The query is stopped and restarted from its
   checkpoint halfway.
3. The script reads the totals stream back read-committed, checks that no update is there
   twice and that the last total of every customer equals what the service published.

``make spark-demo`` starts a local node and runs this; or set LIFTBRIDGE_ADDRS=host:port
to use running servers. Needs the ``spark`` extra and Java 17+.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from liftbridge_client import AckPolicy, Client, StreamConfig
from liftbridge_client.exactly_once import UUID_HEADER, Clock, CommittedReader, Flags
from liftbridge_client.exactly_once.uuids import build_uuid_bytes, new_producer_id

CUSTOMERS = [f"customer-{i}" for i in range(8)]
WAVES = 3
EVENTS_PER_WAVE = 120
RETRIED = 0.1  # the share of events the service publishes twice (a retry after a lost ack)


async def create_streams(brokers: list[str], orders: str, totals: str) -> None:
    async with Client(brokers) as client:
        await client.create_stream(f"{orders}.events", orders, StreamConfig(partitions=3))
        await client.create_stream(f"{totals}.events", totals, StreamConfig(partitions=2))


async def publish_wave(brokers: list[str], stream: str, rng: random.Random) -> dict[str, int]:
    """One wave of order events; returns the amounts per customer of the distinct events."""
    amounts: Counter[str] = Counter()
    producer, clock = new_producer_id(), Clock.from_unix_ns(time.time_ns())
    async with Client(brokers) as client:
        for _ in range(EVENTS_PER_WAVE):
            customer = rng.choice(CUSTOMERS)
            amount = rng.randint(1, 500)
            event = {"event_id": str(uuid.uuid4()), "customer": customer, "amount": amount}
            value = json.dumps(event).encode()
            amounts[customer] += amount
            # A committed (OUTSIDE_TXN) UUID; a retry re-sends it with the same one.
            headers = {UUID_HEADER: build_uuid_bytes(producer, clock.tick(), Flags.OUTSIDE_TXN)}
            copies = 2 if rng.random() < RETRIED else 1
            for _ in range(copies):  # the same event again: a retried publish
                await client.publish(
                    stream,
                    value,
                    key=customer.encode(),
                    headers=headers,
                    ack_policy=AckPolicy.ALL,
                )
    return dict(amounts)


async def read_totals(brokers: list[str], stream: str) -> tuple[dict[str, int], int, int]:
    """Read-committed: the last total per customer, the number of updates, and of
    distinct UUIDs among them."""
    last: dict[str, tuple[int, int]] = {}
    ids: set[bytes] = set()
    count = 0
    async with Client(brokers) as client:
        reader = await CommittedReader.for_stream(client, stream, stop_at_latest=True)
        async with reader:
            async for message in reader:
                count += 1
                ids.add(message.headers[UUID_HEADER])
                row = json.loads(message.value)
                # Partitions are by customer (the key): offsets order one customer's totals.
                last[row["customer"]] = max(
                    last.get(row["customer"], (-1, 0)), (message.offset, row["total"])
                )
    return {customer: total for customer, (_, total) in last.items()}, count, len(ids)


def start_query(spark: Any, brokers: list[str], orders: str, totals: str, checkpoint: Path) -> Any:
    from pyspark.sql.functions import col, from_json, struct, to_json
    from pyspark.sql.functions import sum as sum_

    events = (
        spark.readStream.format("liftbridge")
        .option("brokers", brokers[0])
        .option("stream", orders)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200")
        .option("isolation", "read_committed")  # the service's retried copies are dropped
        .load()
        .select(
            from_json(
                col("value").cast("string"), "event_id string, customer string, amount long"
            ).alias("e")
        )
        .select("e.*")
    )
    totals_df = events.groupBy("customer").agg(sum_("amount").alias("total"))
    return (
        totals_df.select(
            col("customer").alias("key"),
            to_json(struct("customer", "total")).alias("value"),
        )
        .writeStream.format("liftbridge")
        .outputMode("complete")  # every total each batch (the Python sink API has no update mode)
        .option("brokers", brokers[0])
        .option("stream", totals)
        .option("exactlyOnce", "true")
        .option("ackPolicy", "all")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def run_pipeline(spark: Any, brokers: list[str], workdir: Path) -> bool:
    """The whole pipeline on a SparkSession with "liftbridge" registered; True if it checks."""
    # One event loop for all of this process's client calls: grpc.aio stays bound to the
    # first loop it runs on.
    with asyncio.Runner() as loop:
        return _run_pipeline(loop, spark, brokers, workdir)


def _run_pipeline(loop: asyncio.Runner, spark: Any, brokers: list[str], workdir: Path) -> bool:
    tag = uuid.uuid4().hex[:8]
    orders, totals = f"orders-{tag}", f"totals-{tag}"
    loop.run(create_streams(brokers, orders, totals))
    print(f"created streams {orders!r} (3 partitions) and {totals!r} (2 partitions)")
    rng = random.Random(tag)
    expected: Counter[str] = Counter()
    checkpoint = workdir / f"checkpoint-{tag}"

    query = start_query(spark, brokers, orders, totals, checkpoint)
    for wave in range(1, WAVES + 1):
        expected.update(loop.run(publish_wave(brokers, orders, rng)))
        print(f"wave {wave}: the service published {EVENTS_PER_WAVE} order events (+retries)")
        query.processAllAvailable()
        batches = len([p for p in query.recentProgress if p["numInputRows"]])
        print(f"wave {wave}: Spark processed it ({batches} micro-batches with input so far)")
        if wave == 1:
            query.stop()
            print("stopped the query; restarting it from its checkpoint")
            query = start_query(spark, brokers, orders, totals, checkpoint)
    query.stop()

    got, messages, distinct = loop.run(read_totals(brokers, totals))
    print(f"read {messages} total updates back read-committed ({distinct} distinct UUIDs)")
    print(f"{'customer':<12} {'published':>10} {'Spark total':>12}")
    for customer in sorted(expected):
        print(f"{customer:<12} {expected[customer]:>10} {got.get(customer, 0):>12}")
    ok = got == dict(expected) and messages == distinct
    print("totals match, every update written once" if ok else "MISMATCH")
    return ok


def main() -> int:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ.setdefault(var, sys.executable)  # executors run this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from liftbridge_client.spark import register

    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("liftbridge-spark-pipeline")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.warehouse.dir", str(Path(tmp) / "warehouse"))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        print(f"Spark {spark.version} local[2] started in {time.monotonic() - started:.0f}s")
        try:
            ok = run_pipeline(spark, brokers, Path(tmp))
        finally:
            spark.stop()
    print(f"finished in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
