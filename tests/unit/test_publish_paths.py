"""The publish paths against fakes: what goes on the wire, in which order, and how answers
(acks, error acks, async errors, broken streams, silence, close) reach the caller."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import grpc.aio
import pytest
from fake_liftbridge import END, Fail, FakeCluster
from publish_fakes import FakeNats, Rig, ack_scan, make_rig

from liftbridge_client import envelope, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import Correlator
from liftbridge_client._publish.grpc import PublishStream
from liftbridge_client._publish.h2 import H2PublishStream
from liftbridge_client._publish.nats import NatsPublisher

__all__ = ["ack_scan"]  # the fixture, for the tests of NATS acks
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client._transport.grpc import ack_error, async_error
from liftbridge_client._transport.grpc import publish_status_error as unary_publish_error
from liftbridge_client._transport.h2.framing import H2RpcError
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import ClientOptions, RetryPolicy, StreamTransport, Transport
from liftbridge_client.partitioning import RoundRobinPartitioner, key_partition
from liftbridge_client.testing import wait_until


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = await make_rig()
    yield r
    await r.close()


async def settle() -> None:
    """Let every runnable task run (supervised tasks start a few loop iterations later)."""
    for _ in range(20):
        await asyncio.sleep(0)


# ---------------------------------------------------------------- NATS: the wire


async def test_nats_envelope_carries_everything(rig: Rig) -> None:
    fut = rig.publisher.publish_nowait(
        "s", b"value", key=b"k", headers={"h": b"1"}, partition=2, correlation_id="c1"
    )
    await settle()
    [(subject, msg)] = rig.wire.messages()
    assert subject == "s.subj.2"  # partition N: <subject>.N
    assert msg.value == b"value"
    assert msg.key == b"k"
    assert dict(msg.headers) == {"h": b"1"}
    assert msg.ackInbox == "_INBOX.fake"
    assert msg.correlationId == "c1"
    assert msg.ackPolicy == api_pb2.LEADER
    assert msg.offset == -1  # expected offset: no check, never 0 by accident
    rig.ack("c1", 41)
    ack = await fut
    assert ack is not None
    assert ack.offset == 41
    assert ack.correlation_id == "c1"


async def test_partition_zero_uses_the_stream_subject_and_key_picks_partition(rig: Rig) -> None:
    rig.publisher.publish_nowait("s", b"v")
    rig.publisher.publish_nowait("s", b"v", key=b"foo")  # the default: by key
    rig.publisher.publish_nowait("s", b"v", key=b"foo", partitioner=None)  # None: the default
    rig.publisher.publish_nowait("s", b"v", key=b"foo", partition=1)
    await settle()
    assert [s for s, _ in rig.wire.published] == ["s.subj", "s.subj.2", "s.subj.2", "s.subj.1"]
    assert key_partition(b"foo", 3) == 2
    # No partitioner at all (ClientOptions(partitioner=None)): partition 0, as in Go.
    plain = await make_rig(partitioner=None)
    try:
        plain.publisher.publish_nowait("s", b"v", key=b"foo")
        await settle()
        assert [s for s, _ in plain.wire.published] == ["s.subj"]
    finally:
        await plain.close()


async def test_round_robin_partitioner(rig: Rig) -> None:
    rr = RoundRobinPartitioner()
    for _ in range(4):
        rig.publisher.publish_nowait("s", b"v", partitioner=rr)
    await settle()
    assert [s for s, _ in rig.wire.published] == ["s.subj", "s.subj.1", "s.subj.2", "s.subj"]


async def test_expected_offset_travels_in_message_offset(rig: Rig) -> None:
    rig.publisher.publish_nowait("s", b"v", expected_offset=0)
    rig.publisher.publish_nowait("s", b"v", expected_offset=17)
    await settle()
    assert [m.offset for _, m in rig.wire.messages()] == [0, 17]


async def test_crc_option_sets_the_envelope_crc() -> None:
    rig = await make_rig(envelope_crc=True)
    try:
        rig.publisher.publish_nowait("s", b"v")
        await settle()
        [(_, payload)] = rig.wire.published
        assert envelope.decode(payload).has_crc
    finally:
        await rig.close()


async def test_ack_policy_none_resolves_on_write_without_inbox(rig: Rig) -> None:
    assert await rig.publisher.publish("s", b"v", ack_policy=AckPolicy.NONE) is None
    [(_, msg)] = rig.wire.messages()
    assert msg.ackInbox == ""  # the server sends nothing, not even error acks
    assert msg.ackPolicy == api_pb2.NONE
    assert rig.publisher.pending == 0


async def test_order_is_call_order_even_when_metadata_is_looked_up(rig: Rig) -> None:
    rig.md.gate.clear()  # the lookup of "late" blocks until released
    futs = [rig.publisher.publish_nowait("late", b"0")]
    futs += [rig.publisher.publish_nowait("s", str(i).encode()) for i in range(1, 4)]
    futs.append(rig.publisher.publish_nowait("late", b"4"))  # cached by then? not yet
    await settle()
    assert rig.wire.published == []  # the first item holds the line: nothing overtakes it
    rig.md.gate.set()
    await settle()
    assert [m.value for _, m in rig.wire.messages()] == [b"0", b"1", b"2", b"3", b"4"]
    for f in futs:
        f.cancel()


async def test_send_and_publish_nowait_interleave_in_call_order(rig: Rig) -> None:
    values = []
    for i in range(50):
        if i % 2:
            await rig.publisher.send("s", b"%d" % i, partition=1)
        else:
            rig.publisher.publish_nowait("s", b"%d" % i, partition=1)
        values.append(b"%d" % i)
    await settle()
    assert [m.value for _, m in rig.wire.messages()] == values


async def test_unknown_stream_fails_the_future_of_publish_nowait(rig: Rig) -> None:
    fut = rig.publisher.publish_nowait("nope", b"v")
    with pytest.raises(errors.NotFoundError):
        await fut
    with pytest.raises(errors.NotFoundError):
        await rig.publisher.publish("nope", b"v")
    assert rig.publisher.pending == 0


async def test_cancelled_before_sending_is_never_sent(rig: Rig) -> None:
    rig.md.gate.clear()
    blocker = rig.publisher.publish_nowait("late", b"first")
    withdrawn = rig.publisher.publish_nowait("s", b"withdrawn")
    withdrawn.cancel()
    assert rig.publisher.pending == 1
    rig.md.gate.set()
    await settle()
    assert [m.value for _, m in rig.wire.messages()] == [b"first"]
    blocker.cancel()


# ---------------------------------------------------------------- NATS: answers


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (api_pb2.Ack.INCORRECT_OFFSET, errors.IncorrectOffsetError),
        (api_pb2.Ack.TOO_LARGE, errors.MessageTooLargeError),
        (api_pb2.Ack.ENCRYPTION, errors.EncryptionFailedError),
        (api_pb2.Ack.UNKNOWN, errors.PublishError),
        (99, errors.PublishError),
    ],
)
@pytest.mark.usefixtures("ack_scan")
async def test_error_acks_are_typed(rig: Rig, code: int, expected: type[Exception]) -> None:
    fut = rig.publisher.publish_nowait("s", b"v", correlation_id="c")
    await settle()
    rig.ack("c", 0, error=code)
    with pytest.raises(expected) as info:
        await fut
    assert type(info.value) is expected
    assert "'c'" in str(info.value)


def test_ack_error_ok_is_none() -> None:
    assert ack_error(api_pb2.Ack(ackError=api_pb2.Ack.OK)) is None


@pytest.mark.usefixtures("ack_scan")
async def test_undecodable_and_unknown_acks_are_counted(rig: Rig) -> None:
    nats_pub = rig.publisher._nats_pub
    assert nats_pub is not None
    nats_pub.dispatch(b"junk")
    nats_pub.dispatch(envelope.encode(envelope.MsgType.ACK, b"\xff\xff"))
    nats_pub.dispatch(envelope.encode_message(b"a publish, not an ack"))
    assert rig.publisher.undecodable_acks == 3
    rig.ack("nobody-waits-for-this", 1)
    assert rig.publisher.unknown_acks == 1


async def test_no_ack_means_ack_timeout(rig: Rig) -> None:
    # What a paused or read-only partition looks like over NATS: silence.
    with pytest.raises(errors.AckTimeoutError):
        await rig.publisher.publish("s", b"v", ack_wait=0.02)
    assert rig.publisher.pending == 0


async def test_nats_publish_failure_is_mapped(rig: Rig) -> None:
    import nats.errors

    async def broken(subject: str, payload: bytes) -> None:
        raise nats.errors.ConnectionClosedError

    rig.wire.publish = broken  # type: ignore[method-assign]
    with pytest.raises(errors.ConnectionClosedError) as info:
        await rig.publisher.publish("s", b"v")
    assert isinstance(info.value.__cause__, nats.errors.ConnectionClosedError)


async def test_flush_waits_for_pending_and_flushes_nats(rig: Rig) -> None:
    flushes = rig.wire.flushes  # start() flushed once, after subscribing the inbox
    futs = [rig.publisher.publish_nowait("s", b"v", correlation_id=f"c{i}") for i in range(3)]
    flushing = asyncio.create_task(rig.publisher.flush(5))
    await settle()
    assert not flushing.done()
    later = rig.publisher.publish_nowait("s", b"v", correlation_id="later")
    for i in range(3):
        rig.ack(f"c{i}", i)
    await asyncio.wait_for(flushing, 1)  # publishes made while flushing are not waited for
    assert all(f.done() for f in futs)
    assert not later.done()
    assert rig.wire.flushes == flushes + 1
    with pytest.raises(errors.LiftbridgeTimeoutError):
        await rig.publisher.flush(0.02)
    later.cancel()


# ---------------------------------------------------------------- close


async def test_close_fails_everything_chained_and_leaves_no_task(rig: Rig) -> None:
    before = asyncio.all_tasks()
    p = rig.publisher
    futs = [p.publish_nowait("s", b"v") for _ in range(100)]
    futs += [p.publish_nowait("s", b"v", transport=Transport.GRPC) for _ in range(100)]
    await settle()
    cause = OSError("network down")
    await p.close(cause)
    for fut in futs:
        with pytest.raises(errors.ConnectionClosedError) as info:
            await fut
        assert info.value.__cause__ is cause
    assert p.pending == 0
    assert p._sender is None
    # The fake broker runs in this loop too: look at the client's own tasks here
    # (tests/integration/test_lifecycle.py checks every task, against a real server).
    leftover = {
        t for t in asyncio.all_tasks() - before if not t.done() and t.get_name().startswith("lb-")
    }
    assert not leftover
    await wait_until(lambda: all(c.cancelled for c in rig.calls), what="the server seeing it")
    await p.close(None)  # idempotent


# ---------------------------------------------------------------- gRPC


async def test_grpc_request_and_ack(rig: Rig) -> None:
    p = rig.publisher
    fut = p.publish_nowait(
        "s",
        b"v",
        key=b"k",
        headers={"h": b"x"},
        partition=1,
        transport=Transport.GRPC,
        correlation_id="g1",
        ack_policy=AckPolicy.ALL,
    )
    await wait_until(lambda: rig.calls and rig.calls[0].written, what="the request arriving")
    [call] = rig.calls
    [req] = call.written
    assert (req.stream, req.partition, req.value, req.key) == ("s", 1, b"v", b"k")
    assert dict(req.headers) == {"h": b"x"}
    assert req.correlationId == "g1"
    assert req.ackPolicy == api_pb2.ALL
    assert req.expectedOffset == -1
    call.responses.put_nowait(
        api_pb2.PublishResponse(
            correlationId="g1", ack=api_pb2.Ack(stream="s", offset=5, correlationId="g1")
        )
    )
    ack = await fut
    assert ack is not None
    assert ack.offset == 5
    # One stream per broker, reused.
    p.publish_nowait("s", b"v", transport=Transport.GRPC).cancel()
    none = p.publish_nowait("s", b"w", transport=Transport.GRPC, ack_policy=AckPolicy.NONE)
    assert await none is None  # resolved once written
    await wait_until(lambda: len(call.written) == 2, what="the second request arriving")
    assert len(rig.calls) == 1
    assert [r.value for r in call.written] == [b"v", b"w"]


async def test_a_grpc_ack_timeout_makes_its_leader_suspect() -> None:
    # Its leader may be cut off from the cluster and still think it leads: the metadata
    # cache asks the others (tests/unit/test_metadata.py), so that the next publishes find
    # the leader they elected.
    rig = await make_rig(with_nats=False)
    try:
        with pytest.raises(errors.AckTimeoutError) as info:
            await rig.publisher.publish("s", b"v", transport=Transport.GRPC, ack_wait=0.05)
        assert type(info.value) is errors.AckTimeoutError  # the error itself stays as it was
        assert rig.md.suspected == [rig.md.address]
        assert rig.md.avoided == []  # the publisher itself refreshes nothing for it
    finally:
        await rig.close()


async def test_grpc_none_resolves_once_written(rig: Rig) -> None:
    got = await rig.publisher.publish(
        "s", b"v", transport=Transport.GRPC, ack_policy=AckPolicy.NONE
    )
    assert got is None


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (api_pb2.PublishAsyncError.NOT_FOUND, "no such stream: s", errors.NotFoundError),
        (api_pb2.PublishAsyncError.BAD_REQUEST, "bad", errors.InvalidArgumentError),
        (
            api_pb2.PublishAsyncError.BAD_REQUEST,
            "message exceeds max replication size",
            errors.MessageTooLargeError,
        ),
        (
            api_pb2.PublishAsyncError.READONLY,
            "readonly partition: 0",
            errors.ReadonlyPartitionError,
        ),
        (
            api_pb2.PublishAsyncError.INCORRECT_OFFSET,
            "incorrect expected offset",
            errors.IncorrectOffsetError,
        ),
        (
            api_pb2.PublishAsyncError.ENCRYPTION_FAILED,
            "encryption failed",
            errors.EncryptionFailedError,
        ),
        (api_pb2.PublishAsyncError.PERMISSION_DENIED, "no", errors.PermissionDeniedError),
        (api_pb2.PublishAsyncError.INTERNAL, "disk", errors.InternalServerError),
        (
            api_pb2.PublishAsyncError.INTERNAL,
            "failed to publish to NATS: nats: maximum payload exceeded",
            errors.MessageTooLargeError,
        ),
        (api_pb2.PublishAsyncError.UNKNOWN, "?", errors.PublishError),
        (42, "from the future", errors.PublishError),
    ],
)
def test_async_error_mapping(code: int, message: str, expected: type[Exception]) -> None:
    err = async_error(api_pb2.PublishAsyncError(code=cast(Any, code), message=message), "cid")
    assert type(err) is expected
    assert message in str(err)


async def test_async_error_is_checked_before_the_ack(rig: Rig) -> None:
    fut = rig.publisher.publish_nowait("s", b"v", transport=Transport.GRPC, correlation_id="e")
    await wait_until(lambda: rig.calls, what="the call")
    [call] = rig.calls
    # The server sets an empty Ack alongside the error, for old clients.
    call.responses.put_nowait(
        api_pb2.PublishResponse(
            correlationId="e",
            ack=api_pb2.Ack(),
            asyncError=api_pb2.PublishAsyncError(
                code=api_pb2.PublishAsyncError.READONLY, message="readonly partition: 0"
            ),
        )
    )
    with pytest.raises(errors.ReadonlyPartitionError) as info:
        await fut
    # The words a NATS publish to a read-only partition gets (diagnose): the stream and
    # partition, not the server's "READONLY: readonly partition: 0 (correlation id ...)".
    assert str(info.value) == "stream 's' partition 0 is read-only: it takes no new messages"


@pytest.mark.parametrize(
    ("text", "expected", "judged"),
    [
        ("no such stream: s", errors.StreamNotLoadedError, ["s"]),
        # The stream is there; a partition it lacks is no restart's doing.
        ("no such partition: 0", errors.NotFoundError, []),
    ],
)
async def test_not_found_for_the_stream_is_judged_by_the_metadata(
    rig: Rig, text: str, expected: type[errors.NotFoundError], judged: list[str]
) -> None:
    fut = rig.publisher.publish_nowait("s", b"v", transport=Transport.GRPC, correlation_id="e")
    await wait_until(lambda: rig.calls, what="the call")
    rig.calls[0].responses.put_nowait(
        api_pb2.PublishResponse(
            correlationId="e",
            asyncError=api_pb2.PublishAsyncError(
                code=api_pb2.PublishAsyncError.NOT_FOUND, message=text
            ),
        )
    )
    with pytest.raises(errors.NotFoundError) as info:
        await fut
    assert type(info.value) is expected
    assert rig.md.judged == judged


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


async def test_broken_stream_fails_its_publishes_and_reopens(rig: Rig) -> None:
    p = rig.publisher
    futs = [p.publish_nowait("s", b"v", transport=Transport.GRPC) for _ in range(3)]
    nats_fut = p.publish_nowait("s", b"v", correlation_id="n")
    await wait_until(lambda: rig.calls and len(rig.calls[0].written) == 3, what="3 requests")
    [call] = rig.calls
    call.responses.put_nowait(Fail(grpc.StatusCode.UNAVAILABLE, "connection reset"))
    for fut in futs:
        with pytest.raises(errors.UnavailableError) as info:
            await fut
        assert info.value.retriable  # the caller may publish again once the leader moved
        assert "broke" in str(info.value)
        assert isinstance(info.value.__cause__, errors.UnavailableError)
    assert not nats_fut.done()  # other connections' publishes are untouched
    again = p.publish_nowait("s", b"again", transport=Transport.GRPC, correlation_id="a")
    await wait_until(lambda: len(rig.calls) == 2, what="a fresh stream")
    assert rig.md.refreshes == 1  # UNAVAILABLE: the leader may have moved
    rig.calls[1].responses.put_nowait(
        api_pb2.PublishResponse(correlationId="a", ack=api_pb2.Ack(offset=9))
    )
    ack = await again
    assert ack is not None
    assert ack.offset == 9
    nats_fut.cancel()


async def test_stream_ending_cleanly_fails_its_publishes() -> None:
    correlator = Correlator(4)
    tasks = TaskSupervisor()
    await tasks.start()
    async with FakeCluster(("b1",)) as server:
        server.responder = lambda req: None
        pool = server.pool(ClientOptions())
        address = server.address("b1")
        stream = PublishStream(address, pool.stub(address), correlator, spawn=tasks.spawn)
        stream.open()
        correlator.try_acquire()
        fut = correlator.register("x", 60)
        stream.submit(api_pb2.PublishRequest(correlationId="x"), fut, False, lambda _: None)
        await wait_until(lambda: server.publish_calls, what="the call")
        server.publish_calls[0][1].responses.put_nowait(END)  # the server ends it: OK status
        with pytest.raises(errors.UnavailableError):  # the server went away: retriable
            await fut
        assert not stream.usable
        correlator.try_acquire()
        with pytest.raises(errors.ConnectionClosedError):
            stream.submit(api_pb2.PublishRequest(), correlator.register("y", 60), False, print)
        await stream.close()
    assert await tasks.aclose(1.0)


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", errors.AckTimeoutError),
        (grpc.StatusCode.UNKNOWN, "incorrect expected offset", errors.IncorrectOffsetError),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            "message exceeds max replication size",
            errors.MessageTooLargeError,
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "readonly partition: 0",
            errors.ReadonlyPartitionError,
        ),
        (
            grpc.StatusCode.INTERNAL,
            "encryption failed on partition",
            errors.EncryptionFailedError,
        ),
        (grpc.StatusCode.NOT_FOUND, "no such stream: x", errors.NotFoundError),
        (grpc.StatusCode.INVALID_ARGUMENT, "no stream provided", errors.InvalidArgumentError),
        (grpc.StatusCode.UNKNOWN, "context deadline exceeded", errors.AckTimeoutError),  # v1.7.1
    ],
)
def test_unary_publish_error_mapping(
    code: grpc.StatusCode, details: str, expected: type[Exception]
) -> None:
    assert type(unary_publish_error(rpc_error(code, details))) is expected


async def test_nats_publisher_start_and_close_are_idempotent() -> None:
    nc = FakeNats()
    pub = NatsPublisher(cast(Any, nc), Correlator(2), crc=False)
    await pub.close()
    assert pub.inbox == "_INBOX.fake"
    assert "fake" in repr(pub)


async def test_publishes_a_broken_stream_never_wrote_go_out_on_a_new_stream(rig: Rig) -> None:
    p = rig.publisher
    first = p.publish_nowait("s", b"0", transport=Transport.GRPC, partition=1)
    await wait_until(lambda: rig.calls and rig.calls[0].written, what="the first request")
    [call] = rig.calls
    assert [r.value for r in call.written] == [b"0"]
    # The client's side of the call breaks on its next write (a connection reset).
    [stream] = p._leaders._streams.values()

    async def broken_write(req: api_pb2.PublishRequest) -> None:
        raise rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset")

    stream._call.write = broken_write  # type: ignore[method-assign,assignment]
    futs = [
        p.publish_nowait("s", bytes([v]), transport=Transport.GRPC, partition=1) for v in b"123"
    ]
    for fut in (first, futs[0]):  # written (or being written) on the broken stream: failed
        with pytest.raises(errors.UnavailableError):
            await fut
    await wait_until(lambda: len(rig.calls) == 2 and len(rig.calls[1].written) == 2, what="resent")
    assert len(rig.calls) == 2  # the unwritten ones went out on a fresh stream, in order
    assert [r.value for r in rig.calls[1].written] == [b"2", b"3"]
    assert not futs[1].done()
    assert not futs[2].done()
    for fut, offset in zip(futs[1:], (7, 8), strict=True):
        rig.calls[1].responses.put_nowait(
            api_pb2.PublishResponse(
                correlationId=cast(Any, fut).correlation_id, ack=api_pb2.Ack(offset=offset)
            )
        )
    assert [cast(Any, await fut).offset for fut in futs[1:]] == [7, 8]


@pytest.mark.parametrize("writer", ["idle", "busy"])
async def test_h2_one_step_publishes_a_broken_stream_never_wrote_go_out_again(writer: str) -> None:
    """Over h2, plain publishes go serialized to the call itself while nothing waits for
    the stream's writer (else to its outbox, behind what waits); when the call breaks
    before any of their bytes left, they are parsed back and resent in order."""
    rig = await make_rig(stream_transport=StreamTransport.H2)
    try:
        p = rig.publisher
        first = p.publish_nowait("s", b"0", transport=Transport.GRPC, partition=1)
        await wait_until(lambda: rig.calls and rig.calls[0].written, what="the first request")
        [stream] = p._leaders._streams.values()
        assert isinstance(stream, H2PublishStream)
        ahead = []
        if writer == "busy":  # ack policy NONE resolves on write: the writer writes it
            none = AckPolicy.NONE
            ahead = [
                p.publish_nowait("s", b"n", transport=Transport.GRPC, partition=1, ack_policy=none)
            ]

        futs = [
            p.publish_nowait("s", bytes([v]), transport=Transport.GRPC, partition=1) for v in b"123"
        ]
        if writer == "idle":  # written to the call, not yet to the connection
            assert not stream._outbox
            assert stream._h2call.queued == sum(len(m) for m in stream._h2call._out)
            assert len(stream._h2call._out) == 3
        else:  # queued for the writer behind the NONE one, serialized already
            assert [type(req) for req, _, _ in stream._outbox] == [bytes] * 4
        # The call fails before its writer ran (a connection reset).
        stream._h2call._fail(H2RpcError(grpc.StatusCode.UNAVAILABLE, "connection reset"), True)
        n = len(ahead) + 3
        await wait_until(
            lambda: len(rig.calls) == 2 and len(rig.calls[1].written) == n, what="resent"
        )
        sent = rig.calls[1].written
        assert [r.value for r in sent] == [b"n"] * len(ahead) + [b"1", b"2", b"3"]
        cids = [cast(Any, f).correlation_id for f in ahead + futs]
        assert [r.correlationId for r in sent] == cids
        assert [(r.stream, r.partition, r.expectedOffset) for r in sent] == [("s", 1, -1)] * n
        for fut in ahead:
            assert await fut is None  # resolved once written on the new stream
        for fut, offset in zip(futs, (5, 6, 7), strict=True):
            rig.calls[1].responses.put_nowait(
                api_pb2.PublishResponse(
                    correlationId=cast(Any, fut).correlation_id, ack=api_pb2.Ack(offset=offset)
                )
            )
        assert [cast(Any, await fut).offset for fut in futs] == [5, 6, 7]
        with pytest.raises(errors.UnavailableError):
            await first  # written on the broken stream: failed, for the caller to retry
    finally:
        await rig.close()


async def test_h2_publishes_written_while_the_connection_opens_come_back_if_it_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first publishes wait in the call while its connection opens; when it cannot
    be opened they are taken back and go out, in order, on the next stream."""
    rig = await make_rig(stream_transport=StreamTransport.H2)
    try:
        p = rig.publisher
        pool = p._pool.h2()
        real = pool.connection
        refused = asyncio.Event()

        async def refuse_once(address: str) -> Any:
            if not refused.is_set():
                refused.set()
                await asyncio.sleep(0.05)  # the publishes below are written meanwhile
                raise H2RpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
            return await real(address)

        monkeypatch.setattr(pool, "connection", refuse_once)
        await settle()  # the sender task is up and idle
        futs = [
            p.publish_nowait("s", b"%d" % i, transport=Transport.GRPC, partition=1)
            for i in range(4)
        ]
        [stream] = p._leaders._streams.values()
        assert isinstance(stream, H2PublishStream)
        assert not stream._outbox  # the publishes wait in the call itself
        assert len(stream._h2call._out) == 4
        await wait_until(lambda: rig.calls and len(rig.calls[0].written) == 4, what="resent")
        assert refused.is_set()
        assert [r.value for r in rig.calls[0].written] == [b"0", b"1", b"2", b"3"]
        for i, fut in enumerate(futs):
            rig.calls[0].responses.put_nowait(_ack_response(fut, i))
        assert [cast(Any, await f).offset for f in futs] == [0, 1, 2, 3]
    finally:
        await rig.close()


async def test_h2_a_broker_that_refuses_streams_is_retried_with_backoff_not_in_a_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leader that refuses connections (killed, still named by the metadata): the
    publishes the h2 call never wrote come back and wait for the next try, which backs
    off (0.05, 0.1, 0.2 s...) instead of reconnecting and refreshing metadata in a loop
    (seen: ~500 FetchMetadata a second during a failover). Once it accepts, they go out
    in order; later publishes to it waited behind them."""
    rig = await make_rig(
        stream_transport=StreamTransport.H2,
        ack_wait=10.0,
        retry=RetryPolicy(initial_backoff=0.05, max_backoff=1.0),
    )
    try:
        p = rig.publisher
        pool = p._pool.h2()
        real = pool.connection
        attempts: list[float] = []
        loop = asyncio.get_running_loop()
        refusing = True

        async def refuse(address: str) -> Any:
            attempts.append(loop.time())
            if refusing:
                raise H2RpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
            return await real(address)

        monkeypatch.setattr(pool, "connection", refuse)
        await settle()
        kw: dict[str, Any] = {"transport": Transport.GRPC, "partition": 1}
        futs = [p.publish_nowait("s", b"%d" % i, **kw) for i in range(3)]
        await asyncio.sleep(0.6)
        futs += [p.publish_nowait("s", b"late", **kw)]  # waits behind the first three
        await asyncio.sleep(0.2)
        # 0, 0.05, 0.15, 0.35, 0.75: five tries in 0.8 s (a loop made thousands).
        assert 3 <= len(attempts) <= 6, attempts
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert all(later >= earlier * 1.5 for earlier, later in itertools.pairwise(gaps))
        assert rig.md.refreshes <= len(attempts)  # one per try, not one per loop
        assert not any(f.done() for f in futs)  # never written: nothing failed either

        refusing = False
        await wait_until(lambda: rig.calls and len(rig.calls[0].written) == 4, timeout=5)
        assert [r.value for r in rig.calls[0].written] == [b"0", b"1", b"2", b"late"]
        for i, fut in enumerate(futs):
            rig.calls[0].responses.put_nowait(_ack_response(fut, i))
        assert [cast(Any, await f).offset for f in futs] == [0, 1, 2, 3]
        assert not p._outages.down(rig.md.address)  # answered: the outage is over
    finally:
        await rig.close()


async def test_h2_a_stream_of_none_publishes_that_breaks_is_replaced_at_once() -> None:
    """Ack policy NONE gets no answers: a stream the broker took still counts as working
    when it breaks (no backoff before the next); one it never took does not."""
    rig = await make_rig(
        stream_transport=StreamTransport.H2, retry=RetryPolicy(initial_backoff=5.0)
    )
    try:
        p = rig.publisher
        kw: dict[str, Any] = {"transport": Transport.GRPC, "partition": 1}
        assert await p.publish("s", b"x", ack_policy=AckPolicy.NONE, **kw) is None
        [stream] = p._leaders._streams.values()
        stream._break(errors.UnavailableError("connection lost"))
        assert p._outages.down(stream.address)
        assert p._outages.retry_at(stream.address) is None
        assert await p.publish("s", b"y", ack_policy=AckPolicy.NONE, **kw) is None
        await wait_until(lambda: len(rig.calls) == 2 and rig.calls[1].written)
        assert [r.value for r in rig.calls[1].written] == [b"y"]
        # The same break of a stream never opened: the next waits.
        p._leaders._streams[stream.address]._opened = False
        p._leaders._streams[stream.address]._break(errors.UnavailableError("refused"))
        assert p._outages.retry_at(stream.address) is not None
    finally:
        await rig.close()


async def test_publishes_parked_for_a_refusing_broker_fail_on_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = await make_rig(
        stream_transport=StreamTransport.H2, retry=RetryPolicy(initial_backoff=5.0)
    )
    pool = rig.publisher._pool.h2()

    async def refuse(address: str) -> Any:
        raise H2RpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")

    monkeypatch.setattr(pool, "connection", refuse)
    await settle()
    fut = rig.publisher.publish_nowait("s", b"x", transport=Transport.GRPC, partition=1)
    await wait_until(lambda: rig.publisher._leaders._parked, what="parked")
    await rig.close()
    with pytest.raises(errors.ConnectionClosedError):
        await fut
    assert not rig.publisher._leaders._parked
    assert rig.publisher._leaders._unpark_handle is None


def _ack_response(fut: Any, offset: int) -> api_pb2.PublishResponse:
    cid = fut.correlation_id
    return api_pb2.PublishResponse(
        correlationId=cid, ack=api_pb2.Ack(stream="s", offset=offset, correlationId=cid)
    )


@pytest.mark.parametrize("metadata_changes", [False, True])
async def test_a_send_that_waited_for_the_window_keeps_its_slot_and_its_place(
    monkeypatch: pytest.MonkeyPatch, metadata_changes: bool
) -> None:
    """send() with the window full waits for a slot, then takes the one-step path with it;
    when that path is closed meanwhile (new metadata without the leader) it queues with
    the same slot. Either way: call order on the wire, and every slot comes back."""
    rig = await make_rig(stream_transport=StreamTransport.H2, max_inflight=2)
    try:
        p = rig.publisher
        grpc_kw: dict[str, Any] = {"transport": Transport.GRPC, "partition": 1}
        first = await p.send("s", b"0", **grpc_kw)  # opens the stream (the general path)
        await wait_until(lambda: rig.calls and rig.calls[0].written, what="the first request")
        second = await p.send("s", b"1", **grpc_kw)
        enqueued: list[object] = []
        enqueue = p._enqueue

        def spy(item: Any) -> Any:
            enqueued.append(item)
            return enqueue(item)

        monkeypatch.setattr(p, "_enqueue", spy)
        waiting = asyncio.ensure_future(p.send("s", b"2", **grpc_kw))
        await settle()
        assert not waiting.done()  # the window is full
        assert p._correlator.held == 2
        if metadata_changes:  # a new snapshot that names no leader (an election, say)
            rig.md.current = dataclasses.replace(rig.md.current)
            monkeypatch.setattr(rig.md, "cached_leader_address", lambda stream, part: None)
        [call] = rig.calls
        call.responses.put_nowait(_ack_response(first, 0))
        third = await asyncio.wait_for(waiting, 5)
        assert len(enqueued) == (1 if metadata_changes else 0)  # queued only when it had to
        assert p._correlator.held == 2  # second and third: the waited-for slot, not one more
        await wait_until(lambda: len(call.written) == 3, what="the third request")
        assert [r.value for r in call.written] == [b"0", b"1", b"2"]
        for fut, offset in ((second, 1), (third, 2)):
            call.responses.put_nowait(_ack_response(fut, offset))
        assert [cast(Any, await f).offset for f in (first, second, third)] == [0, 1, 2]
        assert p._correlator.held == 0
    finally:
        await rig.close()


async def test_the_first_publishes_over_h2_take_the_one_step_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the leader in the cached metadata, the very first publish opens the stream
    to it itself: a burst at start-up is not queued for the sender one by one."""
    rig = await make_rig(stream_transport=StreamTransport.H2)
    try:
        p = rig.publisher
        await settle()  # the sender task is up and idle
        monkeypatch.setattr(p, "_enqueue", lambda item: pytest.fail("queued"))
        futs = [p.publish_nowait("s", b"%d" % i, transport=Transport.GRPC) for i in range(5)]
        assert len(p._leaders._streams) == 1
        await wait_until(lambda: rig.calls and len(rig.calls[0].written) == 5, what="requests")
        assert [r.value for r in rig.calls[0].written] == [b"0", b"1", b"2", b"3", b"4"]
        for i, fut in enumerate(futs):
            rig.calls[0].responses.put_nowait(_ack_response(fut, i))
        assert [cast(Any, await f).offset for f in futs] == [0, 1, 2, 3, 4]
    finally:
        await rig.close()
