"""Overhead of the exactly-once layer: publish_committed vs publish, read_committed vs subscribe.

    .venv/bin/python -m bench.exactly_once [-n 3000] [--reps 3] [--size 256]

One fresh single node (replication factor 1, so ack ALL = the leader's ack). Publishing is
timed one message at a time on one partition for both, in alternating chunks of 100 (the
exactly-once publisher keeps one message in flight per partition, so that is the
like-for-like plain baseline), plus
plain pipelined ``send()`` for scale. Reading is timed from EARLIEST to the newest offset:
a plain subscription against a CommittedReader over the same messages (all committed, one
producer). The pure Sequencer is timed alone too. Prints per-message microseconds and the
ratios, medians over ``--reps``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable

from bench.ours import Target, client_for, value_of
from liftbridge_client import AckPolicy, Client, StartPosition, StopPosition
from liftbridge_client.exactly_once import CommittedReader, ExactlyOncePublisher
from liftbridge_client.exactly_once.sequencer import Envelope, PartitionRef, Sequencer
from liftbridge_client.exactly_once.uuids import Clock, Flags, build_uuid, new_producer_id
from liftbridge_client.options import StreamTransport, Transport
from liftbridge_client.testing import SingleNode

CHUNK = 100  # publishes are timed in alternating chunks of this many messages


async def _publish_plain(client: Client, stream: str, n: int, value: bytes) -> float:
    started = time.perf_counter()
    for _ in range(n):
        await client.publish(stream, value, ack_policy=AckPolicy.ALL)
    return time.perf_counter() - started


async def _publish_pipelined(client: Client, stream: str, n: int, value: bytes) -> float:
    started = time.perf_counter()
    futures = [await client.send(stream, value, ack_policy=AckPolicy.ALL) for _ in range(n)]
    await asyncio.gather(*futures)
    return time.perf_counter() - started


async def _publish_eo(publisher: ExactlyOncePublisher, stream: str, n: int, value: bytes) -> float:
    started = time.perf_counter()
    for _ in range(n):
        await publisher.publish_committed(stream, value, partition=0)
    return time.perf_counter() - started


async def _read_plain(client: Client, stream: str, n: int) -> float:
    started = time.perf_counter()
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
    ) as sub:
        count = sum([1 async for _ in sub])
    assert count >= n, count
    return time.perf_counter() - started


async def _read_eo(client: Client, stream: str, n: int) -> float:
    started = time.perf_counter()
    async with CommittedReader(client, [(stream, 0)], stop_at_latest=True) as reader:
        count = sum([1 async for _ in reader])
    assert count == n, count
    return time.perf_counter() - started


def _sequencer_us(n: int) -> float:
    producer, clock = new_producer_id(), Clock.from_unix_ns(time.time_ns())
    ref = PartitionRef("s", 0)
    envs = [
        Envelope(ref, i, i + 1, build_uuid(producer, clock.tick(), Flags.OUTSIDE_TXN).bytes)
        for i in range(n)
    ]
    seq = Sequencer()
    started = time.perf_counter()
    for env in envs:
        seq.queue(env)
        while seq.step() is not None:
            pass
    return 1e6 * (time.perf_counter() - started) / n


async def _timed(coro: Awaitable[float], n: int) -> tuple[float, float]:
    """(wall, client process CPU) seconds per message."""
    cpu = time.process_time()
    wall = await coro
    return wall / n, (time.process_time() - cpu) / n


async def _run(node: SingleNode, n: int, reps: int, size: int) -> None:
    target = Target(address=node.addresses[0], nats_url=node.nats_url, stream="eo")
    value = value_of(size)
    keys = ("plain", "pipelined", "eo", "sub", "rc")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    # Reads over h2, the client's default stream transport (bench.ours defaults to grpc.aio).
    async with client_for(target, Transport.NATS, stream_transport=StreamTransport.H2) as client:
        for rep in range(reps):
            plain, eo = f"eo-plain-{rep}", f"eo-eo-{rep}"
            await client.create_stream(f"{plain}.s", plain)
            await client.create_stream(f"{eo}.s", eo)
            # Interleave in chunks, alternating which goes first: the machine's load drifts.
            publisher = ExactlyOncePublisher(client)
            totals = {"plain": [0.0, 0.0], "eo": [0.0, 0.0]}
            for chunk in range(0, n, CHUNK):
                size_ = min(CHUNK, n - chunk)
                runs = [
                    ("plain", _publish_plain(client, plain, size_, value)),
                    ("eo", _publish_eo(publisher, eo, size_, value)),
                ]
                for key, coro in runs if (chunk // CHUNK) % 2 == 0 else runs[::-1]:
                    wall_, cpu_ = await _timed(coro, 1)
                    totals[key][0] += wall_
                    totals[key][1] += cpu_
            for key, (wall_, cpu_) in totals.items():
                results[key].append((wall_ / n, cpu_ / n))
            results["pipelined"].append(
                await _timed(_publish_pipelined(client, plain, n, value), n)
            )
            reads = [("sub", _read_plain(client, eo, n)), ("rc", _read_eo(client, eo, n))]
            for key, coro in reads if rep % 2 == 0 else reads[::-1]:
                results[key].append(await _timed(coro, n))
    wall = {k: 1e6 * statistics.median(w for w, _ in v) for k, v in results.items()}
    cpu = {k: 1e6 * statistics.median(c for _, c in v) for k, v in results.items()}
    print(f"messages {n} x {reps} reps, {size} B, ack ALL (RF 1), NATS transport")
    print(f"{'':<28} wall us/msg (ratio)   client CPU us/msg (ratio)")
    rows = [
        ("publish (one at a time)", "plain", ""),
        ("publish_committed", "eo", "plain"),
        ("send() pipelined (scale)", "pipelined", ""),
        ("subscribe EARLIEST->LATEST", "sub", ""),
        ("read_committed", "rc", "sub"),
    ]
    for label, key, base in rows:
        w = f"{wall[key]:9.1f}" + (f" ({wall[key] / wall[base]:.2f})" if base else " " * 7)
        c = f"{cpu[key]:9.1f}" + (f" ({cpu[key] / cpu[base]:.2f})" if base else "")
        print(f"{label:<28} {w}        {c}")
    print(f"{'Sequencer alone (pure)':<28} {_sequencer_us(100_000):9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    with SingleNode() as node:
        asyncio.run(_run(node, args.n, args.reps, args.size))


if __name__ == "__main__":
    main()
