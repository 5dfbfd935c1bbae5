"""A Spark read task's body without Spark: `read_range` of each partition, in-process.

    .venv/bin/python -m bench.spark_read_micro [-n 200000] [--partitions 1] [--reps 5]
        [--size 256] [--headers] [--profile]

One fresh single node; the stream is filled once (keys ``key-<n>``, values of ``--size``
bytes, round-robin over the partitions, as bench.spark_kafka fills it), then every
partition is read with the Spark source's task body (`liftbridge_client.spark._read`)
``--reps`` times. Prints rows/s, this process's CPU per row (the server runs in another
process), and what the HTTP/2 connection wrote per repetition: socket writes and the
WINDOW_UPDATE frames among them (the flow-control writes a read costs). ``--profile``
runs one more repetition under cProfile and prints the top functions by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import time
from collections import Counter
from typing import Any, cast

from bench.profiling import top_costs
from liftbridge_client import Client
from liftbridge_client._transport.h2 import connection as h2_connection
from liftbridge_client.options import StreamConfig
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._options import SourceOptions
from liftbridge_client.spark._read import RangePartition, read_range
from liftbridge_client.testing import SingleNode

STREAM = "readmicro"

# What every h2 connection of this process wrote: socket writes, and frames by type.
WRITES: Counter[str] = Counter()
_FRAME_NAMES = {0: "DATA", 1: "HEADERS", 3: "RST_STREAM", 4: "SETTINGS", 6: "PING", 7: "GOAWAY"}


class _CountingTransport:
    """A transport that counts what goes through ``write`` (frames are whole per write)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, data: bytes) -> None:
        WRITES["writes"] += 1
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            self._count(data)
            self._inner.write(data)
        finally:
            WRITES["write us"] += int((time.perf_counter() - started) * 1e6)
            WRITES["write cpu us"] += int((time.thread_time() - cpu) * 1e6)

    @staticmethod
    def _count(data: bytes) -> None:
        i = 0
        while len(data) - i >= 9:
            length = int.from_bytes(data[i : i + 3], "big")
            kind = data[i + 3]
            if kind == 8:
                sid = int.from_bytes(data[i + 5 : i + 9], "big") & 0x7FFFFFFF
                WRITES["WINDOW_UPDATE stream" if sid else "WINDOW_UPDATE connection"] += 1
            else:
                WRITES[_FRAME_NAMES.get(kind, f"type {kind}")] += 1
            i += 9 + length

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _count_writes() -> None:
    made = h2_connection.Connection.connection_made

    def connection_made(self: h2_connection.Connection, transport: Any) -> None:
        made(self, cast(asyncio.BaseTransport, _CountingTransport(transport)))

    h2_connection.Connection.connection_made = connection_made  # type: ignore[method-assign]


async def _fill(node: SingleNode, n: int, partitions: int, size: int) -> None:
    async with Client(node.addresses, nats_servers=[node.nats_url]) as client:
        await client.create_stream(f"{STREAM}.subj", STREAM, StreamConfig(partitions=partitions))
        pad = b"x" * size
        futures = []
        for i in range(n):
            key = f"key-{i}".encode()
            value = (key + pad)[:size]
            futures.append(await client.send(STREAM, value, key=key, partition=i % partitions))
        for future in futures:
            await future


def _parts(node: SingleNode, n: int, partitions: int, headers: bool) -> list[RangePartition]:
    options = SourceOptions.parse(
        {
            "brokers": node.addresses[0],
            "stream": STREAM,
            "includeHeaders": "true" if headers else "false",
        },
        streaming=False,
    )
    per = [n // partitions + (1 if p < n % partitions else 0) for p in range(partitions)]
    return [
        RangePartition(PartitionRange(STREAM, p, 0, per[p]), options) for p in range(partitions)
    ]


def _read(parts: list[RangePartition]) -> int:
    rows = 0
    for part in parts:
        for batch in read_range(part):
            rows += batch.num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--headers", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    _count_writes()
    with SingleNode() as node:
        asyncio.run(_fill(node, args.n, args.partitions, args.size))
        parts = _parts(node, args.n, args.partitions, args.headers)
        _read(parts)  # warm-up (connects; the connection is reused as by Spark's tasks)
        rates, cpus = [], []
        for _ in range(args.reps):
            WRITES.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            rows = _read(parts)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert rows == args.n, rows
            rates.append(rows / wall)
            cpus.append(cpu / rows * 1e6)
            print(
                f"  {rows / wall:9.0f} rows/s  cpu {cpu / rows * 1e6:5.2f} us/row  "
                f"h2 writes: {dict(sorted(WRITES.items()))}",
                flush=True,
            )
        print(
            f"median {statistics.median(rates):.0f} rows/s ({min(rates):.0f}..{max(rates):.0f}), "
            f"cpu {statistics.median(cpus):.2f} us/row ({min(cpus):.2f}..{max(cpus):.2f})"
        )
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            _read(parts)
            profiler.disable()
            for row in top_costs(pstats.Stats(profiler), args.n, limit=25):
                print(
                    f"  {row['share']:6.1%} {row['us_per_msg']:6.2f} us/row "
                    f"{row['calls']:>8} {row['function']}"
                )


if __name__ == "__main__":
    main()
