"""Consumer groups on a 3-node cluster whose coordinator is SIGKILLed, stock and patched.

A cluster of its own with `GROUP_SETTINGS` (3 s consumer and coordinator timeouts): the
members report the silent coordinator, the cluster elects another, and consumption goes
on. Every acknowledged message must be read by some member: 0 lost (duplicates allowed).

It runs on v1.9.0 and on v1.9.0+lbc.1. After the test the killed node is restarted, and no
node may have exited on its own, with one pinned exception: v1.9.0's consumer-group expiry
panic (docs/compatibility.md, report 8, fixed by patch 0008), which this scenario hit once
in CI (a survivor exited while the killed coordinator came back). The patched build must
never exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    Consumer,
    ConsumerOptions,
    RetryPolicy,
    StreamConfig,
    errors,
)
from liftbridge_client.testing import (
    GROUP_SETTINGS,
    LIFTBRIDGE_VERSION,
    PATCHED_VERSION,
    Cluster,
    ServerStartError,
    StreamName,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.cluster,
    pytest.mark.liftbridge_version(LIFTBRIDGE_VERSION, PATCHED_VERSION),
]

OPTIONS = ClientOptions(
    ack_wait=4.0,
    rpc_timeout=3.0,
    retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0),
)
FAST = ConsumerOptions(commit_interval=0.3, fetch_interval=0.3)
PARTITIONS = 6


# What a v1.9.0 node prints when it dies of report 8 (the Go panic's stack frame).
EXPIRY_PANIC = "(*consumerGroup).consumerExpired"

_log = logging.getLogger(__name__)


@pytest.fixture(scope="module", params=[LIFTBRIDGE_VERSION, PATCHED_VERSION])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with Cluster(
        3,
        base_dir=tmp_path_factory.mktemp("groups-cluster"),
        settings=GROUP_SETTINGS,
        versions=request.param,
    ) as c:
        yield c


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with Client(cluster.addresses, options=OPTIONS) as c:
        yield c
    crashed = restore(cluster)
    for name, log in crashed.items():
        if cluster.versions[0] == PATCHED_VERSION or EXPIRY_PANIC not in log:
            pytest.fail(f"{name} ({cluster.versions[0]}) exited on its own:\n{log[-4000:]}")
        _log.warning("%s hit v1.9.0's consumer-group expiry panic (report 8)", name)


def restore(cluster: Cluster) -> dict[str, str]:
    """Restart every stopped node; return the logs of those that exited on their own.

    A node that dies while another comes back (the crash CI saw) is restarted too.
    """
    crashed: dict[str, str] = {}
    for attempt in (1, 2):
        for node in cluster.nodes:
            if node.exited_unexpectedly:
                crashed[node.server_id] = node.logs()
        try:
            cluster.ensure_all_running()
        except ServerStartError:
            if attempt == 2:
                raise
        else:
            break
    for node in cluster.nodes:  # exited after the cluster was whole again
        if node.exited_unexpectedly:
            crashed[node.server_id] = node.logs()
    return crashed


async def read_all(consumer: Consumer, seen: set[bytes]) -> None:
    async for msg in consumer:
        seen.add(msg.value)


async def publish_acked(
    client: Client, stream: str, values: list[bytes], acked: set[bytes]
) -> None:
    """Publish each value (round robin over partitions) until acked (ack ALL)."""
    for value in values:
        for attempt in itertools.count(1):
            try:
                await client.publish(
                    stream, value, partition=len(acked) % PARTITIONS, ack_policy=AckPolicy.ALL
                )
                acked.add(value)
                break
            except errors.LiftbridgeError:
                if attempt > 60:
                    raise
                await asyncio.sleep(0.2)


async def test_coordinator_sigkill_recovers_with_nothing_lost(
    cluster: Cluster,
    client: Client,
    unique_stream: StreamName,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = unique_stream.name
    await client.create_stream(
        unique_stream.subject, stream, StreamConfig(partitions=PARTITIONS, replication_factor=3)
    )
    group = f"g-{stream}"
    seen: set[bytes] = set()
    acked: set[bytes] = set()
    a = client.consumer(group, [stream], options=FAST)
    b = client.consumer(group, [stream], options=FAST)
    async with a, b:
        tasks = [asyncio.create_task(read_all(c, seen)) for c in (a, b)]
        try:
            await wait_until(
                lambda: len(a.assignments) == len(b.assignments) == PARTITIONS // 2,
                timeout=20,
                what="a balanced assignment",
            )
            before = [b"before-%03d" % i for i in range(60)]
            await publish_acked(client, stream, before, acked)
            await wait_until(lambda: acked <= seen, timeout=20, what="the first batch")

            md = await client.fetch_metadata(groups=[group])
            old = md.groups[group]
            cluster.node(old.coordinator).kill()

            during = [b"during-%03d" % i for i in range(60)]
            await publish_acked(client, stream, during, acked)
            # The members report the silent coordinator; the cluster picks another.
            await wait_until(
                lambda: old.coordinator not in (a.coordinator, b.coordinator),
                timeout=45,
                what="a new coordinator",
            )
            assert a.epoch > old.epoch
            # The cluster moves a group only when its members report the coordinator.
            assert "reporting it" in caplog.text
            after = [b"after-%03d" % i for i in range(60)]
            await publish_acked(client, stream, after, acked)
            await wait_until(lambda: acked <= seen, timeout=60, what="every acked message")
            assert len(acked) == 180
            assert acked - seen == set()  # 0 lost
            assert a.assignments | b.assignments == {(stream, p) for p in range(PARTITIONS)}
            new = (await client.fetch_metadata(groups=[group])).groups[group]
            assert new.coordinator != old.coordinator
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
