"""Routes: the ways a prepared publish leaves the client.

`Publisher` owns what every publish shares - the checks, the in-flight window, the FIFO
queue and its one sender task. A route owns one way out, and the publisher asks it, never
which kind it is:

- `NatsRoute`: enveloped messages on the partition's NATS subject (one per client);
- `LeaderRoute`: PublishAsync streams, one per partition leader, over h2 or grpc.aio
  (`StreamTransport`), with the routes to them cached per metadata snapshot, and the
  pacing of leaders that refused a stream (`OutageLog`).

Every route implements `_publish.item.Route`:

- ``prepare(item, info)`` builds the wire form (the envelope, or the PublishRequest);
- ``submit(item, fut)`` hands a prepared publish over at once, in call order, when the
  route can take it without waiting (False: the sender does it);
- ``send(item, fut)`` is the sender's way, which may wait (a full NATS buffer, a stream to
  open, a leader to find);
- ``direct(...)`` is the one-step publish of the common case (plain bytes, at most a key
  and a small dict of plain headers, the stream's metadata cached): ``send_plain`` of the
  publisher calls it, and it returns None whenever the general path must run instead.
  Its bytes and outcomes are those of ``prepare`` + ``submit``
  (tests/unit/test_publish_routes.py checks it);
- ``usable`` and ``close``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import anyio

from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.grpc_route import (
    MAX_REQUEST_BYTES,
    PublishStream,
    Spawn,
    check_request_size,
)
from liftbridge_client._publish.h2_route import H2PublishStream
from liftbridge_client._publish.item import Item, Slots
from liftbridge_client._publish.nats_route import NatsPublisher
from liftbridge_client._publish.outages import OutageLog
from liftbridge_client._publish.wire import plain_publish_request
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client.envelope import (
    MESSAGE_HEADERS_TAG,
    REQUEST_HEADERS_TAG,
    plain_header_entries,
)
from liftbridge_client.models import AckPolicy, Metadata, StreamInfo

__all__ = ["MAX_PLAIN_VALUE", "LeaderRoute", "NatsRoute"]

# Values up to this size cannot make a plain request exceed the server's gRPC limit.
MAX_PLAIN_VALUE = MAX_REQUEST_BYTES - 65536
_NONE = AckPolicy.NONE


def _left(deadline: float) -> float:
    return max(deadline - asyncio.get_running_loop().time(), 0.0)


class NatsRoute:
    """Publishes as NATS envelopes, through nats-py's outgoing buffer."""

    def __init__(self, pub: NatsPublisher, correlator: Correlator, slots: Slots) -> None:
        self.pub = pub
        self._correlator = correlator
        self._slots = slots
        self.used = False  # something was written: flush() asks NATS for a round trip
        self.lost = False  # nats-py gave up on the connection

    def __repr__(self) -> str:
        return f"<NatsRoute {self.pub!r}{' lost' if self.lost else ''}>"

    @property
    def usable(self) -> bool:
        return not self.lost

    def prepare(self, item: Item, info: StreamInfo) -> None:
        assert item.partition is not None
        item.subject = info.partition_subject(item.partition)
        item.payload = self.pub.encode(
            item.subject,
            item.value,
            key=item.key,
            headers=item.headers,
            correlation_id=item.correlation_id,
            ack_policy=item.ack_policy,
            expected_offset=item.expected_offset,
        )

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
        entries = b"" if headers is None else plain_header_entries(headers, MESSAGE_HEADERS_TAG)
        if entries is None:
            return None  # not plain: the general path checks them and says what is wrong
        slots = self._slots
        correlator = self._correlator
        if not held and not correlator.take():
            slots.window_full()
            return None  # the general path waits (send) or raises (publish_nowait)
        subject = info.partition_subject(partition)
        cid = f"{slots.cid_prefix}{next(slots.cid_counter)}"
        try:
            payload = self.pub.encode_plain(subject, value, cid, ack_policy, key, headers, entries)
        except BaseException:
            if not held:
                correlator.release()
            raise
        fut = correlator.register(cid, slots.ack_wait)
        if not self._write(stream, subject, payload, fut, ack_policy):
            # nats-py must take it (reconnecting, buffer full...): the sender does that.
            item = Item(stream, value, key, headers, partition, None, ack_policy, -1, cid, self)
            item.subject = subject
            item.payload = payload
            item.future = fut
            slots.queue(item)
        return fut

    def submit(self, item: Item, fut: AckFuture) -> bool:
        assert item.payload is not None
        return not self.lost and self._write(
            item.stream, item.subject, item.payload, fut, item.ack_policy
        )

    def _write(
        self, stream: str, subject: str, payload: bytes, fut: AckFuture, ack_policy: AckPolicy
    ) -> bool:
        """Append a registered publish to nats-py's buffer, as the sender would.

        False when nats-py must take it itself (the sender does that); the idle sender is
        woken either way, to get the batch written.
        """
        if not self.pub.send_nowait_batched(subject, payload):
            return False
        self.used = True
        fut.owner = self.pub  # lost with the NATS connection
        fut.expect = (stream, subject)  # what its ack must name
        if ack_policy is _NONE:
            self._correlator.resolve(fut.correlation_id, None)  # written: nothing will come
        self._slots.wake_sender()
        return True

    async def send(self, item: Item, fut: AckFuture) -> None:
        assert item.payload is not None
        self.used = True
        fut.owner = self.pub
        fut.expect = (item.stream, item.subject)
        # nats-py swallows a CancelledError in a forced flush and returns normally: the
        # sender's loop condition re-checks that the publisher is open after this await.
        if not self.pub.send_nowait(item.subject, item.payload):
            await self.pub.send(item.subject, item.payload)
        if item.ack_policy is _NONE and not fut.done():
            self._correlator.resolve(fut.correlation_id, None)

    async def close(self, exc: BaseException, deadline: float) -> None:
        with anyio.move_on_after(_left(deadline)):
            await self.pub.close()


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
        message = plain_publish_request(
            value, stream, partition, cid, ack_policy, key or b"", entries
        )
        if message is None:
            return None
        correlator = self._correlator
        if not held and not correlator.take():
            slots.window_full()
            return None
        fut = correlator.register(cid, slots.ack_wait)
        assert isinstance(route, H2PublishStream)  # every stream is one when self._h2
        route.submit_raw(message, fut, ack_policy is _NONE, self._requeue_bound)
        return fut

    def submit(self, item: Item, fut: AckFuture) -> bool:
        assert item.partition is not None
        route = self._cached(item.stream, item.partition)
        if route is None or not route.usable:
            return False
        assert item.request is not None
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
        stream.submit(item.request, fut, item.ack_policy is _NONE, self._requeue_bound)
        if metadata is self._metadata.current:  # no refresh in between: the route holds
            self._remember_route(metadata, item.stream, item.partition, stream)

    def _new_stream(self, address: str) -> PublishStream:
        if self._h2:
            return H2PublishStream(
                address, self._pool, self._correlator, spawn=self._spawn, outages=self._outages
            )
        return PublishStream(
            address,
            self._pool.stub(address),
            self._correlator,
            spawn=self._spawn,
            outages=self._outages,
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
