"""The gRPC way out: `LeaderRoute`, PublishAsync streams, one per partition leader.

A `Route` (`_publish.route`) over `_publish.h2.H2PublishStream` (the h2 stream
transport) or `_publish.grpc.PublishStream` (grpc.aio), as ``StreamTransport`` says. The
route to a partition's leader's stream is cached per metadata snapshot, so a publish
goes straight to that stream's writer; leaders that refused a stream are paced
(`_publish.outages.OutageLog`): the publishes to them wait, parked, for the next try,
while the others go on. Publishes a broken stream never wrote go back to the head of the
publisher's queue, in order, for a new stream to carry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.grpc import (
    MAX_REQUEST_BYTES,
    PublishStream,
    Spawn,
    check_request_size,
)
from liftbridge_client._publish.h2 import H2PublishStream
from liftbridge_client._publish.outages import OutageLog
from liftbridge_client._publish.route import Item, Slots
from liftbridge_client._publish.wire import publish_request
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client.envelope import REQUEST_HEADERS_TAG, plain_header_entries
from liftbridge_client.models import AckPolicy, Metadata, StreamInfo

__all__ = ["MAX_PLAIN_VALUE", "LeaderRoute"]

# Values up to this size cannot make a plain request exceed the server's gRPC limit.
MAX_PLAIN_VALUE = MAX_REQUEST_BYTES - 65536
_NONE = AckPolicy.NONE


def _left(deadline: float) -> float:
    return max(deadline - asyncio.get_running_loop().time(), 0.0)


class LeaderRoute:
    """Publishes as PublishAsync requests, on one stream per partition leader."""

    def __init__(
        self,
        *,
        metadata: MetadataCache,
        pool: BrokerPool,
        correlator: Correlator,
        slots: Slots,
        spawn: Spawn,
        outages: OutageLog,
        h2: bool,
    ) -> None:
        self._metadata = metadata
        self._pool = pool
        self._correlator = correlator
        self._slots = slots
        self._spawn = spawn
        self._outages = outages
        self._h2 = h2
        self._loop = asyncio.get_running_loop()
        self._requeue_bound = self._requeue  # one bound method, not one per publish
        self._streams: dict[str, PublishStream] = {}
        # (stream, partition) -> the PublishStream to its leader, valid for one metadata
        # snapshot: lets a publish go straight to that stream's writer.
        self._routes: dict[tuple[str, int], PublishStream] = {}
        self._routes_metadata: object = None
        # Publishes waiting for their leader's next retry (see _park).
        self._parked: list[Item] = []
        self._unpark_handle: asyncio.TimerHandle | None = None
        self.closed = False

    def __repr__(self) -> str:
        return f"<LeaderRoute streams={sorted(self._streams)} parked={len(self._parked)}>"

    @property
    def usable(self) -> bool:
        return not self.closed

    def prepare(self, item: Item, info: StreamInfo) -> None:
        assert item.partition is not None
        req = api_pb2.PublishRequest(
            value=item.value,
            stream=item.stream,
            partition=item.partition,
            correlationId=item.correlation_id,
            ackPolicy=item.ack_policy,  # type: ignore[arg-type]
            expectedOffset=item.expected_offset,
        )
        if item.key:
            req.key = item.key
        if item.headers:
            req.headers.update(item.headers)
        check_request_size(req)
        item.request = req

    def direct(
        self,
        stream: str,
        value: bytes,
        info: StreamInfo,
        partition: int,
        ack_policy: AckPolicy,
        held: bool,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
    ) -> AckFuture | None:
        if not self._h2:
            return None  # grpc.aio takes requests, not serialized messages
        entries = b"" if headers is None else plain_header_entries(headers, REQUEST_HEADERS_TAG)
        if entries is None:
            return None  # not plain: the general path checks them and says what is wrong
        route = self._cached(stream, partition)
        if route is None:
            route = self._route_now(stream, partition)
        if (
            route is None
            or not route.usable
            or len(value) + len(key or b"") + len(entries) > MAX_PLAIN_VALUE
        ):
            return None
        slots = self._slots
        cid = f"{slots.cid_prefix}{next(slots.cid_counter)}"
        message = publish_request(value, stream, partition, cid, ack_policy, key or b"", entries)
        if message is None:
            return None
        correlator = self._correlator
        if not held and not correlator.take():
            slots.window_full()
            return None
        fut = correlator.register(cid, slots.ack_wait)
        fut.stream = stream  # for an error answer's words
        assert isinstance(route, H2PublishStream)  # every stream is one when self._h2
        route.submit_raw(message, fut, ack_policy is _NONE, self._requeue_bound)
        return fut

    def submit(self, item: Item, fut: AckFuture) -> bool:
        assert item.partition is not None
        route = self._cached(item.stream, item.partition)
        if route is None or not route.usable:
            return False
        assert item.request is not None
        fut.stream = item.stream
        route.submit(item.request, fut, item.ack_policy is _NONE, self._requeue_bound)
        return True

    def _cached(self, stream: str, partition: int) -> PublishStream | None:
        if self._routes_metadata is not self._metadata.current:
            return None
        return self._routes.get((stream, partition))

    async def send(self, item: Item, fut: AckFuture) -> None:
        assert item.request is not None
        assert item.partition is not None
        metadata = self._metadata.current
        address = await self._metadata.leader_address(item.stream, item.partition)
        stream = self._streams.get(address)
        if stream is None or not stream.usable:
            if stream is not None:
                del self._streams[address]
                await stream.close()
            outages = self._outages
            if outages.down(address):
                retry_at = outages.retry_at(address)
                if retry_at is not None:
                    self._park(item, retry_at)
                    return
                await self._metadata.refresh(avoid=(address,))  # the leader may have moved
                address = await self._metadata.leader_address(item.stream, item.partition)
                if (retry_at := outages.retry_at(address)) is not None:
                    self._park(item, retry_at)
                    return
            stream = self._streams.get(address)
            if stream is None or not stream.usable:
                stream = self._open_stream(address)
        fut.stream = item.stream
        stream.submit(item.request, fut, item.ack_policy is _NONE, self._requeue_bound)
        if metadata is self._metadata.current:  # no refresh in between: the route holds
            self._remember_route(metadata, item.stream, item.partition, stream)

    def _new_stream(self, address: str) -> PublishStream:
        if self._h2:
            return H2PublishStream(
                address,
                self._pool,
                self._correlator,
                spawn=self._spawn,
                outages=self._outages,
                not_found=self._metadata.not_found,
            )
        return PublishStream(
            address,
            self._pool.stub(address),
            self._correlator,
            spawn=self._spawn,
            outages=self._outages,
            not_found=self._metadata.not_found,
        )

    def _open_stream(self, address: str) -> PublishStream:
        stream = self._new_stream(address)
        stream.open()
        self._streams[address] = stream
        return stream

    def _remember_route(
        self, metadata: Metadata, stream: str, partition: int, route: PublishStream
    ) -> None:
        """Publishes to (stream, partition) go to ``route`` while ``metadata`` is current."""
        if self._routes_metadata is not metadata:
            self._routes.clear()
            self._routes_metadata = metadata
        self._routes[(stream, partition)] = route

    def _route_now(self, stream: str, partition: int) -> PublishStream | None:
        """The route from the cached metadata, without waiting: the leader's stream
        (opened if there is none yet); None when the sender must find it (the leader is
        not known, or its stream broke and must be closed first)."""
        metadata = self._metadata.current
        address = self._metadata.cached_leader_address(stream, partition)
        if address is None:
            return None
        route = self._streams.get(address)
        if route is None:
            if self._outages.down(address):
                return None  # the sender paces new streams to it
            route = self._open_stream(address)
        elif not route.usable:
            return None
        self._remember_route(metadata, stream, partition, route)
        return route

    def _park(self, item: Item, retry_at: float) -> None:
        """Hold a publish whose leader refused its last stream until it may be tried
        again (`OutageLog.retry_at`); the others keep going. Later publishes to that
        leader park behind it, so their order holds."""
        self._parked.append(item)
        handle = self._unpark_handle
        if handle is None or handle.when() > retry_at:
            if handle is not None:
                handle.cancel()
            self._unpark_handle = self._loop.call_at(retry_at, self._unpark)

    def _unpark(self) -> None:
        """Parked publishes back to the head of the queue, in order (any still early park
        again)."""
        self._unpark_handle = None
        parked, self._parked = self._parked, []
        if not self.closed:
            self._slots.requeue(parked)

    def _requeue(self, unwritten: list[tuple[api_pb2.PublishRequest, AckFuture]]) -> None:
        """Publishes a broken stream never wrote: back to the head of the queue, in order."""
        if self.closed:
            return
        self._slots.requeue(
            [
                Item(
                    req.stream,
                    req.value,
                    None,
                    None,
                    req.partition,
                    None,
                    AckPolicy(req.ackPolicy),
                    req.expectedOffset,
                    fut.correlation_id,
                    self,
                    request=req,
                    future=fut,
                )
                for req, fut in unwritten
            ]
        )

    async def close(self, exc: BaseException, deadline: float) -> None:
        self.closed = True
        self._parked.clear()
        if self._unpark_handle is not None:
            self._unpark_handle.cancel()
            self._unpark_handle = None
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            await stream.close(exc, timeout=_left(deadline))
