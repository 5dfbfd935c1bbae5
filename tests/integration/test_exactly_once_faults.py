"""Exactly-once under leader kills on the 3-node cluster (Liftbridge v1.9.0).

Publishers with retries write distinct values with publish_committed to a replicated
stream while the leader is SIGKILLed (and restarted) several times. read_committed must
yield every acknowledged value exactly once; read_uncommitted shows what the retries
stored twice. Bounded for `make test`: EO_FAULT_MESSAGES (default 3000) messages and
EO_FAULT_KILLS (default 2) kills; the issue's 20,000-message run is the same test with
EO_FAULT_MESSAGES=20000.

A transaction over two replicated streams survives a leader kill in its middle and a writer
crash between storing its ACK intents and writing them all: re-written intents commit it
once, and a later transaction the writer never checkpointed is rolled back. A NATS outage
of 2 s under publish_committed (on a node of its own) loses and duplicates nothing either.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from replication_support import KILLS_A_LEADER, print_partition_history, wait_for_full_isr

from liftbridge_client import Client, ClientOptions, RetryPolicy, StreamConfig
from liftbridge_client.exactly_once import (
    UUID_HEADER,
    CommittedReader,
    ExactlyOncePublisher,
    intents_from_json,
    intents_to_json,
    read_uncommitted,
)
from liftbridge_client.models import Message
from liftbridge_client.testing import Cluster, StreamNames

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)

MESSAGES = int(os.environ.get("EO_FAULT_MESSAGES", "3000"))
KILLS = int(os.environ.get("EO_FAULT_KILLS", "2"))
PUBLISHERS = 4
PARTITIONS = 2
OPTIONS = ClientOptions(
    ack_wait=4.0,
    rpc_timeout=3.0,
    max_inflight=256,
    retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0),
)


@pytest.fixture
def own_cluster(tmp_path: Path, liftbridge_server_version: str) -> Iterator[Cluster]:
    """A 3-node cluster of each test's own, not the shared ``liftbridge_cluster``.

    After the earlier tests of a full run, v1.9.0 sometimes never settled after these
    kills: a restarted follower's replication requests to the new leader timed out, it
    reported the leader every 3 s and leadership moved between the two other nodes for
    minutes, longer than any publisher retries (seen twice in full runs, never on a fresh
    cluster; docs/testing.md). The client behaviour under test is the same.
    """
    # Debug: print_partition_history reads the nodes' debug lines on leaders and truncation.
    with Cluster(
        3, base_dir=tmp_path, versions=liftbridge_server_version, log_level="debug"
    ) as cluster:
        yield cluster


async def read_with_retries(client: Client, stream: str, committed: bool) -> list[Message]:
    """Read every partition to its end; a reader cut by a late failover starts again."""
    async with asyncio.timeout(120):
        while True:
            try:
                if committed:
                    parts = [(stream, p) for p in range(PARTITIONS)]
                    async with CommittedReader(client, parts, stop_at_latest=True) as reader:
                        return [m async for m in reader]
                out = []
                for p in range(PARTITIONS):
                    out += [
                        m async for m in read_uncommitted(client, stream, p, stop_at_latest=True)
                    ]
                return out
            except Exception as exc:
                if not getattr(exc, "retriable", False):
                    raise
                log.warning("read cut short (%r): reading again", exc)
                await asyncio.sleep(0.5)


async def leader_of(client: Client, stream: str, partition: int) -> str:
    try:
        meta = await client.fetch_metadata(stream)
    except Exception as exc:
        if getattr(exc, "retriable", False):
            return ""
        raise
    return meta.streams[stream].partitions[partition].leader


@KILLS_A_LEADER
@pytest.mark.timeout(600)
async def test_leader_kills_with_retries_read_committed_exactly_once(
    own_cluster: Cluster, stream_names: StreamNames
) -> None:
    liftbridge_cluster = own_cluster
    async with Client(
        liftbridge_cluster.addresses, nats_servers=[liftbridge_cluster.nats_url], options=OPTIONS
    ) as client:
        name, subject = stream_names("eo-faults")
        await client.create_stream(
            subject, name, StreamConfig(partitions=PARTITIONS, replication_factor=3)
        )
        publishers = [ExactlyOncePublisher(client) for _ in range(PUBLISHERS)]
        acked: list[bytes] = []
        progress = asyncio.Condition()

        async def worker(pub: ExactlyOncePublisher, partition: int, values: list[bytes]) -> None:
            for value in values:
                await pub.publish_committed(name, value, partition=partition)
                async with progress:
                    acked.append(value)
                    progress.notify_all()

        lanes = [(pub, p) for pub in publishers for p in range(PARTITIONS)]
        shares: list[list[bytes]] = [[] for _ in lanes]
        for i in range(MESSAGES):
            shares[i % len(lanes)].append(b"m-%06d" % i)
        publishing = asyncio.gather(
            *(worker(pub, p, share) for (pub, p), share in zip(lanes, shares, strict=True))
        )
        killed = []
        for k in range(1, KILLS + 1):
            target = MESSAGES * k // (KILLS + 1)
            async with progress:
                await progress.wait_for(lambda: len(acked) >= target)  # noqa: B023
            partition = k % PARTITIONS
            # A node restarted after the last kill may still be catching up: ALL acks mean
            # "on every replica" only once it is back in the ISR.
            leader = (await wait_for_full_isr(client, name, partition, timeout=90)).leader
            await asyncio.to_thread(liftbridge_cluster.node(leader).kill)
            killed.append(leader)
            # Restart it only once another node leads: else it may simply resume leading.
            async with asyncio.timeout(60):
                while (await leader_of(client, name, partition)) in (leader, ""):  # noqa: ASYNC110
                    await asyncio.sleep(0.2)  # the cluster offers no event to wait on
            await asyncio.to_thread(liftbridge_cluster.ensure_all_running, timeout=90)
        try:
            async with asyncio.timeout(420):
                await publishing
        except BaseException:
            print_partition_history(liftbridge_cluster, name)
            raise
        committed = await read_with_retries(client, name, committed=True)
        uncommitted = await read_with_retries(client, name, committed=False)

    got = Counter(m.value for m in committed)
    stored = Counter(m.value for m in uncommitted)
    lost = set(acked) - set(got)
    assert not lost, f"{len(lost)} acked messages lost: {sorted(lost)[:5]}"
    assert all(n == 1 for n in got.values()), "read_committed yielded a duplicate"
    assert set(got) == set(acked)
    duplicates = sum(n - 1 for n in stored.values())
    # Every stored copy of a value carries the UUID of its first copy: retries re-sent it.
    uuids: dict[bytes, set[bytes]] = {}
    for m in uncommitted:
        uuids.setdefault(m.value, set()).add(m.headers[UUID_HEADER])
    assert all(len(u) == 1 for u in uuids.values())
    retries = sum(p.retries for p in publishers)
    assert duplicates <= retries
    log.warning(
        "eo faults: %d acked, kills of %s, %d retries, %d duplicates stored, "
        "%d yielded by read_committed (0 lost, 0 duplicated)",
        len(acked),
        killed,
        retries,
        duplicates,
        len(committed),
    )


@KILLS_A_LEADER
@pytest.mark.timeout(300)
async def test_transaction_across_a_leader_kill_and_a_writer_crash_commits_once(
    own_cluster: Cluster, stream_names: StreamNames
) -> None:
    liftbridge_cluster = own_cluster
    async with Client(
        liftbridge_cluster.addresses, nats_servers=[liftbridge_cluster.nats_url], options=OPTIONS
    ) as client:
        streams = []
        for label in ("tx-a", "tx-b"):
            name, subject = stream_names(label)
            await client.create_stream(subject, name, StreamConfig(replication_factor=3))
            await wait_for_full_isr(client, name)
            streams.append(name)
        a, b = streams

        async def committed() -> Counter[bytes]:
            parts = [(a, 0), (b, 0)]
            async with (
                asyncio.timeout(60),
                CommittedReader(client, parts, stop_at_latest=True) as reader,
            ):
                return Counter([m.value async for m in reader])

        writer = ExactlyOncePublisher(client)
        for i in range(50):
            await writer.publish_uncommitted(a, b"a-%d" % i)
            await writer.publish_uncommitted(b, b"b-%d" % i)
            if i == 20:  # the leader of stream a dies mid-transaction
                leader = (await client.fetch_metadata(a)).streams[a].partitions[0].leader
                await asyncio.to_thread(liftbridge_cluster.node(leader).kill)
        assert await committed() == Counter()  # invisible until the intents are written
        checkpoint = intents_to_json(writer.build_ack_intents())
        await writer.write_ack_intents(intents_from_json(checkpoint)[:1])  # then it crashes
        await asyncio.to_thread(liftbridge_cluster.ensure_all_running, timeout=90)
        # A second transaction that the crashed writer never checkpointed.
        await writer.publish_uncommitted(a, b"lost-a")
        await writer.publish_uncommitted(b, b"lost-b")
        recovered = ExactlyOncePublisher(client)
        await recovered.write_ack_intents(intents_from_json(checkpoint))  # all, again
        got = await committed()
    expected = Counter([b"a-%d" % i for i in range(50)] + [b"b-%d" % i for i in range(50)])
    assert got == expected  # each once; the uncheckpointed transaction rolled back


@pytest.fixture
def eo_node_on_external_nats(tmp_path: Path) -> Iterator[Cluster]:
    """A node of this test's own on a NATS server it does not embed, so NATS can restart
    (not the shared cluster: see test_faults.py on v1.9.0 and NATS outages)."""
    with Cluster(1, base_dir=tmp_path) as cluster:
        yield cluster


@pytest.mark.timeout(300)
async def test_nats_outage_with_retries_read_committed_exactly_once(
    eo_node_on_external_nats: Cluster, stream_names: StreamNames
) -> None:
    node = eo_node_on_external_nats
    count = 1000
    async with Client(node.addresses, nats_servers=[node.nats_url], options=OPTIONS) as client:
        name, subject = stream_names("eo-nats")
        await client.create_stream(subject, name, StreamConfig(partitions=PARTITIONS))
        publishers = [ExactlyOncePublisher(client) for _ in range(PUBLISHERS)]
        acked: list[bytes] = []
        third = asyncio.Event()

        async def worker(pub: ExactlyOncePublisher, partition: int, values: list[bytes]) -> None:
            for value in values:
                await pub.publish_committed(name, value, partition=partition)
                acked.append(value)
                if len(acked) >= count // 3:
                    third.set()

        lanes = [(pub, p) for pub in publishers for p in range(PARTITIONS)]
        publishing = asyncio.gather(
            *(
                worker(pub, p, [b"n-%05d" % i for i in range(k, count, len(lanes))])
                for k, (pub, p) in enumerate(lanes)
            )
        )
        await third.wait()
        await asyncio.to_thread(node.nats.stop)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(node.nats.start)
        async with asyncio.timeout(240):
            await publishing
        committed = await read_with_retries(client, name, committed=True)
        uncommitted = await read_with_retries(client, name, committed=False)
    got = Counter(m.value for m in committed)
    assert set(got) == set(acked)
    assert len(acked) == count
    assert all(n == 1 for n in got.values())
    log.warning(
        "eo NATS outage: %d acked, %d retries, %d duplicates stored, 0 in read_committed",
        len(acked),
        sum(p.retries for p in publishers),
        len(uncommitted) - len({m.value for m in uncommitted}),
    )
