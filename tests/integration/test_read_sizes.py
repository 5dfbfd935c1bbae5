"""The client's sockets never read into a fresh 256 KiB allocation.

asyncio's plain protocols get ``sock.recv(256 KiB)`` for every read; CPython allocates
the whole size first, which glibc serves with mmap, a page fault, mremap and munmap: about
8 us for each read of a 100-byte ack on the machines this was measured on, a tenth of a
publish's round trip. The h2 connection is a buffered protocol (it reads into a buffer of
its own), and the NATS connection's transport reads at most 64 KiB at a time. tracemalloc
sees CPython's allocations: here the largest one made while publishing one at a time and
while reading a subscription must stay far below 256 KiB.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from liftbridge_client import Client, ClientOptions, StartPosition, Transport
from liftbridge_client._transport.nats_shortcuts import READ_SIZE
from liftbridge_client.options import StreamTransport
from liftbridge_client.testing import Deployment, StreamNames

pytestmark = pytest.mark.integration

BIG = 200 * 1024  # a read of asyncio's default size would allocate 256 KiB


async def peak_during(work: Callable[[], Awaitable[None]]) -> int:
    """The most memory traced at once while ``work`` ran, above what was traced before."""
    tracemalloc.start()
    try:
        await asyncio.sleep(0)
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        await work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


@pytest.mark.parametrize(
    ("transport", "stream_transport"),
    [(Transport.NATS, StreamTransport.H2), (Transport.GRPC, StreamTransport.H2)],
)
async def test_one_at_a_time_publishes_and_reads_allocate_no_big_read_buffer(
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    transport: Transport,
    stream_transport: StreamTransport,
) -> None:
    options = ClientOptions(transport=transport, stream_transport=stream_transport)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as client:
        stream = stream_names()
        await client.create_stream(stream.subject, stream.name)
        await client.publish(stream.name, b"first")  # connections and metadata settled

        async def publish() -> None:
            for i in range(30):
                await client.publish(stream.name, b"m%d" % i)

        assert await peak_during(publish) < BIG
        if transport is Transport.NATS:
            nc: Any = client._nats
            assert nc._transport._io_writer.transport.max_size == READ_SIZE

        async def read() -> None:
            got = 0
            async with client.subscribe(stream.name, start=StartPosition.EARLIEST) as sub:
                async for _ in sub:
                    got += 1
                    if got == 31:
                        return

        assert await peak_during(read) < BIG
