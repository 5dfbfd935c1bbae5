"""The exactly-once sink's journal on a real Liftbridge node (no Spark): a batch whose
record is larger than a message goes as parts, each under the server's limit, and a replay
reads it back whole."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

from liftbridge_client import Client
from liftbridge_client.exactly_once import AckIntent
from liftbridge_client.spark._journal import PART_BYTES, Record, journal_stream, newest, plan_commit
from liftbridge_client.testing import Deployment

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(liftbridge_server: Deployment) -> AsyncIterator[Client]:
    async with Client(liftbridge_server.addresses) as c:
        yield c


async def test_a_batch_of_60000_intents_is_journaled_in_parts_and_replayed_whole(
    client: Client,
) -> None:
    write = f"journal-{uuid.uuid4().hex}"
    intents = tuple(AckIntent(f"orders-{i % 9}", i % 64, os.urandom(16)) for i in range(60_000))
    parts = Record(write, 0, intents).split()
    assert len(parts) >= 2
    assert all(len(p) <= PART_BYTES for p in parts)

    assert await plan_commit(client, write, 0, intents) == list(intents)
    stream = journal_stream(write)
    info = await client.fetch_partition_metadata(stream, 0)
    assert info.high_watermark == len(parts) - 1  # one message per part
    found = await newest(client, stream)
    assert found is not None
    assert (found.batch, found.intents) == (0, intents)
    # The replay of batch 0 writes the recorded intents, appending nothing.
    replay = await plan_commit(client, write, 0, intents[:2])
    assert replay[: len(intents)] == list(intents)
    info = await client.fetch_partition_metadata(stream, 0)
    assert info.high_watermark == len(parts) - 1
    await client.delete_stream(stream)
