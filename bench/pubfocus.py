"""Focused publish benchmark: pipelined NATS, gRPC and h2, one-at-a-time gRPC.

``python -m bench.pubfocus [--repeat 3] [--n 50000] [--one 2000] [--profile nats|grpc|h2]``
starts a SingleNode, runs every configuration ``repeat`` times on fresh streams and
prints each run and the medians (msgs/s, CPU us/msg; p50 us for one-at-a-time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import pstats
import statistics
from typing import Any

from bench.ours import Target, publish_one, publish_pipelined
from liftbridge_client import Client, StreamConfig
from liftbridge_client.options import ClientOptions, StreamTransport, Transport
from liftbridge_client.testing import SingleNode

_names = itertools.count(1)
# The pipelined configurations: grpc is PublishAsync on grpc.aio, h2 on the h2 transport.
_CONFIGS = {
    "nats": (Transport.NATS, StreamTransport.GRPC),
    "grpc": (Transport.GRPC, StreamTransport.GRPC),
    "h2": (Transport.GRPC, StreamTransport.H2),
}


async def _stream(admin: Client) -> str:
    name = f"focus-{next(_names)}"
    await admin.create_stream(name, name, StreamConfig(partitions=1))
    return name


async def main(args: argparse.Namespace) -> None:
    with SingleNode() as node:
        admin = Client([node.address], options=ClientOptions(keepalive_time=None))
        async with admin:
            configs = [(name, *_CONFIGS[name]) for name in args.only]
            if args.profile:
                transport, streams = _CONFIGS[args.profile]
                target = Target(node.address, node.nats_url, await _stream(admin))
                prof = cProfile.Profile()
                prof.enable()
                await publish_pipelined(
                    target, transport, args.n, 256, "LEADER", stream_transport=streams
                )
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
                return
            results: dict[str, list[dict[str, Any]]] = {}
            for _ in range(args.repeat):
                for name, transport, streams in configs:
                    target = Target(node.address, node.nats_url, await _stream(admin))
                    r = await publish_pipelined(
                        target, transport, args.n, 256, "LEADER", stream_transport=streams
                    )
                    if r["errors"] or r["acked"] != args.n:
                        raise SystemExit(f"{name}: not every publish was acked: {r}")
                    rec = {"rate": args.n / r["seconds"], "cpu": r["cpu_s"] / args.n * 1e6}
                    results.setdefault(f"{name}-pipelined", []).append(rec)
                    print(f"{name}-pipelined {rec['rate']:.0f} msgs/s {rec['cpu']:.1f} us/msg")
                if args.one:
                    target = Target(node.address, node.nats_url, await _stream(admin))
                    r = await publish_one(target, Transport.GRPC, args.one, 256, "LEADER")
                    p50 = statistics.median(r["latencies_us"])
                    rec = {"rate": args.one / r["seconds"], "cpu": r["cpu_s"] / args.one * 1e6}
                    rec["p50"] = p50
                    results.setdefault("grpc-one", []).append(rec)
                    print(f"grpc-one {rec['rate']:.0f} msgs/s p50 {p50:.0f} us")
            print("medians:")
            for key, recs in results.items():
                line = " ".join(f"{k}={statistics.median(r[k] for r in recs):.1f}" for k in recs[0])
                print(f"  {key}: {line}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n", type=int, default=50000)
    parser.add_argument("--one", type=int, default=2000)
    parser.add_argument("--profile", choices=sorted(_CONFIGS))
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(_CONFIGS),
        default=["nats", "grpc"],
        help="pipelined configs",
    )
    asyncio.run(main(parser.parse_args()))
