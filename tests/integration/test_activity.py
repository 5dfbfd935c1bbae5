"""The activity stream against a real Liftbridge v1.9.0 node: every event type, typed.

The node runs with `ACTIVITY_STREAM_SETTINGS` (and `GROUP_SETTINGS`, so that an expired
member's leave comes in seconds); the shared ``liftbridge_server`` runs without the
activity stream, for the error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from liftbridge_client import (
    Client,
    ClientOptions,
    ConsumerOptions,
    RetryPolicy,
    StartPosition,
    StreamConfig,
    errors,
)
from liftbridge_client.activity import (
    ActivityEvent,
    ActivityOp,
    ActivityStream,
    GroupJoined,
    GroupLeft,
    StreamCreated,
    StreamDeleted,
    StreamPaused,
    StreamReadonlyChanged,
    StreamResumed,
)
from liftbridge_client.testing import (
    ACTIVITY_STREAM_SETTINGS,
    GROUP_SETTINGS,
    Deployment,
    SingleNode,
    StreamName,
)

pytestmark = pytest.mark.integration

OPTIONS = ClientOptions(
    rpc_timeout=5.0, retry=RetryPolicy(attempts=5, initial_backoff=0.05, max_backoff=0.5)
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    settings = {**GROUP_SETTINGS, **ACTIVITY_STREAM_SETTINGS}
    with SingleNode(base_dir=tmp_path_factory.mktemp("activity"), settings=settings) as n:
        yield n


@pytest.fixture
async def client(node: SingleNode) -> AsyncIterator[Client]:
    async with Client(node.addresses, options=OPTIONS) as c:
        yield c


async def events_about(
    activity: ActivityStream, name: str, count: int, timeout: float = 20.0
) -> list[ActivityEvent]:
    """The next ``count`` events that concern stream or group ``name``."""
    found: list[ActivityEvent] = []
    while len(found) < count:
        event = await activity.next(timeout)
        about = getattr(event, "stream", None) or getattr(event, "group_id", None)
        streams = getattr(event, "streams", ())
        if about == name or name in streams:
            found.append(event)
    return found


async def test_stream_events_are_typed_in_order_and_resumable(
    client: Client, unique_stream: StreamName
) -> None:
    stream = unique_stream.name
    async with client.activity(start=StartPosition.NEW_ONLY) as activity:
        # NEW_ONLY starts after the newest event: wait until the subscription is live.
        await client.create_stream(unique_stream.subject, stream, StreamConfig(partitions=3))
        await client.pause_stream(stream, partitions=[1, 2])
        await client.publish(stream, b"x", partition=1)  # publishing resumes partition 1
        await client.set_stream_readonly(stream, partitions=[0])
        await client.delete_stream(stream)
        events = await events_about(activity, stream, 5)
    created, paused, resumed, readonly, deleted = events
    assert isinstance(created, StreamCreated)
    assert created.partitions == (0, 1, 2)
    assert isinstance(paused, StreamPaused)
    assert (paused.partitions, paused.resume_all) == ((1, 2), False)
    assert isinstance(resumed, StreamResumed)
    assert resumed.partitions == (1,)
    assert isinstance(readonly, StreamReadonlyChanged)
    assert (readonly.partitions, readonly.readonly) == ((0,), True)
    assert isinstance(deleted, StreamDeleted)
    assert [e.op for e in events] == [
        ActivityOp.CREATE_STREAM,
        ActivityOp.PAUSE_STREAM,
        ActivityOp.RESUME_STREAM,
        ActivityOp.SET_STREAM_READONLY,
        ActivityOp.DELETE_STREAM,
    ]
    ids = [e.id for e in events]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert all(e.timestamp_ns > 0 for e in events)
    # Resuming after an event gives the ones that followed it.
    async with client.activity(start_offset=paused.offset + 1) as again:
        later = await events_about(again, stream, 3)
    assert later == [resumed, readonly, deleted]


async def test_group_joins_and_leaves_are_events(client: Client, unique_stream: StreamName) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream)
    group = f"g-{stream}"
    fast = ConsumerOptions(fetch_interval=0.2, commit_interval=None)
    async with client.activity(start=StartPosition.NEW_ONLY) as activity:
        first = client.consumer(group, [stream], options=fast)
        second = client.consumer(group, [stream], options=fast)
        await first.start()
        await second.start()
        await first.close()  # a leave
        await second.close(leave=False)  # silent: expired after groups.consumer.timeout
        events = await events_about(activity, group, 4)
    joined_first, joined_second, left_first, left_second = events
    assert isinstance(joined_first, GroupJoined)
    assert (joined_first.consumer_id, joined_first.streams) == (first.consumer_id, (stream,))
    assert isinstance(joined_second, GroupJoined)
    assert joined_second.consumer_id == second.consumer_id
    assert isinstance(left_first, GroupLeft)
    assert (left_first.consumer_id, left_first.expired) == (first.consumer_id, False)
    assert isinstance(left_second, GroupLeft)
    assert (left_second.consumer_id, left_second.expired) == (second.consumer_id, True)


async def test_a_server_without_the_activity_stream_says_so(
    liftbridge_server: Deployment,
) -> None:
    async with Client(liftbridge_server.addresses, options=OPTIONS) as client:
        with pytest.raises(
            errors.FeatureNotSupportedError, match=r"activity\.stream\.enabled"
        ) as info:
            async with client.activity():
                pass
        assert info.value.feature == "activity_stream"
        with pytest.raises(errors.FeatureNotSupportedError):
            await client.activity().next(1.0)


async def test_a_member_dropped_for_silence_joins_again(
    client: Client, unique_stream: StreamName, caplog: pytest.LogCaptureFixture
) -> None:
    stream = unique_stream.name
    await client.create_stream(unique_stream.subject, stream)
    group = f"g-{stream}"
    # Fetching every 4 s against the node's 3 s consumer timeout: dropped between fetches.
    slow = ConsumerOptions(fetch_interval=4.0, commit_interval=None)
    async with client.activity(start=StartPosition.NEW_ONLY) as activity:
        consumer = client.consumer(group, [stream], options=slow)
        await consumer.start()
        joined, dropped, rejoined = await events_about(activity, group, 3, timeout=30)
        await consumer.close()
    assert "not below the server's consumer timeout" in caplog.text
    assert isinstance(joined, GroupJoined)
    assert isinstance(dropped, GroupLeft)
    assert (dropped.consumer_id, dropped.expired) == (consumer.consumer_id, True)
    assert isinstance(rejoined, GroupJoined)
    assert rejoined.consumer_id == consumer.consumer_id
