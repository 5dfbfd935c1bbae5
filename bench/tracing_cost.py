"""What trace propagation costs a publish, on and off.

``python -m bench.tracing_cost [--n 200000] [--repeat 5] [--server]``

In-process (default): ``Client.publish_nowait`` on a stub publisher that returns an
already-acked future, so only the client's own dispatch is timed, in ns per call:

- ``direct``: the stub called without the client (what the facade adds is the rest);
- ``before``: the facade's method as it was before tracing existed (same body, no check);
- ``off``: through the client, tracing off (the default);
- ``on``: tracing on with the SDK's TracerProvider (spans recorded, exported nowhere).

``--server`` adds an end-to-end figure: pipelined publishes of 256 B over NATS to a
fresh local single node, msgs/s with tracing off and on (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from liftbridge_client import Ack, AckPolicy, Client, ClientOptions, TracingOptions

_ACK = Ack("s", "s", "s", 0, "", "c", AckPolicy.LEADER, 1, 2)


class _StubPublisher:
    """Answers every publish at once with the same ack."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()

    def publish_nowait(
        self, stream: str, value: bytes, *args: Any, **kw: Any
    ) -> asyncio.Future[Ack]:
        future: asyncio.Future[Ack] = self._loop.create_future()
        future.set_result(_ACK)
        return future


def _before(client: Client, stream: str, value: bytes, **kw: Any) -> Any:
    """``Client.publish_nowait`` as it was before tracing (the body, verbatim)."""
    return client._require_open().publish_nowait(stream, value, **kw)


def _client(tracing: TracingOptions | None) -> Client:
    client = Client(["127.0.0.1:1"], options=ClientOptions(tracing=tracing))
    client._publisher = _StubPublisher()  # type: ignore[assignment]
    return client


async def _time(n: int, mode: str, provider: TracerProvider) -> float:
    """ns per publish_nowait call in ``mode``."""
    tracing = TracingOptions(tracer_provider=provider) if mode == "on" else None
    client = _client(tracing)
    stub = client._publisher
    assert stub is not None
    value = b"x" * 256
    calls: dict[str, Callable[..., Any]] = {
        "direct": stub.publish_nowait,
        "before": partial(_before, client),
        "off": client.publish_nowait,
        "on": client.publish_nowait,
    }
    call = calls[mode]
    started = time.perf_counter_ns()
    for _ in range(n):
        call("s", value, key=None)
    elapsed = time.perf_counter_ns() - started
    await asyncio.sleep(0)  # let done callbacks (span ends) run before the next round
    return elapsed / n


async def in_process(n: int, repeat: int) -> dict[str, float]:
    provider = TracerProvider()  # no span processor: spans are recorded, not exported
    results: dict[str, list[float]] = {"direct": [], "before": [], "off": [], "on": []}
    for _ in range(repeat):
        for mode, samples in results.items():
            samples.append(await _time(n if mode != "on" else n // 10, mode, provider))
    return {mode: statistics.median(samples) for mode, samples in results.items()}


async def _pipelined(addresses: list[str], nats_url: str, tracing: bool, n: int) -> float:
    options = ClientOptions(
        tracing=TracingOptions(tracer_provider=TracerProvider()) if tracing else None
    )
    async with Client(addresses, nats_servers=[nats_url], options=options) as client:
        stream = f"tracing-cost-{time.monotonic_ns()}"
        await client.create_stream(stream, stream)
        value = b"x" * 256
        started = time.perf_counter()
        futures = [await client.send(stream, value) for _ in range(n)]
        await asyncio.gather(*futures)
        seconds = time.perf_counter() - started
        await client.delete_stream(stream)
    return n / seconds


def end_to_end(n: int, repeat: int) -> dict[str, float]:
    from liftbridge_client.testing import SingleNode

    rates: dict[str, list[float]] = {"off": [], "on": []}
    with SingleNode() as node:
        for _ in range(repeat):
            for mode, samples in rates.items():
                rate = asyncio.run(_pipelined(node.addresses, node.nats_url, mode == "on", n))
                samples.append(rate)
    return {mode: statistics.median(samples) for mode, samples in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--server", action="store_true", help="also end to end (20k msgs)")
    args = parser.parse_args()
    ns = asyncio.run(in_process(args.n, args.repeat))
    print("publish_nowait dispatch, ns per call (median of runs):")
    for mode, value in ns.items():
        print(f"  {mode:<7} {value:8.0f}")
    print(f"  tracing off costs {ns['off'] - ns['before']:+.0f} ns per call over before")
    if args.server:
        rates = end_to_end(20_000, args.repeat)
        print("pipelined NATS publish to a local node, msgs/s (median):")
        for mode, rate in rates.items():
            print(f"  {mode:<7} {rate:8.0f}")


if __name__ == "__main__":
    main()
