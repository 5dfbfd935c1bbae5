"""Consumer groups: members share a stream's partitions; a restart resumes
after the commit.

Two members of the group "billing" split the four partitions of a stream
between them, each message goes to exactly one of them. Closing commits what
they read and leaves the group; a member that joins later continues after the
committed positions.

Needs a server with consumer groups (Liftbridge >= v1.8.0) and cursors enabled
(``cursors.stream.partitions`` >= 1). Point it at one with
LIFTBRIDGE_ADDRS=host:port[,host:port] (default 127.0.0.1:9292).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import replace

from liftbridge_client import Client, Consumer, ConsumerOptions, StreamConfig

PARTITIONS = 4

# Ask the coordinator for assignments every half second (default: 0.4 x the
# server's groups.consumer.timeout, 6 s with the default 15 s), so that
# rebalances show quickly.
OPTIONS = ConsumerOptions(fetch_interval=0.5, commit_interval=1.0)


async def read_until(members: list[Consumer], count: int) -> list[str]:
    """Read with every member at once until ``count`` messages came in;
    who read what."""
    got: list[str] = []
    done = asyncio.Event()

    async def read(consumer: Consumer) -> None:
        async for message in consumer:
            got.append(f"{consumer.consumer_id}: {message.value.decode()}")
            if len(got) == count:
                done.set()

    tasks = [asyncio.create_task(read(m)) for m in members]
    try:
        await asyncio.wait_for(done.wait(), timeout=30)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return got


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_ADDRS", "127.0.0.1:9292").split(",")
    suffix = uuid.uuid4().hex[:8]
    stream, group = f"orders-{suffix}", f"billing-{suffix}"

    async with Client(brokers) as client:
        config = StreamConfig(partitions=PARTITIONS)
        await client.create_stream(f"{stream}.events", stream, config)

        def member(name: str) -> Consumer:
            options = replace(OPTIONS, consumer_id=name)
            return client.consumer(group, [stream], options=options)

        def half(parts: frozenset[tuple[str, int]]) -> bool:
            return len(parts) == PARTITIONS // 2

        async def publish(i: int) -> None:
            value = f"order {i}".encode()
            await client.publish(stream, value, partition=i % PARTITIONS)

        alice, bob = member("alice"), member("bob")
        async with alice, bob:
            # The group rebalances as members join: wait until each holds half.
            for each in (alice, bob):
                await each.wait_assigned(half, timeout=30)
            for each in (alice, bob):
                parts = sorted(p for _, p in each.assignments)
                print(each.consumer_id, "reads", parts)
            for i in range(8):
                await publish(i)
            got = await read_until([alice, bob], 8)
            got.sort(key=lambda s: int(s.rsplit(" ", 1)[1]))
            print("each order read once:", got)
        # Leaving committed both members' positions to the group's cursors.

        for i in range(8, 10):
            await publish(i)
        carol = member("carol")
        async with carol:
            read = [await carol.next(timeout=20) for _ in range(2)]
            later = [m.value.decode() for m in read]
            print("after a restart:", sorted(later))  # orders 8 and 9 only

        await client.delete_stream(stream)


if __name__ == "__main__":
    asyncio.run(main())
