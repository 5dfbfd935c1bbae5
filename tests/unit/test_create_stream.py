"""create_stream: retries while the cluster has no metadata leader, then waits until visible."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from liftbridge_client import _admin, errors
from liftbridge_client._grpc import call
from liftbridge_client.models import Metadata, PartitionInfo, StreamInfo
from liftbridge_client.options import ClientOptions, RetryPolicy

OPTIONS = ClientOptions(
    create_stream_timeout=2.0, retry=RetryPolicy(attempts=2, initial_backoff=0.01, max_backoff=0.01)
)


def metadata_with(name: str | None, *, leader: str = "n1", subject: str = "s") -> Metadata:
    streams = {}
    if name is not None:
        part = PartitionInfo(stream=name, id=0, leader=leader, replicas=("n1",), isr=("n1",))
        streams[name] = StreamInfo(name=name, subject=subject, partitions={0: part})
    return Metadata(brokers=(), streams=streams)


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class FakeStub:
    """A broker whose CreateStream answers with ``error`` (or succeeds)."""

    def __init__(self, error: grpc.aio.AioRpcError | None) -> None:
        self.error = error

    async def CreateStream(self, req: Any, timeout: float) -> None:
        if self.error is not None:
            raise self.error


class FakeMetadata:
    def __init__(
        self,
        create_failures: list[errors.LiftbridgeError],
        visible_after: int,
        *,
        broker_answers: list[grpc.aio.AioRpcError | None] | None = None,
    ) -> None:
        self.create_failures = create_failures
        self.visible_after = visible_after
        self.broker_answers = broker_answers or []  # one per broker, as call_any tries them
        self.creates = 0
        self.refreshes = 0
        self.existing_subject = "s"

    async def call_any(self, what: str, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        self.creates += 1
        if self.create_failures:
            raise self.create_failures.pop(0)
        for answer in self.broker_answers:  # MetadataCache.call_any: next broker if unreachable
            try:
                return await call(lambda a=answer: fn(FakeStub(a)))  # type: ignore[misc]
            except (errors.UnavailableError, errors.DeadlineExceededError):
                continue
        return None

    async def refresh(self) -> Metadata:
        self.refreshes += 1
        if self.refreshes > self.visible_after:
            return metadata_with("orders", subject=self.existing_subject)
        # First the stream is unknown, then known without a leader yet.
        return metadata_with("orders" if self.refreshes > 1 else None, leader="")


def no_leader() -> errors.InternalServerError:
    return errors.InternalServerError("INTERNAL", details="no known metadata leader")


async def create(md: FakeMetadata, **settings: Any) -> None:
    await _admin.create_stream(md, OPTIONS, "s", "orders", None, settings)  # type: ignore[arg-type]


async def test_retries_no_metadata_leader_past_the_policy_attempts() -> None:
    # Four failures while the policy allows two attempts: the deadline, not the count, rules.
    md = FakeMetadata([no_leader() for _ in range(4)], visible_after=0)
    await create(md)
    assert md.creates == 5


async def test_other_errors_are_not_retried() -> None:
    md = FakeMetadata([errors.AlreadyExistsError("exists")], visible_after=0)
    with pytest.raises(errors.AlreadyExistsError):
        await create(md)
    assert md.creates == 1


async def test_gives_up_at_the_deadline() -> None:
    md = FakeMetadata([no_leader() for _ in range(10_000)], visible_after=0)
    with pytest.raises(errors.InternalServerError, match="INTERNAL"):
        await create(md)


async def test_waits_until_the_stream_and_its_leaders_are_visible() -> None:
    md = FakeMetadata([], visible_after=3)
    await create(md)
    assert md.refreshes == 4  # unknown, leaderless, leaderless, complete


async def test_unknown_setting_is_invalid_input() -> None:
    md = FakeMetadata([], visible_after=0)
    with pytest.raises(errors.InvalidInputError):
        await create(md, partition_count=3)
    assert md.creates == 0


async def test_already_exists_after_an_ambiguous_attempt_is_this_calls_stream() -> None:
    # Broker 1 timed out (the stream was created anyway), broker 2 says it exists.
    md = FakeMetadata(
        [],
        visible_after=0,
        broker_answers=[
            rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED),
            rpc_error(grpc.StatusCode.ALREADY_EXISTS, "stream already exists"),
        ],
    )
    await create(md)  # no AlreadyExistsError: the stream matches the request


async def test_already_exists_after_an_ambiguous_attempt_but_another_stream_raises() -> None:
    md = FakeMetadata(
        [],
        visible_after=0,
        broker_answers=[
            rpc_error(grpc.StatusCode.UNAVAILABLE),
            rpc_error(grpc.StatusCode.ALREADY_EXISTS, "stream already exists"),
        ],
    )
    md.existing_subject = "someone-elses-subject"
    with pytest.raises(errors.AlreadyExistsError):
        await create(md)


async def test_already_exists_without_an_ambiguous_attempt_raises() -> None:
    md = FakeMetadata(
        [],
        visible_after=0,
        broker_answers=[rpc_error(grpc.StatusCode.ALREADY_EXISTS, "stream already exists")],
    )
    with pytest.raises(errors.AlreadyExistsError):
        await create(md)
