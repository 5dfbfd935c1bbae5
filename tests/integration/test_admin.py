"""Stream administration and metadata against a real Liftbridge node."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from liftbridge_client import Client, ClientOptions, StreamConfig, errors

pytestmark = pytest.mark.integration


def unique(prefix: str = "adm") -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"{prefix}-{tag}", f"{prefix}.{tag}"


@pytest.fixture
async def client(liftbridge_server: Any) -> AsyncIterator[Client]:
    async with Client(liftbridge_server.addresses) as c:
        yield c


async def test_create_stream_with_every_option_and_read_it_back(client: Client) -> None:
    name, subject = unique()
    await client.create_stream(
        subject,
        name,
        config=StreamConfig(
            group="workers",
            replication_factor=1,
            partitions=3,
            retention_max_bytes=10_000_000,
            retention_max_messages=1000,
            retention_max_age=3600,
            cleaner_interval=60,
            segment_max_bytes=1_000_000,
            segment_max_age=600,
            compact_enabled=True,
            compact_max_goroutines=2,
            auto_pause_time=120,
            auto_pause_disable_if_subscribers=True,
            min_isr=1,
            optimistic_concurrency_control=True,
            encryption=False,
        ),
    )
    md = await client.fetch_metadata(name)
    stream = md.streams[name]
    assert stream.subject == subject
    assert sorted(stream.partitions) == [0, 1, 2]
    assert stream.creation_timestamp_ns > 0
    leader_ids = {p.leader for p in stream.partitions.values()}
    assert leader_ids <= {b.id for b in md.brokers}
    part = await client.fetch_partition_metadata(name, 2)
    assert part.id == 2
    assert part.high_watermark == -1  # nothing published yet
    assert part.newest_offset == -1
    assert not part.paused
    assert not part.readonly


async def test_settings_come_in_one_stream_config(client: Client) -> None:
    name, subject = unique()
    await client.create_stream(subject, name, StreamConfig(partitions=2))
    assert len((await client.fetch_metadata(name)).streams[name].partitions) == 2
    # 0.2's keyword settings are gone (StreamConfig is their one home): Python names the
    # keyword, and no stream is created.
    with pytest.raises(TypeError, match="partitions"):
        await client.create_stream(subject + "x", name + "x", partitions=2)  # type: ignore[call-arg]
    with pytest.raises(errors.InvalidInputError, match="config must be a StreamConfig"):
        await client.create_stream(subject + "x", name + "x", {"partitions": 2})  # type: ignore[arg-type]
    assert name + "x" not in (await client.fetch_metadata()).streams


async def test_duplicate_name_is_already_exists(client: Client) -> None:
    name, subject = unique()
    await client.create_stream(subject, name)
    with pytest.raises(errors.AlreadyExistsError):
        await client.create_stream(subject, name)


async def test_exist_ok_accepts_the_same_stream_and_refuses_a_different_one(
    client: Client,
) -> None:
    name, subject = unique()
    await client.create_stream(subject, name, StreamConfig(partitions=2))
    await client.create_stream(
        subject, name, StreamConfig(partitions=2), exist_ok=True
    )  # the same: fine
    with pytest.raises(errors.AlreadyExistsError, match=r"exists with 2 partitions, not 3$"):
        await client.create_stream(subject, name, StreamConfig(partitions=3), exist_ok=True)
    with pytest.raises(
        errors.AlreadyExistsError,
        match=re.escape(f"exists with subject '{subject}', not '{subject}.x'") + "$",
    ):
        await client.create_stream(subject + ".x", name, StreamConfig(partitions=2), exist_ok=True)
    subject, name = reversed(unique())
    await client.create_stream(subject, name, exist_ok=True)  # new: simply created


# v1.7.1 does not reserve these names: it creates the streams.
@pytest.mark.server_versions("v1.9.0", "master")
@pytest.mark.parametrize("reserved", ["__activity", "__cursors"])
async def test_reserved_names_are_invalid_argument(client: Client, reserved: str) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        await client.create_stream(f"x.{uuid.uuid4().hex[:6]}", reserved)


async def test_replication_factor_beyond_cluster_is_invalid_argument(client: Client) -> None:
    name, subject = unique()
    with pytest.raises(errors.InvalidArgumentError):
        await client.create_stream(subject, name, StreamConfig(replication_factor=5))


async def test_inputs_that_crash_the_server_never_leave_the_client(client: Client) -> None:
    name, subject = unique()
    with pytest.raises(errors.InvalidInputError):
        await client.create_stream(subject, name, StreamConfig(partitions=-1))
    with pytest.raises(errors.InvalidInputError):
        await client.create_stream("", name)
    # The server is still up and answering.
    md = await client.fetch_metadata()
    assert md.brokers


async def test_delete_pause_readonly_and_their_not_found(client: Client) -> None:
    name, subject = unique()
    await client.create_stream(subject, name, StreamConfig(partitions=2))

    await client.pause_stream(name, partitions=[1])
    parts = (await client.fetch_metadata(name)).streams[name].partitions
    assert parts[1].paused
    assert not parts[0].paused

    await client.set_stream_readonly(name, partitions=[0])
    part0 = await client.fetch_partition_metadata(name, 0)
    assert part0.readonly
    assert part0.readonly_changed is not None
    await client.set_stream_readonly(name, partitions=[0], readonly=False)
    assert not (await client.fetch_partition_metadata(name, 0)).readonly

    await client.delete_stream(name)
    assert name not in (await client.fetch_metadata(name)).streams
    with pytest.raises(errors.NotFoundError):
        await client.delete_stream(name)
    with pytest.raises(errors.NotFoundError):
        await client.pause_stream(name)
    with pytest.raises(errors.NotFoundError):
        await client.set_stream_readonly(name)


async def test_partition_metadata_of_missing_partition(client: Client) -> None:
    name, subject = unique()
    await client.create_stream(subject, name)
    with pytest.raises(errors.NotFoundError):
        await client.fetch_partition_metadata(name, 3)


async def test_connect_survives_a_dead_seed(liftbridge_server: Any) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    async with Client([dead, *liftbridge_server.addresses]) as c:
        assert (await c.fetch_metadata()).brokers


async def test_no_reachable_seed_fails_with_typed_error() -> None:
    opts = ClientOptions(connect_timeout=2.0, rpc_timeout=0.5)
    client = Client(["127.0.0.1:1"], options=opts)
    with pytest.raises(errors.NoBrokerAvailableError):
        await client.connect()
    with pytest.raises(errors.ConnectionClosedError):
        await client.fetch_metadata()


async def test_connect_errors_name_the_wrong_port(liftbridge_server: Any) -> None:
    # The node's NATS port given as a broker, its gRPC port given as a NATS server: each
    # error says which port it looks like, at once (not after connect_timeout).
    nats_address = liftbridge_server.nats_url.split("://", 1)[-1]
    grpc_address = liftbridge_server.addresses[0]
    opts = ClientOptions(connect_timeout=5.0, rpc_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(errors.NoBrokerAvailableError, match="this looks like the NATS port"):
        await Client([nats_address], options=opts).connect()
    with pytest.raises(
        errors.NatsUnreachableError, match="this looks like a Liftbridge gRPC port"
    ) as info:
        await Client(
            liftbridge_server.addresses, nats_servers=[f"nats://{grpc_address}"], options=opts
        ).connect()
    assert isinstance(info.value.__cause__, errors.ProtocolError)
    assert time.monotonic() - started < 3


async def test_address_overrides_redirect_advertised_addresses(liftbridge_server: Any) -> None:
    real = liftbridge_server.addresses[0]
    # Advertised by nobody, but mapped onto the real node: the seed is reachable only via it.
    opts = ClientOptions(address_overrides={"lb.invalid:9292": real})
    async with Client(["lb.invalid:9292"], options=opts) as c:
        assert (await c.fetch_metadata()).brokers


async def test_close_is_idempotent_and_leaves_no_tasks(liftbridge_server: Any) -> None:
    before = asyncio.all_tasks()
    c = Client(liftbridge_server.addresses)
    await c.connect()
    await c.close()
    await c.close()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()
    with pytest.raises(errors.ConnectionClosedError):
        await c.create_stream("a.b", "ab")
