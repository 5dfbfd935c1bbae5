"""Publishing against real Liftbridge v1.9.0 servers, over NATS and over gRPC.

Messages are read back with a raw gRPC Subscribe (the generated stub, not the client's
Subscription), so these tests pin the publish path alone. Also pinned here: what the server
does when it answers nothing (paused or read-only partitions over NATS), its publish errors
(optimistic concurrency, read-only, too large), and the client's own guarantees (ordering,
the in-flight window, flush, close with pending acks, no task left behind).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    StreamConfig,
    Transport,
    errors,
)
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client._publish.route import Slots
from liftbridge_client._transport.grpc import publish_status_error
from liftbridge_client.options import StreamTransport
from liftbridge_client.partitioning import KeyPartitioner, RoundRobinPartitioner, key_partition
from liftbridge_client.testing import (
    Cluster,
    Deployment,
    SingleNode,
    StreamName,
    StreamNames,
    tasks_left,
    wait_until,
)

pytestmark = pytest.mark.integration

# NATS, and gRPC on both stream transports (grpc.aio and h2).
BOTH = pytest.mark.parametrize(
    ("transport", "stream_transport"),
    [
        (Transport.NATS, StreamTransport.GRPC),
        (Transport.GRPC, StreamTransport.GRPC),
        (Transport.GRPC, StreamTransport.H2),
    ],
    ids=["nats", "grpc", "h2"],
)
# A test that publishes over gRPC: once per stream transport.
STREAMS = pytest.mark.parametrize(
    "stream_transport", [StreamTransport.GRPC, StreamTransport.H2], ids=["grpc", "h2"]
)


@pytest.fixture
def stream_transport() -> StreamTransport:
    return StreamTransport.GRPC  # parametrised by BOTH and STREAMS


@pytest.fixture
async def client(
    liftbridge_server: Deployment, stream_transport: StreamTransport
) -> AsyncIterator[Client]:
    options = ClientOptions(ack_wait=5.0, stream_transport=stream_transport)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as c:
        yield c


async def new_stream(client: Client, names: StreamNames, **settings: Any) -> StreamName:
    stream = names()
    await client.create_stream(stream.subject, stream.name, StreamConfig(**settings))
    return stream


async def read_back(
    client: Client, stream: str, count: int, *, partition: int = 0, timeout: float = 5.0
) -> list[api_pb2.Message]:
    """The first ``count`` messages of a partition, through a raw Subscribe to its leader."""
    leader = await client._metadata.leader_address(stream, partition)
    got: list[api_pb2.Message] = []
    async with grpc.aio.insecure_channel(leader) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        req = api_pb2.SubscribeRequest(
            stream=stream, partition=partition, startPosition=api_pb2.EARLIEST
        )
        call = stub.Subscribe(req, timeout=timeout)
        first = True
        try:
            async for msg in call:
                if first:  # the server's empty handshake message
                    first = False
                    continue
                got.append(msg)
                if len(got) == count:
                    break
        except grpc.aio.AioRpcError as exc:
            raise AssertionError(f"read {len(got)} of {count} messages: {exc.code()}") from exc
        finally:
            call.cancel()
    return got


async def newest_offset(client: Client, stream: str, partition: int = 0) -> int:
    return (await client.fetch_partition_metadata(stream, partition)).newest_offset


# ---------------------------------------------------------------- round trips


@BOTH
async def test_publish_and_read_back_in_order(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    stream = await new_stream(client, stream_names)
    acks = [await client.publish(stream.name, b"a", transport=transport)]
    futs = [client.publish_nowait(stream.name, b"n%d" % i, transport=transport) for i in range(50)]
    futs += [await client.send(stream.name, b"s%d" % i, transport=transport) for i in range(50)]
    acks += await asyncio.gather(*futs)
    offsets = [ack.offset for ack in acks if ack is not None]
    assert offsets == list(range(101))  # consecutive, in call order
    messages = await read_back(client, stream.name, 101)
    assert [m.offset for m in messages] == list(range(101))
    expected = [b"a"] + [b"n%d" % i for i in range(50)] + [b"s%d" % i for i in range(50)]
    assert [m.value for m in messages] == expected


@BOTH
async def test_plain_and_general_publishes_keep_call_order(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    """Plain publishes take the one-step path, others (headers, a key, an ack wait, a
    stream whose metadata is not cached yet) the queue; none overtakes another."""
    stream = await new_stream(client, stream_names, partitions=2)
    other = await new_stream(client, stream_names)
    futs: list[asyncio.Future[Any]] = []
    expected: list[bytes] = []
    for i in range(900):
        value = b"v%d" % i
        if i % 97 == 5:  # the first publish to a stream waits for its metadata
            fresh = await new_stream(client, stream_names)
            await client.publish(fresh.name, b"x", transport=transport)
        if i % 50 == 7:
            fut = await client.send(
                stream.name, value, partition=1, headers={"i": b"%d" % i}, transport=transport
            )
        elif i % 50 == 13:
            fut = client.publish_nowait(
                stream.name, value, partition=1, ack_wait=5.0, transport=transport
            )
        elif i % 50 == 21:
            fut = await client.send(other.name, value, transport=transport)  # another stream
            futs.append(fut)
            continue
        elif i % 3 == 0:
            fut = client.publish_nowait(stream.name, value, partition=1, transport=transport)
        else:
            fut = await client.send(stream.name, value, partition=1, transport=transport)
        futs.append(fut)
        expected.append(value)
        if i % 300 == 299:
            await asyncio.sleep(0.05)  # let the queue and the window empty
    acks = await asyncio.gather(*futs)
    mine = [a for a in acks if a is not None and a.stream == stream.name]
    assert [a.offset for a in mine] == list(range(len(expected)))
    assert {a.partition for a in mine} == {1}
    messages = await read_back(client, stream.name, len(expected), partition=1)
    assert [m.value for m in messages] == expected


async def test_send_now_goes_at_once_or_leaves_it_to_send(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    """The Spark sinks' one-step send: a future when the message can go at once, None
    when `send` must take it (a full window, a closed client); the messages keep the call
    order either way."""
    options = ClientOptions(ack_wait=5.0, max_inflight=3)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as c:
        stream = await new_stream(c, stream_names)
        name = stream.name
        publisher = c._publisher
        assert publisher is not None
        futs: list[Any] = []
        went_now = 0
        for i in range(40):
            key, headers = b"k%d" % (i % 3), {"i": b"%d" % i}
            fut = c._send_now(name, b"v%d" % i, key, headers, 0, AckPolicy.LEADER)
            if fut is None:
                fut = await c.send(name, b"v%d" % i, key=key, headers=headers, partition=0)
            else:
                went_now += 1
            futs.append(fut)
        assert went_now >= 3
        acks = await asyncio.gather(*futs)
        assert [a.offset for a in acks] == list(range(40))
        # Idle again: three go at once, the fourth finds the window full.
        now = [c._send_now(name, b"w%d" % i, None, None, 0, AckPolicy.LEADER) for i in range(4)]
        assert now[3] is None
        assert publisher.pending == 3
        went = [fut for fut in now if fut is not None]
        assert len(went) == 3
        last = await c.send(name, b"w3", partition=0)
        acks = await asyncio.gather(*went, last)
        assert [a.offset for a in acks] == [40, 41, 42, 43]
        messages = await read_back(c, name, 44)
        assert [(m.value, m.key, dict(m.headers).get("i")) for m in messages] == [
            (b"v%d" % i, b"k%d" % (i % 3), b"%d" % i) for i in range(40)
        ] + [(b"w%d" % i, b"", None) for i in range(4)]
    assert c._send_now(name, b"v", None, None, None, AckPolicy.LEADER) is None  # closed


@BOTH
async def test_ack_fields(client: Client, stream_names: StreamNames, transport: Transport) -> None:
    stream = await new_stream(client, stream_names)
    before = time.time_ns()
    ack = await client.publish(
        stream.name, b"v", correlation_id="my-correlation-id", transport=transport
    )
    assert ack is not None
    assert ack.stream == stream.name
    assert ack.offset == 0
    assert ack.correlation_id == "my-correlation-id"
    assert ack.ack_policy is AckPolicy.LEADER
    assert ack.partition_subject == stream.subject  # the base subject...
    assert ack.msg_subject == stream.subject  # ...and the one used (partition 0: the same)
    assert before - 10**9 < ack.commit_timestamp_ns < time.time_ns() + 10**9
    assert ack.reception_timestamp_ns <= ack.commit_timestamp_ns
    publisher = client._require_open()
    if transport is Transport.NATS:
        assert ack.ack_inbox == publisher.ack_inbox  # our inbox, one per client
    else:
        assert ack.ack_inbox  # the server's PublishAsync session inbox
        assert ack.ack_inbox != publisher.ack_inbox


@BOTH
async def test_ack_policy_none_returns_none_and_stores(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    stream = await new_stream(client, stream_names)
    policy: AckPolicy = AckPolicy.NONE  # typed wide: the test checks the runtime result
    got = await client.publish(stream.name, b"fire", ack_policy=policy, transport=transport)
    assert got is None
    await client.flush(5)
    [msg] = await read_back(client, stream.name, 1)
    assert msg.value == b"fire"
    assert client._require_open().unknown_acks == 0  # no late ack showed up either


@BOTH
async def test_headers_and_key_round_trip(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    stream = await new_stream(client, stream_names)
    headers = {"trace-id": b"abc", "binary": bytes(range(256)), "empty": b""}
    await client.publish(stream.name, b"v", key=b"the-key", headers=headers, transport=transport)
    [msg] = await read_back(client, stream.name, 1)
    assert msg.key == b"the-key"
    for name, value in headers.items():
        assert msg.headers[name] == value
    # The server adds "subject" (and "reply") on every message it stores.
    assert msg.headers["subject"] == stream.subject.encode()
    assert msg.headers["reply"] == b""


@STREAMS
async def test_unknown_stream_is_not_found(client: Client) -> None:
    for transport in (Transport.NATS, Transport.GRPC):
        with pytest.raises(errors.NotFoundError):
            await client.publish("no-such-stream-anywhere", b"v", transport=transport)


async def test_unary_publish_status_texts_map_to_typed_errors(
    client: Client, stream_names: StreamNames
) -> None:
    # The client publishes with PublishAsync; unary Publish folds ack errors into status
    # texts, which the error table (also used for PublishToSubject) must still recognise.
    stream = await new_stream(client, stream_names, optimistic_concurrency_control=True)
    stub = client._pool.stub(await client._metadata.leader_address(stream.name, 0))
    req = api_pb2.PublishRequest(stream=stream.name, value=b"u", expectedOffset=0)
    resp = await stub.Publish(req, timeout=5)
    assert resp.ack.offset == 0
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Publish(req, timeout=5)  # offset 0 is taken now
    assert isinstance(publish_status_error(info.value), errors.IncorrectOffsetError)


# ---------------------------------------------------------------- partitions


@BOTH
async def test_key_partitioning_matches_crc32(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    stream = await new_stream(client, stream_names, partitions=4)
    keys = [b"foobarbazqux", b"blah", b"foo", b"customer-7", b"x", b"y"]
    for key in keys:
        ack = await client.publish(
            stream.name, key, key=key, partitioner=KeyPartitioner(), transport=transport
        )
        assert ack is not None
        expected = zlib.crc32(key) % 4
        assert expected == key_partition(key, 4)
        assert ack.msg_subject == (
            stream.subject if expected == 0 else f"{stream.subject}.{expected}"
        )
    for partition in range(4):
        mine = [k for k in keys if zlib.crc32(k) % 4 == partition]
        if mine:
            got = await read_back(client, stream.name, len(mine), partition=partition)
            assert [m.value for m in got] == mine
            assert all(m.key == m.value for m in got)


async def test_explicit_partition_beats_key(client: Client, stream_names: StreamNames) -> None:
    stream = await new_stream(client, stream_names, partitions=3)
    ack = await client.publish(
        stream.name, b"v", key=b"foo", partition=1, partitioner=KeyPartitioner()
    )  # foo -> 2
    assert ack is not None
    assert ack.msg_subject == f"{stream.subject}.1"


@BOTH
async def test_the_key_picks_the_partition_by_default(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    stream = await new_stream(client, stream_names, partitions=3)
    ack = await client.publish(stream.name, b"v", key=b"foo", transport=transport)
    assert ack.msg_subject == f"{stream.subject}.2"  # crc32(foo) % 3 == 2
    assert ack.partition == 2
    ack = await client.publish(stream.name, b"v", transport=transport)  # no key: 0
    assert ack.msg_subject == stream.subject
    # A per-call partitioner still wins over the client's.
    ack = await client.publish(
        stream.name, b"v", key=b"foo", partitioner=lambda *a: 1, transport=transport
    )
    assert ack.msg_subject == f"{stream.subject}.1"
    # partitioner=None is the keyword's default: the client's partitioner (0.3; 0.2 read it
    # as "partition 0", which is now partition=0).
    ack = await client.publish(stream.name, b"v", key=b"foo", partitioner=None, transport=transport)
    assert ack.msg_subject == f"{stream.subject}.2"
    ack = await client.publish(stream.name, b"v", key=b"foo", partition=0, transport=transport)
    assert ack.msg_subject == stream.subject


@STREAMS
async def test_go_liftbridge_default_with_no_partitioner(
    liftbridge_server: Deployment, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    options = ClientOptions(
        partitioner=None, stream_transport=stream_transport
    )  # go-liftbridge's default: partition 0
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as go_like:
        stream = await new_stream(go_like, stream_names, partitions=3)
        for transport in (Transport.NATS, Transport.GRPC):
            ack = await go_like.publish(stream.name, b"v", key=b"foo", transport=transport)
            assert ack.msg_subject == stream.subject


@BOTH
async def test_round_robin(client: Client, stream_names: StreamNames, transport: Transport) -> None:
    stream = await new_stream(client, stream_names, partitions=3)
    rr = RoundRobinPartitioner()
    subjects = []
    for i in range(6):
        ack = await client.publish(stream.name, b"%d" % i, partitioner=rr, transport=transport)
        assert ack is not None
        subjects.append(ack.msg_subject)
    s = stream.subject
    assert subjects == [s, f"{s}.1", f"{s}.2"] * 2
    for partition in range(3):
        got = await read_back(client, stream.name, 2, partition=partition)
        assert [m.value for m in got] == [b"%d" % partition, b"%d" % (partition + 3)]


# ---------------------------------------------------------------- optimistic concurrency


@BOTH
async def test_optimistic_concurrency(
    client: Client, stream_names: StreamNames, transport: Transport
) -> None:
    stream = await new_stream(client, stream_names, optimistic_concurrency_control=True)
    ack = await client.publish(stream.name, b"first", expected_offset=0, transport=transport)
    assert ack is not None
    assert ack.offset == 0
    ack = await client.publish(stream.name, b"second", expected_offset=1, transport=transport)
    assert ack is not None
    assert ack.offset == 1
    for wrong in (0, 1, 5):
        with pytest.raises(errors.IncorrectOffsetError):
            await client.publish(stream.name, b"stale", expected_offset=wrong, transport=transport)
    # -1 (the default) means "no check", even on an OCC stream.
    ack = await client.publish(stream.name, b"unchecked", transport=transport)
    assert ack is not None
    assert ack.offset == 2
    messages = await read_back(client, stream.name, 3)
    assert [m.value for m in messages] == [b"first", b"second", b"unchecked"]


@STREAMS
async def test_occ_stream_refuses_ack_policy_none_over_grpc(
    client: Client, stream_names: StreamNames
) -> None:
    # The server answers BAD_REQUEST, after the future already resolved to None: counted as
    # an answer for nothing pending, and logged.
    stream = await new_stream(client, stream_names, optimistic_concurrency_control=True)
    publisher = client._require_open()
    before = publisher.unknown_acks
    policy: AckPolicy = AckPolicy.NONE  # typed wide: the test checks the runtime result
    got = await client.publish(stream.name, b"v", ack_policy=policy, transport=Transport.GRPC)
    assert got is None
    async with asyncio.timeout(5):
        while publisher.unknown_acks == before:  # noqa: ASYNC110 - a counter, not an event
            await asyncio.sleep(0.02)
    assert publisher.unknown_acks == before + 1
    assert await newest_offset(client, stream.name) == -1


# ---------------------------------------------------------------- publish to subject


async def test_publish_to_subject_with_headers(client: Client, stream_names: StreamNames) -> None:
    stream = await new_stream(client, stream_names)
    ack = await client.publish_to_subject(
        stream.subject, b"via-subject", key=b"k", headers={"h1": b"v1"}, correlation_id="subj-1"
    )
    assert ack is not None
    assert ack.stream == stream.name
    assert ack.correlation_id == "subj-1"
    [msg] = await read_back(client, stream.name, 1)
    assert (msg.value, msg.key, msg.headers["h1"]) == (b"via-subject", b"k", b"v1")
    policy: AckPolicy = AckPolicy.NONE  # typed wide: the test checks the runtime result
    assert await client.publish_to_subject(stream.subject, b"x", ack_policy=policy) is None


async def test_publish_to_subject_nobody_listens(client: Client, stream_names: StreamNames) -> None:
    lonely = stream_names().subject
    started = time.monotonic()
    with pytest.raises(errors.AckTimeoutError):
        await client.publish_to_subject(lonely, b"v", ack_wait=0.5)
    assert time.monotonic() - started < 3


# ---------------------------------------------------------------- silence and refusal


@STREAMS
async def test_paused_partition_over_nats_times_out(
    client: Client, stream_names: StreamNames
) -> None:
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)
    started = time.monotonic()
    # The server says nothing; the client asks the metadata why and names it.
    with pytest.raises(errors.PartitionPausedError, match="partition 0 is paused") as caught:
        await client.publish(stream.name, b"v", ack_wait=0.5, transport=Transport.NATS)
    assert isinstance(caught.value.__cause__, errors.AckTimeoutError)
    assert 0.45 < time.monotonic() - started < 3
    # Over gRPC the server resumes the partition and stores the message.
    ack = await client.publish(stream.name, b"w", transport=Transport.GRPC)
    assert ack is not None
    assert ack.offset == 0  # the NATS publish was never stored


@STREAMS
async def test_readonly_partition(client: Client, stream_names: StreamNames) -> None:
    stream = await new_stream(client, stream_names)
    await client.publish(stream.name, b"before")
    await client.set_stream_readonly(stream.name)
    # NATS: no ack at all; the metadata says why, as gRPC would.
    with pytest.raises(errors.ReadonlyPartitionError) as caught:
        await client.publish(stream.name, b"v", ack_wait=0.5, transport=Transport.NATS)
    assert isinstance(caught.value.__cause__, errors.AckTimeoutError)
    with pytest.raises(errors.ReadonlyPartitionError) as refused:  # gRPC: refused
        await client.publish(stream.name, b"v", transport=Transport.GRPC)
    # One message for both (gRPC gave the server's "READONLY: readonly partition: 0 ...").
    words = f"stream {stream.name!r} partition 0 is read-only: it takes no new messages"
    assert str(caught.value) == str(refused.value) == words
    assert await newest_offset(client, stream.name) == 0


async def test_nats_timeout_burst_is_checked_once(
    client: Client, stream_names: StreamNames
) -> None:
    # 1000 publishes to a paused partition time out together: one metadata check names
    # the cause for all of them, and its answer serves the next burst too.
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)
    publisher = client._require_open()
    refreshes = 0
    refresh = client._metadata.refresh

    async def counting(**kw: Any) -> Any:
        nonlocal refreshes
        refreshes += 1
        return await refresh(**kw)

    publisher._timeouts._refresh = counting
    futs = [
        client.publish_nowait(stream.name, b"%d" % i, ack_wait=0.5, transport=Transport.NATS)
        for i in range(1000)
    ]
    outcomes = await asyncio.gather(*futs, return_exceptions=True)
    assert all(isinstance(o, errors.PartitionPausedError) for o in outcomes), outcomes[:3]
    assert refreshes == 1
    with pytest.raises(errors.PartitionPausedError):
        await client.publish(stream.name, b"late", ack_wait=0.2, transport=Transport.NATS)
    assert refreshes == 1  # within the answer's lifetime: no second check


async def test_nats_timeout_on_deleted_stream(client: Client, stream_names: StreamNames) -> None:
    stream = await new_stream(client, stream_names)
    await client.publish(stream.name, b"warm")  # metadata cached: NATS publishes go straight
    await client.delete_stream(stream.name)
    with pytest.raises(errors.NotFoundError, match="no longer lists the stream") as caught:
        await client.publish(stream.name, b"v", ack_wait=0.5, transport=Transport.NATS)
    assert type(caught.value) is errors.NotFoundError  # deleted by this client: no doubt
    assert isinstance(caught.value.__cause__, errors.AckTimeoutError)


@STREAMS
async def test_too_large_for_nats(client: Client, stream_names: StreamNames) -> None:
    stream = await new_stream(client, stream_names)
    big = b"x" * (1024 * 1024)  # NATS max_payload: 1 MiB, the envelope pushes it over
    with pytest.raises(errors.MessageTooLargeError, match="max_payload"):
        await client.publish(stream.name, big, transport=Transport.NATS)
    # Over gRPC the server's own NATS publish fails: INTERNAL "maximum payload exceeded".
    with pytest.raises(errors.MessageTooLargeError, match="maximum payload"):
        await client.publish(stream.name, big, transport=Transport.GRPC)
    # Above the gRPC request limit the client refuses it before the stream is hurt.
    with pytest.raises(errors.MessageTooLargeError, match="gRPC limit"):
        await client.publish(stream.name, big * 4, transport=Transport.GRPC)
    ack = await client.publish(stream.name, b"small", transport=Transport.GRPC)  # stream intact
    assert ack is not None
    assert ack.offset == 0


@pytest.fixture(scope="module")
def small_replication_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    """A node whose clustering.replication.max.bytes is 2 KiB: TOO_LARGE below NATS's limit."""
    settings = {"clustering.replication.max.bytes": 2048}
    with SingleNode(base_dir=tmp_path_factory.mktemp("small-repl"), settings=settings) as node:
        yield node


@BOTH
async def test_too_large_ack_from_the_server(
    small_replication_server: SingleNode,
    stream_names: StreamNames,
    transport: Transport,
    stream_transport: StreamTransport,
) -> None:
    node = small_replication_server
    options = ClientOptions(stream_transport=stream_transport)
    async with Client(node.addresses, nats_servers=[node.nats_url], options=options) as client:
        stream = await new_stream(client, stream_names)
        # NATS: an error ack (TOO_LARGE); gRPC: asyncError BAD_REQUEST with the server's text.
        match = "replication.max.bytes" if transport is Transport.NATS else "max replication size"
        with pytest.raises(errors.MessageTooLargeError, match=match):
            await client.publish(stream.name, b"x" * 4096, transport=transport)
        ack = await client.publish(stream.name, b"fits", transport=transport)
        assert ack is not None
        assert ack.offset == 0


# ---------------------------------------------------------------- window, flush, close


@STREAMS
async def test_inflight_limit(
    liftbridge_server: Deployment, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    options = ClientOptions(max_inflight=5, ack_wait=10, stream_transport=stream_transport)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as client:
        stream = await new_stream(client, stream_names)
        await client.pause_stream(stream.name)  # NATS publishes get no ack: slots stay taken
        futs = [client.publish_nowait(stream.name, b"%d" % i) for i in range(5)]
        with pytest.raises(errors.InflightLimitError):
            client.publish_nowait(stream.name, b"6")
        waiting = asyncio.create_task(client.send(stream.name, b"6"))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # send() waits for room
        futs[0].cancel()  # giving up on one makes room
        sixth = await asyncio.wait_for(waiting, 2)
        assert not sixth.done()
        for fut in [*futs, sixth]:
            fut.cancel()
        # Over gRPC the paused partition is resumed; acks flow and the window drains.
        futs2 = [
            await client.send(stream.name, b"g%d" % i, transport=Transport.GRPC) for i in range(20)
        ]
        assert all(f.done() for f in futs2[:15])
        await asyncio.gather(*futs2)


@STREAMS
async def test_flush_waits_for_every_ack(client: Client, stream_names: StreamNames) -> None:
    stream = await new_stream(client, stream_names)
    futs = [client.publish_nowait(stream.name, b"%d" % i) for i in range(300)]
    futs += [
        client.publish_nowait(stream.name, b"g%d" % i, transport=Transport.GRPC) for i in range(100)
    ]
    await client.flush(10)
    assert all(f.done() and f.exception() is None for f in futs)
    assert client._require_open().pending == 0


async def test_close_with_1000_pending_acks(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(ack_wait=60, max_inflight=2000)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)  # no acks will come
    futs = [client.publish_nowait(stream.name, b"%d" % i) for i in range(1000)]
    publisher = client._require_open()
    await wait_until(lambda: not publisher._queue, what="every publish written")
    assert publisher.pending == 1000
    started = time.monotonic()
    await client.close(drain=False)
    assert time.monotonic() - started < 2
    for fut in futs:
        assert fut.done()
        with pytest.raises(errors.ConnectionClosedError):
            fut.result()
    with pytest.raises(errors.ConnectionClosedError):
        client.publish_nowait(stream.name, b"late")
    await asyncio.sleep(0)
    leftover = {t for t in asyncio.all_tasks() - before if not t.done()}
    assert not leftover, leftover


@STREAMS
async def test_close_right_after_sending_over_grpc(
    liftbridge_server: Deployment, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    before = asyncio.all_tasks()
    client = Client(
        liftbridge_server.addresses, options=ClientOptions(stream_transport=stream_transport)
    )
    await client.connect()
    assert client._require_open().transport is Transport.GRPC  # no NATS: gRPC by default
    stream = await new_stream(client, stream_names)
    futs = [client.publish_nowait(stream.name, b"%d" % i) for i in range(200)]
    await asyncio.sleep(0)
    await client.close(drain=False)
    for fut in futs:  # each either acked in time or failed with the close
        assert fut.done()
        if fut.exception() is not None:
            assert isinstance(fut.exception(), errors.ConnectionClosedError)
    assert await tasks_left(before) == set()


async def test_nats_transport_without_nats_is_refused(liftbridge_server: Deployment) -> None:
    options = ClientOptions(transport=Transport.NATS)
    async with Client(liftbridge_server.addresses, options=options) as client:
        with pytest.raises(errors.InvalidInputError, match="NATS connection"):
            await client.publish("whatever", b"v")


# ---------------------------------------------------------------- replication


@pytest.mark.cluster
@STREAMS
async def test_leader_and_all_acks_with_three_replicas(
    liftbridge_cluster: Cluster, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    async with Client(
        liftbridge_cluster.addresses,
        nats_servers=[liftbridge_cluster.nats_url],
        options=ClientOptions(stream_transport=stream_transport),
    ) as client:
        stream = await new_stream(client, stream_names, replication_factor=3, partitions=2)
        info = (await client.fetch_metadata(stream.name)).streams[stream.name]
        assert all(len(p.replicas) == 3 for p in info.partitions.values())
        offsets: dict[int, int] = {0: 0, 1: 0}
        for transport in (Transport.NATS, Transport.GRPC):
            for policy in (AckPolicy.LEADER, AckPolicy.ALL):
                for partition in (0, 1):
                    ack = await client.publish(
                        stream.name,
                        b"%s-%s" % (transport.name.encode(), policy.name.encode()),
                        partition=partition,
                        ack_policy=policy,
                        transport=transport,
                    )
                    assert ack is not None
                    assert ack.ack_policy is policy
                    assert ack.offset == offsets[partition]
                    offsets[partition] += 1
        for partition in (0, 1):
            got = await read_back(client, stream.name, 4, partition=partition)
            assert [m.offset for m in got] == [0, 1, 2, 3]


async def test_a_lone_nats_publish_is_written_by_its_callers_task(
    client: Client, stream_names: StreamNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One publish at a time goes out from the caller's task (one event-loop iteration
    less per round trip); a burst still leaves its later publishes to the sender."""
    stream = await new_stream(client, stream_names)
    await client.publish(stream.name, b"warm", transport=Transport.NATS)  # metadata cached
    wakes = 0
    wake_sender = Slots.wake_sender

    def counting(self: Slots) -> None:
        nonlocal wakes
        wakes += 1
        wake_sender(self)

    monkeypatch.setattr(Slots, "wake_sender", counting)
    acks = [
        await client.publish(stream.name, b"%d" % i, transport=Transport.NATS) for i in range(20)
    ]
    # nats-py's own flusher may be due now and then (a PING): then the sender is woken.
    assert wakes <= 2, wakes
    futs = [client.publish_nowait(stream.name, b"b", transport=Transport.NATS) for _ in range(200)]
    acks += await asyncio.gather(*futs)
    assert wakes > 2  # the burst's later publishes went through the sender
    assert [a.offset for a in acks] == list(range(1, 221))
