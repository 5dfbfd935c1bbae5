"""MetadataCache: seeds tried in turn, coalesced refreshes, leader routing and retries.

Against the in-process fake API (fake_liftbridge.py): real channels, real statuses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import grpc
import pytest
from fake_liftbridge import FakeCluster, Partition, Stream, dead_address

from liftbridge_client import errors
from liftbridge_client._cluster import metadata as metadata_module
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client._transport.grpc import BrokerPool, Stub
from liftbridge_client.models import ConsumerGroupInfo, Metadata
from liftbridge_client.options import ClientOptions, RetryPolicy
from liftbridge_client.testing import wait_until

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
    # b is gone: unlisted, no longer leading or in an ISR (replicas keep naming it).
    cluster.hidden.add("b")
    cluster.streams["s"].partitions[0] = Partition(leader="a", isr=["a"], replicas=["a", "b"])
    await cache.refresh()
    assert cluster.address("b") not in cache._pool.addresses()
    assert cluster.address("a") in cache._pool.addresses()
    assert [b.id for b in cache.current.brokers] == ["a"]


async def test_a_leader_the_answer_names_but_leaves_out_keeps_its_last_address(
    cluster: FakeCluster,
) -> None:
    """A node lists only the brokers that answered its NATS survey in time: the leader
    of s/0 (b) left out of the answer still leads, and still answers over gRPC."""
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    await cache.refresh()
    cache._pool.stub(cluster.address("b"))
    cluster.hidden.add("b")
    await cache.refresh()
    assert await cache.leader_address("s", 0) == cluster.address("b")
    assert cache.cached_leader_address("s", 0) == cluster.address("b")
    assert await cache.replica_address("s", 0) in {cluster.address("a"), cluster.address("b")}
    assert cluster.address("b") in cache._pool.addresses()  # its channel stays open
    assert {b.id for b in cache.current.brokers} == {"a", "b"}
    # Once no partition names it as leader or in an ISR, it is gone.
    cluster.streams["s"].partitions[0] = Partition(leader="a", isr=["a"], replicas=["a", "b"])
    await cache.refresh()
    assert [b.id for b in cache.current.brokers] == ["a"]
    assert cluster.address("b") not in cache._pool.addresses()
    # And named again while still unlisted: its last address comes back.
    cluster.streams["s"].partitions[0] = Partition(leader="b", isr=["b"], replicas=["a", "b"])
    await cache.refresh()
    assert await cache.leader_address("s", 0) == cluster.address("b")


async def test_a_leader_never_listed_has_no_known_address(cluster: FakeCluster) -> None:
    cluster.hidden.add("b")
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    with pytest.raises(errors.UnavailableError, match="no known leader"):
        await cache.leader_address("s", 0)
    assert cache.known_broker("b") is None


async def test_a_coordinator_left_out_of_the_answer_keeps_its_last_address(
    cluster: FakeCluster,
) -> None:
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    await cache.refresh()
    b = cache.current.broker("b")
    assert b is not None
    answer = Metadata(
        brokers=tuple(x for x in cache.current.brokers if x.id != "b"),
        streams={},
        groups={"g": ConsumerGroupInfo(group_id="g", coordinator="b", epoch=1)},
    )
    assert cache._complete(answer).broker("b") == b  # named as the group's coordinator
    assert cache._complete(replace(answer, groups={})).broker("b") is None
    assert cache.known_broker("b") == b  # what the group consumer falls back to


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


# ------------------------------------------------------------ suspect leaders
#
# A leader that stopped acking a gRPC publish may be cut off from the cluster by a network
# partition, and it still answers FetchMetadata from its old view, naming itself the
# leader. Every refresh (the periodic one, call_leader's, a timeout check's) asks it last.


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_module, "RECHECK_S", 0.02)


NO_PERIODIC = replace(OPTIONS, metadata_refresh_interval=None)


async def _started(cluster: FakeCluster, supervisor: TaskSupervisor) -> MetadataCache:
    cache = cluster.metadata_cache(NO_PERIODIC)
    await cache.refresh()  # both brokers known
    cache.start(supervisor.spawn)
    cluster.calls.clear()
    return cache


def _asked(cluster: FakeCluster) -> list[str]:
    return [broker for broker, _ in cluster.calls_of("FetchMetadata")]


async def test_every_refresh_and_any_broker_call_ask_a_suspect_last(
    cluster: FakeCluster, supervisor: TaskSupervisor
) -> None:
    cache = await _started(cluster, supervisor)
    cluster.streams["s"].partitions[0].leader = "a"  # b leads nothing: one refresh settles it
    cache.suspect(cluster.address("b"))
    await wait_until(lambda: _asked(cluster), what="the refresh around b")
    for _ in range(20):
        await cache.refresh()
        await cache.call_any("partition metadata", partition_metadata)
    assert set(_asked(cluster)) == {"a"}
    assert {broker for broker, _ in cluster.calls_of("FetchPartitionMetadata")} == {"a"}
    assert cache.suspects == frozenset({cluster.address("b")})
    cluster.calls.clear()
    cluster.fail("FetchMetadata", grpc.StatusCode.UNAVAILABLE, "down", broker="a")
    await cache.refresh()  # the suspect still answers when nobody else does
    assert _asked(cluster) == ["a", "b"]


async def test_while_the_answer_names_the_suspect_it_is_asked_again(
    cluster: FakeCluster, supervisor: TaskSupervisor, quick: None
) -> None:
    # The others have not elected a new leader yet: ask again until they have, so that
    # the publishes made meanwhile stop going to the old leader.
    cache = await _started(cluster, supervisor)
    cache.suspect(cluster.address("b"))  # b leads partition 0
    await wait_until(lambda: len(_asked(cluster)) >= 3, what="three refreshes")
    cluster.streams["s"].partitions[0].leader = "a"  # elected
    await wait_until(
        lambda: cache.current.streams["s"].partitions[0].leader == "a", what="the new leader"
    )
    await asyncio.sleep(0.1)
    asked = _asked(cluster)
    assert set(asked) == {"a"}
    await asyncio.sleep(0.1)
    assert _asked(cluster) == asked  # no more once the answer names another leader


async def test_a_suspect_that_keeps_leading_is_dropped_after_suspect_s(
    cluster: FakeCluster,
    supervisor: TaskSupervisor,
    quick: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A leader that is only slow keeps its partitions: the re-asking ends, and it is asked
    # like any broker again.
    monkeypatch.setattr(metadata_module, "SUSPECT_S", 0.2)
    cache = await _started(cluster, supervisor)
    cache.suspect(cluster.address("b"))
    await asyncio.sleep(0.4)
    calls = len(_asked(cluster))
    assert 2 <= calls <= 12
    await asyncio.sleep(0.2)
    assert len(_asked(cluster)) == calls
    assert cache.suspects == frozenset()
    cluster.calls.clear()
    for _ in range(30):  # b first about every other time again
        await cache.refresh()
    assert set(_asked(cluster)) == {"a", "b"}


async def test_failed_refreshes_around_a_suspect_are_quiet_and_tried_again(
    cluster: FakeCluster,
    supervisor: TaskSupervisor,
    quick: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = await _started(cluster, supervisor)
    cluster.fail("FetchMetadata", grpc.StatusCode.UNAVAILABLE, "down", times=4)  # a, b twice
    cache.suspect(cluster.address("b"))
    await wait_until(lambda: len(_asked(cluster)) >= 5, what="a refresh after two failures")
    assert _asked(cluster)[:4] == ["a", "b", "a", "b"]
    cluster.streams["s"].partitions[0].leader = "a"
    await wait_until(
        lambda: cache.current.streams["s"].partitions[0].leader == "a", what="the new leader"
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_several_suspects_are_all_asked_last(supervisor: TaskSupervisor, quick: None) -> None:
    async with FakeCluster(("a", "b", "c")) as three:
        three.streams["s"] = Stream(
            "subj", {0: Partition(leader="a", isr=["a"]), 1: Partition(leader="b", isr=["b"])}
        )
        cache = await _started(three, supervisor)
        cache.suspect(three.address("a"))
        cache.suspect(three.address("b"))
        await wait_until(lambda: len(_asked(three)) >= 3, what="three refreshes")
        assert set(_asked(three)) == {"c"}
        await cache.stop()


async def test_stop_ends_the_refreshes_and_forgets_the_suspects(
    cluster: FakeCluster, supervisor: TaskSupervisor, quick: None
) -> None:
    cache = await _started(cluster, supervisor)
    cache.suspect(cluster.address("b"))
    await wait_until(lambda: _asked(cluster), what="a refresh")
    await cache.stop()
    calls = len(_asked(cluster))
    await asyncio.sleep(0.1)
    assert len(_asked(cluster)) == calls
    assert cache.suspects == frozenset()
    cache.suspect(cluster.address("b"))  # after stop: remembered, no task started
    await asyncio.sleep(0.05)
    assert len(_asked(cluster)) == calls


async def test_a_suspect_before_start_is_asked_last_without_a_refresh_task(
    cluster: FakeCluster,
) -> None:
    cache = cluster.metadata_cache(NO_PERIODIC)
    await cache.refresh()
    cluster.calls.clear()
    cache.suspect(cluster.address("b"))
    await asyncio.sleep(0.05)
    assert _asked(cluster) == []  # nothing runs on its own before start()
    await cache.refresh()
    assert _asked(cluster) == ["a"]


# ------------------------------------------------------------ streams left out
#
# A broker that restarted answers NOT_FOUND, and metadata without the stream, until it has
# reloaded its streams: NOT_FOUND for a stream listed lately is retriable until the answers
# prove it gone (ABSENT_ANSWERS in a row over ABSENT_SECONDS).


def _not_found(stream: str = "s") -> errors.NotFoundError:
    return errors.NotFoundError(f"no such stream {stream}", details="stream not found")


async def test_a_stream_left_out_lately_is_not_loaded_until_proven_gone(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metadata_module, "ABSENT_SECONDS", 0.0)
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    removed = cluster.streams.pop("s")
    seen: list[type[errors.NotFoundError]] = []
    for _ in range(metadata_module.ABSENT_ANSWERS):
        await cache.refresh()
        err = cache.not_found("s", _not_found())
        seen.append(type(err))
        assert err.retriable is (type(err) is errors.StreamNotLoadedError)
    # The answers before the last one leave it unproven; the last one proves it gone.
    assert seen == [errors.StreamNotLoadedError] * (metadata_module.ABSENT_ANSWERS - 1) + [
        errors.NotFoundError
    ]
    with pytest.raises(errors.NotFoundError) as info:
        await cache.stream("s")  # a lookup (which refreshes) says the same
    assert type(info.value) is errors.NotFoundError
    cluster.streams["s"] = removed  # created again: listed, so NOT_FOUND is a restart again
    await cache.refresh()
    assert type(cache.not_found("s", _not_found())) is errors.StreamNotLoadedError


async def test_proof_takes_absent_seconds_too(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    del cluster.streams["s"]
    for _ in range(metadata_module.ABSENT_ANSWERS + 2):  # answers in a row, within a second
        await cache.refresh()
        with pytest.raises(errors.StreamNotLoadedError, match="answers in a row"):
            await cache.stream("s")


async def test_a_stream_listed_again_is_not_missing(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    removed = cluster.streams.pop("s")
    await cache.refresh()
    cluster.streams["s"] = removed
    await cache.refresh()
    assert cache._missing == {}
    err = cache.not_found("s", _not_found())
    assert isinstance(err, errors.StreamNotLoadedError)
    assert "left it out" not in str(err)  # listed in the last answer


async def test_not_found_for_a_stream_never_listed_or_deleted_here_is_plain(
    cluster: FakeCluster,
) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    exc = _not_found("never")
    assert cache.not_found("never", exc) is exc
    del cluster.streams["s"]
    await cache.refresh()
    cache.forget_stream("s")  # what delete_stream does: this client deleted it
    with pytest.raises(errors.NotFoundError) as info:
        await cache.stream("s")
    assert type(info.value) is errors.NotFoundError
    cluster.streams["s"] = Stream("subj", {0: Partition(leader="a", isr=[])})  # created again
    await cache.refresh()
    assert type(cache.not_found("s", _not_found())) is errors.StreamNotLoadedError
    # Subclasses pass through unchanged.
    other = errors.StreamNotLoadedError("x")
    assert cache.not_found("s", other) is other


async def test_not_found_starts_one_refresh_per_gap(
    cluster: FakeCluster, supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    gap = 0.3
    monkeypatch.setattr(metadata_module, "NOT_FOUND_REFRESH_GAP", gap)
    cache = await _started(cluster, supervisor)

    def burst() -> None:  # 1000 pipelined publishes get a NOT_FOUND each
        for _ in range(50):
            assert isinstance(cache.not_found("s", _not_found()), errors.StreamNotLoadedError)

    burst()
    await wait_until(lambda: _asked(cluster), what="the refresh NOT_FOUND started")
    started = asyncio.get_running_loop().time()
    await asyncio.sleep(gap / 3)
    burst()  # within the gap, after the first refresh ended: no second one
    await asyncio.sleep(gap / 3)
    assert len(_asked(cluster)) == 1
    await asyncio.sleep(max(gap - (asyncio.get_running_loop().time() - started), 0) + 0.05)
    burst()  # the gap is over: one more
    await wait_until(lambda: len(_asked(cluster)) == 2, what="the second refresh")
    await asyncio.sleep(0.05)
    assert len(_asked(cluster)) == 2
    burst()  # from a lookup that has just refreshed itself: none
    cache.not_found("s", _not_found(), refresh=False)
    await cache.stop()
    cache.not_found("s", _not_found())  # stopped: no task, no error
    await asyncio.sleep(0.05)
    assert len(_asked(cluster)) == 2


async def test_an_answer_predating_this_clients_delete_does_not_undo_it(
    cluster: FakeCluster,
) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    cache.forget_stream("s")
    await cache.refresh()  # sent before the delete was applied: still lists it
    del cluster.streams["s"]
    await cache.refresh()
    assert type(cache.not_found("s", _not_found())) is errors.NotFoundError
    cache.stream_created("s")  # this client creates it again: a restart may hide it again
    assert type(cache.not_found("s", _not_found())) is errors.StreamNotLoadedError


async def test_proven_gone_is_plain_before_a_refresh_forgets_it(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    del cluster.streams["s"]
    for _ in range(metadata_module.ABSENT_ANSWERS):
        await cache.refresh()  # answers enough, within ABSENT_SECONDS: not proven yet
    assert type(cache.not_found("s", _not_found())) is errors.StreamNotLoadedError
    monkeypatch.setattr(metadata_module, "ABSENT_SECONDS", 0.0)  # time has passed
    assert type(cache.not_found("s", _not_found())) is errors.NotFoundError


async def test_a_partition_a_listed_stream_lacks_is_plainly_not_found(
    cluster: FakeCluster,
) -> None:
    """Recreated with fewer partitions: the stream is listed, so no restart explains it."""
    cluster.streams["s"].partitions[1].leader = ""  # not cached: the lookup refreshes
    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    del cluster.streams["s"].partitions[1]
    with pytest.raises(errors.NotFoundError, match="partition 1 is not in the metadata") as info:
        await cache.leader_address("s", 1)
    assert type(info.value) is errors.NotFoundError
