"""Why a NATS publish got no ack: `_publish.publisher.TimeoutCheck` (one check per burst)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from liftbridge_client import errors
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.publisher import TimeoutCheck, diagnose
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client.models import Broker, Metadata, PartitionInfo, StreamInfo
from liftbridge_client.testing import wait_until


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
        (Metadata(brokers=(), streams={}), errors.NotFoundError, "no longer exists"),
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


@pytest.fixture
async def supervisor() -> AsyncIterator[TaskSupervisor]:
    tasks = TaskSupervisor()
    await tasks.start()
    yield tasks
    await tasks.aclose(1.0)


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
    supervisor: TaskSupervisor, refresh: _Refresh, capacity: int = 2000
) -> tuple[Correlator, TimeoutCheck]:
    loop = asyncio.get_running_loop()
    correlator = Correlator(capacity, loop=loop)
    check = TimeoutCheck(refresh=refresh, current=_meta, spawn=supervisor.spawn, clock=loop.time)
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
    monkeypatch.setattr("liftbridge_client._publish.publisher.TTL", 60.0)
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
    monkeypatch.setattr("liftbridge_client._publish.publisher.TTL", 0.05)
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


async def test_a_grpc_timeout_keeps_its_error_and_refreshes_around_its_leader(
    supervisor: TaskSupervisor,
) -> None:
    refresh = _Refresh(_meta(leader="n2"), delay=0.0)
    correlator, check = _setup(supervisor, refresh)
    futs = []
    for i in range(50):
        fut = _send(correlator, f"g{i}", 0.01, nats=False)
        fut.owner = _Stream("127.0.0.1:9001")
        futs.append(fut)
    outcomes = await asyncio.gather(*futs, return_exceptions=True)
    # gRPC answers what NATS leaves silent: the timeout itself is the news, kept as it is.
    assert all(type(o) is errors.AckTimeoutError for o in outcomes)
    await asyncio.sleep(0.05)
    assert refresh.avoided == [("127.0.0.1:9001",)]  # one refresh for the burst
    assert check.checks == 1


class _Answers(_Refresh):
    """Answers these metadata in turn, then the last one again."""

    def __init__(self, *answers: Metadata | BaseException) -> None:
        super().__init__(answers[0], delay=0.0)
        self.answers = list(answers)

    async def __call__(self, *, avoid: tuple[str, ...] | frozenset[str] = ()) -> Metadata:
        self.answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return await super().__call__(avoid=avoid)


def _grpc_timeout(correlator: Correlator, cid: str, address: str) -> AckFuture:
    fut = _send(correlator, cid, 0.01, nats=False)
    fut.owner = _Stream(address)
    return fut


N1, N2 = "127.0.0.1:9001", "127.0.0.1:9002"


async def test_while_the_answer_still_names_the_suspect_the_metadata_is_asked_again(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The others have not elected a new leader yet: ask again until they have, so that
    # the publishes made meanwhile stop going to the old leader.
    monkeypatch.setattr("liftbridge_client._publish.publisher.RECHECK_S", 0.02)
    refresh = _Answers(_meta(), _meta(), _meta(leader="n2"))
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "a", N1)
    await wait_until(lambda: refresh.calls >= 3, what="three refreshes")
    await asyncio.sleep(0.1)
    assert refresh.avoided == [(N1,)] * 3  # and none after the answer named n2


async def test_a_suspect_that_keeps_leading_is_dropped_after_suspect_s(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A leader that is only slow keeps its partitions: the re-asking ends.
    monkeypatch.setattr("liftbridge_client._publish.publisher.RECHECK_S", 0.02)
    monkeypatch.setattr("liftbridge_client._publish.publisher.SUSPECT_S", 0.2)
    refresh = _Refresh(_meta(), delay=0.0)
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "a", N1)
    await asyncio.sleep(0.4)
    calls = refresh.calls
    assert 2 <= calls <= 12
    await asyncio.sleep(0.2)
    assert refresh.calls == calls


async def test_failed_refreshes_are_quiet_and_tried_again(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("liftbridge_client._publish.publisher.RECHECK_S", 0.02)
    down = errors.NoBrokerAvailableError("no broker reachable")
    refresh = _Answers(down, TimeoutError(), _meta(leader="n2"))
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError) as info:
        await _grpc_timeout(correlator, "a", N1)
    assert type(info.value) is errors.AckTimeoutError
    await wait_until(lambda: refresh.calls >= 3, what="three refreshes")
    await asyncio.sleep(0.1)
    assert refresh.calls == 3


async def test_every_suspect_is_avoided_by_the_running_refreshes(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("liftbridge_client._publish.publisher.RECHECK_S", 0.05)
    both = Metadata(
        brokers=_meta().brokers,
        streams={
            "s": StreamInfo(
                "s",
                "sub",
                {
                    0: PartitionInfo("s", 0, "n1", ("n1",), ("n1",)),
                    1: PartitionInfo("s", 1, "n2", ("n2",), ("n2",)),
                },
            )
        },
    )
    refresh = _Answers(both, both, Metadata(brokers=_meta().brokers, streams={}))
    correlator, check = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "a", N1)
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "b", N2)
    await wait_until(lambda: refresh.calls >= 3, what="three refreshes")
    await asyncio.sleep(0.15)
    assert refresh.avoided[0] == (N1,)
    assert refresh.avoided[1:] == [(N1, N2)] * (refresh.calls - 1)
    assert refresh.calls == 3
    check.close()


async def test_the_nats_check_asks_suspects_last_even_once_they_lead_nothing(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # n2 timed out a gRPC publish, and the others have since named n1 the leader. n2, cut
    # off, still names itself: a NATS check asking it would send the publishes back to it.
    monkeypatch.setattr("liftbridge_client._publish.publisher.RECHECK_S", 0.02)
    refresh = _Refresh(_meta(leader="n1"), delay=0.0)
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "g", N2)
    await wait_until(lambda: refresh.calls >= 1, what="the refresh around n2")
    with pytest.raises(errors.AckTimeoutError):
        await _send(correlator, "n", 0.01)  # over NATS, to n1 as the client knows
    assert refresh.avoided == [(N2,), (N1, N2)]


async def test_close_stops_the_refreshes(
    supervisor: TaskSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("liftbridge_client._publish.publisher.RECHECK_S", 0.02)
    refresh = _Refresh(_meta(), delay=0.0)
    correlator, check = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError):
        await _grpc_timeout(correlator, "a", N1)
    await wait_until(lambda: refresh.calls >= 1, what="a refresh")
    check.close()
    await asyncio.sleep(0.05)
    calls = refresh.calls
    await asyncio.sleep(0.1)
    assert refresh.calls == calls


async def test_a_timeout_without_a_known_leader_is_left_alone(supervisor: TaskSupervisor) -> None:
    refresh = _Refresh(_meta(paused=True))
    correlator, _ = _setup(supervisor, refresh)
    with pytest.raises(errors.AckTimeoutError) as e:
        await _send(correlator, "a", 0.01, nats=False)  # no owner: written nowhere yet
    assert type(e.value) is errors.AckTimeoutError
    await asyncio.sleep(0.05)
    assert refresh.calls == 0


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
