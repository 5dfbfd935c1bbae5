"""An in-process Liftbridge API for unit tests: real grpc.aio servers on 127.0.0.1:0.

`FakeCluster` runs one `FakeBroker` (an ``APIServicer``, so mypy checks every handler
against the real API) per broker id, each on its own loopback port, and keeps the state
they answer from: streams and their leaders, cursors, scripted failures, scripted
Subscribe streams and a PublishAsync responder. The client under test talks to it with
its real channels (`BrokerPool`), so what it sees is what gRPC really delivers:
statuses, cancellations, half-closes. Only the server's logic is stood in for.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import grpc
import grpc.aio

from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client.options import ClientOptions

Ctx: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


@dataclass(frozen=True)
class Fail:
    """An RPC that fails with this status (the handler aborts)."""

    code: grpc.StatusCode
    details: str = ""


class Hang:
    """A Subscribe stream that sends nothing more until the client goes away."""


class End:
    """A Subscribe stream that ends here with an OK status."""


HANG = Hang()
END = End()
Item = api_pb2.Message | Fail | Hang | End


class SubscribeCall:
    """One Subscribe call as the server sees it: what it will stream, and how it ended.

    Items are streamed in order; when the queue is empty the call waits (an idle
    partition), so a test can push more while it runs.
    """

    def __init__(self, items: Iterable[Item]) -> None:
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        for item in items:
            self.queue.put_nowait(item)
        self.request: api_pb2.SubscribeRequest | None = None
        self.cancelled = False  # the client went away (cancelled or closed) mid-stream
        self.finished = asyncio.Event()


# Answers one PublishAsync request: a response, None (no answer now: ack policy NONE, or
# the test answers later through the call's ``responses``), or a failure ending the call.
Responder = Callable[[api_pb2.PublishRequest], api_pb2.PublishResponse | Fail | None]


class PublishCall:
    """One PublishAsync call as the server sees it: what was written, what to answer.

    ``responses`` is streamed back in order (a `Fail` aborts the call, `END` ends it
    with OK); the cluster's responder adds to it as requests arrive.
    """

    def __init__(self) -> None:
        self.written: list[api_pb2.PublishRequest] = []
        self.responses: asyncio.Queue[api_pb2.PublishResponse | Fail | End] = asyncio.Queue()
        self.cancelled = False  # the client went away mid-call
        self.finished = asyncio.Event()


@dataclass
class Partition:
    leader: str
    isr: list[str]
    replicas: list[str] = field(default_factory=list)
    paused: bool = False


@dataclass
class Stream:
    subject: str
    partitions: dict[int, Partition]


class FakeBroker(api_pb2_grpc.APIServicer):
    """One broker of a `FakeCluster`; every handler records its request first."""

    def __init__(self, cluster: FakeCluster, broker_id: str) -> None:
        self.cluster = cluster
        self.id = broker_id
        self.server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.server = grpc.aio.server()
        api_pb2_grpc.add_APIServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)

    async def _enter(self, rpc: str, request: object, context: Ctx) -> None:
        """Record the call; abort it if the test scripted a failure for it."""
        self.cluster.calls.append((rpc, self.id, request))
        failure = self.cluster.next_failure(rpc, self.id)
        if failure is not None:
            await context.abort(failure.code, failure.details)

    # ------------------------------------------------------------ metadata

    async def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: Ctx
    ) -> api_pb2.FetchMetadataResponse:
        await self._enter("FetchMetadata", request, context)
        self.cluster.before_metadata()
        return self.cluster.metadata_response()

    async def FetchPartitionMetadata(
        self, request: api_pb2.FetchPartitionMetadataRequest, context: Ctx
    ) -> api_pb2.FetchPartitionMetadataResponse:
        await self._enter("FetchPartitionMetadata", request, context)
        return api_pb2.FetchPartitionMetadataResponse()

    # ------------------------------------------------------------ admin (recorded only)

    async def CreateStream(
        self, request: api_pb2.CreateStreamRequest, context: Ctx
    ) -> api_pb2.CreateStreamResponse:
        await self._enter("CreateStream", request, context)
        return api_pb2.CreateStreamResponse()

    async def DeleteStream(
        self, request: api_pb2.DeleteStreamRequest, context: Ctx
    ) -> api_pb2.DeleteStreamResponse:
        await self._enter("DeleteStream", request, context)
        return api_pb2.DeleteStreamResponse()

    async def PauseStream(
        self, request: api_pb2.PauseStreamRequest, context: Ctx
    ) -> api_pb2.PauseStreamResponse:
        await self._enter("PauseStream", request, context)
        return api_pb2.PauseStreamResponse()

    async def SetStreamReadonly(
        self, request: api_pb2.SetStreamReadonlyRequest, context: Ctx
    ) -> api_pb2.SetStreamReadonlyResponse:
        await self._enter("SetStreamReadonly", request, context)
        return api_pb2.SetStreamReadonlyResponse()

    # ------------------------------------------------------------ cursors

    async def SetCursor(
        self, request: api_pb2.SetCursorRequest, context: Ctx
    ) -> api_pb2.SetCursorResponse:
        await self._enter("SetCursor", request, context)
        key = (request.cursorId, request.stream, request.partition)
        self.cluster.cursors[key] = request.offset
        return api_pb2.SetCursorResponse()

    async def FetchCursor(
        self, request: api_pb2.FetchCursorRequest, context: Ctx
    ) -> api_pb2.FetchCursorResponse:
        await self._enter("FetchCursor", request, context)
        key = (request.cursorId, request.stream, request.partition)
        return api_pb2.FetchCursorResponse(offset=self.cluster.cursors.get(key, -1))

    # ------------------------------------------------------------ streams

    async def Subscribe(
        self, request: api_pb2.SubscribeRequest, context: Ctx
    ) -> AsyncIterator[api_pb2.Message]:
        await self._enter("Subscribe", request, context)
        scripts = self.cluster.subscribe_scripts[self.id]
        call = scripts.popleft() if scripts else SubscribeCall([Fail(grpc.StatusCode.UNAVAILABLE)])
        call.request = request
        self.cluster.subscribe_calls.append((self.id, call))
        try:
            while True:
                item = await call.queue.get()
                if isinstance(item, Fail):
                    await context.abort(item.code, item.details)
                if isinstance(item, End):
                    return
                if isinstance(item, Hang):
                    await asyncio.Event().wait()  # until the client cancels the call
                assert isinstance(item, api_pb2.Message)
                yield item
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        finally:
            call.finished.set()

    async def PublishAsync(
        self,
        request_iterator: AsyncIterator[api_pb2.PublishRequest],
        context: Ctx,
    ) -> AsyncIterator[api_pb2.PublishResponse]:
        self.cluster.calls.append(("PublishAsync", self.id, None))
        call = PublishCall()
        self.cluster.publish_calls.append((self.id, call))

        async def read() -> None:
            async for req in request_iterator:
                call.written.append(req)
                self.cluster.published.append((self.id, req))
                answer = self.cluster.responder(req)
                if answer is not None:
                    call.responses.put_nowait(answer)

        reader = asyncio.create_task(read())
        try:
            while True:
                item = await call.responses.get()
                if isinstance(item, Fail):
                    await context.abort(item.code, item.details)
                if isinstance(item, End):
                    return
                assert isinstance(item, api_pb2.PublishResponse)
                yield item
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        finally:
            reader.cancel()
            call.finished.set()

    # ------------------------------------------------------------ not served here

    async def Publish(
        self, request: api_pb2.PublishRequest, context: Ctx
    ) -> api_pb2.PublishResponse:
        await self._unimplemented("Publish", request, context)
        return api_pb2.PublishResponse()

    async def PublishToSubject(
        self, request: api_pb2.PublishToSubjectRequest, context: Ctx
    ) -> api_pb2.PublishToSubjectResponse:
        await self._unimplemented("PublishToSubject", request, context)
        return api_pb2.PublishToSubjectResponse()

    async def JoinConsumerGroup(
        self, request: api_pb2.JoinConsumerGroupRequest, context: Ctx
    ) -> api_pb2.JoinConsumerGroupResponse:
        await self._unimplemented("JoinConsumerGroup", request, context)
        return api_pb2.JoinConsumerGroupResponse()

    async def LeaveConsumerGroup(
        self, request: api_pb2.LeaveConsumerGroupRequest, context: Ctx
    ) -> api_pb2.LeaveConsumerGroupResponse:
        await self._unimplemented("LeaveConsumerGroup", request, context)
        return api_pb2.LeaveConsumerGroupResponse()

    async def FetchConsumerGroupAssignments(
        self,
        request: api_pb2.FetchConsumerGroupAssignmentsRequest,
        context: Ctx,
    ) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
        await self._unimplemented("FetchConsumerGroupAssignments", request, context)
        return api_pb2.FetchConsumerGroupAssignmentsResponse()

    async def ReportConsumerGroupCoordinator(
        self,
        request: api_pb2.ReportConsumerGroupCoordinatorRequest,
        context: Ctx,
    ) -> api_pb2.ReportConsumerGroupCoordinatorResponse:
        await self._unimplemented("ReportConsumerGroupCoordinator", request, context)
        return api_pb2.ReportConsumerGroupCoordinatorResponse()

    async def _unimplemented(self, rpc: str, request: object, context: Ctx) -> None:
        await self._enter(rpc, request, context)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} is not served by the fake")


class FakeCluster:
    """Brokers on loopback ports and the state they answer from."""

    def __init__(
        self, broker_ids: Iterable[str] = ("a", "b"), *, advertised: dict[str, int] | None = None
    ) -> None:
        self.brokers = {i: FakeBroker(self, i) for i in broker_ids}
        # Ports the brokers advertise in metadata instead of their real ones (tests then
        # name brokers by fixed addresses and reach them through address_overrides).
        self.advertised = advertised or {}
        self.streams: dict[str, Stream] = {}
        self.cursors: dict[tuple[str, str, int], int] = {}
        self.calls: list[tuple[str, str, object]] = []
        self.failures: dict[tuple[str, str | None], deque[Fail]] = defaultdict(deque)
        self.subscribe_scripts: dict[str, deque[SubscribeCall]] = defaultdict(deque)
        self.subscribe_calls: list[tuple[str, SubscribeCall]] = []
        self.published: list[tuple[str, api_pb2.PublishRequest]] = []
        self.publish_calls: list[tuple[str, PublishCall]] = []
        self.responder: Responder = self.ack_everything
        self.leader_plan: list[dict[str, str]] = []  # stream -> leader, for the next refreshes
        self.hidden: set[str] = set()  # broker ids left out of metadata
        self._offsets = itertools.count()
        self.pools: list[BrokerPool] = []

    async def __aenter__(self) -> FakeCluster:
        for broker in self.brokers.values():
            await broker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for pool in self.pools:
            await pool.close()
        for broker in self.brokers.values():
            await broker.stop()

    # ------------------------------------------------------------ set-up

    def address_overrides(self) -> dict[str, str]:
        """Advertised address -> real address, for `ClientOptions.address_overrides`."""
        return {f"127.0.0.1:{port}": self.address(i) for i, port in self.advertised.items()}

    def address(self, broker_id: str) -> str:
        return self.brokers[broker_id].address

    def add_stream(
        self, name: str, subject: str, leaders: Iterable[str], *, isr: Iterable[str] = ()
    ) -> None:
        """A stream with one partition per entry of ``leaders`` (broker ids; "" = none)."""
        in_sync = list(isr)
        self.streams[name] = Stream(
            subject,
            {
                i: Partition(leader, in_sync or ([leader] if leader else []), list(self.brokers))
                for i, leader in enumerate(leaders)
            },
        )

    def fail(
        self,
        rpc: str,
        code: grpc.StatusCode,
        details: str = "",
        *,
        broker: str | None = None,
        times: int = 1,
    ) -> None:
        """The next ``times`` calls of ``rpc`` (on ``broker``, or on any) fail this way."""
        self.failures[(rpc, broker)].extend(Fail(code, details) for _ in range(times))

    def script(self, broker_id: str, *items: Item) -> SubscribeCall:
        """What the next Subscribe on ``broker_id`` streams; then it waits for more."""
        call = SubscribeCall(items)
        self.subscribe_scripts[broker_id].append(call)
        return call

    def pool(self, options: ClientOptions) -> BrokerPool:
        """A client's channels to these brokers, closed with the cluster."""
        pool = BrokerPool(options)
        self.pools.append(pool)
        return pool

    def metadata_cache(
        self, options: ClientOptions, seeds: Iterable[str] | None = None
    ) -> MetadataCache:
        seed_list = list(seeds or [self.address(next(iter(self.brokers)))])
        return MetadataCache(self.pool(options), seed_list, options)

    # ------------------------------------------------------------ what brokers answer

    def next_failure(self, rpc: str, broker_id: str) -> Fail | None:
        for key in ((rpc, broker_id), (rpc, None)):
            queue = self.failures.get(key)
            if queue:
                return queue.popleft()
        return None

    def before_metadata(self) -> None:
        if self.leader_plan:
            for name, leader in self.leader_plan.pop(0).items():
                for partition in self.streams[name].partitions.values():
                    partition.leader = leader
                    partition.isr = [leader] if leader not in partition.isr else partition.isr

    def metadata_response(self) -> api_pb2.FetchMetadataResponse:
        resp = api_pb2.FetchMetadataResponse(
            brokers=[
                api_pb2.Broker(id=i, host="127.0.0.1", port=self.advertised.get(i, b.port))
                for i, b in self.brokers.items()
                if i not in self.hidden
            ]
        )
        for name, stream in self.streams.items():
            meta = resp.streamMetadata.add(name=name, subject=stream.subject)
            for pid, p in stream.partitions.items():
                meta.partitions[pid].CopyFrom(
                    api_pb2.PartitionMetadata(
                        id=pid, leader=p.leader, replicas=p.replicas, isr=p.isr, paused=p.paused
                    )
                )
        return resp

    def calls_of(self, rpc: str) -> list[tuple[str, object]]:
        return [(broker, req) for name, broker, req in self.calls if name == rpc]

    def ack_everything(self, req: api_pb2.PublishRequest) -> api_pb2.PublishResponse | None:
        """The default PublishAsync answer: an ack with the next offset (none for NONE)."""
        if req.ackPolicy == api_pb2.NONE:
            return None
        return api_pb2.PublishResponse(
            correlationId=req.correlationId,
            ack=api_pb2.Ack(
                stream=req.stream,
                correlationId=req.correlationId,
                offset=next(self._offsets),
                ackPolicy=req.ackPolicy,
            ),
        )


_HELD: list[socket.socket] = []


def dead_address() -> str:
    """A loopback address nothing listens on (connections are refused: UNAVAILABLE).

    The port stays bound (not listening) for the rest of the run, so no fake broker of a
    later test gets it: grpc-core would remember the failed connections to it.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return f"127.0.0.1:{sock.getsockname()[1]}"
