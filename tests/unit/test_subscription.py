"""Subscription IO against the in-process fake API: handshake, ends, resubscribe, cancel.

Each Subscribe call streams the next script given for the broker it went to: messages
(``EMPTY`` is the handshake), gRPC errors, ``EOF`` (an OK status), and, when it runs
out, the call waits like an idle stream. The client uses real grpc.aio channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import fake_liftbridge
import grpc
import grpc.aio
import pytest
from fake_liftbridge import END, Fail, FakeCluster, Partition, Stream, SubscribeCall

from liftbridge_client import StartPosition, StopPosition, errors
from liftbridge_client._cluster import metadata as metadata_module
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client.options import ClientOptions, RetryPolicy, StreamTransport
from liftbridge_client.subscription import Subscription
from liftbridge_client.testing import wait_until

A, B = "127.0.0.1:1001", "127.0.0.1:1002"
EMPTY = api_pb2.Message()
EOF = grpc.aio.EOF
FAST = RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.005)
OPTIONS = ClientOptions(retry=FAST, resubscribe_wait=0.5, rpc_timeout=0.2)

Item = api_pb2.Message | grpc.aio.AioRpcError | object

STREAM_TRANSPORT: StreamTransport = StreamTransport.GRPC  # set for each test by the fixture below


@pytest.fixture(params=[StreamTransport.GRPC, StreamTransport.H2], ids=["grpc", "h2"], autouse=True)
def stream_transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here runs on both stream transports (the fake is a real gRPC server)."""
    monkeypatch.setattr(sys.modules[__name__], "STREAM_TRANSPORT", request.param)


MakeCluster = Callable[..., Awaitable["SubscribeCluster"]]


def msg(offset: int, value: bytes = b"v") -> api_pb2.Message:
    return api_pb2.Message(stream="s", partition=0, offset=offset, value=value, timestamp=1)


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class SubscribeCluster:
    """The in-process fake API (fake_liftbridge) set up for one partition, s/0.

    Brokers a and b advertise the fixed addresses A and B (reached through address
    overrides), ``leader`` leads s/0 with ``isr`` in sync. ``script(A, ...)`` says what the
    next Subscribe on A streams; ``requests`` lists every Subscribe (address, request) and
    ``calls`` the calls as the server saw them.
    """

    def __init__(self, fake: FakeCluster, leader: str, isr: tuple[str, ...]) -> None:
        self.fake = fake
        self._removed: Stream | None = None
        fake.streams["s"] = Stream(
            "subj", {0: Partition(leader=leader, isr=list(isr), replicas=["a", "b"])}
        )

    @property
    def leader_plan(self) -> list[str]:
        return [plan["s"] for plan in self.fake.leader_plan]

    @leader_plan.setter
    def leader_plan(self, leaders: list[str]) -> None:
        self.fake.leader_plan = [{"s": leader} for leader in leaders]

    @property
    def stream_exists(self) -> bool:
        return "s" in self.fake.streams

    @stream_exists.setter
    def stream_exists(self, exists: bool) -> None:
        if not exists:
            self._removed = self.fake.streams.pop("s", None)
        elif self._removed is not None:
            self.fake.streams["s"] = self._removed  # listed again (a node has reloaded it)

    def script(self, address: str, *items: Item) -> None:
        self.fake.script(_ID[address], *(_item(i) for i in items))

    @property
    def requests(self) -> list[tuple[str, api_pb2.SubscribeRequest]]:
        out = []
        for broker, req in self.fake.calls_of("Subscribe"):
            assert isinstance(req, api_pb2.SubscribeRequest)
            out.append((_ADDRESS[broker], req))
        return out

    @property
    def calls(self) -> list[SubscribeCall]:
        return [call for _, call in self.fake.subscribe_calls]

    @property
    def refreshes(self) -> int:
        return len(self.fake.calls_of("FetchMetadata"))

    def options(self, options: ClientOptions) -> ClientOptions:
        return dataclasses.replace(options, address_overrides=self.fake.address_overrides())


_ID = {A: "a", B: "b"}
_ADDRESS = {"a": A, "b": B}


def _item(item: Item) -> fake_liftbridge.Item:
    if isinstance(item, grpc.aio.AioRpcError):
        return Fail(item.code(), item.details() or "")
    if item is EOF:
        return END
    assert isinstance(item, api_pb2.Message)
    return item


@pytest.fixture
async def make_cluster() -> AsyncIterator[Callable[..., Awaitable[SubscribeCluster]]]:
    async with contextlib.AsyncExitStack() as stack:

        async def make(leader: str = "a", isr: tuple[str, ...] = ("a", "b")) -> SubscribeCluster:
            fake = FakeCluster(("a", "b"), advertised={"a": 1001, "b": 1002})
            await stack.enter_async_context(fake)
            return SubscribeCluster(fake, leader, isr)

        yield make


def subscribe(
    cluster: SubscribeCluster, options: ClientOptions = OPTIONS, **kw: Any
) -> tuple[Subscription, list[Subscription]]:
    options = dataclasses.replace(cluster.options(options), stream_transport=STREAM_TRANSPORT)
    pool = cluster.fake.pool(options)
    metadata = MetadataCache(pool, [A], options)
    closed: list[Subscription] = []
    sub = Subscription(metadata, pool, options, "s", 0, on_close=closed.append, **kw)
    return sub, closed


async def offsets(sub: Subscription) -> list[int]:
    return [m.offset async for m in sub]


# ---------------------------------------------------------------- handshake


async def test_handshake_is_hidden_and_messages_are_models(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(
        A,
        EMPTY,
        msg(0, b"zero"),
        msg(1),
        rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stop offset reached"),
    )
    sub, closed = subscribe(cluster, start=StartPosition.EARLIEST, stop_offset=1)
    async with sub:
        assert sub.broker == A
        first = await anext(sub)
        assert (first.offset, first.value, first.stream) == (0, b"zero", "s")
        assert await offsets(sub) == [1]
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert sub.last_offset == 1
    assert closed == [sub]
    ((_, req),) = cluster.requests
    assert (req.startPosition, req.stopPosition, req.stopOffset) == (
        api_pb2.EARLIEST,
        api_pb2.STOP_OFFSET,
        1,
    )


async def test_a_first_message_that_is_not_a_handshake_is_delivered(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, msg(5), EOF)
    sub, _ = subscribe(cluster)
    async with sub:
        assert (await anext(sub)).offset == 5


async def test_async_for_without_async_with_opens_lazily(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(
        A, EMPTY, msg(0), rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stop offset reached")
    )
    sub, closed = subscribe(cluster, start=StartPosition.EARLIEST, stop=StopPosition.LATEST)
    assert cluster.requests == []
    assert await offsets(sub) == [0]
    assert closed == [sub]  # an ended subscription leaves the client's registry
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_enter_raises_not_found_once_the_metadata_proves_it(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOT_FOUND at open for a partition the metadata lists may be a restarted broker's;
    once the metadata answers leave the stream out long enough, it is plainly not found."""
    monkeypatch.setattr(metadata_module, "ABSENT_SECONDS", 0.0)
    cluster = await make_cluster()
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    sub, closed = subscribe(cluster, dataclasses.replace(OPTIONS, retry=RetryPolicy(10, 0, 0)))
    await sub._metadata.refresh()  # listed: the NOT_FOUND may be a restart's
    cluster.stream_exists = False
    with pytest.raises(errors.NotFoundError) as info:
        await sub.__aenter__()
    assert type(info.value) is errors.NotFoundError
    assert cluster.refreshes >= 1 + metadata_module.ABSENT_ANSWERS  # it did look again
    assert sub.end_reason is None
    assert closed == [sub]


async def test_not_found_at_open_from_a_restarted_broker_subscribes_once_it_has_reloaded(
    make_cluster: MakeCluster,
) -> None:
    """A broker that restarted answers NOT_FOUND until it has reloaded its streams (the
    metadata still lists the partition): opening tries again instead of failing."""
    cluster = await make_cluster()
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    cluster.script(A, EMPTY, msg(0))
    sub, _ = subscribe(cluster, dataclasses.replace(OPTIONS, retry=RetryPolicy(10, 0, 0)))
    await sub._metadata.refresh()
    async with sub:
        assert (await anext(sub)).offset == 0
    assert len(cluster.requests) == 3


async def test_unknown_stream_raises_not_found_without_subscribing(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.stream_exists = False
    sub, _ = subscribe(cluster)
    with pytest.raises(errors.NotFoundError):
        async with sub:
            pass
    assert cluster.requests == []


async def test_not_leader_at_open_refreshes_and_goes_to_the_new_leader(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.leader_plan = ["a", "b"]
    cluster.script(A, rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader"))
    cluster.script(B, EMPTY, msg(0))
    sub, _ = subscribe(cluster)
    async with sub:
        assert sub.broker == B
        assert (await anext(sub)).offset == 0
    assert [a for a, _ in cluster.requests] == [A, B]


async def test_handshake_timeout_is_retried_then_raised(
    make_cluster: MakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = await make_cluster()
    for _ in range(FAST.attempts):
        cluster.script(A)  # never answers
    sub, _ = subscribe(cluster, options=ClientOptions(retry=FAST, rpc_timeout=0.05))
    with (
        caplog.at_level(logging.WARNING, "liftbridge_client.subscription"),
        pytest.raises(errors.LiftbridgeTimeoutError, match="no handshake"),
    ):
        async with sub:
            pass
    assert f"giving up subscribing after {FAST.attempts} attempts" in caplog.text
    # Each attempt's request reaches the fake server unless the short timeout beat it there
    # (a loaded machine: the attempt is still counted above).
    assert 1 <= len(cluster.requests) <= FAST.attempts
    await wait_until(lambda: all(c.cancelled for c in cluster.calls), what="every call cancelled")


async def test_read_isr_replica_goes_to_an_isr_member_and_empty_isr_to_the_leader(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster(leader="a", isr=("b",))
    cluster.script(B, EMPTY)
    sub, _ = subscribe(cluster, read_isr_replica=True)
    async with sub:
        assert sub.broker == B
    assert cluster.requests[0][1].readISRReplica

    cluster = await make_cluster(leader="a", isr=())
    cluster.script(A, EMPTY)
    sub, _ = subscribe(cluster, read_isr_replica=True)
    async with sub:
        assert sub.broker == A


# ---------------------------------------------------------------- ends


async def test_stop_latest_on_an_empty_stream_ends_cleanly_at_enter(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stream is empty"))
    sub, _ = subscribe(cluster, start=StartPosition.EARLIEST, stop=StopPosition.LATEST)
    async with sub:
        assert await offsets(sub) == []
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert "Stream is empty" in str(sub.end_reason)


async def test_readonly_end_is_clean(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(
        A, EMPTY, msg(0), rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "End of readonly partition")
    )
    sub, _ = subscribe(cluster, start=StartPosition.EARLIEST)
    async with sub:
        assert await offsets(sub) == [0]
    assert isinstance(sub.end_reason, errors.ReadonlyPartitionEnd)


@pytest.mark.parametrize(
    ("code", "details", "kind"),
    [
        (grpc.StatusCode.NOT_FOUND, "commit log was deleted", errors.StreamDeletedEnd),
        (grpc.StatusCode.FAILED_PRECONDITION, "commit log was closed", errors.PartitionPausedEnd),
    ],
)
async def test_deleted_and_paused_are_raised_after_the_messages(
    make_cluster: MakeCluster,
    code: grpc.StatusCode,
    details: str,
    kind: type[errors.SubscriptionEnded],
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), msg(1), rpc_error(code, details))
    sub, _ = subscribe(cluster, start=StartPosition.EARLIEST)
    async with sub:
        assert [(await anext(sub)).offset for _ in range(2)] == [0, 1]
        with pytest.raises(kind) as info:
            await anext(sub)
    assert sub.end_reason is info.value
    assert isinstance(info.value.__cause__, errors.ServerError)
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


CLOSED_SEGMENT = "Failed to create stream reader: segment has been closed"


@pytest.mark.parametrize("paused", [True, False])
async def test_a_closed_segment_at_open_is_a_pause_only_if_the_metadata_says_so(
    make_cluster: MakeCluster, paused: bool
) -> None:
    """INTERNAL "segment has been closed" answers a Subscribe to a paused partition, and
    also one whose reader opened a segment that retention deleted at that moment (seen
    under load in the Spark reader's tests): only the first ends the subscription."""
    cluster = await make_cluster()
    cluster.fake.streams["s"].partitions[0].paused = paused
    cluster.script(A, rpc_error(grpc.StatusCode.INTERNAL, CLOSED_SEGMENT))
    cluster.script(A, EMPTY, msg(7))
    sub, _ = subscribe(cluster, start=StartPosition.EARLIEST)
    if paused:
        with pytest.raises(errors.PartitionPausedEnd, match="resume=True"):
            async with sub:
                pass
        assert len(cluster.requests) == 1
    else:
        async with sub:
            assert (await anext(sub)).offset == 7
            assert sub.end_reason is None
        assert len(cluster.requests) == 2


async def test_a_closed_segment_mid_stream_resubscribes_after_the_last_offset(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), rpc_error(grpc.StatusCode.INTERNAL, CLOSED_SEGMENT))
    cluster.script(A, EMPTY, msg(1))
    sub, _ = subscribe(cluster, start=StartPosition.EARLIEST)
    async with sub:
        assert [(await anext(sub)).offset for _ in range(2)] == [0, 1]
    assert [req.startOffset for _, req in cluster.requests][-1] == 1


# ---------------------------------------------------------------- resubscribe


async def test_resubscribe_after_unavailable_resumes_after_the_last_offset(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.leader_plan = ["a", "b"]
    cluster.script(A, EMPTY, msg(0), msg(1), msg(2), rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
    # The new leader replays 2 (must be dropped), then continues.
    cluster.script(B, EMPTY, msg(2), msg(3), msg(4))
    sub, _ = subscribe(cluster, start=StartPosition.EARLIEST, stop_offset=10)
    got: list[int] = []
    async with sub:
        async for m in sub:
            got.append(m.offset)
            if m.offset == 4:
                break
    assert got == [0, 1, 2, 3, 4]
    assert sub.resubscribes == 1
    (_, first), (address, second) = cluster.requests
    assert first.startPosition == api_pb2.EARLIEST
    assert address == B
    assert (second.startPosition, second.startOffset) == (api_pb2.OFFSET, 3)
    assert (second.stopPosition, second.stopOffset) == (api_pb2.STOP_OFFSET, 10)


async def test_resubscribe_before_any_message_uses_the_original_position(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
    cluster.script(A, EMPTY, msg(7))
    sub, _ = subscribe(cluster, start_time_delta=60)
    async with sub:
        assert (await anext(sub)).offset == 7
    (_, first), (_, second) = cluster.requests
    assert second.startPosition == first.startPosition == api_pb2.TIMESTAMP
    assert second.startTimestamp == first.startTimestamp > 0


async def test_not_leader_and_closed_log_during_resubscribe_are_retried(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    # open: a; resubscribe: still a (which says it is not the leader), then b.
    cluster.leader_plan = ["a", "a", "b"]
    cluster.script(A, EMPTY, msg(0), rpc_error(grpc.StatusCode.INTERNAL, "commit log was closed"))
    cluster.script(A, rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader"))
    cluster.script(B, EMPTY, msg(1))
    sub, _ = subscribe(cluster)
    async with sub:
        assert [(await anext(sub)).offset for _ in range(2)] == [0, 1]
    assert [a for a, _ in cluster.requests] == [A, A, B]
    assert cluster.requests[-1][1].startOffset == 1


async def test_an_ok_status_mid_stream_resubscribes(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), EOF)
    cluster.script(A, EMPTY, msg(1))
    sub, _ = subscribe(cluster)
    async with sub:
        assert [(await anext(sub)).offset for _ in range(2)] == [0, 1]


async def test_resubscribe_gives_up_after_resubscribe_wait(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
    options = ClientOptions(retry=FAST, resubscribe_wait=0.4, rpc_timeout=0.3)
    sub, closed = subscribe(cluster, options=options)
    loop = asyncio.get_running_loop()
    async with sub:
        assert (await anext(sub)).offset == 0
        started = loop.time()
        # The last attempt's error: every unscripted Subscribe answers UNAVAILABLE, unless
        # the deadline cut that attempt short first (a busy machine): both are retriable.
        with pytest.raises((errors.UnavailableError, errors.LiftbridgeTimeoutError)) as info:
            await anext(sub)
        assert info.value.retriable
        assert 0.35 < loop.time() - started < 2.5
        assert len(cluster.requests) > 3
        assert closed == [sub]


async def test_stream_deleted_during_resubscribe_raises_stream_deleted(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    sub, _ = subscribe(cluster)
    async with sub:
        await anext(sub)
        cluster.stream_exists = False  # deleted: the metadata no longer lists it
        with pytest.raises(errors.StreamDeletedEnd):
            await anext(sub)


async def test_not_found_from_a_restarting_broker_resubscribes_while_metadata_lists_it(
    make_cluster: MakeCluster,
) -> None:
    """A broker that restarts answers NOT_FOUND "No such partition" until it has loaded
    its streams; the metadata still lists the partition, so that is no deletion (0.2 ended
    the subscription with StreamDeletedEnd)."""
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), rpc_error(grpc.StatusCode.UNAVAILABLE, "restarting"))
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    cluster.script(A, EMPTY, msg(1))
    sub, _ = subscribe(cluster)
    async with sub:
        assert (await anext(sub)).offset == 0
        assert (await anext(sub)).offset == 1
        assert sub.end_reason is None
    assert [req.startOffset for _, req in cluster.requests][-1] == 1


async def test_a_metadata_answer_without_the_stream_is_no_proof_of_deletion(
    make_cluster: MakeCluster,
) -> None:
    """NOT_FOUND, and a metadata answer that does not list the stream (a restarting node
    answers both until it has reloaded its streams; the fault suite saw subscribers end
    with StreamDeletedEnd that way): the subscription tries again and reads on once the
    stream is listed again."""
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0), rpc_error(grpc.StatusCode.UNAVAILABLE, "restarting"))
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    cluster.script(A, rpc_error(grpc.StatusCode.NOT_FOUND, "No such partition"))
    cluster.script(A, EMPTY, msg(1))
    # The stream is listed again after 0.3 s, well within the resubscribe wait: with the
    # suite's 0.5 s a loaded machine (CI) ran out of it while metadata requests timed out.
    options = dataclasses.replace(OPTIONS, resubscribe_wait=3.0)
    sub, _ = subscribe(cluster, options)
    async with sub:
        assert (await anext(sub)).offset == 0
        cluster.stream_exists = False
        asyncio.get_running_loop().call_later(0.3, setattr, cluster, "stream_exists", True)
        assert (await anext(sub)).offset == 1
        assert sub.end_reason is None


async def test_stop_offset_delivered_before_the_break_ends_without_resubscribing(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(2), msg(3), rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
    sub, _ = subscribe(cluster, start_offset=2, stop_offset=3)
    async with sub:
        assert await offsets(sub) == [2, 3]
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert len(cluster.requests) == 1


async def test_reverse_resumes_below_the_last_offset_and_ends_on_eof(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(9), msg(8), rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
    cluster.script(A, EMPTY, msg(8), msg(7), rpc_error(grpc.StatusCode.UNKNOWN, "EOF"))
    sub, _ = subscribe(cluster, start=StartPosition.LATEST, reverse=True)
    async with sub:
        assert await offsets(sub) == [9, 8, 7]
    assert isinstance(sub.end_reason, errors.StopPositionReached)
    assert cluster.requests[1][1].startOffset == 7
    assert cluster.requests[1][1].reverse


# ---------------------------------------------------------------- close and cancel


async def test_cancelling_the_consuming_task_leaves_the_subscription_usable(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0))
    sub, closed = subscribe(cluster)
    received = asyncio.Event()

    async def consume() -> None:
        async for _ in sub:
            received.set()

    await sub.__aenter__()
    task = asyncio.create_task(consume())
    await received.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sub._call is not None
    assert not sub._call.done()  # the read in flight was kept, and the call with it
    assert not sub.closed
    cluster.calls[0].queue.put_nowait(msg(1))
    assert (await anext(sub)).offset == 1
    await sub.aclose()
    await wait_until(lambda: cluster.calls[0].cancelled, what="the server seeing the cancel")
    assert closed == [sub]


async def test_a_timed_out_read_keeps_the_subscription_and_loses_nothing(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY)
    sub, _ = subscribe(cluster)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(sub), 0.05)
    assert sub._call is not None
    assert not sub._call.done()
    assert not sub.closed
    with pytest.raises(errors.LiftbridgeTimeoutError):
        await sub.next(timeout=0.02)
    cluster.calls[0].queue.put_nowait(msg(0))
    cluster.calls[0].queue.put_nowait(msg(1))
    assert (await sub.next(timeout=1)).offset == 0
    assert (await anext(sub)).offset == 1
    assert len(cluster.calls) == 1  # no resubscribe was needed
    await sub.close()
    with pytest.raises(errors.ConnectionClosedError):
        await sub.next(timeout=1)
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_next_raises_the_end_reason_and_validates_its_timeout(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(
        A, EMPTY, msg(0), rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stop offset reached")
    )
    sub, _ = subscribe(cluster, stop_offset=0)
    assert (await sub.next(timeout=datetime.timedelta(seconds=5))).offset == 0
    with pytest.raises(errors.StopPositionReached):
        await sub.next(timeout=1)
    for bad in (-1, "1", float("nan"), float("inf"), datetime.timedelta(seconds=-1)):
        with pytest.raises(errors.InvalidInputError, match="timeout"):
            await sub.next(timeout=bad)  # type: ignore[arg-type]


async def test_aclosing_closes_the_subscription(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0))
    sub, closed = subscribe(cluster)
    async with contextlib.aclosing(sub):
        assert (await anext(sub)).offset == 0
    assert sub.closed
    assert closed == [sub]


async def test_close_from_another_task_ends_iteration_cleanly(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    cluster.script(A, EMPTY, msg(0))
    sub, closed = subscribe(cluster)
    async with sub:
        reader = asyncio.create_task(offsets(sub))
        await asyncio.sleep(0.01)
        await sub.close()
        await sub.close()
        assert await reader == [0]
    assert sub.end_reason is None
    await wait_until(lambda: cluster.calls[0].cancelled, what="the server seeing the cancel")
    assert closed == [sub]


async def test_close_while_waiting_for_the_handshake_cancels_at_once(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    cluster.script(A)  # the handshake never comes
    sub, closed = subscribe(cluster, options=ClientOptions(rpc_timeout=30))
    entering = asyncio.create_task(sub.__aenter__())
    await wait_until(lambda: bool(cluster.calls), what="the server seeing the call")
    await sub.close()
    async with asyncio.timeout(1):
        assert await entering is sub
    await wait_until(lambda: cluster.calls[0].cancelled, what="the server seeing the cancel")
    assert await offsets(sub) == []
    assert closed == [sub]


async def test_close_before_open_sends_nothing(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster()
    sub, closed = subscribe(cluster)
    await sub.close()
    assert await offsets(sub) == []
    assert cluster.requests == []
    assert closed == [sub]


async def test_invalid_arguments_are_rejected_before_anything_is_sent(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster()
    with pytest.raises(errors.InvalidInputError):
        subscribe(cluster, start=StartPosition.OFFSET)
    assert cluster.requests == []
