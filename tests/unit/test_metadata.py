"""MetadataCache: seeds tried in turn, coalesced refreshes, leader routing and retries.

A fake pool stands in for gRPC; the real thing is covered by integration tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from liftbridge_client import errors
from liftbridge_client._metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client.options import ClientOptions, RetryPolicy

OPTIONS = ClientOptions(retry=RetryPolicy(attempts=3, initial_backoff=0, max_backoff=0))


def metadata_response(leader: str = "b") -> api_pb2.FetchMetadataResponse:
    resp = api_pb2.FetchMetadataResponse(
        brokers=[
            api_pb2.Broker(id="a", host="127.0.0.1", port=1001),
            api_pb2.Broker(id="b", host="127.0.0.1", port=1002),
        ]
    )
    stream = resp.streamMetadata.add(name="s", subject="subj")
    stream.partitions[0].CopyFrom(
        api_pb2.PartitionMetadata(id=0, leader=leader, replicas=["a", "b"], isr=["a", "b"])
    )
    stream.partitions[1].CopyFrom(api_pb2.PartitionMetadata(id=1, leader="a", isr=[]))
    return resp


def unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="down"
    )


class FakeStub:
    def __init__(self, pool: FakePool, address: str) -> None:
        self.pool = pool
        self.address = address

    async def FetchMetadata(self, req: Any, timeout: float) -> api_pb2.FetchMetadataResponse:
        self.pool.calls.append(("FetchMetadata", self.address))
        if self.address in self.pool.dead:
            raise unavailable()
        await asyncio.sleep(0)
        return self.pool.responder()


class FakePool:
    def __init__(self, responder: Callable[[], api_pb2.FetchMetadataResponse]) -> None:
        self.responder = responder
        self.dead: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.forgotten: list[str] = []

    def stub(self, address: str) -> FakeStub:
        return FakeStub(self, address)

    def addresses(self) -> set[str]:
        return {"127.0.0.1:1001", "gone:1"}

    async def forget(self, address: str) -> None:
        self.forgotten.append(address)


def cache(pool: FakePool, seeds: list[str]) -> MetadataCache:
    return MetadataCache(pool, seeds, OPTIONS)  # type: ignore[arg-type]


async def test_dead_seed_does_not_fail_refresh() -> None:
    pool = FakePool(metadata_response)
    pool.dead.add("dead:1")
    md = await cache(pool, ["dead:1", "live:2"]).refresh()
    assert [b.id for b in md.brokers] == ["a", "b"]
    assert pool.calls == [("FetchMetadata", "dead:1"), ("FetchMetadata", "live:2")]
    assert pool.forgotten == ["gone:1"]  # channel to a departed broker is closed


async def test_all_seeds_dead_raises_no_broker_available() -> None:
    pool = FakePool(metadata_response)
    pool.dead.update({"x:1", "y:2"})
    with pytest.raises(errors.NoBrokerAvailableError) as info:
        await cache(pool, ["x:1", "y:2"]).refresh()
    assert isinstance(info.value.__cause__, errors.UnavailableError)


async def test_concurrent_refreshes_share_one_round_trip() -> None:
    pool = FakePool(metadata_response)
    c = cache(pool, ["live:1"])
    await asyncio.gather(*(c.refresh() for _ in range(10)))
    # The first caller fetches; the others find a newer generation and return it.
    assert len(pool.calls) == 1


async def test_leader_and_replica_addresses() -> None:
    c = cache(FakePool(metadata_response), ["live:1"])
    assert await c.leader_address("s", 0) == "127.0.0.1:1002"
    assert await c.replica_address("s", 0) in {"127.0.0.1:1001", "127.0.0.1:1002"}
    # Empty ISR: the leader serves the read.
    assert await c.replica_address("s", 1) == "127.0.0.1:1001"
    with pytest.raises(errors.NotFoundError):
        await c.leader_address("s", 7)
    with pytest.raises(errors.NotFoundError):
        await c.stream("nope")


async def test_call_leader_refreshes_and_retries_on_not_leader() -> None:
    leaders = iter(["b", "a", "a"])
    pool = FakePool(lambda: metadata_response(next(leaders)))
    c = cache(pool, ["live:1"])
    await c.refresh()
    seen: list[str] = []

    async def fn(stub: Any) -> str:
        seen.append(stub.address)
        if stub.address == "127.0.0.1:1002":
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="Server not partition leader",
            )
        return "ok"

    assert await c.call_leader("Test", "s", 0, fn) == "ok"
    assert seen == ["127.0.0.1:1002", "127.0.0.1:1001"]


async def test_call_leader_gives_up_after_policy_attempts() -> None:
    c = cache(FakePool(metadata_response), ["live:1"])
    attempts = 0

    async def fn(stub: Any) -> None:
        nonlocal attempts
        attempts += 1
        raise unavailable()

    with pytest.raises(errors.UnavailableError):
        await c.call_leader("Test", "s", 0, fn)
    assert attempts == OPTIONS.retry.attempts


async def test_non_retriable_errors_surface_at_once() -> None:
    c = cache(FakePool(metadata_response), ["live:1"])
    attempts = 0

    async def fn(stub: Any) -> None:
        nonlocal attempts
        attempts += 1
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.INVALID_ARGUMENT, grpc.aio.Metadata(), grpc.aio.Metadata(), details="x"
        )

    with pytest.raises(errors.InvalidArgumentError):
        await c.call_leader("Test", "s", 0, fn)
    assert attempts == 1


def test_needs_a_seed() -> None:
    with pytest.raises(errors.InvalidInputError):
        MetadataCache(FakePool(metadata_response), [], OPTIONS)  # type: ignore[arg-type]
