"""Rig for unit tests of the publisher: a fake NATS connection, a cached-metadata fake, and
one broker of the in-process fake API (fake_liftbridge) for PublishAsync over real gRPC.

Shared by test_publish_paths.py and test_publisher_validation.py (imported by module name:
pytest puts this directory on sys.path, and mypy checks it as a top-level module).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from types import MappingProxyType
from typing import Any, cast

import nats.aio.client
import pytest
from fake_liftbridge import FakeCluster, PublishCall

import liftbridge_client._publish.nats as nats_publish
from liftbridge_client import envelope, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.publisher import Publisher
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client.models import Metadata, PartitionInfo, StreamInfo
from liftbridge_client.options import ClientOptions, StreamTransport

try:  # the C accelerator as built, also where LIFTBRIDGE_CLIENT_PURE keeps the client off it
    from liftbridge_client import _speedups as compiled
except ImportError:
    compiled = None  # type: ignore[assignment]


@pytest.fixture(params=["c", "pure"])
def ack_scan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The NATS ack dispatch through the C scan, then through protobuf alone (both paths
    serve in production: with and without the accelerator), whether or not this process
    runs with LIFTBRIDGE_CLIENT_PURE. Use it by importing it."""
    if request.param == "pure":
        monkeypatch.setattr(nats_publish, "_pending_ack", None)
    elif compiled is None:
        pytest.skip("the C accelerator is not built (test_speedups.py fails in CI for that)")
    else:
        monkeypatch.setattr(nats_publish, "_pending_ack", compiled.pending_ack)
    return str(request.param)


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


class BufferedNats(FakeNats):
    """`FakeNats` with the outgoing buffer of nats-py's connection, as `PubBuffer` finds it:
    once a subject went through ``publish``, later messages are appended to ``_pending``
    in the call, as on a real connection (on plain `FakeNats` the sender writes them)."""

    def __init__(self) -> None:
        super().__init__()
        self._status = nats.aio.client.Client.CONNECTED
        self._pending: list[bytes] = []
        self._pending_data_size = 0
        self._max_pending_size = 1024 * 1024
        self._flush_queue: asyncio.Queue[None] = asyncio.Queue()
        self.stats = {"out_msgs": 0, "out_bytes": 0}

    async def _flush_pending(self) -> None:
        self.flushes += 1


def stream_info(name: str, partitions: int) -> StreamInfo:
    parts = {i: PartitionInfo(name, i, "b1", ("b1",), ("b1",)) for i in range(partitions)}
    return StreamInfo(name, f"{name}.subj", MappingProxyType(parts))


class FakeMetadata:
    """Stream "s" (3 partitions) is cached; "late" is found only by an (async) lookup."""

    def __init__(self, address: str) -> None:
        self.address = address  # the broker every partition is led by
        self.current = Metadata(brokers=(), streams={"s": stream_info("s", 3)})
        self.later: dict[str, StreamInfo] = {"late": stream_info("late", 1)}
        self.gate = asyncio.Event()
        self.gate.set()
        self.refreshes = 0
        self.avoided: list[tuple[str, ...]] = []  # each refresh's ``avoid``, sorted
        self.suspected: list[str] = []  # each leader named suspect, in turn
        self.judged: list[str] = []  # each stream a NOT_FOUND was judged for (not_found)

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
        return self.address

    def cached_leader_address(self, stream: str, partition: int) -> str | None:
        return self.address if stream in self.current.streams else None

    async def refresh(self, *, avoid: Collection[str] = ()) -> Metadata:
        self.refreshes += 1
        self.avoided.append(tuple(sorted(avoid)))
        return self.current

    def addresses(self) -> list[str]:
        return [self.address]

    def suspect(self, address: str) -> None:
        self.suspected.append(address)

    def not_found(
        self, stream: str, exc: errors.NotFoundError, *, refresh: bool = True
    ) -> errors.NotFoundError:
        """Each stream judged is recorded; how the cache judges is tested in test_metadata."""
        self.judged.append(stream)
        return errors.StreamNotLoadedError(str(exc), details=exc.details)


class Rig:
    def __init__(
        self, publisher: Publisher, nc: FakeNats | None, server: FakeCluster, md: FakeMetadata
    ) -> None:
        self.publisher, self.nc, self.server, self.md = publisher, nc, server, md

    @property
    def calls(self) -> list[PublishCall]:
        """The PublishAsync calls the broker received, oldest first."""
        return [call for _, call in self.server.publish_calls]

    async def close(self) -> None:
        await self.publisher.close(None)
        await self.server.__aexit__()

    @property
    def wire(self) -> FakeNats:
        """The fake NATS connection (the rig must have one)."""
        assert self.nc is not None
        return self.nc

    def ack(
        self,
        cid: str,
        offset: int,
        error: int = 0,
        *,
        stream: str | None = None,
        subject: str | None = None,
    ) -> None:
        """Deliver an ack on the NATS inbox, as the server would: naming the stream and
        the subject the pending publish went to (unless told otherwise)."""
        fut = self.publisher._correlator.get(cid)
        expect = fut.expect if fut is not None and fut.expect else ("s", "s.subj")
        nats_pub = self.publisher._nats_pub
        assert nats_pub is not None
        subject = expect[1] if subject is None else subject
        pb = api_pb2.Ack(
            stream=expect[0] if stream is None else stream,
            partitionSubject=subject,
            msgSubject=subject,
            offset=offset,
            ackInbox=nats_pub.inbox,
            correlationId=cid,
            ackError=cast(Any, error),
        )
        nats_pub.dispatch(envelope.encode_ack(pb))

    def assert_nothing_happened(self) -> None:
        """Nothing sent on NATS, no gRPC call, nothing pending or queued, the window free."""
        assert self.nc is None or self.nc.published == []
        assert self.server.publish_calls == []
        assert self.publisher.pending == 0
        assert self.publisher._correlator.held == 0
        assert not self.publisher._queue


async def make_rig(
    *,
    with_nats: bool = True,
    auto_ack: bool = False,
    buffered_nats: bool = False,
    **options: Any,
) -> Rig:
    """A started publisher on fakes; ``options`` are ClientOptions fields.

    The broker answers PublishAsync only as the test says (``rig.calls[i].responses``),
    or acks everything itself with ``auto_ack``. ``buffered_nats``: the NATS fake is a
    `BufferedNats`.
    """
    nc = (BufferedNats() if buffered_nats else FakeNats()) if with_nats else None
    server = await FakeCluster(("b1",)).__aenter__()
    if not auto_ack:
        server.responder = lambda req: None
    # These tests reach into the grpc.aio PublishAsync call; the h2 one is tested end to
    # end by the publish integration tests (on both stream transports).
    options.setdefault("stream_transport", StreamTransport.GRPC)
    opts = ClientOptions(**options)
    md = FakeMetadata(server.address("b1"))
    tasks = TaskSupervisor()
    await tasks.start()
    publisher = Publisher(
        metadata=cast(Any, md),
        pool=server.pool(opts),
        options=opts,
        nats=cast(Any, nc),
        tasks=tasks,
    )
    await publisher.start()
    return Rig(publisher, nc, server, md)
