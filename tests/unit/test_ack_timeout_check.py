"""Why a NATS publish got no ack: `_publish.timeouts.TimeoutCheck` (one check per burst)."""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.timeouts import TimeoutCheck, diagnose
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client._transport.grpc import async_error
from liftbridge_client.models import Broker, Metadata, PartitionInfo, StreamInfo


def _meta(
    *, leader: str = "n1", paused: bool = False, readonly: bool = False, subject: str = "sub"
) -> Metadata:
    parts = {
        pid: PartitionInfo(
            stream="s",
            id=pid,
            leader=leader,
            replicas=("n1",),
            isr=("n1",),
            paused=paused and pid == 1,
            readonly=readonly and pid == 1,
        )
        for pid in (0, 1)
    }
    brokers = tuple(Broker(b, "127.0.0.1", port) for b, port in (("n1", 9001), ("n2", 9002)))
    return Metadata(brokers=brokers, streams={"s": StreamInfo("s", subject, parts)})


TIMEOUT = errors.AckTimeoutError("no ack for correlation id 'c' within 0.5s")


@pytest.mark.parametrize(
    ("after", "kind", "words"),
    [
        (_meta(readonly=True), errors.ReadonlyPartitionError, "partition 1 is read-only"),
        (_meta(paused=True), errors.PartitionPausedError, "partition 1 is paused"),
        (Metadata(brokers=(), streams={}), errors.NotFoundError, "no longer lists the stream"),
        (_meta(subject="other"), errors.NotFoundError, "now on subject 'other'"),
        (_meta(leader=""), errors.NotLeaderError, "has no leader"),
        (_meta(leader="n2"), errors.NotLeaderError, "moved from n1 to n2"),
        (_meta(), errors.AckTimeoutError, "its leader n1 is the one the client knew"),
    ],
    ids=["readonly", "paused", "gone", "resubjected", "leaderless", "moved", "healthy"],
)
def test_diagnose_names_the_cause(
    after: Metadata, kind: type[errors.LiftbridgeError], words: str
) -> None:
    result = diagnose(TIMEOUT, "s", "sub.1", _meta(), after)
    assert type(result) is kind
    assert words in str(result)
    assert "'s'" in str(result)
    assert result.__cause__ is TIMEOUT


def test_readonly_wins_over_paused() -> None:
    after = _meta(readonly=True, paused=True)
    assert isinstance(diagnose(TIMEOUT, "s", "sub.1", after, after), errors.ReadonlyPartitionError)


class _Refresh:
    def __init__(self, answer: Metadata | BaseException, delay: float = 0.05) -> None:
        self.answer = answer
        self.delay = delay
        self.calls = 0
        self.avoided: list[tuple[str, ...]] = []

    async def __call__(self, *, avoid: tuple[str, ...] | frozenset[str] = ()) -> Metadata:
        self.calls += 1
        self.avoided.append(tuple(sorted(avoid)))
        await asyncio.sleep(self.delay)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _setup(
    supervisor: TaskSupervisor,
    refresh: _Refresh,
    suspected: list[str] | None = None,
    capacity: int = 2000,
) -> tuple[Correlator, TimeoutCheck]:
    loop = asyncio.get_running_loop()
    correlator = Correlator(capacity, loop=loop)
    check = TimeoutCheck(
        refresh=refresh,
        current=_meta,
        suspect=(suspected if suspected is not None else []).append,
        spawn=supervisor.spawn,
        clock=loop.time,
    )
    correlator.on_timeout = check.take
    return correlator, check


def _send(correlator: Correlator, cid: str, timeout: float, *, nats: bool = True) -> AckFuture:
    correlator.try_acquire()
    fut = correlator.register(cid, timeout)
    if nats:
        fut.expect = ("s", "sub.1")
    return fut


async def test_a_burst_of_timeouts_costs_one_check(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TTL no stall can outlast: on a loaded machine the burst's timers once spread over
    # more than the 1 s default (expiry has its own test below).
    monkeypatch.setattr("liftbridge_client._publish.timeouts.TTL", 60.0)
    refresh = _Refresh(_meta(paused=True))
    correlator, check = _setup(supervisor, refresh)
    futs = [_send(correlator, f"c{i}", 0.05) for i in range(1000)]
    outcomes = await asyncio.gather(*futs, return_exceptions=True)
    assert all(isinstance(o, errors.PartitionPausedError) for o in outcomes)
    assert all(isinstance(o.__cause__, errors.AckTimeoutError) for o in outcomes)  # type: ignore[union-attr]
    assert refresh.calls == 1
    assert len(correlator) == 0  # the slots were freed at the timeout
    assert correlator.held == 0
    # The answer serves the next timeouts for a while: no second check.
    with pytest.raises(errors.PartitionPausedError):
        await _send(correlator, "late", 0.01)
    assert refresh.calls == 1
    assert check.checks == 1


async def test_answer_expires(supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("liftbridge_client._publish.timeouts.TTL", 0.05)
    refresh = _Refresh(_meta(readonly=True), delay=0.0)
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.ReadonlyPartitionError):
        await _send(correlator, "a", 0.01)
    await asyncio.sleep(0.1)
    with pytest.raises(errors.ReadonlyPartitionError):
        await _send(correlator, "b", 0.01)
    assert refresh.calls == 2


async def test_failed_check_keeps_the_timeout_and_says_why(supervisor: TaskSupervisor) -> None:
    cause = errors.NoBrokerAvailableError("FetchMetadata: no broker reachable among ['x:1']")
    correlator, _ = _setup(supervisor, _Refresh(cause))
    with pytest.raises(errors.AckTimeoutError, match="checking the partition's state failed") as e:
        await _send(correlator, "a", 0.01)
    assert e.value.__cause__ is cause


async def test_the_check_asks_the_other_brokers_before_the_leader(
    supervisor: TaskSupervisor,
) -> None:
    # A leader cut off from the cluster answers metadata from its old view: asked first,
    # it would say it still leads, and every publish would keep going to it.
    refresh = _Refresh(_meta(leader="n2"))
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.NotLeaderError, match="moved from n1 to n2"):
        await _send(correlator, "a", 0.01)
    assert refresh.avoided == [("127.0.0.1:9001",)]  # n1, the leader the client knew


class _Stream:
    """What a gRPC publish's future is owned by: the PublishAsync stream to its leader."""

    def __init__(self, address: str) -> None:
        self.address = address


def _grpc_timeout(correlator: Correlator, cid: str, address: str) -> AckFuture:
    fut = _send(correlator, cid, 0.01, nats=False)
    fut.owner = _Stream(address)
    return fut


N1 = "127.0.0.1:9001"


async def test_a_grpc_timeout_keeps_its_error_and_names_its_leader_suspect(
    supervisor: TaskSupervisor,
) -> None:
    # gRPC answers what NATS leaves silent: the timeout itself is the news, kept as it is.
    # Its leader may be cut off, though: the metadata cache is told, and refreshes around
    # it (tests/unit/test_metadata.py); no check runs here.
    refresh = _Refresh(_meta(leader="n2"), delay=0.0)
    suspected: list[str] = []
    correlator, check = _setup(supervisor, refresh, suspected)
    futs = [_grpc_timeout(correlator, f"g{i}", N1) for i in range(50)]
    outcomes = await asyncio.gather(*futs, return_exceptions=True)
    assert all(type(o) is errors.AckTimeoutError for o in outcomes)
    assert suspected == [N1] * 50
    await asyncio.sleep(0.05)
    assert refresh.calls == 0
    assert check.checks == 0


async def test_after_close_a_grpc_timeout_names_nobody(supervisor: TaskSupervisor) -> None:
    suspected: list[str] = []
    correlator, check = _setup(supervisor, _Refresh(_meta()), suspected)
    check.close()
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "a", N1)
    assert suspected == []


async def test_a_timeout_without_a_known_leader_is_left_alone(supervisor: TaskSupervisor) -> None:
    refresh = _Refresh(_meta(paused=True))
    suspected: list[str] = []
    correlator, _ = _setup(supervisor, refresh, suspected)
    with pytest.raises(errors.AckTimeoutError) as e:
        await _send(correlator, "a", 0.01, nats=False)  # no owner: written nowhere yet
    assert type(e.value) is errors.AckTimeoutError
    await asyncio.sleep(0.05)
    assert refresh.calls == 0
    assert suspected == []


async def test_close_settles_the_waiting(supervisor: TaskSupervisor) -> None:
    refresh = _Refresh(_meta(paused=True), delay=10.0)
    correlator, check = _setup(supervisor, refresh)
    fut = _send(correlator, "a", 0.01)
    await asyncio.sleep(0.05)
    assert not fut.done()  # waiting for the check
    check.close()
    with pytest.raises(errors.AckTimeoutError):
        await fut
    # After close a timeout is plain again.
    with pytest.raises(errors.AckTimeoutError):
        await _send(correlator, "b", 0.01)
    assert refresh.calls == 1


async def test_cancelled_while_checked(supervisor: TaskSupervisor) -> None:
    correlator, _ = _setup(supervisor, _Refresh(_meta(paused=True), delay=0.1))
    fut = _send(correlator, "a", 0.01)
    await asyncio.sleep(0.03)
    fut.cancel()  # the caller gave up while the check ran: nothing breaks
    await asyncio.sleep(0.15)
    assert fut.cancelled()


def test_readonly_partition_has_the_words_of_grpcs_refusal() -> None:
    # gRPC surfaced the server's "READONLY: readonly partition: 1 (correlation id ...)"
    # while NATS named the stream: one error type and one message for both now.
    refused = async_error(
        api_pb2.PublishAsyncError(
            code=api_pb2.PublishAsyncError.READONLY, message="readonly partition: 1"
        ),
        "c",
        "s",
    )
    found = diagnose(TIMEOUT, "s", "sub.1", _meta(), _meta(readonly=True))
    assert type(refused) is type(found) is errors.ReadonlyPartitionError
    assert (
        str(refused)
        == str(found)
        == ("stream 's' partition 1 is read-only: it takes no new messages")
    )
    assert found.__cause__ is TIMEOUT  # over NATS: learnt once the ack wait ran out


@pytest.mark.parametrize(
    ("after", "calls"),
    [
        (_meta(), [True]),  # healthy, same leader: only the NATS path is left to blame
        (_meta(leader="n2"), [False]),  # moved: NATS may not reach the new leader
        (_meta(leader=""), []),  # an election: wait for it
        (_meta(paused=True), []),
        (_meta(readonly=True), []),
        (Metadata(brokers=(), streams={}), []),
    ],
    ids=["healthy", "moved", "leaderless", "paused", "readonly", "gone"],
)
async def test_a_check_that_blames_the_nats_path_calls_on_strand_once(
    supervisor: TaskSupervisor, after: Metadata, calls: list[bool]
) -> None:
    correlator, check = _setup(supervisor, _Refresh(after))
    seen: list[bool] = []
    check.on_strand = seen.append
    futs = [_send(correlator, f"c{i}", 0.05) for i in range(20)]
    await asyncio.gather(*futs, return_exceptions=True)
    assert seen == calls


async def test_a_failed_check_strands_nothing(supervisor: TaskSupervisor) -> None:
    correlator, check = _setup(supervisor, _Refresh(errors.UnavailableError("down")))
    seen: list[bool] = []
    check.on_strand = seen.append
    with pytest.raises(errors.AckTimeoutError):
        await _send(correlator, "c", 0.05)
    assert seen == []


async def test_a_stream_missing_from_the_answer_is_judged_by_not_found(
    supervisor: TaskSupervisor,
) -> None:
    """A broker that restarted answers metadata without the streams it has not reloaded:
    the metadata cache judges whether "no longer lists" is proven (`not_found`)."""
    judged: list[str] = []

    def not_found(stream: str, exc: errors.NotFoundError) -> errors.NotFoundError:
        judged.append(stream)
        return errors.StreamNotLoadedError(f"{exc} (listed lately)")

    loop = asyncio.get_running_loop()
    suspected: list[str] = []
    for after, kind in [
        (Metadata(brokers=(), streams={}), errors.StreamNotLoadedError),
        # The stream is listed, on another subject: what it says is proven.
        (_meta(subject="other"), errors.NotFoundError),
    ]:
        correlator = Correlator(10, loop=loop)
        check = TimeoutCheck(
            refresh=_Refresh(after),
            current=_meta,
            suspect=suspected.append,
            spawn=supervisor.spawn,
            clock=loop.time,
            not_found=not_found,
        )
        correlator.on_timeout = check.take
        with pytest.raises(errors.NotFoundError) as info:
            await _send(correlator, "c", 0.01)
        assert type(info.value) is kind
        assert isinstance(info.value.__cause__, errors.AckTimeoutError)
    assert judged == ["s"]
