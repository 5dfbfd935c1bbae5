"""Subscriptions against real Liftbridge v1.9.0 servers.

Every start and stop position, the hidden handshake, each way the server ends a
subscription (with the exact status it sends), cancellation, reading from an ISR
replica, and a leader failover on the 3-node cluster with no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest
from compaction_support import compacted_stream, widest_gap
from replication_support import KILLS_A_LEADER, wait_for_full_isr

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    Message,
    RetryPolicy,
    StartPosition,
    StopPosition,
    StreamConfig,
    Transport,
    errors,
)
from liftbridge_client._native import ACTIVE
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client._transport.h2 import ServerStreamCall
from liftbridge_client.options import StreamTransport
from liftbridge_client.subscription import Subscription, WireMessages
from liftbridge_client.testing import (
    Cluster,
    Deployment,
    SingleNode,
    StreamName,
    StreamNames,
    wait_until,
)

pytestmark = pytest.mark.integration

OPTIONS = ClientOptions(
    transport=Transport.GRPC,
    rpc_timeout=3.0,
    resubscribe_wait=5.0,
    retry=RetryPolicy(attempts=5, initial_backoff=0.05, max_backoff=0.5),
)


@pytest.fixture(params=[StreamTransport.GRPC, StreamTransport.H2], ids=["grpc", "h2"])
def stream_transport(request: pytest.FixtureRequest) -> StreamTransport:
    """Every subscribe test runs on both stream transports."""
    transport: StreamTransport = request.param
    return transport


def with_transport(options: ClientOptions, transport: StreamTransport) -> ClientOptions:
    return dataclasses.replace(options, stream_transport=transport)


@pytest.fixture
async def client(
    liftbridge_server: Deployment, stream_transport: StreamTransport
) -> AsyncIterator[Client]:
    async with Client(
        liftbridge_server.addresses, options=with_transport(OPTIONS, stream_transport)
    ) as c:
        yield c


def reading(sub: Subscription) -> bool:
    """A reader waits on the subscription's call (grpc.aio: a read task; h2: a waiter)."""
    call = sub._call
    return sub._inflight is not None or (isinstance(call, ServerStreamCall) and call.waiting)


@pytest.fixture
async def stream(client: Client, unique_stream: StreamName) -> str:
    await client.create_stream(unique_stream.subject, unique_stream.name)
    return unique_stream.name


async def publish(client: Client, stream: str, *values: bytes) -> list[int]:
    offsets = []
    for value in values:
        ack = await client.publish(stream, value, ack_policy=AckPolicy.ALL)
        assert ack is not None
        offsets.append(ack.offset)
    return offsets


async def read(sub: Subscription, count: int, timeout: float = 5.0) -> list[Message]:
    async with asyncio.timeout(timeout):
        return [await anext(sub) for _ in range(count)]


async def drain(sub: Subscription, timeout: float = 5.0) -> list[Message]:
    """Everything until the subscription ends by itself."""
    async with asyncio.timeout(timeout):
        return [m async for m in sub]


def values(messages: Sequence[Message]) -> list[bytes]:
    return [m.value for m in messages]


def offsets(messages: Sequence[Message]) -> list[int]:
    return [m.offset for m in messages]


async def read_protos(sub: Subscription, count: int, timeout: float = 5.0) -> list[api_pb2.Message]:
    """``count`` messages through `Subscription._next_protos` (the Spark source's reads)."""
    out: list[api_pb2.Message] = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            got = await sub._next_protos(count - len(out))
            assert got, f"the subscription ended after {len(out)} of {count}"
            out.extend(got)
    return out


# ---------------------------------------------------------------- handshake, start positions


async def test_handshake_is_hidden_and_earliest_to_latest_reads_everything(
    client: Client, stream: str
) -> None:
    assert await publish(client, stream, b"m0", b"m1", b"m2") == [0, 1, 2]
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
    ) as sub:
        got = await drain(sub)
    # The first item is offset 0 with its payload: the server's empty handshake is not seen.
    assert offsets(got) == [0, 1, 2]
    assert values(got) == [b"m0", b"m1", b"m2"]
    assert all(m.stream == stream and m.partition == 0 and m.timestamp_ns > 0 for m in got)
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert str(sub.end_reason).endswith("Stop offset reached")


async def test_next_protos_gives_what_iterating_gives_in_batches_and_ends_the_same(
    client: Client, stream: str
) -> None:
    """The protobufs of `_next_protos` carry what the Messages of ``async for`` carry, in
    batches of at most the limit, and it returns [] where iteration stops."""
    sent = [b"m%d" % i for i in range(40)] + [b""]  # an empty value too
    await publish(client, stream, *sent)
    async with client.subscribe(stream, start_offset=3, stop_offset=40) as sub:
        expected = await drain(sub)
    async with client.subscribe(stream, start_offset=3, stop_offset=40) as sub:
        got: list[api_pb2.Message] = []
        sizes = []
        async with asyncio.timeout(5.0):
            while batch := await sub._next_protos(7):
                sizes.append(len(batch))
                got.extend(batch)
        assert await sub._next_protos(7) == []
        assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert max(sizes) <= 7
    assert [(p.offset, p.value, p.stream, p.partition, p.timestamp) for p in got] == [
        (m.offset, m.value, m.stream, m.partition, m.timestamp_ns) for m in expected
    ]
    assert [p.offset for p in got] == list(range(3, 41))
    assert sub.last_offset == 40
    backwards = client.subscribe(stream, start_offset=3, reverse=True)
    with pytest.raises(ValueError, match="forward"):
        await backwards._next_protos(1)
    await backwards.close()


async def test_next_wire_gives_next_protos_messages_as_bytes_where_it_can(
    client: Client, stream: str
) -> None:
    """`_next_wire` (the Spark source's plain reads) yields the messages `_next_protos`
    yields, in order and once each: over h2 with the accelerator, as undecoded bytes
    whose offsets it names; else decoded. Offsets before the start are never given."""
    sent = [b"w%d" % i for i in range(60)]
    await publish(client, stream, *sent)
    async with client.subscribe(stream, start_offset=5, stop_offset=59) as sub:
        got: list[api_pb2.Message] = []
        wired = decoded = 0
        async with asyncio.timeout(5.0):
            while chunk := await sub._next_wire(16):
                decoded += not isinstance(chunk, WireMessages)
                if isinstance(chunk, WireMessages):
                    wired += 1
                    pbs = [api_pb2.Message.FromString(raw) for raw in chunk.raws]
                    assert (chunk.first, chunk.last) == (pbs[0].offset, pbs[-1].offset)
                    assert len(pbs) <= 16
                    got.extend(pbs)
                else:
                    got.extend(chunk)
        assert await sub._next_wire(16) == []
        h2 = type(sub._call) is ServerStreamCall or sub._call is None
    assert [(p.offset, p.value, p.stream) for p in got] == [
        (i, sent[i], stream) for i in range(5, 60)
    ]
    on_h2 = client.options.stream_transport is StreamTransport.H2
    if ACTIVE and on_h2 and h2:
        # The bytes path serves, also when it has to wait for messages; only one that
        # came with the subscription's opening is read as it was.
        assert wired > 0
        assert decoded <= 1
    if not ACTIVE:
        assert wired == 0
    # Messages that arrive while it waits: the same, each once.
    async with client.subscribe(stream, start_offset=60, stop_offset=71) as sub:

        async def trickle() -> None:
            for i in range(12):
                await publish(client, stream, b"late%d" % i)
                await asyncio.sleep(0.02)

        feeder = asyncio.create_task(trickle())
        late: list[api_pb2.Message] = []
        kinds = []
        async with asyncio.timeout(10.0):
            while chunk := await sub._next_wire(16):
                kinds.append(isinstance(chunk, WireMessages))
                if isinstance(chunk, WireMessages):
                    late.extend(api_pb2.Message.FromString(raw) for raw in chunk.raws)
                else:
                    late.extend(chunk)
        await feeder
    assert [(p.offset, p.value) for p in late] == [(60 + i, b"late%d" % i) for i in range(12)]
    if ACTIVE and on_h2:
        assert kinds.count(False) <= 1


async def test_new_only_sees_only_what_is_published_after_it_is_established(
    client: Client, stream: str
) -> None:
    await publish(client, stream, b"old0", b"old1")
    async with client.subscribe(stream) as sub:  # NEW_ONLY; established on enter
        await publish(client, stream, b"new2", b"new3")
        got = await read(sub, 2)
    assert (offsets(got), values(got)) == ([2, 3], [b"new2", b"new3"])
    assert sub.end_reason is None


async def test_offset_start_and_stop(client: Client, stream: str) -> None:
    await publish(client, stream, *(b"m%d" % i for i in range(6)))
    async with client.subscribe(stream, start_offset=2, stop_offset=4) as sub:
        got = await drain(sub)
    assert offsets(got) == [2, 3, 4]
    assert isinstance(sub.end_reason, errors.StopPositionReached)


async def test_a_start_offset_past_the_high_watermark_is_where_the_read_starts(
    client: Client, stream: str, liftbridge_server: Deployment
) -> None:
    """The server starts such a read at its high watermark, not at the offset asked for
    (its committed reader keeps only the watermark while it waits; a failover's new leader
    is where clients meet it): the client drops what comes before the offset."""
    await publish(client, stream, b"m0", b"m1", b"m2")  # offsets 0-2: the watermark is 2

    async def raw_first_offset() -> int:
        async with grpc.aio.insecure_channel(liftbridge_server.addresses[0]) as channel:
            stub = api_pb2_grpc.APIStub(channel)
            call = stub.Subscribe(
                api_pb2.SubscribeRequest(
                    stream=stream, startPosition=api_pb2.StartPosition.OFFSET, startOffset=6
                ),
                timeout=30,
            )
            async for message in call:
                if message.value:  # past the empty handshake message
                    call.cancel()
                    return int(message.offset)
        raise AssertionError("the subscription ended")

    async with client.subscribe(stream, start_offset=6) as sub:
        raw = asyncio.ensure_future(raw_first_offset())
        reader = asyncio.ensure_future(read(sub, 4, timeout=20))
        await wait_until(lambda: reading(sub), timeout=10)
        await asyncio.sleep(0.5)  # the raw subscription is open too (no handshake to wait on)
        await publish(client, stream, *(b"m%d" % i for i in range(3, 10)))
        got = await reader
        assert [m.offset for m in got] == [6, 7, 8, 9]
        assert values(got) == [b"m6", b"m7", b"m8", b"m9"]
        assert await asyncio.wait_for(raw, 10) == 3  # what the server itself sent first


async def test_a_stop_offset_that_compaction_removed_ends_the_read_there(
    client: Client, unique_stream: StreamName
) -> None:
    """A v1.9.0 server ends a read only on the stop offset itself: when compaction removed
    it, the server sends the offsets past it and never ends. The client delivers none of
    them and ends at the first (`StopPositionReached`, as on the stop offset)."""
    name = unique_stream.name
    kept = await compacted_stream(client, unique_stream.subject, name)
    low, high = widest_gap(kept)  # offsets low+1 .. high-1 are gone
    stop = (low + high) // 2
    for start, wanted in ((low, [low]), (low + 1, []), (stop, [])):
        async with client.subscribe(name, start_offset=start, stop_offset=stop) as sub:
            got = await drain(sub, timeout=20)  # it ends by itself
        assert offsets(got) == wanted
        assert isinstance(sub.end_reason, errors.StopPositionReached)
        assert sub._past_stop == high  # the server's next offset, not delivered
        assert sub.last_offset == (wanted[-1] if wanted else None)
    # A stop offset that is there still ends the read on it, past nothing.
    async with client.subscribe(name, start_offset=low, stop_offset=high) as sub:
        assert offsets(await drain(sub, timeout=20)) == [low, high]
    assert sub._past_stop is None
    # A reverse read from inside the gap (v1.9.0: emulated by forward reads to stop offsets).
    async with client.subscribe(name, start_offset=stop, reverse=True) as sub:
        assert offsets(await drain(sub, timeout=20)) == [o for o in kept if o <= stop][::-1]


async def test_latest_starts_at_the_newest_message(client: Client, stream: str) -> None:
    await publish(client, stream, b"a", b"b", b"c")
    async with client.subscribe(stream, start=StartPosition.LATEST) as sub:
        first = await read(sub, 1)
        await publish(client, stream, b"d")
        second = await read(sub, 1)
    assert offsets(first + second) == [2, 3]


async def test_timestamp_start_and_stop(client: Client, stream: str) -> None:
    await publish(client, stream, b"a", b"b", b"c", b"d", b"e")
    async with client.subscribe(stream, start=StartPosition.EARLIEST, stop_offset=4) as sub:
        stamps = [m.timestamp_ns for m in await drain(sub)]
    async with client.subscribe(
        stream, start_timestamp_ns=stamps[1], stop_timestamp_ns=stamps[3]
    ) as sub:
        got = await drain(sub)
    assert offsets(got) == [1, 2, 3]
    assert isinstance(sub.end_reason, errors.StopPositionReached)


async def test_a_stop_time_before_the_oldest_message_is_an_empty_read(
    client: Client, stream: str
) -> None:
    """The server refuses it with INTERNAL "timestamp is before the beginning of the log";
    nothing lies at or before that time, so the read ends empty, as a stop offset before
    the start does (a start time before the log starts at the oldest message instead)."""
    await publish(client, stream, b"a", b"b")
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop_timestamp_ns=1_000_000_000
    ) as sub:
        got = await drain(sub)
    assert got == []
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert isinstance(sub.end_reason.__cause__, errors.InternalServerError)
    async with client.subscribe(
        stream, start_timestamp_ns=1_000_000_000, stop=StopPosition.LATEST
    ) as sub:
        assert values(await drain(sub)) == [b"a", b"b"]


async def test_time_delta_starts_that_many_seconds_back(client: Client, stream: str) -> None:
    await publish(client, stream, b"before0", b"before1")
    await asyncio.sleep(0.8)
    cut = time.time_ns()
    await publish(client, stream, b"after2", b"after3")
    # Reach 0.4 s before the cut: well after "before*", safely before "after*".
    delta = (time.time_ns() - cut) / 1e9 + 0.4
    async with client.subscribe(stream, start_time_delta=delta, stop=StopPosition.LATEST) as sub:
        got = await drain(sub)
    assert values(got) == [b"after2", b"after3"]


async def test_reverse_reads_newest_first_and_ends_on_every_server(
    client: Client, stream: str
) -> None:
    """v1.9.0 ignores SubscribeRequest field 12 (it would read forward and then wait): the
    client emulates the reverse read there, and reads natively where the server honours
    it (tests/integration/test_features.py covers each version)."""
    await publish(client, stream, b"a", b"b", b"c")
    async with client.subscribe(stream, start=StartPosition.LATEST, reverse=True) as sub:
        got = await drain(sub)
    assert values(got) == [b"c", b"b", b"a"]
    assert isinstance(sub.end_reason, errors.StopPositionReached)


async def test_a_missing_partition_or_stream_raises_not_found_on_enter(
    client: Client, stream: str
) -> None:
    with pytest.raises(errors.NotFoundError):
        async with client.subscribe(stream, partition=3):
            pass
    with pytest.raises(errors.NotFoundError):
        async with client.subscribe(stream + "-missing"):
            pass


async def test_invalid_arguments_fail_before_anything_is_sent(client: Client) -> None:
    with pytest.raises(errors.InvalidInputError):
        client.subscribe("any", start=StartPosition.OFFSET)
    with pytest.raises(errors.InvalidInputError):
        client.subscribe("any", start_offset=5, stop_offset=4)


# ---------------------------------------------------------------- how subscriptions end


async def test_stop_latest_on_an_empty_stream_ends_cleanly(client: Client, stream: str) -> None:
    # The server refuses with RESOURCE_EXHAUSTED "Stream is empty" (before any handshake).
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
    ) as sub:
        assert await drain(sub) == []
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    cause = sub.end_reason.__cause__
    assert isinstance(cause, errors.ResourceExhaustedError)
    assert cause.details == "Stream is empty"


async def test_readonly_while_subscribed_ends_cleanly(client: Client, stream: str) -> None:
    await publish(client, stream, b"a", b"b")
    async with client.subscribe(stream, start=StartPosition.EARLIEST) as sub:
        assert offsets(await read(sub, 2)) == [0, 1]
        await client.set_stream_readonly(stream)
        assert await drain(sub) == []
    assert isinstance(sub.end_reason, errors.ReadonlyPartitionEnd)
    cause = sub.end_reason.__cause__
    assert isinstance(cause, errors.ResourceExhaustedError)
    assert cause.details == "End of readonly partition"


async def test_subscribing_to_a_readonly_partition(client: Client, stream: str) -> None:
    await publish(client, stream, b"a", b"b")
    await client.set_stream_readonly(stream)
    # The server turns ON_CANCEL into "stop at the newest offset": RESOURCE_EXHAUSTED
    # "Stop offset reached" after the last message; the client reports a read-only end.
    async with client.subscribe(stream, start=StartPosition.EARLIEST) as sub:
        assert offsets(await drain(sub)) == [0, 1]
    assert isinstance(sub.end_reason, errors.ReadonlyPartitionEnd)
    assert sub.end_reason.__cause__ is not None
    assert getattr(sub.end_reason.__cause__, "details", "") == "Stop offset reached"
    # NEW_ONLY on it: INVALID_ARGUMENT "Stop offset is before start offset: 1 < 2".
    async with client.subscribe(stream) as sub:
        assert await drain(sub) == []
    assert isinstance(sub.end_reason, errors.ReadonlyPartitionEnd)
    cause = sub.end_reason.__cause__
    assert isinstance(cause, errors.InvalidArgumentError)
    assert cause.details == "Stop offset is before start offset: 1 < 2"


async def test_stream_deleted_while_subscribed_raises(client: Client, stream: str) -> None:
    await publish(client, stream, b"a")
    async with client.subscribe(stream, start=StartPosition.EARLIEST) as sub:
        await read(sub, 1)
        await client.delete_stream(stream)
        with pytest.raises(errors.StreamDeletedEnd) as info:
            await read(sub, 1)
    assert sub.end_reason is info.value
    cause = info.value.__cause__
    assert isinstance(cause, errors.NotFoundError)
    assert cause.details == "commit log was deleted"


async def test_partition_paused_while_subscribed_raises(client: Client, stream: str) -> None:
    await publish(client, stream, b"a")
    async with client.subscribe(stream, start=StartPosition.EARLIEST) as sub:
        await read(sub, 1)
        await client.pause_stream(stream)
        with pytest.raises(errors.PartitionPausedEnd) as info:
            await read(sub, 1)
    cause = info.value.__cause__
    assert isinstance(cause, errors.FailedPreconditionError)
    assert cause.details == "commit log was closed"


async def test_paused_partition_needs_resume(client: Client, stream: str) -> None:
    await publish(client, stream, b"a", b"b")
    await client.pause_stream(stream)
    # Without resume: INTERNAL "Failed to create stream reader: segment has been closed".
    with pytest.raises(errors.PartitionPausedEnd) as info:
        async with client.subscribe(stream, start=StartPosition.EARLIEST):
            pass
    cause = info.value.__cause__
    assert isinstance(cause, errors.InternalServerError)
    assert cause.details == "Failed to create stream reader: segment has been closed"
    assert "resume=True" in str(info.value)
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST, resume=True
    ) as sub:
        assert values(await drain(sub)) == [b"a", b"b"]
    # Resumed for good: a plain subscription works again.
    async with client.subscribe(stream, start=StartPosition.EARLIEST, stop_offset=1) as sub:
        assert values(await drain(sub)) == [b"a", b"b"]


# ---------------------------------------------------------------- close and cancel


async def test_cancelling_the_consumer_cancels_the_grpc_call(client: Client, stream: str) -> None:
    await publish(client, stream, b"a")
    sub = client.subscribe(stream, start=StartPosition.EARLIEST)
    got = asyncio.Event()

    async def consume() -> None:
        async with sub:
            async for _ in sub:
                got.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got.wait(), 5)
    call = sub._call
    assert call is not None
    await wait_until(lambda: reading(sub), what="the consumer waiting")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.cancelled()
    assert call.done()
    assert await call.code() is grpc.StatusCode.CANCELLED
    assert sub.closed
    assert sub not in client._subscriptions


async def test_read_timeouts_keep_the_subscription_and_lose_nothing(
    client: Client, stream: str
) -> None:
    async with client.subscribe(stream, start=StartPosition.NEW_ONLY) as sub:
        call = sub._call
        for _ in range(3):  # an idle stream: every read times out
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(sub), 0.05)
            with pytest.raises(errors.LiftbridgeTimeoutError):
                await sub.next(timeout=0.05)
        await publish(client, stream, b"a", b"b", b"c")
        got = [await sub.next(timeout=5) for _ in range(3)]
        assert values(got) == [b"a", b"b", b"c"]
        assert offsets(got) == [0, 1, 2]
        assert sub._call is call  # the same gRPC call throughout: no resubscribe
        assert sub.resubscribes == 0


async def test_close_from_another_task_ends_iteration(client: Client, stream: str) -> None:
    sub = client.subscribe(stream)
    async with sub:
        reader = asyncio.create_task(drain(sub))
        await wait_until(lambda: reading(sub), what="the reader waiting")
        await sub.close()
        assert await reader == []
    assert sub.end_reason is None


async def test_closing_the_client_closes_its_subscriptions(
    liftbridge_server: Deployment, unique_stream: StreamName, stream_transport: StreamTransport
) -> None:
    options = with_transport(OPTIONS, stream_transport)
    async with Client(liftbridge_server.addresses, options=options) as c:
        await c.create_stream(unique_stream.subject, unique_stream.name)
        sub = c.subscribe(unique_stream.name)
        await sub.__aenter__()
        reader = asyncio.create_task(drain(sub))
        await wait_until(lambda: reading(sub), what="the reader waiting")
    assert await reader == []
    assert sub.closed


# ---------------------------------------------------------------- cluster


async def _cluster_stream(client: Client, cluster: Cluster, names: StreamNames) -> str:
    """A stream replicated on every node, once every node's metadata lists it.

    CreateStream returns when the metadata leader has committed it; another node may
    apply it a moment later, and a lookup answered by that node would not find it.
    """
    name, subject = names("rf3")
    await client.create_stream(subject, name, StreamConfig(replication_factor=3))
    request = api_pb2.FetchMetadataRequest(streams=[name])
    async with asyncio.timeout(10):
        for address in cluster.addresses:
            stub = client._pool.stub(address)
            while True:  # polling a server: there is no event to wait on
                try:
                    response = await stub.FetchMetadata(request, timeout=5)
                except grpc.aio.AioRpcError as exc:
                    # A node a previous test killed and restarted may still be starting.
                    if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                        raise
                    await asyncio.sleep(0.2)
                    continue
                if response.streamMetadata[0].partitions:
                    break
                await asyncio.sleep(0.05)
    return name


async def test_read_isr_replica_reads_from_a_follower(
    liftbridge_cluster: Cluster, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    options = with_transport(OPTIONS, stream_transport)
    async with Client(liftbridge_cluster.addresses, options=options) as client:
        stream = await _cluster_stream(client, liftbridge_cluster, stream_names)
        await publish(client, stream, b"a", b"b", b"c")
        md = await client.fetch_metadata(stream)
        part = md.streams[stream].partitions[0]
        leader = md.broker(part.leader)
        assert leader is not None
        isr = {b.address for b in md.brokers if b.id in part.isr}
        followers_seen: set[str] = set()
        for _ in range(12):  # a random ISR member each time: 2 of 3 are followers
            async with client.subscribe(
                stream, start=StartPosition.EARLIEST, stop_offset=2, read_isr_replica=True
            ) as sub:
                assert values(await drain(sub)) == [b"a", b"b", b"c"]
            assert sub.broker in isr
            if sub.broker != leader.address:
                followers_seen.add(sub.broker)
            if followers_seen:
                break
        assert followers_seen, "read_isr_replica never picked a follower in 12 tries"
        # Without it, a follower refuses: FAILED_PRECONDITION "Server not partition leader".
        follower = next(iter(followers_seen))
        stub = client._pool.stub(follower)
        call = stub.Subscribe(api_pb2.SubscribeRequest(stream=stream))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert info.value.details() == "Server not partition leader"
        await client.delete_stream(stream)


async def _wait_for_new_leader(client: Client, stream: str, dead: str, timeout: float) -> str:
    """The new partition leader, once it leads (it then takes publishes from NATS)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # Answered only by a broker whose partition has finished becoming leader.
            part = await client.fetch_partition_metadata(stream)
        except errors.LiftbridgeError:
            part = None
        if part is not None and part.leader not in ("", dead):
            return part.leader
        await asyncio.sleep(0.2)
    raise AssertionError(f"no new leader for {stream} within {timeout}s")


@KILLS_A_LEADER
@pytest.mark.parametrize("protos", [False, True], ids=["messages", "next_protos"])
async def test_leader_failover_resubscribes_without_gap_or_duplicate(
    liftbridge_cluster: Cluster,
    stream_names: StreamNames,
    stream_transport: StreamTransport,
    protos: bool,
) -> None:
    options = ClientOptions(
        transport=Transport.GRPC,
        rpc_timeout=2.0,
        resubscribe_wait=20.0,
        metadata_refresh_interval=None,
        ack_wait=10.0,
        retry=RetryPolicy(attempts=5, initial_backoff=0.05, max_backoff=0.5),
        stream_transport=stream_transport,
    )
    async with Client(liftbridge_cluster.addresses, options=options) as client:
        stream = await _cluster_stream(client, liftbridge_cluster, stream_names)
        await wait_for_full_isr(client, stream)  # an ALL ack means "on every replica" only then
        before = [b"before-%d" % i for i in range(5)]
        after = [b"after-%d" % i for i in range(5)]
        await publish(client, stream, *before)  # ack ALL: every replica has them
        md = await client.fetch_metadata(stream)
        old_leader = md.streams[stream].partitions[0].leader
        old_address = liftbridge_cluster.node(old_leader).address

        async with client.subscribe(stream, start=StartPosition.EARLIEST) as sub:
            assert sub.broker == old_address
            # part of what is there: the rest is in flight
            received = [
                (m.offset, m.value) for m in await (read_protos if protos else read)(sub, 3)
            ]

            await asyncio.to_thread(liftbridge_cluster.node(old_leader).kill)  # SIGKILL
            new_leader = await _wait_for_new_leader(client, stream, old_leader, timeout=20)
            await publish(client, stream, *after)  # through the surviving nodes

            rest = len(before) + len(after) - 3
            if protos:
                received += [(m.offset, m.value) for m in await read_protos(sub, rest, 25)]
            else:
                received += [(m.offset, m.value) for m in await read(sub, rest, timeout=25)]
            assert sub.resubscribes >= 1
            assert sub.broker == liftbridge_cluster.node(new_leader).address

        assert [offset for offset, _ in received] == list(range(10))
        assert [value for _, value in received] == before + after
        await asyncio.to_thread(liftbridge_cluster.node(old_leader).start)
        # Whole again (every node serving, metadata complete) before the next test uses it.
        await asyncio.to_thread(liftbridge_cluster.wait_ready)


async def test_a_node_restart_resubscribes_instead_of_reporting_a_deleted_stream(
    tmp_path: Path, stream_transport: StreamTransport
) -> None:
    """A node SIGKILLed and started again: the subscription comes back and reads on, and
    does not take the restart for a deleted stream (a restarting node can answer NOT_FOUND
    "No such partition" before it has loaded its streams; the fault suite saw a
    read_committed reader end with StreamDeletedEnd that way). Pinned here for a plain
    subscription, which passed 6 of 6 runs; a stream really deleted still ends it with
    StreamDeletedEnd (the test above)."""
    options = dataclasses.replace(with_transport(OPTIONS, stream_transport), resubscribe_wait=30.0)
    with SingleNode(base_dir=tmp_path) as node:
        async with Client(node.addresses, options=options) as client:
            await client.create_stream("restart.subject", "restart")
            await publish(client, "restart", b"before")
            async with client.subscribe("restart", start=StartPosition.EARLIEST) as sub:
                assert values(await read(sub, 1)) == [b"before"]
                await asyncio.to_thread(node.node.kill)
                await asyncio.to_thread(node.node.start)
                async with asyncio.timeout(30):
                    while True:  # publishes fail until the node serves again
                        try:
                            await publish(client, "restart", b"after")
                            break
                        except errors.LiftbridgeError:
                            await asyncio.sleep(0.2)
                got = await read(sub, 1, timeout=30)
                assert values(got) == [b"after"]
                assert sub.end_reason is None
