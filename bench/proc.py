"""One measurement of this client in a process of its own (as the Go peer runs in its own).

    python -m bench.proc '{"op": "pub"|"one"|"sub", "address": ..., "nats_url": ...,
                           "stream": ..., "n": N, "size": B, "transport": "nats"|"grpc",
                           "stream_transport": "grpc"|"h2", "loop": "asyncio"|"uvloop"}'

Prints one JSON object: the result of the matching `bench.ours` function. ``loop``
"uvloop" runs it on uvloop's event loop (the client supports any asyncio loop).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import liftbridge_client
from bench import ours
from bench.rss import _rss_mib as rss_mib
from bench.stats import summarize_latencies
from liftbridge_client.models import StartPosition
from liftbridge_client.options import StreamTransport, Transport

_T = TypeVar("_T")


async def run(task: dict[str, Any]) -> dict[str, Any]:
    target = ours.Target(task["address"], task["nats_url"], task["stream"], 1)
    transport = Transport(task.get("transport", "grpc"))
    stream_transport = StreamTransport(task.get("stream_transport", "grpc"))
    n, size = int(task["n"]), int(task.get("size", 256))
    if task["op"] == "pub":
        return await ours.publish_pipelined(
            target,
            transport,
            n,
            size,
            "LEADER",
            window=int(task.get("window", ours.DEFAULT_WINDOW)),
            stream_transport=stream_transport,
        )
    if task["op"] == "one":
        out = await ours.publish_one(
            target, transport, n, size, "LEADER", stream_transport=stream_transport
        )
        out["latency_us"] = summarize_latencies(out.pop("latencies_us"))
        return out
    if task["op"] == "sub":
        return await ours.subscribe(target, [n], stream_transport=stream_transport)
    if task["op"] == "slow":
        return await slow_consumer(target, n, stream_transport)
    raise SystemExit(f"unknown op {task['op']!r}")


async def slow_consumer(
    target: ours.Target, n: int, stream_transport: StreamTransport
) -> dict[str, Any]:
    """Read ``n`` messages sleeping 10 ms after each, from a partition holding many more:
    how far RSS grows while the server could send everything at once."""
    client = ours.client_for(target, Transport.GRPC, stream_transport=stream_transport)
    async with client, client.subscribe(target.stream, start=StartPosition.EARLIEST) as sub:
        await anext(sub)
        baseline = peak = rss_mib()
        got = 1
        while got < n:
            await anext(sub)
            got += 1
            await asyncio.sleep(0.01)
            peak = max(peak, rss_mib())
    return {"messages": got, "rss_baseline_mib": baseline, "rss_peak_mib": peak}


def loop_runner(task: dict[str, Any]) -> Callable[[Coroutine[Any, Any, _T]], _T]:
    """``asyncio.run``, or ``uvloop.run`` for a task with ``"loop": "uvloop"``."""
    loop = task.get("loop", "asyncio")
    if loop == "uvloop":
        import uvloop

        return uvloop.run
    if loop != "asyncio":
        raise SystemExit(f"unknown loop {loop!r}")
    return asyncio.run


def main() -> None:
    task = json.loads(sys.argv[1])
    result = loop_runner(task)(run(task))
    # Which library ran (bench-compare runs another tree's liftbridge_client).
    result["lib"] = str(Path(liftbridge_client.__file__).parent)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
