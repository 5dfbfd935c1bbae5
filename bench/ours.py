"""This client's measurements (run in the runner's own process, one event loop each)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from liftbridge_client import Client
from liftbridge_client.models import AckPolicy, StartPosition, StopPosition
from liftbridge_client.options import ClientOptions, StreamTransport, Transport

__all__ = [
    "DEFAULT_WINDOW",
    "Target",
    "client_for",
    "publish_one",
    "publish_pipelined",
    "publish_rate",
    "subscribe",
]


@dataclass(frozen=True, slots=True)
class Target:
    """Where to publish: the server and the stream."""

    address: str
    nats_url: str
    stream: str
    partitions: int = 1


# This client's publishes in flight unless a measurement says otherwise: its default.
DEFAULT_WINDOW = ClientOptions().max_inflight


def client_for(
    target: Target,
    transport: Transport,
    *,
    window: int = DEFAULT_WINDOW,
    stream_transport: StreamTransport = StreamTransport.GRPC,
) -> Client:
    """A client for one measurement; no keepalive pings (the server throttles them)."""
    options = ClientOptions(
        max_inflight=window,
        transport=transport,
        keepalive_time=None,
        stream_transport=stream_transport,
    )
    return Client([target.address], nats_servers=[target.nats_url], options=options)


def value_of(size: int) -> bytes:
    """The payload every client sends: ``size`` bytes of a-z."""
    return bytes(97 + i % 26 for i in range(size))


def _policy(name: str) -> AckPolicy:
    return AckPolicy.ALL if name == "ALL" else AckPolicy.LEADER


async def publish_pipelined(
    target: Target,
    transport: Transport,
    n: int,
    size: int,
    ack: str,
    *,
    window: int = DEFAULT_WINDOW,
    stream_transport: StreamTransport = StreamTransport.GRPC,
) -> dict[str, Any]:
    """``send()`` n messages with at most ``window`` in flight, then wait for every ack.

    As the Go peer hands PublishAsync an ack handler that counts, each future gets a
    done callback that counts (acks, errors, the first error); the futures are not
    kept, and ``flush()`` waits for the last acks.
    """
    value = value_of(size)
    policy = _policy(ack)
    parts = target.partitions
    acked = 0
    errors: list[BaseException] = []

    def on_done(fut: asyncio.Future[Any]) -> None:
        nonlocal acked
        if fut.cancelled():
            errors.append(asyncio.CancelledError())
        elif (exc := fut.exception()) is not None:
            errors.append(exc)
        elif fut.result() is not None:
            acked += 1

    async with client_for(
        target, transport, window=window, stream_transport=stream_transport
    ) as client:
        await client.fetch_metadata(target.stream)
        send = client.send
        stream = target.stream
        cpu0 = time.process_time()
        start = time.perf_counter()
        for i in range(n):
            fut = await send(stream, value, partition=i % parts, ack_policy=policy)
            fut.add_done_callback(on_done)
        await client.flush()
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    return {
        "seconds": seconds,
        "acked": acked,
        "errors": len(errors),
        "first_error": repr(errors[0]) if errors else None,
        "cpu_s": cpu,
    }


async def publish_one(
    target: Target,
    transport: Transport,
    n: int,
    size: int,
    ack: str,
    *,
    stream_transport: StreamTransport = StreamTransport.GRPC,
) -> dict[str, Any]:
    """``await publish()`` n times: one message in flight; latency of each."""
    value = value_of(size)
    policy = _policy(ack)
    parts = target.partitions
    latencies: list[float] = []
    acked = 0
    async with client_for(target, transport, stream_transport=stream_transport) as client:
        await client.fetch_metadata(target.stream)
        cpu0 = time.process_time()
        start = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            ack_ = await client.publish(
                target.stream, value, partition=i % parts, ack_policy=policy
            )
            latencies.append((time.perf_counter() - t0) * 1e6)
            if ack_ is not None:
                acked += 1
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    return {
        "seconds": seconds,
        "acked": acked,
        "errors": 0,
        "cpu_s": cpu,
        "latencies_us": latencies,
    }


async def publish_rate(
    target: Target, transport: Transport, n: int, size: int, rate: float
) -> dict[str, Any]:
    """``send()`` at a fixed offered rate; publish->ack latency of each message."""
    value = value_of(size)
    latencies: list[float] = []
    async with client_for(target, transport, window=max(DEFAULT_WINDOW, int(rate))) as client:
        await client.fetch_metadata(target.stream)
        futures: list[asyncio.Future[Any]] = []

        def record(t0: float) -> Any:
            def done(fut: asyncio.Future[Any]) -> None:
                if not fut.cancelled() and fut.exception() is None:
                    latencies.append((time.perf_counter() - t0) * 1e6)

            return done

        start = time.perf_counter()
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t0 = time.perf_counter()
            # send() waits for window room: above the client's capacity the achieved rate
            # falls below the offered one (and the wait counts in the latency).
            fut = await client.send(target.stream, value, partition=0)
            fut.add_done_callback(record(t0))
            futures.append(fut)
        results = await asyncio.gather(*futures, return_exceptions=True)
        seconds = time.perf_counter() - start
    errors = [r for r in results if isinstance(r, BaseException)]
    return {
        "seconds": seconds,
        "acked": len(latencies),
        "errors": len(errors),
        "first_error": repr(errors[0]) if errors else None,
        "latencies_us": latencies,
    }


async def subscribe(
    target: Target, counts: list[int], *, stream_transport: StreamTransport = StreamTransport.GRPC
) -> dict[str, Any]:
    """Read offsets 0..count-1 of every partition from EARLIEST, partitions concurrently."""
    async with client_for(target, Transport.GRPC, stream_transport=stream_transport) as client:
        await client.fetch_metadata(target.stream)

        async def one(partition: int, count: int) -> tuple[int, int, int]:
            got = nbytes = disorder = 0
            if count == 0:
                return 0, 0, 0
            async with client.subscribe(
                target.stream,
                partition,
                start=StartPosition.EARLIEST,
                stop=StopPosition.OFFSET,
                stop_offset=count - 1,
            ) as sub:
                async for msg in sub:
                    if msg.offset != got:
                        disorder += 1
                    got = msg.offset + 1
                    nbytes += len(msg.value)
                    if got >= count:
                        break
            return got, nbytes, disorder

        cpu0 = time.process_time()
        start = time.perf_counter()
        results = await asyncio.gather(*(one(p, c) for p, c in enumerate(counts)))
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    return {
        "seconds": seconds,
        "messages": sum(r[0] for r in results),
        "bytes": sum(r[1] for r in results),
        "out_of_order": sum(r[2] for r in results),
        "cpu_s": cpu,
    }
