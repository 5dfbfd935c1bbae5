"""MetadataCache: seeds tried in turn, coalesced refreshes, leader routing and retries.

Against the in-process fake API (fake_liftbridge.py): real channels, real statuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from fake_liftbridge import FakeCluster, Partition, Stream, dead_address

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._transport.grpc import BrokerPool, Stub
from liftbridge_client.options import ClientOptions, RetryPolicy

OPTIONS = ClientOptions(
    rpc_timeout=2.0, retry=RetryPolicy(attempts=3, initial_backoff=0, max_backoff=0)
)


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(("a", "b")) as c:
        c.streams["s"] = Stream(
            "subj",
            {
                0: Partition(leader="b", isr=["a", "b"], replicas=["a", "b"]),
                1: Partition(leader="a", isr=[]),  # no ISR reported: the leader serves reads
            },
        )
        yield c


async def partition_metadata(stub: Stub) -> api_pb2.FetchPartitionMetadataResponse:
    req = api_pb2.FetchPartitionMetadataRequest(stream="s", partition=0)
    return await stub.FetchPartitionMetadata(req, timeout=2)


async def test_dead_seed_does_not_fail_refresh(cluster: FakeCluster) -> None:
    dead = dead_address()
    md = await cluster.metadata_cache(OPTIONS, [dead, cluster.address("a")]).refresh()
    assert [b.id for b in md.brokers] == ["a", "b"]
    assert [broker for broker, _ in cluster.calls_of("FetchMetadata")] == ["a"]


async def test_a_broker_that_left_has_its_channel_closed(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    await cache.refresh()
    cache._pool.stub(cluster.address("b"))  # a channel to b is open
    cluster.hidden.add("b")
    await cache.refresh()
    assert cluster.address("b") not in cache._pool.addresses()
    assert cluster.address("a") in cache._pool.addresses()


async def test_all_seeds_dead_raises_no_broker_available(cluster: FakeCluster) -> None:
    with pytest.raises(errors.NoBrokerAvailableError) as info:
        await cluster.metadata_cache(OPTIONS, [dead_address(), dead_address()]).refresh()
    assert isinstance(info.value.__cause__, errors.UnavailableError)


async def test_concurrent_refreshes_share_one_round_trip(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await asyncio.gather(*(cache.refresh() for _ in range(10)))
    # The first caller fetches; the others find a newer generation and return it.
    assert len(cluster.calls_of("FetchMetadata")) == 1


async def test_a_refresh_asks_the_avoided_brokers_last(cluster: FakeCluster) -> None:
    """A leader cut off from the cluster still answers metadata from its old view, so a
    refresh made because it stopped acking asks the others first (and it only when none
    of them answers)."""
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()  # both brokers known: the order is shuffled from here
    cluster.calls.clear()
    for _ in range(20):
        await cache.refresh(avoid=(cluster.address("b"),))
    assert {broker for broker, _ in cluster.calls_of("FetchMetadata")} == {"a"}
    cluster.calls.clear()
    cluster.fail("FetchMetadata", grpc.StatusCode.UNAVAILABLE, "down", broker="a")
    await cache.refresh(avoid=(cluster.address("b"),))
    assert [broker for broker, _ in cluster.calls_of("FetchMetadata")] == ["a", "b"]


async def test_leader_and_replica_addresses(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    assert await cache.leader_address("s", 0) == cluster.address("b")
    assert await cache.replica_address("s", 0) in {cluster.address("a"), cluster.address("b")}
    assert await cache.replica_address("s", 1) == cluster.address("a")  # empty ISR: the leader
    with pytest.raises(errors.NotFoundError):
        await cache.leader_address("s", 7)
    with pytest.raises(errors.NotFoundError):
        await cache.stream("nope")


async def test_a_leader_lookup_whose_refresh_lacks_the_stream_is_not_found(
    cluster: FakeCluster,
) -> None:
    """No leader cached, and the refresh answers without the stream (a broker that
    restarted and has not loaded it): NotFoundError, which publishers and subscriptions
    handle, not a KeyError (the fault suite's gRPC publishers got `PublishError: publish
    failed: KeyError`)."""
    cluster.streams["s"].partitions[0].leader = ""
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    del cluster.streams["s"]
    with pytest.raises(errors.NotFoundError, match="not in the metadata"):
        await cache.leader_address("s", 0)


async def test_the_cached_leader_address_never_looks_anything_up(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    assert cache.cached_leader_address("s", 0) is None  # nothing cached yet: no lookup either
    assert cluster.calls_of("FetchMetadata") == []
    await cache.refresh()
    assert cache.cached_leader_address("s", 0) == cluster.address("b")
    assert cache.cached_leader_address("s", 1) == cluster.address("a")
    assert cache.cached_leader_address("s", 7) is None
    assert cache.cached_leader_address("nope", 0) is None
    cluster.streams["s"].partitions[0].leader = ""  # an election: no leader named
    await cache.refresh()
    assert cache.cached_leader_address("s", 0) is None
    assert len(cluster.calls_of("FetchMetadata")) == 2


async def test_call_leader_refreshes_and_retries_on_not_leader(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    cluster.fail(
        "FetchPartitionMetadata",
        grpc.StatusCode.FAILED_PRECONDITION,
        "Server not partition leader",
        broker="b",
    )
    cluster.leader_plan = [{"s": "a"}]  # the refresh after the refusal names a
    await cache.call_leader("Test", "s", 0, partition_metadata)
    assert [b for b, _ in cluster.calls_of("FetchPartitionMetadata")] == ["b", "a"]


async def test_call_leader_gives_up_after_policy_attempts(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    cluster.fail("FetchPartitionMetadata", grpc.StatusCode.UNAVAILABLE, "down", times=10)
    with pytest.raises(errors.UnavailableError):
        await cache.call_leader("Test", "s", 0, partition_metadata)
    assert len(cluster.calls_of("FetchPartitionMetadata")) == OPTIONS.retry.attempts


async def test_non_retriable_errors_surface_at_once(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    cluster.fail("FetchPartitionMetadata", grpc.StatusCode.INVALID_ARGUMENT, "x", times=10)
    with pytest.raises(errors.InvalidArgumentError):
        await cache.call_leader("Test", "s", 0, partition_metadata)
    assert len(cluster.calls_of("FetchPartitionMetadata")) == 1


def test_needs_a_seed() -> None:
    with pytest.raises(errors.InvalidInputError):
        MetadataCache(BrokerPool(OPTIONS), [], OPTIONS)
