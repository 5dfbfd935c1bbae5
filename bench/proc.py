"""One measurement of this client in a process of its own (as the Go peer runs in its own).

    python -m bench.proc '{"op": "pub"|"one"|"sub", "address": ..., "nats_url": ...,
                           "stream": ..., "n": N, "size": B, "transport": "nats"|"grpc",
                           "stream_transport": "grpc"|"h2"}'

Prints one JSON object: the result of the matching `bench.ours` function.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from bench import ours
from bench.stats import summarize_latencies
from liftbridge_client.options import Transport


async def run(task: dict[str, Any]) -> dict[str, Any]:
    target = ours.Target(task["address"], task["nats_url"], task["stream"], 1)
    transport = Transport(task.get("transport", "grpc"))
    stream_transport = task.get("stream_transport", "grpc")
    n, size = int(task["n"]), int(task.get("size", 256))
    if task["op"] == "pub":
        return await ours.publish_pipelined(
            target, transport, n, size, "LEADER", stream_transport=stream_transport
        )
    if task["op"] == "one":
        out = await ours.publish_one(
            target, transport, n, size, "LEADER", stream_transport=stream_transport
        )
        out["latency_us"] = summarize_latencies(out.pop("latencies_us"))
        return out
    if task["op"] == "sub":
        return await ours.subscribe(target, [n], stream_transport=stream_transport)
    raise SystemExit(f"unknown op {task['op']!r}")


def main() -> None:
    task = json.loads(sys.argv[1])
    print(json.dumps(asyncio.run(run(task))))


if __name__ == "__main__":
    main()
