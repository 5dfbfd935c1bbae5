"""Cursors against real Liftbridge v1.9.0 servers: round trips, routing, disabled cursors.

The shared fixtures run with one ``__cursors`` partition (the harness default), so two
extra single nodes are started here from the harness's parts: one with three cursors
partitions (to see each cursor land in the partition the client computed) and one with
cursors disabled.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from liftbridge_client import Client, ClientOptions, RetryPolicy, StreamConfig, errors
from liftbridge_client._cluster.admin import CURSORS_STREAM, cursor_key, cursors_partition
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client.testing import (
    Cluster,
    Deployment,
    LiftbridgeNode,
    NodeConfig,
    StreamName,
    free_ports,
)
from liftbridge_client.testing._config import nats_embedded_config, nats_url

pytestmark = pytest.mark.integration

OPTIONS = ClientOptions(
    rpc_timeout=5.0, retry=RetryPolicy(attempts=5, initial_backoff=0.05, max_backoff=0.5)
)


def start_node(workdir: Path, cursors_partitions: int) -> LiftbridgeNode:
    """A seed node with embedded NATS, configured with ``cursors_partitions``."""
    port, nats_port = free_ports(2)
    workdir.mkdir(parents=True, exist_ok=True)
    nats_config = workdir / "nats.conf"
    nats_config.write_text(nats_embedded_config(nats_port))
    config = NodeConfig(
        server_id="n1",
        port=port,
        data_dir=workdir / "data",
        nats_servers=(nats_url(nats_port),),
        namespace=f"lbcursors-{uuid.uuid4().hex[:8]}",
        embedded_nats_config=nats_config,
        bootstrap_seed=True,
        cursors_partitions=cursors_partitions,
        log_level="info",
    )
    return LiftbridgeNode(config, workdir).start()


@pytest.fixture(scope="module")
def three_cursors_partitions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_node(tmp_path_factory.mktemp("cursors3"), 3) as node:
        yield node.address


@pytest.fixture(scope="module")
def cursors_disabled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_node(tmp_path_factory.mktemp("cursors0"), 0) as node:
        yield node.address


@pytest.fixture
async def client(liftbridge_server: Deployment) -> AsyncIterator[Client]:
    async with Client(liftbridge_server.addresses, options=OPTIONS) as c:
        yield c


# ---------------------------------------------------------------- single node


async def test_round_trip(client: Client, unique_stream: StreamName) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=2))
    assert await client.fetch_cursor("reader", stream) == -1  # no cursor yet
    await client.set_cursor("reader", stream, 41)
    assert await client.fetch_cursor("reader", stream) == 41
    # Cursors are per (id, stream, partition).
    assert await client.fetch_cursor("reader", stream, partition=1) == -1
    assert await client.fetch_cursor("other", stream) == -1
    # The latest value wins, also when it is lower (served from the leader's cache).
    await client.set_cursor("reader", stream, 5)
    assert await client.fetch_cursor("reader", stream) == 5
    await client.set_cursor("reader", stream, -1)
    assert await client.fetch_cursor("reader", stream) == -1


async def test_the_server_lists_the_cursors_stream_and_accepts_any_stream_name(
    client: Client,
) -> None:
    md = await client.fetch_metadata()
    assert sorted(md.streams[CURSORS_STREAM].partitions) == [0]  # the harness default: 1
    # The server does not check that the stream exists.
    name = f"no-such-stream-{uuid.uuid4().hex[:8]}"
    await client.set_cursor("reader", name, 9, partition=3)
    assert await client.fetch_cursor("reader", name, partition=3) == 9


async def test_invalid_inputs_are_rejected_client_side(client: Client) -> None:
    with pytest.raises(errors.InvalidInputError):
        await client.set_cursor("", "s", 1)
    with pytest.raises(errors.InvalidInputError):
        await client.set_cursor("id", "s", -2)
    with pytest.raises(errors.InvalidInputError):
        await client.fetch_cursor("id", "")


async def test_each_cursor_lands_in_the_partition_the_client_computed(
    three_cursors_partitions: str,
) -> None:
    async with Client([three_cursors_partitions], options=OPTIONS) as client:
        md = await client.fetch_metadata()
        assert sorted(md.streams[CURSORS_STREAM].partitions) == [0, 1, 2]
        stream = "orders"
        ids = [f"reader-{i}" for i in range(8)]
        owners = {i: cursors_partition(cursor_key(i, stream, 0), 3) for i in ids}
        assert set(owners.values()) == {0, 1, 2}
        for n, cursor_id in enumerate(ids):
            before = {
                p: (await client.fetch_partition_metadata(CURSORS_STREAM, p)).newest_offset
                for p in range(3)
            }
            await client.set_cursor(cursor_id, stream, 100 + n)
            after = {
                p: (await client.fetch_partition_metadata(CURSORS_STREAM, p)).newest_offset
                for p in range(3)
            }
            grown = [p for p in range(3) if after[p] != before[p]]
            assert grown == [owners[cursor_id]], cursor_id
        for n, cursor_id in enumerate(ids):
            assert await client.fetch_cursor(cursor_id, stream) == 100 + n


async def test_cursors_disabled_is_a_typed_error(cursors_disabled: str) -> None:
    async with Client([cursors_disabled], options=OPTIONS) as client:
        assert CURSORS_STREAM not in (await client.fetch_metadata()).streams
        with pytest.raises(errors.CursorsDisabledError, match=r"cursors\.stream\.partitions"):
            await client.set_cursor("reader", "s", 1)
        with pytest.raises(errors.CursorsDisabledError):
            await client.fetch_cursor("reader", "s")
    # What the server itself answers (and the client maps when its metadata is stale).
    async with grpc.aio.insecure_channel(cursors_disabled) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.FetchCursor(
                api_pb2.FetchCursorRequest(stream="s", partition=0, cursorId="reader"), timeout=5
            )
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert info.value.details() == "Cursors stream does not exist"


# ---------------------------------------------------------------- cluster


async def test_cluster_routes_to_the_cursors_leader_and_recovers_from_stale_routes(
    liftbridge_cluster: Cluster,
) -> None:
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    async with Client(liftbridge_cluster.addresses, options=OPTIONS) as client:
        md = await client.fetch_metadata()
        cursors = md.streams[CURSORS_STREAM]
        assert sorted(cursors.partitions) == [0]
        leader = cursors.partitions[0].leader
        follower = next(i for i in liftbridge_cluster.server_ids if i != leader)

        # A broker that does not lead the owning partition refuses.
        stub = client._pool.stub(liftbridge_cluster.node(follower).address)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.FetchCursor(
                api_pb2.FetchCursorRequest(stream=stream, partition=0, cursorId="c"), timeout=5
            )
        assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert info.value.details() == "Server not leader for cursors partition 0"

        await client.set_cursor("c", stream, 17)
        assert await client.fetch_cursor("c", stream) == 17

        # Stale metadata naming the follower as leader: NotLeader, refresh, retry.
        cache = client._metadata
        stale_part = dataclasses.replace(cursors.partitions[0], leader=follower)
        stale_stream = dataclasses.replace(cursors, partitions={0: stale_part})
        cache._metadata = dataclasses.replace(
            cache.current, streams={**cache.current.streams, CURSORS_STREAM: stale_stream}
        )
        assert await client.fetch_cursor("c", stream) == 17
        assert cache.current.streams[CURSORS_STREAM].partitions[0].leader == leader
