"""Focused subscribe throughput: publish N messages, then time ``async for`` from EARLIEST.

    .venv/bin/python -m bench.subscribe_micro [-n 200000] [--reps 5] [--size 256]

One fresh single node; the stream is filled once (pipelined ``send()`` over NATS), then
read ``--reps`` times with the same method as ``python -m bench`` (bench.ours.subscribe).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from bench.ours import Target, client_for, publish_pipelined, subscribe
from liftbridge_client.options import Transport
from liftbridge_client.testing import SingleNode


async def _run(node: SingleNode, n: int, reps: int, size: int) -> list[float]:
    target = Target(address=node.addresses[0], nats_url=node.nats_url, stream="micro")
    async with client_for(target, Transport.NATS) as client:
        await client.create_stream("micro.subj", "micro")
    pub = await publish_pipelined(target, Transport.NATS, n, size, "LEADER")
    print(f"published {n}: {pub.get('messages', n)}")
    rates = []
    for _ in range(reps):
        res = await subscribe(target, [n])
        assert res["messages"] == n, res
        assert res["out_of_order"] == 0, res
        rate = n / res["seconds"]
        rates.append(rate)
        print(f"  {rate:9.0f} msgs/s  cpu {1e6 * res['cpu_s'] / n:5.1f} us/msg")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    with SingleNode() as node:
        rates = asyncio.run(_run(node, args.n, args.reps, args.size))
    med, best, worst = statistics.median(rates), max(rates), min(rates)
    print(f"median {med:.0f} msgs/s, best {best:.0f}, worst {worst:.0f}")


if __name__ == "__main__":
    main()
