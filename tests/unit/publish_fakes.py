"""Fakes for unit tests of the publisher: NATS, a broker pool with PublishAsync calls, metadata.

Shared by test_publish_paths.py and test_publisher_validation.py (imported by module name:
pytest puts this directory on sys.path, and mypy checks it as a top-level module).
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any, cast

import grpc

from liftbridge_client import envelope, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publisher import Publisher
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client.models import Metadata, PartitionInfo, StreamInfo
from liftbridge_client.options import ClientOptions


class FakeNats:
    max_payload = 1024 * 1024
    is_closed = False

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes]] = []
        self.flushes = 0

    def new_inbox(self) -> str:
        return "_INBOX.fake"

    async def subscribe(self, subject: str, cb: Any) -> Any:
        return None

    async def flush(self, timeout: int = 10) -> None:
        self.flushes += 1

    async def publish(self, subject: str, payload: bytes) -> None:
        self.published.append((subject, payload))

    def messages(self) -> list[tuple[str, api_pb2.Message]]:
        return [(s, envelope.decode_message(p)) for s, p in self.published]


class FakeCall:
    """A PublishAsync call: records writes, plays scripted responses."""

    def __init__(self) -> None:
        self.written: list[api_pb2.PublishRequest] = []
        self.responses: asyncio.Queue[api_pb2.PublishResponse | BaseException] = asyncio.Queue()
        self.cancelled = False

    async def write(self, req: api_pb2.PublishRequest) -> None:
        self.written.append(req)

    async def read(self) -> api_pb2.PublishResponse:
        item = await self.responses.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    async def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED if self.cancelled else grpc.StatusCode.OK


class FakeStub:
    def __init__(self, pool: FakePool) -> None:
        self.pool = pool

    def PublishAsync(self) -> FakeCall:
        call = FakeCall()
        self.pool.calls.append(call)
        return call


class FakePool:
    def __init__(self) -> None:
        self.calls: list[FakeCall] = []

    def stub(self, address: str) -> Any:
        return FakeStub(self)


def stream_info(name: str, partitions: int) -> StreamInfo:
    parts = {i: PartitionInfo(name, i, "b1", ("b1",), ("b1",)) for i in range(partitions)}
    return StreamInfo(name, f"{name}.subj", MappingProxyType(parts))


class FakeMetadata:
    """Stream "s" (3 partitions) is cached; "late" is found only by an (async) lookup."""

    def __init__(self) -> None:
        self.current = Metadata(brokers=(), streams={"s": stream_info("s", 3)})
        self.later: dict[str, StreamInfo] = {"late": stream_info("late", 1)}
        self.gate = asyncio.Event()
        self.gate.set()
        self.refreshes = 0

    async def stream(self, name: str) -> StreamInfo:
        await self.gate.wait()
        if name in self.later:
            streams = dict(self.current.streams)
            streams[name] = self.later.pop(name)
            self.current = Metadata(brokers=(), streams=streams)
        info = self.current.streams.get(name)
        if info is None:
            raise errors.NotFoundError(f"no such stream: {name}", details="")
        return info

    async def leader_address(self, stream: str, partition: int) -> str:
        return "b1:9292"

    async def refresh(self) -> Metadata:
        self.refreshes += 1
        return self.current

    def addresses(self) -> list[str]:
        return ["b1:9292"]


class Rig:
    def __init__(
        self, publisher: Publisher, nc: FakeNats | None, pool: FakePool, md: FakeMetadata
    ) -> None:
        self.publisher, self.nc, self.pool, self.md = publisher, nc, pool, md

    @property
    def wire(self) -> FakeNats:
        """The fake NATS connection (the rig must have one)."""
        assert self.nc is not None
        return self.nc

    def ack(self, cid: str, offset: int, error: int = 0) -> None:
        """Deliver an ack on the NATS inbox, as the server would."""
        pb = api_pb2.Ack(
            stream="s",
            correlationId=cid,
            offset=offset,
            ackError=cast(Any, error),
            msgSubject="s.subj",
        )
        nats_pub = self.publisher._nats_pub
        assert nats_pub is not None
        nats_pub.dispatch(envelope.encode_ack(pb))

    def assert_nothing_happened(self) -> None:
        """Nothing sent on NATS, no gRPC call, nothing pending or queued, the window free."""
        assert self.nc is None or self.nc.published == []
        assert self.pool.calls == []
        assert self.publisher.pending == 0
        assert self.publisher._correlator.held == 0
        assert not self.publisher._queue


async def make_rig(*, with_nats: bool = True, **options: Any) -> Rig:
    """A started publisher on fakes; ``options`` are ClientOptions fields."""
    nc = FakeNats() if with_nats else None
    pool, md = FakePool(), FakeMetadata()
    tasks = TaskSupervisor()
    await tasks.start()
    publisher = Publisher(
        metadata=cast(Any, md),
        pool=cast(Any, pool),
        options=ClientOptions(**options),
        nats=cast(Any, nc),
        tasks=tasks,
    )
    await publisher.start()
    return Rig(publisher, nc, pool, md)
