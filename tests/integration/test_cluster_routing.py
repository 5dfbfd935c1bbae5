"""Leader routing on the 3-node cluster: partitions led by different nodes; a leader dies."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from replication_support import KILLS_A_LEADER, wait_for_full_isr

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    RetryPolicy,
    StartPosition,
    StopPosition,
    StreamConfig,
    Transport,
    errors,
)
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client.options import StreamTransport
from liftbridge_client.testing import Cluster, StreamNames

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

OPTIONS = ClientOptions(
    ack_wait=5.0,
    rpc_timeout=3.0,
    retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0),
)


class MetadataRequests:
    """Counts the FetchMetadata RPCs this process sends, one per broker tried.

    Counted in the client: the docker images log at info level, where the servers do not
    log each request.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent = 0
        call_any = MetadataCache.call_any

        async def counting(
            cache: MetadataCache, what: str, fn: Callable[[Any], Awaitable[Any]], **kw: Any
        ) -> Any:
            if what != "FetchMetadata":
                return await call_any(cache, what, fn, **kw)

            def counted(stub: Any) -> Awaitable[Any]:
                self.sent += 1
                return fn(stub)

            return await call_any(cache, what, counted, **kw)

        monkeypatch.setattr(MetadataCache, "call_any", counting)


async def wait_for_partitions(client: Client, stream: str, count: int) -> None:
    async with asyncio.timeout(15):
        while True:  # the metadata leader assigns partitions asynchronously
            md = await client.fetch_metadata(stream)
            info = md.streams.get(stream)
            if (
                info
                and len(info.partitions) == count
                and all(p.leader for p in info.partitions.values())
            ):
                return
            await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("transport", "stream_transport"),
    [
        (Transport.NATS, StreamTransport.GRPC),
        (Transport.GRPC, StreamTransport.GRPC),
        (Transport.GRPC, StreamTransport.H2),
    ],
    ids=["nats", "grpc", "h2"],
)
async def test_partitions_led_by_different_nodes(
    liftbridge_cluster: Cluster,
    stream_names: StreamNames,
    transport: Transport,
    stream_transport: StreamTransport,
) -> None:
    async with Client(
        liftbridge_cluster.addresses,
        nats_servers=[liftbridge_cluster.nats_url],
        options=dataclasses.replace(OPTIONS, stream_transport=stream_transport),
    ) as client:
        # v1.9.0 gives every partition of one CreateStream the same (least loaded) leader:
        # leader loads are only updated once a stream is applied. Separate streams spread.
        streams = [stream_names(f"spread{i}") for i in range(3)]
        leaders: dict[tuple[str, int], str] = {}
        for name, subject in streams:
            await client.create_stream(
                subject, name, StreamConfig(partitions=2, replication_factor=1)
            )
            await wait_for_partitions(client, name, 2)
            info = (await client.fetch_metadata(name)).streams[name]
            assert len({p.leader for p in info.partitions.values()}) == 1
            leaders.update({(name, p.id): p.leader for p in info.partitions.values()})
        assert len(set(leaders.values())) >= 2, f"every partition on one node: {leaders}"

        for (name, partition), leader in leaders.items():
            for i in range(2):
                ack = await client.publish(
                    name, b"p%d-%d" % (partition, i), partition=partition, transport=transport
                )
                assert ack is not None
                assert ack.offset == i
            # Partition metadata is answered by the leader only: routing must find it.
            part = await client.fetch_partition_metadata(name, partition)
            assert part.leader == leader
            assert part.newest_offset == 1
            async with client.subscribe(
                name, partition, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
            ) as sub:
                got = [m.value async for m in sub]
            assert got == [b"p%d-0" % partition, b"p%d-1" % partition]


@KILLS_A_LEADER
@pytest.mark.parametrize(
    "stream_transport", [StreamTransport.GRPC, StreamTransport.H2], ids=["grpc", "h2"]
)
async def test_publishing_continues_after_the_leader_dies(
    liftbridge_cluster: Cluster,
    stream_names: StreamNames,
    stream_transport: StreamTransport,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, subject = stream_names("failover")
    metadata_requests = MetadataRequests(monkeypatch)
    options = dataclasses.replace(OPTIONS, stream_transport=stream_transport)
    async with Client(liftbridge_cluster.addresses, options=options) as client:
        await client.create_stream(subject, name, StreamConfig(replication_factor=3))
        await wait_for_partitions(client, name, 1)
        await wait_for_full_isr(client, name)  # an ALL ack means "on every replica" only then
        # ALL: a LEADER ack only says the leader appended it, and a leader killed before its
        # followers caught up takes the message with it (seen here with SIGKILL).
        before = await client.publish(
            name, b"before", transport=Transport.GRPC, ack_policy=AckPolicy.ALL
        )
        assert before is not None
        old_leader = (await client.fetch_metadata(name)).streams[name].partitions[0].leader
        asked_before = metadata_requests.sent
        assert asked_before > 0  # routing asked already (else the bound below says nothing)
        await asyncio.to_thread(liftbridge_cluster.node(old_leader).kill)
        killed_at = time.monotonic()

        # The first publish after the kill may fail (retriable): the caller retries.
        # Within a bounded time a new leader takes writes, found via metadata refresh.
        # ALL again: only an ALL ack promises that the read below finds "after" (on v1.7.1 a
        # LEADER-acked one vanished when the dead node was elected again; KILLS_A_LEADER).
        failures: list[errors.LiftbridgeError] = []
        async with asyncio.timeout(40):
            while True:
                try:
                    after = await client.publish(
                        name, b"after", transport=Transport.GRPC, ack_policy=AckPolicy.ALL
                    )
                    break
                except errors.LiftbridgeError as exc:
                    failures.append(exc)
                    await asyncio.sleep(0.2)
        assert after is not None
        assert after.offset >= 1
        # Retries are paced: a client that reconnected and refreshed in a loop asked ~500
        # times a second while the dead leader was still named (seen with h2).
        asked = metadata_requests.sent - asked_before
        assert asked <= 20 + 20 * (time.monotonic() - killed_at), asked
        # What the caller saw meanwhile says "retry": nothing non-retriable.
        assert all(f.retriable for f in failures), failures
        # Brokers apply the leader change at slightly different times: ask until one says so.
        async with asyncio.timeout(10):
            while True:
                md = await client.fetch_metadata(name)
                if md.streams[name].partitions[0].leader not in {old_leader, ""}:
                    break
                await asyncio.sleep(0.1)

        async with client.subscribe(
            name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as sub:
            values = [m.value async for m in sub]
        assert values[0] == b"before"
        assert values[-1] == b"after"
