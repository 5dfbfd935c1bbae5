"""Consumer groups against a real Liftbridge v1.9.0 node (fast group timeouts).

The node runs with `GROUP_SETTINGS` (3 s consumer and coordinator timeouts), so an
expired member is noticed in seconds. Cluster faults are in test_groups_cluster.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from liftbridge_client import (
    Client,
    ClientOptions,
    Consumer,
    ConsumerOptions,
    RetryPolicy,
    StreamConfig,
    errors,
)
from liftbridge_client.groups import group_cursor_id
from liftbridge_client.subscription import Subscription
from liftbridge_client.testing import (
    GROUP_SETTINGS,
    SingleNode,
    StreamName,
    wait_until,
)

pytestmark = pytest.mark.integration

OPTIONS = ClientOptions(
    rpc_timeout=5.0, retry=RetryPolicy(attempts=5, initial_backoff=0.05, max_backoff=0.5)
)
FAST = ConsumerOptions(commit_interval=0.2, fetch_interval=0.2)
PARTITIONS = 6


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    with SingleNode(base_dir=tmp_path_factory.mktemp("groups"), settings=GROUP_SETTINGS) as n:
        yield n


@pytest.fixture
async def client(node: SingleNode) -> AsyncIterator[Client]:
    async with Client(node.addresses, options=OPTIONS) as c:
        yield c


Seen = dict[tuple[int, int], list[str]]  # (partition, offset) -> consumer ids that got it


class Member:
    """A consumer reading in a task, recording who got which message."""

    def __init__(self, consumer: Consumer, seen: Seen) -> None:
        self.consumer = consumer
        self.seen = seen
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Member:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for msg in self.consumer:
            self.seen[(msg.partition, msg.offset)].append(self.consumer.consumer_id)

    async def crash(self) -> None:
        """Stop without leaving or committing what was not committed yet."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.consumer.close(leave=False, commit_last=False)

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.close()


async def publish(client: Client, stream: str, per_partition: int, start: int = 0) -> None:
    for i in range(start, start + per_partition):
        await asyncio.gather(
            *(client.publish(stream, b"v%d" % i, partition=p) for p in range(PARTITIONS))
        )


async def balanced(members: list[Member], timeout: float = 20.0) -> None:
    """Wait until the members' assignments are disjoint and cover every partition."""

    def ok() -> bool:
        sets = [m.consumer.assignments for m in members]
        union = frozenset().union(*sets)
        return (
            sum(len(s) for s in sets) == PARTITIONS
            and len(union) == PARTITIONS
            and all(sets)
            and max(map(len, sets)) - min(map(len, sets)) <= 1
        )

    await wait_until(ok, timeout=timeout, what="a balanced assignment")


@pytest.mark.parametrize("members", [2, 3])
async def test_members_share_partitions_each_read_by_exactly_one(
    client: Client, unique_stream: StreamName, members: int
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=PARTITIONS))
    seen: Seen = defaultdict(list)
    group = f"g-{stream}"
    async with contextlib.AsyncExitStack() as stack:
        running = [
            await stack.enter_async_context(
                Member(client.consumer(group, [stream], options=FAST), seen)
            )
            for _ in range(members)
        ]
        await balanced(running)
        owner = {p: m.consumer.consumer_id for m in running for (_, p) in m.consumer.assignments}
        await publish(client, stream, 5)
        await wait_until(lambda: len(seen) == PARTITIONS * 5, timeout=20, what="every message")
        for (partition, _), who in seen.items():
            assert who == [owner[partition]]  # once, by the partition's owner
        md = await client.fetch_metadata(groups=[group, "no-such-group"])
        assert set(md.groups) == {group}  # unknown groups are left out
        info = md.groups[group]
        assert info.coordinator == "n1"
        assert info.epoch == running[0].consumer.epoch


async def test_a_member_that_crashes_loses_its_partitions_after_the_timeout(
    client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=PARTITIONS))
    seen: Seen = defaultdict(list)
    group = f"g-{stream}"
    async with (
        Member(client.consumer(group, [stream], options=FAST), seen) as a,
        Member(client.consumer(group, [stream], options=FAST), seen) as b,
    ):
        await balanced([a, b])
        await publish(client, stream, 3)
        await wait_until(lambda: len(seen) == PARTITIONS * 3, timeout=20, what="first batch")
        lost = b.consumer.assignments
        await b.crash()
        # The server expires b after groups.consumer.timeout (3 s); a then gets everything.
        await wait_until(
            lambda: len(a.consumer.assignments) == PARTITIONS, timeout=30, what="reassignment"
        )
        await publish(client, stream, 3, start=3)
        await wait_until(lambda: len(seen) == PARTITIONS * 6, timeout=20, what="second batch")
        for p in {p for _, p in lost}:
            for offset in range(3, 6):
                assert a.consumer.consumer_id in seen[(p, offset)]
        # Nothing is lost: every offset of every partition was read.
        assert set(seen) == {(p, o) for p in range(PARTITIONS) for o in range(6)}


async def test_a_member_joining_mid_stream_rebalances_without_gaps(
    client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=PARTITIONS))
    seen: Seen = defaultdict(list)
    group = f"g-{stream}"
    per_partition = 40
    async with Member(client.consumer(group, [stream], options=FAST), seen) as a:
        await wait_until(lambda: len(a.consumer.assignments) == PARTITIONS, what="a owns all")
        publisher = asyncio.create_task(publish(client, stream, per_partition))
        await wait_until(lambda: len(seen) >= PARTITIONS * 10, timeout=20, what="progress")
        async with Member(client.consumer(group, [stream], options=FAST), seen) as b:
            await balanced([a, b])
            await publisher
            total = PARTITIONS * per_partition
            await wait_until(lambda: len(seen) == total, timeout=30, what="every message")
            assert set(seen) == {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}
            moved = {p for _, p in b.consumer.assignments}
            assert len(moved) == PARTITIONS // 2
            # Only messages around the hand-over may be read twice (processed but not yet
            # committed when the partition moved), never more than a few per partition.
            twice = [k for k, who in seen.items() if len(who) > 1]
            assert all(p in moved for p, _ in twice)
            assert b.consumer.consumer_id in {w for (p, _), who in seen.items() for w in who}


async def test_positions_are_committed_and_a_restart_resumes_after_them(
    client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=2))
    group = f"g-{stream}"
    for i in range(10):
        await client.publish(stream, b"%d" % i, partition=i % 2)
    manual = ConsumerOptions(commit_interval=None, fetch_interval=0.2, consumer_id="solo")
    assert client.consumer(group, [stream], options=manual).cursor_id == group_cursor_id(group)
    async with client.consumer(group, [stream], options=manual) as consumer:
        got = [await consumer.next(timeout=10) for _ in range(6)]
        await consumer.commit()  # the sixth included
        committed = {
            p: await client.fetch_cursor(group_cursor_id(group), stream, partition=p)
            for p in (0, 1)
        }
        assert committed == {p: max(m.offset for m in got if m.partition == p) for p in (0, 1)}
        await consumer.close(commit_last=False)
    async with client.consumer(group, [stream], options=manual) as again:
        rest = [await again.next(timeout=10) for _ in range(4)]
    assert sorted((m.partition, m.offset) for m in got + rest) == [
        (p, o) for p in (0, 1) for o in range(5)
    ]


async def test_a_restarted_member_with_the_same_id_takes_its_own_place(
    client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=2))
    group = f"g-{stream}"
    options = ConsumerOptions(consumer_id="worker-1", fetch_interval=0.2)
    first = client.consumer(group, [stream], options=options)
    assert await first.wait_assigned(timeout=10) == {(stream, 0), (stream, 1)}
    await first.close(leave=False)  # a crash: the membership stays until it expires
    async with client.consumer(group, [stream], options=options) as again:
        assert await again.wait_assigned(timeout=10) == {(stream, 0), (stream, 1)}
        await client.publish(stream, b"after", partition=1)
        msg = await again.next(timeout=10)
        assert (msg.partition, msg.value) == (1, b"after")


async def test_joining_for_a_missing_stream_fails(client: Client) -> None:
    consumer = client.consumer("g-missing", ["no-such-stream-for-groups"])
    with pytest.raises(errors.FailedPreconditionError, match="stream"):
        await consumer.start()
    await consumer.close()


MEMBER_SCRIPT = """
import asyncio, sys
from liftbridge_client import StreamConfig, Client, ConsumerOptions

async def main(address, group, stream):
    async with Client([address]) as client:
        consumer = client.consumer(group, [stream], options=ConsumerOptions(fetch_interval=0.2))
        await consumer.wait_assigned(lambda parts: len(parts) == 3, timeout=30)
        print("assigned", flush=True)
        async for _ in consumer:
            pass

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_member_process_killed_loses_its_partitions_after_the_timeout(
    node: SingleNode, client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=PARTITIONS))
    group = f"g-{stream}"
    seen: Seen = defaultdict(list)
    async with Member(client.consumer(group, [stream], options=FAST), seen) as survivor:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            MEMBER_SCRIPT,
            node.address,
            group,
            stream,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
            assert line.strip() == b"assigned"
            await survivor.consumer.wait_assigned(lambda parts: len(parts) == 3, timeout=30)
        finally:
            process.kill()  # SIGKILL: no leave, no commit
            await process.wait()
        await survivor.consumer.wait_assigned(lambda parts: len(parts) == PARTITIONS, timeout=30)
        await publish(client, stream, 2)
        await wait_until(lambda: len(seen) == PARTITIONS * 2, timeout=20, what="every message")


async def test_closing_the_client_closes_its_consumers_and_leaves(
    node: SingleNode, client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream)
    group = f"g-{stream}"
    async with Client(node.addresses, options=OPTIONS) as other:
        consumer = other.consumer(group, [stream], options=FAST)
        await consumer.wait_assigned(timeout=10)
        assert group in (await client.fetch_metadata(groups=[group])).groups
    assert consumer.closed
    # The last member left, so the server deleted the group at once (no timeout).
    assert group not in (await client.fetch_metadata(groups=[group])).groups


async def test_a_custom_cursor_id(client: Client, unique_stream: StreamName) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream)
    group = f"g-{stream}"
    await client.publish(stream, b"one")
    options = ConsumerOptions(cursor_id=group, fetch_interval=0.2)  # the group id itself
    async with client.consumer(group, [stream], options=options) as consumer:
        assert (await consumer.next(timeout=10)).value == b"one"
    assert await client.fetch_cursor(group, stream) == 0
    assert await client.fetch_cursor(group_cursor_id(group), stream) == -1


async def test_members_joining_a_new_group_at_once_all_get_in(
    client: Client, node: SingleNode, unique_stream: StreamName
) -> None:
    """Joins racing to create a group: the server refuses all but one with "consumer group
    already exists"; the others join again and find it (seen by the fault suite)."""
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=2))
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(Client(node.addresses, options=OPTIONS))
            for _ in range(4)
        ]
        for round_ in range(5):
            group = f"g-race-{round_}-{stream}"
            consumers = [c.consumer(group, [stream], options=FAST) for c in clients]
            await asyncio.gather(*(consumer.start() for consumer in consumers))  # none raises

            def shared() -> bool:
                sets = [consumer.assignments for consumer in consumers]  # noqa: B023
                return sum(map(len, sets)) == 2 and frozenset().union(*sets) == {
                    (stream, 0),
                    (stream, 1),
                }

            await wait_until(shared, timeout=20, what="both partitions assigned once")
            await asyncio.gather(*(consumer.close() for consumer in consumers))


async def test_a_reader_whose_subscription_ends_cleanly_is_started_again(
    client: Client, unique_stream: StreamName
) -> None:
    """A partition reader ended without an error (here its first subscription stops after
    offset 1, as a StopPositionReached end) is restarted by the next assignment round;
    only a read-only partition's end is for good (seen by the fault suite: never restarted)."""
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream)
    consumer = client.consumer(f"g-{stream}", [stream], options=FAST)
    real = consumer._subscribe
    calls = 0

    def first_stops_early(*args: Any, **kwargs: Any) -> Subscription:
        nonlocal calls
        calls += 1
        if calls == 1:
            kwargs = {**kwargs, "stop_offset": 1}
        return real(*args, **kwargs)

    consumer._subscribe = first_stops_early
    for i in range(4):
        await client.publish(stream, b"v%d" % i)
    async with consumer:
        got = [(await consumer.next(timeout=15)).offset for _ in range(4)]
    assert got == [0, 1, 2, 3]
    assert calls >= 2
