"""The states stream of read_committed streaming (option ``committedStatesStream``) is
created replicated: on up to three servers, so one server down does not stop the query."""

from __future__ import annotations

import pytest

from liftbridge_client import Client, StreamConfig
from liftbridge_client.spark._committed_stream import STORE_REPLICAS, ensure_store
from liftbridge_client.testing import Deployment, StreamNames

pytestmark = [pytest.mark.integration]


async def replicas(client: Client, name: str) -> int:
    return len((await client.fetch_metadata(name)).streams[name].partitions[0].replicas)


@pytest.mark.cluster
async def test_on_a_cluster_it_has_three_replicas(
    liftbridge_cluster: Deployment, stream_names: StreamNames
) -> None:
    name = stream_names().name
    async with Client(liftbridge_cluster.addresses) as client:
        await ensure_store(client, name)
        assert await replicas(client, name) == STORE_REPLICAS == 3
        await ensure_store(client, name)  # a second batch finds it
        assert len((await client.fetch_metadata()).brokers) == 3
        await client.delete_stream(name)


async def test_on_one_server_one_replica_and_a_users_stream_is_kept(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name = stream_names().name
    async with Client(liftbridge_server.addresses) as client:
        await ensure_store(client, name)
        assert await replicas(client, name) == 1
        # One the user created (other settings) is used as it is.
        own = stream_names()
        await client.create_stream(own.subject, own.name, StreamConfig(retention_max_messages=7))
        await ensure_store(client, own.name)
        info = (await client.fetch_metadata(own.name)).streams[own.name]
        assert info.subject == own.subject
        await client.delete_stream(name)
        await client.delete_stream(own.name)
