"""Publishing: keys and partitions, both transports, pipelining, optimistic concurrency.

Runs against LIFTBRIDGE_ADDRS=host:port[,host:port] (default 127.0.0.1:9292) and
LIFTBRIDGE_NATS_URL (default nats://127.0.0.1:4222).
"""

from __future__ import annotations

import asyncio
import os
import uuid

from liftbridge_client import AckPolicy, Client, StreamConfig, Transport, errors
from liftbridge_client.partitioning import RoundRobinPartitioner


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    nats_url = os.environ.get("LIFTBRIDGE_NATS_URL", "nats://127.0.0.1:4222")
    name = f"publish-example-{uuid.uuid4().hex[:8]}"

    async with Client(brokers, nats_servers=[nats_url]) as client:
        await client.create_stream(f"{name}.orders", name, StreamConfig(partitions=3))

        # A key picks the partition (CRC-32 of the key, as go-liftbridge does); with a NATS
        # connection the message goes straight on the partition's NATS subject.
        ack = await client.publish(name, b"order #1", key=b"customer-7", headers={"v": b"1"})
        assert ack is not None
        print(f"keyed publish: {ack.msg_subject} offset {ack.offset}")

        # The same through the gRPC API, to an explicit partition, acked by every replica.
        ack = await client.publish(
            name, b"order #2", partition=1, ack_policy=AckPolicy.ALL, transport=Transport.GRPC
        )
        assert ack is not None
        print(f"gRPC publish: {ack.msg_subject} offset {ack.offset}")

        # Pipelining: queue many, then wait once. Order is kept per partition.
        rr = RoundRobinPartitioner()
        futures = [client.publish_nowait(name, b"event %d" % i, partitioner=rr) for i in range(99)]
        await client.flush(timeout=10)
        print(f"pipelined {len(futures)} publishes, all acked: {all(f.done() for f in futures)}")

        # Optimistic concurrency: the write only lands at the offset you expect.
        occ = f"{name}-occ"
        await client.create_stream(
            f"{name}.ledger", occ, StreamConfig(optimistic_concurrency_control=True)
        )
        await client.publish(occ, b"entry 0", expected_offset=0)
        try:
            await client.publish(occ, b"stale entry", expected_offset=0)
        except errors.IncorrectOffsetError as exc:
            print(f"refused as expected: {exc}")

        # Fire and forget: no ack; it returns (None) once the message is written.
        await client.publish(name, b"metrics", ack_policy=AckPolicy.NONE)

        await client.delete_stream(occ)
        await client.delete_stream(name)


if __name__ == "__main__":
    asyncio.run(main())
