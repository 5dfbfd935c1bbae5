"""Feature detection and fallbacks against three real server versions and mixed clusters.

Single nodes of v1.9.0, v1.7.1 and master (50ac358b41eb), and two 3-node clusters of mixed
versions (v1.9.0 + master, v1.7.1 + v1.9.0, as in rolling upgrades), all started once per
session by the ``liftbridge_versions`` fixture; and one node upgraded in place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import grpc.aio
import pytest

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    Message,
    StartPosition,
    StreamConfig,
    _subscribe,
    errors,
)
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client.features import FEATURES, State
from liftbridge_client.testing import Cluster, StreamName, StreamNames
from liftbridge_client.testing.plugin import VersionedDeployments

pytestmark = pytest.mark.integration

VERSIONS = [
    pytest.param("v1.9.0", id="v1.9.0"),
    pytest.param("v1.7.1", id="v1.7.1"),
    pytest.param("master", id="master", marks=pytest.mark.liftbridge_version("master")),
]
OPTIONS = ClientOptions(rpc_timeout=5.0)
# What each version supports once probed (reverse needs a partition to be probed).
EXPECTED_WITHOUT = {
    "v1.9.0": {"reverse_subscribe"},
    "v1.7.1": {"reverse_subscribe", "consumer_groups"},
    "master": set(),
}


@pytest.fixture
async def versioned(
    request: pytest.FixtureRequest, liftbridge_versions: VersionedDeployments
) -> AsyncIterator[tuple[str, Client]]:
    version: str = request.param
    node = liftbridge_versions.single(version)
    async with Client(node.addresses, options=OPTIONS) as client:
        yield version, client


async def publish_values(client: Client, stream: str, count: int, partition: int = 0) -> None:
    for i in range(count):
        await client.publish(
            stream, f"m{i}".encode(), partition=partition, ack_policy=AckPolicy.ALL
        )


async def drain(client: Client, stream: str, partition: int = 0, **kw: object) -> list[Message]:
    async with asyncio.timeout(30):
        async with client.subscribe(stream, partition, reverse=True, **kw) as sub:  # type: ignore[arg-type]
            got = [m async for m in sub]
        assert isinstance(sub.end_reason, errors.StopPositionReached)
        return got


def offsets(messages: Sequence[Message]) -> list[int]:
    return [m.offset for m in messages]


# ---------------------------------------------------------------- one version at a time


@pytest.mark.parametrize("versioned", VERSIONS, indirect=True)
async def test_rpc_probes_tell_versions_apart_without_creating_streams(
    versioned: tuple[str, Client], caplog: pytest.LogCaptureFixture
) -> None:
    version, client = versioned
    before = set((await client.fetch_metadata()).streams)
    address = client.options.resolve((await client.fetch_metadata()).brokers[0].address)
    with caplog.at_level(logging.DEBUG, logger="liftbridge_client.features"):
        cluster = await client.features.cluster()
    assert set((await client.fetch_metadata()).streams) == before  # nothing created
    # Everything but reverse (not decided yet) and what the version lacks.
    assert cluster.enabled == set(FEATURES) - EXPECTED_WITHOUT[version] - {"reverse_subscribe"}
    # Reverse is a behaviour: undecided until a partition is read (v1.7.1 lacks the RPCs
    # of v1.8.0, so it is older than reverse: decided at once).
    expected_reverse = State.UNSUPPORTED if version == "v1.7.1" else State.UNKNOWN
    assert cluster.state("reverse_subscribe") is expected_reverse
    verb = "Disabling" if version == "v1.7.1" else "Enabling"
    assert f"{verb} feature consumer_groups" in caplog.text
    if version == "v1.7.1":
        with pytest.raises(errors.FeatureNotSupportedError) as info:
            await client.features.require("consumer_groups")
        assert info.value.feature == "consumer_groups"
        assert info.value.broker == address
        assert "JoinConsumerGroup answers UNIMPLEMENTED" in str(info.value)
    else:
        await client.features.require("consumer_groups")
    # Cached: a second look asks nothing (the same object comes back).
    assert (await client.features.broker(address)) is cluster.brokers[0]


@pytest.mark.parametrize("versioned", VERSIONS, indirect=True)
async def test_reverse_reads_newest_first_and_ends_cleanly_on_every_version(
    versioned: tuple[str, Client], stream_names: StreamNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    version, client = versioned
    monkeypatch.setattr(_subscribe, "WINDOW", 3)  # several windows from few messages
    empty, full = stream_names(), stream_names()
    await client.create_stream(empty.subject, empty.name)
    await client.create_stream(full.subject, full.name)
    assert await drain(client, empty.name, start=StartPosition.LATEST) == []
    await publish_values(client, full.name, 8)

    got = await drain(client, full.name, start=StartPosition.LATEST)
    assert offsets(got) == [7, 6, 5, 4, 3, 2, 1, 0]
    assert [m.value for m in got] == [f"m{i}".encode() for i in range(7, -1, -1)]
    assert offsets(await drain(client, full.name, start_offset=4)) == [4, 3, 2, 1, 0]
    assert offsets(await drain(client, full.name, start_offset=100)) == list(range(7, -1, -1))
    assert offsets(await drain(client, full.name, start=StartPosition.EARLIEST)) == [0]
    assert offsets(await drain(client, full.name)) == list(range(7, -1, -1))  # NEW_ONLY
    stamp = got[7 - 5].timestamp_ns  # the first message at or after it is offset 5
    assert offsets(await drain(client, full.name, start_timestamp_ns=stamp)) == [5, 4, 3, 2, 1, 0]

    address = client.options.resolve((await client.fetch_metadata()).brokers[0].address)
    native = client.features.cached()[address].state("reverse_subscribe")
    assert native is (State.SUPPORTED if version == "master" else State.UNSUPPORTED)


@pytest.mark.parametrize("versioned", VERSIONS, indirect=True)
async def test_what_each_server_does_with_the_reverse_field_itself(
    versioned: tuple[str, Client], unique_stream: StreamName
) -> None:
    """The raw server behaviour the probe relies on (no client logic in between)."""
    version, client = versioned
    await client.create_stream(unique_stream.subject, unique_stream.name)
    await publish_values(client, unique_stream.name, 3)
    address = client.options.resolve((await client.fetch_metadata()).brokers[0].address)
    req = api_pb2.SubscribeRequest(
        stream=unique_stream.name,
        startPosition=api_pb2.OFFSET,
        startOffset=1,
        reverse=True,
    )
    async with grpc.aio.insecure_channel(address) as channel:
        call = api_pb2_grpc.APIStub(channel).Subscribe(req, timeout=10)
        seen: list[int] = []
        ended: grpc.aio.AioRpcError | None = None
        try:
            while len(seen) < 2:
                msg = await call.read()
                assert isinstance(msg, api_pb2.Message)
                if msg.ByteSize():
                    seen.append(msg.offset)
        except grpc.aio.AioRpcError as exc:
            ended = exc
        finally:
            call.cancel()
    if version == "master":
        assert seen == [1, 0]  # backwards (then UNKNOWN "EOF", not read here)
    else:
        assert seen == [1, 2]  # field 12 ignored: forward, and the stream would stay open
        assert ended is None


# ---------------------------------------------------------------- mixed clusters


async def stream_led_by_each_broker(
    client: Client, stream_names: StreamNames, brokers: Sequence[str]
) -> dict[str, str]:
    """A one-partition stream led by each broker (address -> stream name).

    The server puts every partition of one stream on the same leader and moves to the
    next broker for the next stream, so a few streams cover every broker.
    """
    found: dict[str, str] = {}
    for _ in range(3 * len(brokers)):
        name = stream_names()
        await client.create_stream(name.subject, name.name, StreamConfig(replication_factor=1))
        # The broker asked may not have applied the creation yet: ask until it lists it.
        async with asyncio.timeout(30):
            while True:
                metadata = await client.fetch_metadata(name.name)
                if name.name in metadata.streams:
                    break
                await asyncio.sleep(0.1)
        addresses = {b.id: b.address for b in metadata.brokers}
        found.setdefault(addresses[metadata.streams[name.name].partitions[0].leader], name.name)
        if set(found) == set(brokers):
            break
    assert set(found) == set(brokers), f"no stream led by each broker: {found}"
    return found


@pytest.mark.cluster
@pytest.mark.liftbridge_version("master")
async def test_mixed_v1_9_0_and_master_cluster_intersects_reverse(
    liftbridge_versions: VersionedDeployments, stream_names: StreamNames
) -> None:
    cluster = liftbridge_versions.cluster(("v1.9.0", "v1.9.0", "master"))
    master = cluster.node("n3").address
    async with Client(cluster.addresses, options=OPTIONS) as client:
        streams = await stream_led_by_each_broker(client, stream_names, cluster.addresses)
        results = {}
        for address, stream in streams.items():
            await publish_values(client, stream, 4)
            results[address] = offsets(await drain(client, stream, start_offset=3))
        # Native on master, emulated on v1.9.0: the same answer everywhere.
        assert set(map(tuple, results.values())) == {(3, 2, 1, 0)}
        features = await client.features.cluster()
        per_broker = {b.broker: b.state("reverse_subscribe") for b in features.brokers}
        assert per_broker[master] is State.SUPPORTED
        assert {s for a, s in per_broker.items() if a != master} == {State.UNSUPPORTED}
        assert features.state("reverse_subscribe") is State.UNSUPPORTED
        assert sorted(features.lacking("reverse_subscribe")) == sorted(
            a for a in cluster.addresses if a != master
        )
        assert features.supported("consumer_groups")  # every node has the v1.8.0 RPCs
        await client.features.require("reverse_subscribe", brokers=[master])
        with pytest.raises(errors.FeatureNotSupportedError) as info:
            await client.features.require("reverse_subscribe")
        assert info.value.broker != master


@pytest.mark.cluster
async def test_mixed_v1_7_1_and_v1_9_0_cluster_intersects_consumer_groups(
    liftbridge_versions: VersionedDeployments,
) -> None:
    cluster = liftbridge_versions.cluster(("v1.7.1", "v1.9.0", "v1.9.0"))
    old = cluster.node("n1").address
    async with Client(cluster.addresses, options=OPTIONS) as client:
        features = await client.features.cluster()
        assert not features.supported("consumer_groups")
        assert features.lacking("consumer_groups") == [old]
        assert features.supported("cursors")
        with pytest.raises(errors.FeatureNotSupportedError) as info:
            await client.features.require("consumer_groups")
        assert (info.value.feature, info.value.broker) == ("consumer_groups", old)
        newer = [a for a in cluster.addresses if a != old]
        await client.features.require("consumer_groups", brokers=newer)
        assert await client.features.supported("consumer_groups", brokers=newer)


@pytest.mark.cluster
@pytest.mark.liftbridge_version("master")
async def test_rolling_upgrade_of_one_node_to_master(
    tmp_path: Path, stream_names: StreamNames
) -> None:
    """A node upgraded in place keeps its data; the client sees the new version once told
    to forget what it knew (or once the broker leaves and rejoins the metadata)."""
    with Cluster(3, base_dir=tmp_path, versions="v1.9.0") as cluster:
        node = cluster.node("n3")
        async with Client(cluster.addresses, options=OPTIONS) as client:
            streams = await stream_led_by_each_broker(client, stream_names, cluster.addresses)
            stream = streams[node.address]
            await publish_values(client, stream, 3)
            assert offsets(await drain(client, stream, start=StartPosition.LATEST)) == [2, 1, 0]
            before = client.features.cached()[node.address]
            assert before.state("reverse_subscribe") is State.UNSUPPORTED

            await asyncio.to_thread(node.stop)
            node.switch_version("master")
            await asyncio.to_thread(node.start, wait=False)
            await asyncio.to_thread(cluster.wait_ready)
            assert "Liftbridge Version:        dev" in node.logs()

            # Still known as v1.9.0: emulated, which gives the same answer.
            assert offsets(await drain(client, stream, start=StartPosition.LATEST)) == [2, 1, 0]
            assert client.features.cached()[node.address] is before
            client.features.invalidate(node.address)
            assert offsets(await drain(client, stream, start=StartPosition.LATEST)) == [2, 1, 0]
            after = client.features.cached()[node.address]
            assert after.state("reverse_subscribe") is State.SUPPORTED


@pytest.mark.parametrize("versioned", VERSIONS, indirect=True)
async def test_consumer_groups_agree_with_detection_on_every_version(
    versioned: tuple[str, Client], unique_stream: StreamName
) -> None:
    """The consumer API (which maps UNIMPLEMENTED itself) and `features` agree."""
    version, client = versioned
    await client.create_stream(unique_stream.subject, unique_stream.name)
    supported = await client.features.supported("consumer_groups")
    assert supported is (version != "v1.7.1")
    consumer = client.consumer(f"g-{unique_stream.name}", [unique_stream.name])
    if supported:
        async with consumer:  # joins, then leaves
            pass
    else:
        with pytest.raises(errors.FeatureNotSupportedError) as info:
            async with consumer:
                pass
        assert info.value.feature == "consumer_groups"
        # Detection names the broker (the join's error does not: it goes to any broker).
        with pytest.raises(errors.FeatureNotSupportedError) as detected:
            await client.features.require("consumer_groups")
        assert detected.value.broker == (await client.fetch_metadata()).brokers[0].address
