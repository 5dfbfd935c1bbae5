"""Cursor routing, validation and error mapping, against a fake pool."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest

from liftbridge_client import errors
from liftbridge_client._cursors import cursor_key, cursors_partition, fetch_cursor, set_cursor
from liftbridge_client._metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client.options import ClientOptions, RetryPolicy

OPTIONS = ClientOptions(retry=RetryPolicy(attempts=3, initial_backoff=0, max_backoff=0))
ADDRESS = {"a": "127.0.0.1:1001", "b": "127.0.0.1:1002", "c": "127.0.0.1:1003"}


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class FakeStub:
    def __init__(self, pool: FakePool, address: str) -> None:
        self.pool = pool
        self.address = address

    async def FetchMetadata(self, req: Any, timeout: float) -> api_pb2.FetchMetadataResponse:
        self.pool.refreshes += 1
        if self.pool.leader_plan:
            self.pool.leaders = self.pool.leader_plan.pop(0)
        resp = api_pb2.FetchMetadataResponse(
            brokers=[
                api_pb2.Broker(id=i, host="127.0.0.1", port=int(a.rsplit(":")[1]))
                for i, a in ADDRESS.items()
            ]
        )
        if self.pool.leaders:
            stream = resp.streamMetadata.add(name="__cursors", subject="ns.cursors")
            for pid, leader in enumerate(self.pool.leaders):
                stream.partitions[pid].CopyFrom(
                    api_pb2.PartitionMetadata(id=pid, leader=leader, isr=[leader])
                )
        return resp

    def _answer(self, what: str, req: Any) -> None:
        self.pool.calls.append((what, self.address, req))
        if self.pool.errors:
            raise self.pool.errors.pop(0)

    async def SetCursor(self, req: api_pb2.SetCursorRequest, timeout: float) -> Any:
        self._answer("SetCursor", req)
        self.pool.stored[(req.cursorId, req.stream, req.partition)] = req.offset
        return api_pb2.SetCursorResponse()

    async def FetchCursor(self, req: api_pb2.FetchCursorRequest, timeout: float) -> Any:
        self._answer("FetchCursor", req)
        offset = self.pool.stored.get((req.cursorId, req.stream, req.partition), -1)
        return api_pb2.FetchCursorResponse(offset=offset)


class FakePool:
    def __init__(self, leaders: str) -> None:
        self.leaders = leaders  # one broker id per __cursors partition; "" = no stream
        self.leader_plan: list[str] = []
        self.calls: list[tuple[str, str, Any]] = []
        self.errors: list[grpc.aio.AioRpcError] = []
        self.stored: dict[tuple[str, str, int], int] = {}
        self.refreshes = 0

    def stub(self, address: str) -> FakeStub:
        return FakeStub(self, address)

    def addresses(self) -> set[str]:
        return set(ADDRESS.values())

    async def forget(self, address: str) -> None:
        pass


def metadata(pool: FakePool) -> MetadataCache:
    return MetadataCache(pool, [ADDRESS["a"]], OPTIONS)  # type: ignore[arg-type]


def test_key_and_partition_golden_values() -> None:
    assert cursor_key("a", "s", 0) == b"a,s,0"
    # CRC-32 (IEEE) 0xC1CB346D is above 2**31: a signed hash would pick another partition.
    assert cursors_partition(b"a,s,0", 3) == 0xC1CB346D % 3 == 2
    assert cursors_partition(b"b,s,0", 3) == 0x866B4EBD % 3 == 1
    assert cursors_partition(b"orders,events,7", 3) == 0x31C4CED7 % 3 == 0
    assert cursors_partition(b"anything", 1) == 0


async def test_requests_go_to_the_leader_of_the_owning_partition() -> None:
    pool = FakePool("abc")  # partition 0 led by a, 1 by b, 2 by c
    md = metadata(pool)
    await set_cursor(md, OPTIONS, "a", "s", 0, 41)  # -> partition 2
    await set_cursor(md, OPTIONS, "b", "s", 0, 7)  # -> partition 1
    assert await fetch_cursor(md, OPTIONS, "a", "s", 0) == 41
    assert await fetch_cursor(md, OPTIONS, "b", "s", 0) == 7
    assert await fetch_cursor(md, OPTIONS, "zz", "s", 0) == -1
    routed = [(what, address) for what, address, _ in pool.calls[:4]]
    assert routed == [
        ("SetCursor", ADDRESS["c"]),
        ("SetCursor", ADDRESS["b"]),
        ("FetchCursor", ADDRESS["c"]),
        ("FetchCursor", ADDRESS["b"]),
    ]
    req = pool.calls[0][2]
    assert (req.cursorId, req.stream, req.partition, req.offset) == ("a", "s", 0, 41)


async def test_not_leader_refreshes_and_retries_on_the_new_leader() -> None:
    pool = FakePool("aaa")
    md = metadata(pool)
    await md.refresh()
    pool.leader_plan = ["aab"]
    pool.errors = [
        rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "Server not leader for cursors partition 2")
    ]
    await set_cursor(md, OPTIONS, "a", "s", 0, 3)
    assert [address for _, address, _ in pool.calls] == [ADDRESS["a"], ADDRESS["b"]]


async def test_not_leader_retries_are_bounded() -> None:
    pool = FakePool("a")
    pool.errors = [
        rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "Server not cursor partition leader")
    ] * 10
    with pytest.raises(errors.NotLeaderError):
        await fetch_cursor(metadata(pool), OPTIONS, "a", "s", 0)
    assert len(pool.calls) == OPTIONS.retry.attempts


async def test_no_cursors_stream_in_metadata_is_cursors_disabled() -> None:
    pool = FakePool("")
    with pytest.raises(errors.CursorsDisabledError, match=r"cursors\.stream\.partitions"):
        await set_cursor(metadata(pool), OPTIONS, "a", "s", 0, 1)
    assert pool.calls == []


async def test_server_saying_cursors_stream_does_not_exist_is_cursors_disabled() -> None:
    pool = FakePool("a")
    pool.errors = [rpc_error(grpc.StatusCode.INTERNAL, "Cursors stream does not exist")]
    with pytest.raises(errors.CursorsDisabledError) as info:
        await fetch_cursor(metadata(pool), OPTIONS, "a", "s", 0)
    assert isinstance(info.value, errors.InternalServerError)
    assert info.value.details == "Cursors stream does not exist"
    assert isinstance(info.value.__cause__, errors.InternalServerError)


async def test_other_internal_errors_pass_through() -> None:
    pool = FakePool("a")
    pool.errors = [rpc_error(grpc.StatusCode.INTERNAL, "publish timed out")]
    with pytest.raises(errors.InternalServerError) as info:
        await set_cursor(metadata(pool), OPTIONS, "a", "s", 0, 1)
    assert type(info.value) is errors.InternalServerError


@pytest.mark.parametrize(
    ("cursor_id", "stream", "partition", "offset", "fragment"),
    [
        ("", "s", 0, 0, "cursor_id must be a non-empty string"),
        ("a,b", "s", 0, 0, "must not contain ','"),
        ("a", "", 0, 0, "stream must be a non-empty string"),
        ("a", "s", -1, 0, "partition must be >= 0"),
        ("a", "s", True, 0, "partition must be an int"),
        ("a", "s", 0, -2, "offset must be >= -1"),
        ("a", "s", 0, 1.5, "offset must be an int"),
    ],
)
async def test_invalid_inputs(
    cursor_id: Any, stream: Any, partition: Any, offset: Any, fragment: str
) -> None:
    pool = FakePool("a")
    with pytest.raises(errors.InvalidInputError, match=fragment):
        await set_cursor(metadata(pool), OPTIONS, cursor_id, stream, partition, offset)
    assert pool.calls == []
    assert pool.refreshes == 0


async def test_minus_one_is_a_valid_offset_to_set() -> None:
    pool = FakePool("a")
    await set_cursor(metadata(pool), OPTIONS, "a", "s", 0, -1)
    assert pool.calls[0][2].offset == -1
