"""Cursors: remember how far a reader got, and resume from there after a restart.

Needs a server with cursors enabled (``cursors.stream.partitions`` >= 1). Point it at
one with LIFTBRIDGE_ADDRS=host:port[,host:port] and LIFTBRIDGE_NATS_URL (defaults:
127.0.0.1:9292 and nats://127.0.0.1:4222).
"""

from __future__ import annotations

import asyncio
import os
import uuid

from liftbridge_client import Client, StartPosition, StopPosition


async def read_batch(client: Client, stream: str, reader: str) -> list[str]:
    """Read everything after the reader's cursor, saving the cursor as it goes."""
    cursor = await client.fetch_cursor(reader, stream)  # -1: no cursor yet
    if cursor >= 0:
        subscription = client.subscribe(stream, start_offset=cursor + 1, stop=StopPosition.LATEST)
    else:
        subscription = client.subscribe(
            stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        )
    seen: list[str] = []
    async with subscription:
        async for message in subscription:
            seen.append(message.value.decode())
            await client.set_cursor(reader, stream, message.offset)
    return seen


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    nats_url = os.environ.get("LIFTBRIDGE_NATS_URL", "nats://127.0.0.1:4222")
    name = f"cursors-example-{uuid.uuid4().hex[:8]}"

    async with Client(brokers, nats_servers=[nats_url]) as client:
        await client.create_stream(f"{name}.jobs", name)
        for i in range(3):
            await client.publish(name, f"job {i}".encode())
        print("first run: ", await read_batch(client, name, "worker"))

        for i in range(3, 5):
            await client.publish(name, f"job {i}".encode())
        print("second run:", await read_batch(client, name, "worker"))  # jobs 3 and 4 only
        print("cursor now:", await client.fetch_cursor("worker", name))

        await client.delete_stream(name)


if __name__ == "__main__":
    asyncio.run(main())
