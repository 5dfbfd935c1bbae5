"""Subscribe: read a range, follow new messages, and see how a subscription ends.

Point it at a server with LIFTBRIDGE_ADDRS=host:port[,host:port] and
LIFTBRIDGE_NATS_URL (defaults: 127.0.0.1:9292 and nats://127.0.0.1:4222).
"""

from __future__ import annotations

import asyncio
import os
import uuid

from liftbridge_client import Client, StartPosition, StopPosition


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    nats_url = os.environ.get("LIFTBRIDGE_NATS_URL", "nats://127.0.0.1:4222")
    name = f"subscribe-example-{uuid.uuid4().hex[:8]}"

    async with Client(brokers, nats_servers=[nats_url]) as client:
        await client.create_stream(f"{name}.events", name)
        for i in range(5):
            await client.publish(name, f"event {i}".encode())

        # A bounded read: from offset 1 to the newest message, then iteration ends by itself.
        async with client.subscribe(name, start_offset=1, stop=StopPosition.LATEST) as subscription:
            async for message in subscription:
                print(f"offset {message.offset}: {message.value.decode()}")
        print(f"ended: {subscription.end_reason!r}")

        # Follow new messages (NEW_ONLY, the default). `async with` returns once the
        # server has accepted the subscription, so nothing published after it is missed.
        async with client.subscribe(name) as live:
            await client.publish(name, b"fresh")
            message = await anext(live)
            print(f"live: offset {message.offset}: {message.value.decode()}")

        # Everything published in the last 60 seconds, up to the newest message.
        async with client.subscribe(name, start_time_delta=60, stop=StopPosition.LATEST) as recent:
            print(f"last minute: {len([m async for m in recent])} messages")

        # The newest message only.
        async with client.subscribe(
            name, start=StartPosition.LATEST, stop=StopPosition.LATEST
        ) as newest:
            print(f"newest: {[m.offset async for m in newest]}")

        await client.delete_stream(name)


if __name__ == "__main__":
    asyncio.run(main())
