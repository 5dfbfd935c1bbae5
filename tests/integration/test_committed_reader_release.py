"""A CommittedReader ended by an error is freed when dropped, ring and all (found by the soak).

The soak (``make soak``) resumes its read_committed reader from its checkpoint whenever a
failover ends it (``StreamDeletedEnd`` from a restarted node that has not reloaded the
stream). Each ended reader stayed in memory with its Sequencer ring (4096 messages, about
47,000 Python blocks, 3-4 MiB) until the cyclic garbage collector ran, which in a large
process is rare: the error's traceback held the feeders' frames, and through their
``self`` the reader, in reference cycles (the error left in the reader's queue, the error
and the frame that raised it). Deleting the stream ends the reader the same way here.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from liftbridge_client import Client, ClientOptions, StreamConfig, errors
from liftbridge_client.exactly_once import CommittedReader, ExactlyOncePublisher
from liftbridge_client.testing import Deployment, SingleNode, StreamNames

pytestmark = pytest.mark.integration


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Only reference counting frees objects during the test."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("partitions", [1, 2, "2 streams"])
async def test_a_reader_ended_by_an_error_is_freed_without_the_cyclic_gc(
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    no_cyclic_gc: None,
    partitions: int | str,
) -> None:
    async with Client(liftbridge_server.addresses) as client:
        name, subject = stream_names("ended")
        count = partitions if isinstance(partitions, int) else 1
        await client.create_stream(subject, name, StreamConfig(partitions=count))
        publisher = ExactlyOncePublisher(client)
        for i in range(40):
            await publisher.publish_committed(name, f"v{i}".encode(), partition=i % count)
        parts = [(name, p) for p in range(count)]
        if partitions == "2 streams":
            # As in the soak: one partition ends, the other's feeder is live and cancelled.
            other, other_subject = stream_names("live")
            await client.create_stream(other_subject, other)
            parts.append((other, 0))
        reader = CommittedReader(client, parts)
        alive = weakref.ref(reader)
        read = 0
        ended = None
        try:  # not pytest.raises: its ExceptionInfo would keep the error (and all) alive
            async with reader:
                async for _message in reader:
                    read += 1
                    if read == 40:
                        await client.delete_stream(name)
        except errors.StreamDeletedEnd as exc:
            ended = type(exc).__name__
        assert (read, ended) == (40, "StreamDeletedEnd")
        del reader
        await asyncio.sleep(0.2)  # the feeders' last turns
        assert alive() is None, "the ended reader is still referenced: " + ", ".join(
            sorted({type(o).__name__ for o in gc.get_referrers(alive())})
        )


async def test_a_reader_ended_by_a_node_restart_is_freed_without_the_cyclic_gc(
    tmp_path: Path, no_cyclic_gc: None
) -> None:
    # The soak's case: the node is killed and restarted under a live reader; the
    # subscription resubscribes and may be told "No such partition" before the node has
    # reloaded the stream. That error is also the subscription's end reason, in a cycle
    # with the subscription's frames, so it must not carry the reader's frame. When the
    # metadata already lists the partition again the reader resubscribes and lives on (a
    # loaded machine makes that the usual case); the stream is then deleted, so the
    # reader ends after its restart either way.
    with SingleNode(base_dir=tmp_path) as node:
        options = ClientOptions(resubscribe_wait=60.0, rpc_timeout=3.0)
        async with Client(node.addresses, options=options) as client:
            await client.create_stream(
                "release.restart", "release-restart", StreamConfig(partitions=2)
            )
            publisher = ExactlyOncePublisher(client)
            for i in range(100):
                await publisher.publish_committed("release-restart", b"v%d" % i, partition=i % 2)
            reader = CommittedReader(client, [("release-restart", 0), ("release-restart", 1)])
            alive = weakref.ref(reader)

            async def restart() -> None:
                await asyncio.sleep(1.0)
                await asyncio.to_thread(node.node.kill)
                await asyncio.sleep(0.5)
                await asyncio.to_thread(node.node.start)
                await asyncio.sleep(2.0)  # the reader's resubscribe, or its end
                async with asyncio.timeout(30):
                    while True:
                        try:
                            await client.delete_stream("release-restart")
                            return
                        except errors.LiftbridgeError:
                            await asyncio.sleep(0.5)  # still starting

            restarting = asyncio.create_task(restart())
            read, ended = 0, None
            try:
                async with asyncio.timeout(60), reader:
                    async for _message in reader:
                        read += 1
            except errors.StreamDeletedEnd as exc:
                ended = type(exc).__name__
            await restarting
            assert (read, ended) == (100, "StreamDeletedEnd")
            del reader
            await asyncio.sleep(0.2)
            assert alive() is None, "the ended reader is still referenced"
