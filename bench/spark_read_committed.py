"""Driver time per micro-batch of a read_committed streaming query with many producers.

``python -m bench.spark_read_committed [--producers N] [--txns T] [--batch M] [--reps R]``
(never part of ``make test``). One fresh Liftbridge node of the harness, one local[2]
SparkSession (UI off, 127.0.0.1). A stream of 4 partitions gets ``producers`` producers
(distinct ProducerIDs, spread over the partitions), each writing ``txns`` transactions of 4
CONTINUE_TXN messages and an ACK_TXN, interleaved, and one transaction in 10 rolled back.
A query reads it with ``isolation=read_committed`` and ``maxOffsetsPerTrigger=M`` to
parquet; Spark's progress reports give, per micro-batch, the driver's ``latestOffset``
(where the source plans the batch) and the whole trigger. Also printed: the size of the
checkpoint's offset files, and whether the parquet output holds exactly the committed rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark import session
from liftbridge_client import Client, StreamConfig
from liftbridge_client.exactly_once import UUID_HEADER
from liftbridge_client.exactly_once.uuids import Flags, build_uuid_bytes, unix_ns_to_clock

PARTITIONS = 4


async def publish(address: str, stream: str, producers: int, txns: int) -> int:
    """Publish the workload; returns how many rows are committed."""
    base = unix_ns_to_clock(time.time_ns())
    committed = 0
    async with Client([address]) as client:
        await client.create_stream(stream, stream, StreamConfig(partitions=PARTITIONS))
        pending = []
        last_ack: dict[int, int] = {}
        for t in range(txns):
            for p in range(producers):
                pid = p.to_bytes(6, "big")
                part = p % PARTITIONS
                clock = base + (t * 8 + 1) * 16
                for i in range(4):
                    uuid = build_uuid_bytes(pid, clock + i * 16, Flags.CONTINUE_TXN)
                    value = b"%d-%d-%d" % (p, t, i)
                    pending.append(
                        await client.send(
                            stream, value, partition=part, headers={UUID_HEADER: uuid}
                        )
                    )
                # An ACK_TXN at the last acknowledged clock rolls the open span back.
                last = last_ack.setdefault(p, clock - 1)
                if (t + p) % 10 == 0:
                    ack_clock = last
                else:
                    ack_clock = last_ack[p] = clock + 3 * 16
                    committed += 4
                uuid = build_uuid_bytes(pid, ack_clock, Flags.ACK_TXN)
                pending.append(
                    await client.send(stream, b"", partition=part, headers={UUID_HEADER: uuid})
                )
                if len(pending) >= 2000:
                    await asyncio.gather(*pending)
                    pending.clear()
        await asyncio.gather(*pending)
    return committed


async def publish_interleaved(
    address: str, stream: str, partitions: int, messages: int, size: int
) -> tuple[int, int]:
    """About ``messages`` messages on an existing stream: ten producers per partition whose
    transactions (4 CONTINUE_TXN messages and an ACK_TXN) interleave message by message,
    so most of them span a boundary between micro-batches; one in nine is rolled back.
    Values are padded to ``size`` bytes. Returns (messages sent, rows committed)."""
    producers = 10 * partitions
    rounds = max(1, messages // (producers * 5))
    base = unix_ns_to_clock(time.time_ns())
    pad = max(0, size - 16)
    sent = committed = 0
    async with Client([address]) as client:
        pending = []

        async def send(p: int, clock: int, flags: Flags, value: bytes) -> None:
            uuid = build_uuid_bytes((0xBE0000000000 + p).to_bytes(6, "big"), clock, flags)
            pending.append(
                await client.send(
                    stream, value, partition=p % partitions, headers={UUID_HEADER: uuid}
                )
            )
            if len(pending) >= 4096:
                await asyncio.gather(*pending)
                pending.clear()

        last_ack = dict.fromkeys(range(producers), base - 1)
        for t in range(rounds):
            clock = base + t * 8 * 16
            for i in range(4):
                for p in range(producers):
                    value = b"%d-%d-%d-" % (p, t, i)
                    await send(p, clock + i * 16, Flags.CONTINUE_TXN, value + b"x" * pad)
            for p in range(producers):
                if (p + t) % 9 == 0:  # roll back: an ACK at the last acknowledged clock
                    await send(p, last_ack[p], Flags.ACK_TXN, b"")
                else:
                    last_ack[p] = clock + 4 * 16
                    await send(p, last_ack[p], Flags.ACK_TXN, b"")
                    committed += 4
            sent += producers * 5
        await asyncio.gather(*pending)
    return sent, committed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_read_committed")
    parser.add_argument("--producers", type=int, default=240)
    parser.add_argument("--txns", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8000, help="maxOffsetsPerTrigger")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--isolation",
        default="read_committed",
        help="read_uncommitted: the same query reading every message (for the ratio)",
    )
    args = parser.parse_args(argv)
    from liftbridge_client.testing import SingleNode

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-rc-") as tmp, SingleNode() as node:
        spark = session(2, Path(tmp))  # bench.spark's: local, UI off, 127.0.0.1
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        for rep in range(args.reps):
            stream = f"rc-{rep}-{os.getpid()}"
            committed = asyncio.run(publish(node.address, stream, args.producers, args.txns))
            out, checkpoint = Path(tmp, f"out-{rep}"), Path(tmp, f"cp-{rep}")
            t0 = time.monotonic()
            query = (
                spark.readStream.format("liftbridge")
                .option("brokers", node.address)
                .option("stream", stream)
                .option("startingOffsets", "earliest")
                .option("isolation", args.isolation)
                .option("maxOffsetsPerTrigger", str(args.batch))
                .load()
                .selectExpr("cast(value AS string) AS v")
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .start()
            )
            try:
                query.processAllAvailable()
            finally:
                query.stop()
            seconds = time.monotonic() - t0
            batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
            latest = [p["durationMs"].get("latestOffset", 0) for p in batches]
            trigger = [p["durationMs"].get("triggerExecution", 0) for p in batches]
            sizes = [f.stat().st_size for f in (checkpoint / "offsets").iterdir() if f.is_file()]
            rows = spark.read.parquet(str(out)).count()
            distinct = spark.read.parquet(str(out)).distinct().count()
            if args.isolation != "read_committed":
                committed = args.producers * args.txns * 5  # every message is a row
            record = {
                "isolation": args.isolation,
                "rows_per_s": round(rows / seconds),
                "producers": args.producers,
                "messages": args.producers * args.txns * 5,
                "committed": committed,
                "rows": rows,
                "distinct": distinct,
                "batches": len(batches),
                "latest_offset_ms": latest,
                "latest_offset_median_ms": statistics.median(latest) if latest else None,
                "trigger_median_ms": statistics.median(trigger) if trigger else None,
                "offset_file_bytes_max": max(sizes),
                "seconds": round(seconds, 2),
                "load": os.getloadavg(),
            }
            results.append(record)
            print(json.dumps(record), flush=True)
        spark.stop()
    # Distinct only read committed: the ACK messages' values are all empty.
    ok = all(
        r["rows"] == r["committed"]
        and (r["isolation"] != "read_committed" or r["rows"] == r["distinct"])
        for r in results
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
