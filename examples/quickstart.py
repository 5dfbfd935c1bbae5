"""Quickstart: create a stream, publish over NATS and over gRPC, read it back.

Run against a local server (``make demo`` starts one and runs this), or
point it elsewhere: LIFTBRIDGE_ADDRS=host:port[,host:port] and
LIFTBRIDGE_NATS_URL.
"""

from __future__ import annotations

import asyncio
import os
import uuid

from liftbridge_client import Client, StartPosition, StopPosition, Transport


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    nats_url = os.environ.get("LIFTBRIDGE_NATS_URL", "nats://127.0.0.1:4222")
    name = f"quickstart-{uuid.uuid4().hex[:8]}"

    async with Client(brokers, nats_servers=[nats_url]) as client:
        await client.create_stream(f"{name}.events", name)
        print(f"created stream {name!r} on subject {name}.events")

        # An enveloped Message straight on the stream's NATS subject; the ack
        # comes back on the client's ack inbox, matched by correlation id.
        ack = await client.publish(
            name,
            b"hello over NATS",
            key=b"k1",
            transport=Transport.NATS,
        )
        assert ack is not None
        cid = ack.correlation_id
        print(f"NATS publish acked: offset={ack.offset} correlation_id={cid}")

        # The same through the gRPC API (a PublishAsync stream to the leader).
        ack = await client.publish(
            name,
            b"hello over gRPC",
            headers={"via": b"grpc"},
            transport=Transport.GRPC,
        )
        assert ack is not None
        print(f"gRPC publish acked: offset={ack.offset}")

        # Read from the earliest offset up to the latest one, then stop.
        async with client.subscribe(
            name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as subscription:
            async for message in subscription:
                offset, value = message.offset, message.value
                headers = dict(message.headers)
                print(f"  offset {offset}: {value!r} headers={headers}")

        await client.delete_stream(name)
        print(f"deleted stream {name!r}")


if __name__ == "__main__":
    asyncio.run(main())
