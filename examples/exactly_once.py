"""Exactly-once: de-duplicated publishing, and a transaction over two streams.

A publisher stamps every message with a UUID (header ``eo-uuid``) and re-sends the SAME
UUID when it retries, so a read-committed reader drops the copies a retry leaves behind.
Uncommitted messages stay invisible to it until the transaction's ACK intents are written.
Point it at a server with LIFTBRIDGE_ADDRS=host:port[,host:port] and LIFTBRIDGE_NATS_URL
(defaults: 127.0.0.1:9292 and nats://127.0.0.1:4222).
"""

from __future__ import annotations

import asyncio
import os
import uuid

from liftbridge_client import Client
from liftbridge_client.exactly_once import (
    UUID_HEADER,
    CommittedReader,
    ExactlyOncePublisher,
    intents_from_json,
    intents_to_json,
    read_uncommitted,
)


async def read_committed(client: Client, *streams: str) -> list[str]:
    parts = [(stream, 0) for stream in streams]
    async with CommittedReader(client, parts, stop_at_latest=True) as reader:
        return [message.value.decode() async for message in reader]


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    nats_url = os.environ.get("LIFTBRIDGE_NATS_URL", "nats://127.0.0.1:4222")
    run = uuid.uuid4().hex[:8]
    orders, invoices = f"eo-orders-{run}", f"eo-invoices-{run}"

    async with Client(brokers, nats_servers=[nats_url]) as client:
        await client.create_stream(f"{orders}.in", orders)
        await client.create_stream(f"{invoices}.in", invoices)
        publisher = ExactlyOncePublisher(client)

        # 1. Committed publishes; simulate a retry whose first attempt was stored anyway.
        await publisher.publish_committed(orders, b"order-1")
        await publisher.publish_committed(orders, b"order-2")
        stored = [m async for m in read_uncommitted(client, orders, stop_at_latest=True)]
        copy = stored[-1]
        await client.publish(orders, copy.value, headers={UUID_HEADER: copy.headers[UUID_HEADER]})
        stored = [m async for m in read_uncommitted(client, orders, stop_at_latest=True)]
        committed = await read_committed(client, orders)
        print("stored:        ", [m.value.decode() for m in stored])  # order-2 twice
        print("read committed:", committed)  # order-2 once
        assert committed == ["order-1", "order-2"]

        # 2. A transaction over two streams: invisible until its ACK intents are written.
        await publisher.publish_uncommitted(orders, b"order-3")
        await publisher.publish_uncommitted(invoices, b"invoice-3")
        before = await read_committed(client, orders, invoices)
        print("before commit: ", before)
        assert "order-3" not in before
        checkpoint = intents_to_json(publisher.build_ack_intents())  # store this durably
        await publisher.write_ack_intents(intents_from_json(checkpoint))
        await publisher.write_ack_intents(intents_from_json(checkpoint))  # again: harmless
        after = await read_committed(client, orders, invoices)
        print("after commit:  ", after)
        assert sorted(after) == ["invoice-3", "order-1", "order-2", "order-3"]

        await client.delete_stream(orders)
        await client.delete_stream(invoices)


if __name__ == "__main__":
    asyncio.run(main())
