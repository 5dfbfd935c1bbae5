"""The publisher: a publish is checked, queued and sent here (one sender loop).

`Publisher` owns what every publish shares, and asks a route for the rest:

- `partitioning`: which partition a message goes to;
- the checks of each call's arguments (`_publish_args`; nothing is sent for bad input);
- `_publish.acks.Correlator`: correlation id -> ack future, ack timeouts, the
  in-flight window (``ClientOptions.max_inflight``);
- the FIFO queue of `_publish.route.Item` (in `_publish.route.Slots`, which the routes
  share) and its one sender task;
- `_publish.timeouts.TimeoutCheck`: why a NATS publish got no ack;
- the ways out, behind one interface (`_publish.route.Route`): `_publish.nats.NatsRoute`
  (enveloped messages on the partition's NATS subject, acks on the client's inbox) and
  `_publish.leaders.LeaderRoute` (PublishAsync streams, one per partition leader, over
  h2 or grpc.aio).

Each verb (`publish`, `send`, `publish_nowait`) takes the `Client`'s typed arguments and
picks the path itself: the one-step path for a plain publish, else the general path,
which checks every argument once (`_publish_args.stream_publish`).

Ordering. A plain publish (at most a key, a few plain headers, a partition, an ack policy
and a transport) with nothing queued ahead of it and the sender idle takes one step in the
call (`Publisher.send_plain`, then the route's ``direct``): over NATS it is appended to
nats-py's outgoing buffer (`_transport.nats_shortcuts.PubBuffer`), over gRPC with the h2
transport it goes, serialized, to the PublishAsync stream to its leader (opened from the
cached metadata if needed; `LeaderRoute.direct`). Every other publish puts one item on a FIFO queue,
synchronously, before it returns (or, for `send`, once it has a window slot; slots are
granted first come, first served). One sender task drains the queue in order. NATS items it
writes itself, awaiting each write; a gRPC item it hands (no await) to the outbox of the
PublishAsync stream to the partition's leader, whose single writer task awaits each write in
turn. When nothing is ahead of a gRPC item (the queue is empty and the sender idle) and the
route to its stream is known for the current metadata, the call hands it to that outbox
directly, saving the hop through the sender. Either way messages reach the wire in call
order: per NATS connection, and per PublishAsync stream. Single writers are required because
both writes are coroutines (``nats.aio.client.Client.publish``, ``StreamStreamCall.write``)
and nats-py has no public synchronous way to append to its outgoing buffer (the one-step
path appends only when nothing would differ from nats-py's own). The queues are plain deques
and the writers wake through one future per idle period, so the per-message cost is a
future, a timer handle and one awaited write - no task per message. A stream that breaks
gives the requests it never wrote back to the head of the queue, in order, for a new stream.
Mixing transports for one partition gives no order guarantee (the gRPC path goes through a
broker, the NATS path does not).

Transports: ``ClientOptions.transport`` (None: NATS when the client has a NATS
connection, else gRPC), overridden per call with ``transport=``. NATS publishes detour
over the leaders' streams while NATS looks stranded (`_publish.strand`). Without NATS
servers, nats-py and the NATS modules are never imported.

Silence from the server surfaces after the ack wait (which counts from the call,
queueing included): over NATS, a publish to a paused partition (it is only resumed by
gRPC publishes and subscribes) or to a read-only one gets no ack at all, and
`_publish.timeouts.TimeoutCheck` then checks the partition's metadata, once per burst of
timeouts, to raise `PartitionPausedError`, `ReadonlyPartitionError`, `NotFoundError` or
`NotLeaderError`, else an `AckTimeoutError` that says what remains possible. Over gRPC
the server resumes a paused partition and refuses a read-only one
(`ReadonlyPartitionError`). With ack policy NONE nothing is ever acknowledged: the
future resolves to None as soon as the message is written.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING

import anyio

from liftbridge_client import _validate, errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.grpc import publish_to_subject
from liftbridge_client._publish.leaders import LeaderRoute
from liftbridge_client._publish.outages import OutageLog
from liftbridge_client._publish.route import Item, Route, Slots
from liftbridge_client._publish.timeouts import TimeoutCheck
from liftbridge_client._publish_args import (
    INT32_MAX,
    seconds_arg,
    stream_publish,
    subject_publish,
)
from liftbridge_client._tasks import TaskHandle, TaskSupervisor
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client.models import Ack, AckPolicy, PublishStats, StreamInfo
from liftbridge_client.options import ClientOptions, StreamTransport, Transport
from liftbridge_client.partitioning import (
    KeyPartitioner,
    Partitioner,
    choose_partition,
    key_partition,
)

if TYPE_CHECKING:
    import nats.aio.client

    from liftbridge_client._publish.nats import NatsPublisher, NatsRoute
    from liftbridge_client._publish.strand import Detour

__all__ = ["Publisher"]

log = logging.getLogger(__name__)

# The sender gets NATS bytes written this often in a long queue, and lets the ack
# readers run less often: the queue is bounded by max_inflight, and a sender that
# yields mid-queue lets new publishes queue behind it instead of taking the direct path.
_KICK_EVERY = 256
_YIELD_EVERY = 4096
# Enum members as module constants: reading ``AckPolicy.NONE`` costs ~0.1 us (the enum
# class's attribute lookup), several times per publish on the hot paths.
_LEADER = AckPolicy.LEADER
_NONE = AckPolicy.NONE
_NATS = Transport.NATS

Seconds = float | datetime.timedelta


class Publisher:
    """Publishing for one `Client`. See the module docstring for ordering and silence."""

    def __init__(
        self,
        *,
        metadata: MetadataCache,
        pool: BrokerPool,
        options: ClientOptions,
        nats: nats.aio.client.Client | None,
        tasks: TaskSupervisor,
    ) -> None:
        self._metadata = metadata
        self._tasks = tasks
        self._pool = pool
        self._options = options
        self._nats = nats
        self._loop = asyncio.get_running_loop()
        self._correlator = Correlator(options.max_inflight, loop=self._loop)
        # A NATS publish that gets no ack is silence, not an answer: ask the metadata why.
        # A gRPC one makes its leader suspect: the metadata is refreshed around it.
        self._timeouts = TimeoutCheck(
            refresh=metadata.refresh,
            current=lambda: metadata.current,
            suspect=metadata.suspect,
            spawn=tasks.spawn,
            clock=self._loop.time,
            not_found=metadata.not_found,
        )
        self._correlator.on_timeout = self._timeouts.take
        self._transport = options.transport or (_NATS if nats is not None else Transport.GRPC)
        # What the routes share: correlation ids, the ack wait, the sender's queue.
        self._slots = Slots(options.ack_wait)
        self._queue = self._slots.queue
        self._ack_wait = options.ack_wait
        self._sender: TaskHandle | None = None
        self._sender_idle = False
        self._nats_lost: BaseException | None = None  # nats-py gave up on the connection
        self._draining = False
        self._closed = False
        self._fast_ok = True  # False once closing, draining or NATS is lost: full checks
        self._outages = OutageLog(options.retry, self._loop.time)
        # The ways out: NATS if connected (nats-py is imported only then), and the leaders'
        # streams. NATS publishes detour around a NATS server cut off from the leaders.
        self._nats_pub: NatsPublisher | None = None
        self._nats_route: NatsRoute | None = None
        self._detour: Detour | None = None
        if nats is not None:
            from liftbridge_client._publish.nats import NatsPublisher, NatsRoute
            from liftbridge_client._publish.strand import Detour, Strand

            self._nats_pub = NatsPublisher(nats, self._correlator, crc=options.envelope_crc)
            self._nats_route = NatsRoute(self._nats_pub, self._correlator, self._slots)
            if options.nats_detour:
                strand = Strand(options.ack_wait)
                self._detour = Detour(strand, self._loop, self._route_nats, nats, tasks.spawn)
        self._timeouts.on_strand = self._detour.stranded if self._detour else None
        self._leaders = LeaderRoute(
            metadata=metadata,
            pool=pool,
            correlator=self._correlator,
            slots=self._slots,
            spawn=tasks.spawn,
            outages=self._outages,
            h2=options.stream_transport is StreamTransport.H2,
        )
        self._nats_way: Route | None = self._nats_route  # the leaders' streams in a detour
        self._default_route: Route | None = (
            self._nats_route if self._transport is _NATS else self._leaders
        )

    def __repr__(self) -> str:
        return (
            f"<Publisher transport={self._transport.name} queued={len(self._queue)} "
            f"{self._correlator!r}>"
        )

    @property
    def transport(self) -> Transport:
        """The default transport (``ClientOptions.transport`` resolved)."""
        return self._transport

    @property
    def cid_prefix(self) -> str:
        """What every correlation id this publisher makes up starts with."""
        return self._slots.cid_prefix

    @property
    def pending(self) -> int:
        """Publishes waiting for their ack (or, with ack policy NONE, for their write)."""
        return len(self._correlator)

    @property
    def unknown_acks(self) -> int:
        """Acks that matched no pending publish (late after a timeout, duplicates...)."""
        return self._correlator.unknown_acks

    @property
    def undecodable_acks(self) -> int:
        """Messages on the NATS ack inbox that were not valid acks (dropped)."""
        return self._nats_pub.undecodable_acks if self._nats_pub is not None else 0

    @property
    def ack_inbox(self) -> str | None:
        return self._nats_pub.inbox if self._nats_pub is not None else None

    async def start(self) -> None:
        """Subscribe the ack inbox (NATS) and start the sender task."""
        if self._nats_pub is not None:
            await self._nats_pub.start()
        if self._sender is None:
            self._sender = self._tasks.spawn(self._send_loop, name="lb-publisher")

    # ------------------------------------------------------------ publishing
    #
    # The verbs take `Client.publish`'s arguments, in its order (the client passes them
    # positionally). A publish with no partitioner, expected offset, correlation id or
    # ack wait may take the one-step path (`send_plain`); every other, and every one it
    # refuses, takes the general path: the checks (`_prepare`), then the queue.

    def publish(
        self,
        stream: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = _LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: Seconds | None = None,
    ) -> Awaitable[Ack | None]:
        """Send one message; awaiting the result gives its ack (None with ack policy NONE).

        A publish that leaves in one step gives its future, any other a coroutine (bad
        input raises here). Cancelling the awaiting task withdraws the publish: if it
        was not written yet it never is, and its window slot is freed at once.
        """
        if (
            partitioner is None
            and expected_offset is None
            and correlation_id is None
            and ack_wait is None
        ):
            fut = self.send_plain(
                stream, value, partition, ack_policy, transport, False, key, headers
            )
            if fut is not None:
                return fut  # the common case, in one step
            if self._window_was_full():
                return _ack_of(
                    self._send_held(stream, value, key, headers, partition, ack_policy, transport)
                )
        item = self._prepare(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )
        return _ack_of(self._send_item(item))

    async def send(
        self,
        stream: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = _LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: Seconds | None = None,
        *,
        plain_tried: bool = False,
    ) -> AckFuture:
        """Wait for room in the in-flight window, queue the message, return its future
        (``plain_tried``: the caller's `send_plain` of it returned None just now)."""
        if (
            partitioner is None
            and expected_offset is None
            and correlation_id is None
            and ack_wait is None
        ):
            plain = (stream, value, partition, ack_policy, transport, False, key, headers)
            if not plain_tried and (fut := self.send_plain(*plain)) is not None:
                return fut  # the common case, in one step
            if self._window_was_full():
                return await self._send_held(
                    stream, value, key, headers, partition, ack_policy, transport
                )
        item = self._prepare(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )
        return await self._send_item(item)

    def publish_nowait(
        self,
        stream: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = _LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: Seconds | None = None,
    ) -> AckFuture:
        """Queue the message now; `InflightLimitError` if the window is full.

        Invalid input raises here. Only when the stream's metadata is not
        cached yet (the first publish to it) is it looked up by the sender;
        lookup failures, and a partition out of range, then fail the future.
        """
        if (
            partitioner is None
            and expected_offset is None
            and correlation_id is None
            and ack_wait is None
        ):
            fut = self.send_plain(
                stream, value, partition, ack_policy, transport, False, key, headers
            )
            if fut is not None:
                return fut
            self._window_was_full()  # try_acquire below says so
        item = self._prepare(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )
        self._correlator.try_acquire()
        return self._enqueue(item)

    async def _send_item(self, item: Item) -> AckFuture:
        """`send` on the general path: the stream's metadata (looked up if not cached), a
        window slot, the queue."""
        if not item.ready:
            self._complete(item, await self._metadata.stream(item.stream))
        await self._correlator.acquire()
        return self._enqueue(item)

    async def _send_held(
        self,
        stream: str,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        partition: int | None,
        ack_policy: AckPolicy,
        transport: Transport | None,
    ) -> AckFuture:
        """`send` of a plain publish the one-step path refused for a full window only: wait
        for a slot, then take the one-step path with it (a pipelining publisher waits here
        all the time), or else the general path."""
        await self._correlator.acquire()
        try:
            fut = self.send_plain(
                stream, value, partition, ack_policy, transport, True, key, headers
            )
            if fut is not None:
                return fut
            item = self._prepare(
                stream, value, key, headers, partition, None, ack_policy, None, None, transport
            )
            if not item.ready:
                self._complete(item, await self._metadata.stream(stream))
        except BaseException:
            self._correlator.release()
            raise
        return self._enqueue(item)

    def _window_was_full(self) -> bool:
        """Whether the one-step publish just refused found the window full (and reset)."""
        slots = self._slots
        full = slots.window_was_full
        slots.window_was_full = False
        return full

    def send_plain(
        self,
        stream: str,
        value: bytes,
        partition: int | None,
        ack_policy: AckPolicy,
        transport: Transport | None,
        held: bool = False,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
    ) -> AckFuture | None:
        """The common publish in one step, or None: take the general path.

        ``held``: the caller holds a window slot for it already (and keeps it when
        None comes back). Without, None because the window is full sets
        ``Slots.window_was_full``.

        Common means: nothing queued ahead of it (so order holds) and the sender
        idle, a slot free in the window, the stream's metadata cached, plain
        arguments (exact bytes, at most a key, ``partition``, ``ack_policy``,
        ``transport`` and a small dict of ``headers``), no partitioner to call; over
        gRPC, also the h2 stream transport and the partition's leader in the cached
        metadata (its PublishAsync stream is opened here if there is none). Then the
        message is encoded and registered here and handed to nats-py's buffer or that
        stream, skipping the queue item and the hop through the sender (woken only to
        write a NATS batch out). The bytes on the wire and every check are those of the
        general path. The route takes ``headers`` only when they are cheap to check
        (`envelope.plain_header_entries`), else returns None for the general path.
        """
        if (
            self._queue
            or not self._sender_idle
            or not self._fast_ok
            or type(stream) is not str
            or type(value) is not bytes
            or type(ack_policy) is not AckPolicy
            or (key is not None and type(key) is not bytes)
        ):
            return None
        route: Route | None
        if transport is None:
            route = self._default_route
        elif type(transport) is not Transport:
            return None
        else:
            route = self._nats_way if transport is _NATS else self._leaders
        if route is None:
            return None
        info = self._metadata.current.streams.get(stream)
        if info is None:
            return None
        if partition is None:
            partitioner = self._options.partitioner
            if partitioner is not None and type(partitioner) is not KeyPartitioner:
                return None  # it may look at the value: the general path calls it
            # What the general path's choose_partition gives (no partitioner: 0).
            count = len(info.partitions)
            partition = key_partition(key, count) if key and partitioner and count else 0
        elif type(partition) is not int or not 0 <= partition < len(info.partitions):
            return None  # the general path says what is wrong with it
        return route.direct(stream, value, info, partition, ack_policy, held, key or None, headers)

    # ------------------------------------------------------------ preparing

    def _prepare(
        self,
        stream: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = _LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: Seconds | None = None,
    ) -> Item:
        """Validate everything client-side; nothing is sent for bad input."""
        # Fast path: exact bytes, a str stream and at most ``partition`` and
        # ``ack_policy`` (the common arguments) with values that need no conversion.
        # Anything else, and every error, goes through the full checks.
        if (
            self._fast_ok
            and type(stream) is str
            and stream
            and type(value) is bytes
            and key is None
            and headers is None
            and partitioner is None
            and expected_offset is None
            and correlation_id is None
            and transport is None
            and ack_wait is None
            and (partition is None or (type(partition) is int and 0 <= partition <= INT32_MAX))
            and type(ack_policy) is AckPolicy
        ):
            route = self._default_route
            if route is not None:
                slots = self._slots
                item = Item(
                    stream,
                    value,
                    None,
                    None,
                    partition,
                    self._options.partitioner,
                    ack_policy,
                    -1,
                    f"{slots.cid_prefix}{next(slots.cid_counter)}",
                    route,
                )
                return self._complete_if_known(item)
        return self._prepare_checked(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )

    def _prepare_checked(
        self,
        stream: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = _LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: Seconds | None = None,
    ) -> Item:
        """`_prepare` with every argument checked and converted."""
        self._check_accepting()
        args = stream_publish(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )
        route: Route = self._leaders
        if (args.transport or self._transport) is _NATS:
            if self._nats_lost is not None:
                raise errors.ConnectionClosedError(
                    "the NATS connection is closed for good; publish with transport=Transport.GRPC"
                ) from self._nats_lost
            if self._nats_route is None:
                raise errors.InvalidInputError(
                    "transport NATS needs a NATS connection: create the Client with "
                    "nats_servers=[...], or publish with transport=Transport.GRPC"
                )
            route = self._nats_way or self._nats_route
        cid = args.correlation_id
        slots = self._slots
        if cid is None:
            cid = f"{slots.cid_prefix}{next(slots.cid_counter)}"
        else:
            slots.skip_past(cid)
        item = Item(
            args.stream,
            args.value,
            args.key,
            args.headers,
            args.partition,
            args.partitioner if args.partitioner is not None else self._options.partitioner,
            args.ack_policy,
            args.expected_offset,
            cid,
            route,
            ack_wait=args.ack_wait,
        )
        return self._complete_if_known(item)

    def _complete_if_known(self, item: Item) -> Item:
        """Complete now when the stream's metadata is cached (else `send` looks it up)."""
        info = self._metadata.current.streams.get(item.stream)
        if info is not None:
            self._complete(item, info)
        else:  # not a stream we know: check the name before it goes into a request
            _validate.text("stream", item.stream)
        return item

    def _complete(self, item: Item, info: StreamInfo) -> None:
        """Choose the partition and build the bytes (NATS) or the request (gRPC)."""
        partitioner = item.partitioner
        if item.partition is None and (
            partitioner is None or (not item.key and type(partitioner) is KeyPartitioner)
        ):
            partition = 0  # what choose_partition gives: skip the call (the common case)
        else:
            try:
                partition = choose_partition(
                    item.stream,
                    item.key,
                    item.value,
                    len(info.partitions),
                    partition=item.partition,
                    partitioner=item.partitioner,
                )
            except errors.LiftbridgeError:
                raise
            except Exception as exc:  # the user's code: say whose, keep its error as cause
                raise errors.PartitionerError(
                    f"partitioner {item.partitioner!r} raised {type(exc).__name__} for a "
                    f"message to stream {item.stream!r}: {exc}"
                ) from exc
        item.partition = partition
        item.route.prepare(item, info)

    def _enqueue(self, item: Item) -> AckFuture:
        """Register the future on the slot just acquired and wake the sender."""
        ack_wait = item.ack_wait
        try:
            fut = self._correlator.register(
                item.correlation_id, self._ack_wait if ack_wait is None else ack_wait
            )
        except BaseException:
            self._correlator.release()
            raise
        item.future = fut
        if not self._queue and self._sender_idle and item.ready and item.route.submit(item, fut):
            # Nothing ahead of it (queue empty, sender idle): written or handed to its
            # stream's writer as the sender would, saving the hop through the sender.
            return fut
        self._slots.put(item)
        return fut

    # ------------------------------------------------------------ the sender

    async def _send_loop(self) -> None:
        slots = self._slots
        queue = slots.queue
        correlator = self._correlator
        nats_pub = self._nats_pub
        written = 0
        while not self._closed:
            if not queue:
                if nats_pub is not None and nats_pub.unflushed:
                    await nats_pub.kick()  # what send_nowait queued goes out now
                    continue
                waker = slots.waker = self._loop.create_future()
                self._sender_idle = True
                try:
                    await waker
                finally:
                    self._sender_idle = False
                continue
            item = queue.popleft()
            fut = item.future
            assert fut is not None
            if fut.done():
                continue  # cancelled or timed out before it went out: never sent
            try:
                if not item.ready:
                    self._complete(item, await self._metadata.stream(item.stream))
                    if fut.done():
                        continue
                await item.route.send(item, fut)
            except errors.LiftbridgeError as exc:
                if not fut.done():
                    correlator.fail(fut.correlation_id, exc)
                continue
            except Exception as exc:  # a partitioner's bug, an unexpected library error
                log.exception("publish %s failed unexpectedly", fut.correlation_id)
                if not fut.done():
                    failure = errors.PublishError(f"publish failed: {exc!r}")
                    failure.__cause__ = exc
                    correlator.fail(fut.correlation_id, failure)
                continue
            written += 1
            if written % _KICK_EVERY == 0:
                if nats_pub is not None:
                    await nats_pub.kick()
                if written % _YIELD_EVERY == 0:
                    await asyncio.sleep(0)

    # ------------------------------------------------------------ subject publish

    async def publish_to_subject(
        self,
        subject: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = _LEADER,
        correlation_id: str | None = None,
        ack_wait: Seconds | None = None,
    ) -> Ack | None:
        """Publish to a NATS subject through a broker (unary PublishToSubject).

        Every stream on the subject stores the message; the first ack comes
        back. The call's deadline is the ack wait: with no stream on the
        subject, `AckTimeoutError`. Not counted in the in-flight window.
        """
        self._check_accepting()
        args = subject_publish(subject, value, key, headers, ack_policy, correlation_id, ack_wait)
        cid = args.correlation_id
        if cid is None:
            slots = self._slots
            cid = f"{slots.cid_prefix}{next(slots.cid_counter)}"
        req = api_pb2.PublishToSubjectRequest(
            subject=args.subject,
            key=args.key,
            value=args.value,
            headers=args.headers,
            correlationId=cid,
            ackPolicy=args.ack_policy,  # type: ignore[arg-type]
        )
        wait = self._options.ack_wait if args.ack_wait is None else args.ack_wait
        last: errors.LiftbridgeError | None = None
        for address in self._metadata.addresses():
            try:
                return await publish_to_subject(self._pool.stub(address), req, wait)
            except errors.UnavailableError as exc:  # not delivered: another broker may do
                log.debug("PublishToSubject: broker %s unavailable: %s", address, exc)
                last = exc
            except errors.LiftbridgeError as exc:
                if self._closed:
                    raise errors.ConnectionClosedError("the client was closed") from exc
                raise
        raise errors.NoBrokerAvailableError("PublishToSubject: no broker reachable") from last

    # ------------------------------------------------------------ flush and close

    async def flush(self, timeout: float | datetime.timedelta | None) -> None:
        """Wait until every publish made so far is acked or failed, and NATS has the bytes.

        Publishes made while waiting are not waited for. `TimeoutError` (ours,
        also the builtin) after ``timeout`` seconds; nothing is cancelled then.
        `ConnectionClosedError` when the client closes meanwhile.
        """
        timeout = None if timeout is None else seconds_arg("timeout", timeout, 0.0)
        self._check_accepting()
        loop = self._loop
        deadline = None if timeout is None else loop.time() + timeout
        pending = self._correlator.pending()
        if pending:
            _, not_done = await asyncio.wait(pending, timeout=timeout)
            if not_done:
                raise errors.LiftbridgeTimeoutError(
                    f"flush: {len(not_done)} publishes still pending after {timeout}s"
                )
        nats_used = self._nats_route is not None and self._nats_route.used
        if nats_used and self._nats_pub is not None and not self._nats_pub.closed:
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            if not self._closed:
                await self._nats_pub.flush(left)  # close() ends it (stop_flushes)
        if self._closed:  # the publishes failed, or the round trip was cut
            raise errors.ConnectionClosedError("flush: the client was closed")

    def _check_accepting(self) -> None:
        if self._closed:
            raise errors.ConnectionClosedError("the client is closed")
        if self._draining:
            raise errors.ConnectionClosedError("the client is closing: no new publishes")

    async def drain(self, timeout: float) -> int:
        """Refuse new publishes, then wait up to ``timeout`` s for the pending ones.

        Returns how many were still pending when the time ran out (0: all settled).
        Publishes already accepted keep their own ack wait; the ones left are failed
        by `close`.
        """
        self._draining = True
        self._fast_ok = False
        if self._correlator.held == 0:
            return 0
        with anyio.move_on_after(timeout):
            await self._correlator.wait_empty()
        return self._correlator.held

    def _route_nats(self, detour: bool) -> None:
        """NATS publishes go over the leaders' streams (``detour``), or over NATS again."""
        self._nats_way = self._leaders if detour else self._nats_route
        if self._transport is _NATS:
            self._default_route = self._nats_way

    def nats_outage(self, down: bool) -> bool:
        """nats-py lost (``down``) or regained its connection; True: a move of the detour."""
        return self._detour.outage(down) if self._detour is not None else False

    def nats_lost(self, cause: BaseException) -> None:
        """nats-py closed the connection for good: fail every NATS publish now.

        Publishes already written wait for acks that can no longer come; queued
        ones can no longer be written. Both fail at once with `ConnectionClosedError`
        (chained to ``cause``) instead of at their ack wait. gRPC publishes go on.
        """
        if self._closed or self._nats_route is None or self._nats_lost is not None:
            return
        self._nats_lost = cause
        self._nats_route.lost = True
        self._fast_ok = False
        exc = errors.ConnectionClosedError(f"the NATS connection was closed: {cause}")
        exc.__cause__ = cause
        failed = self._correlator.fail_owned(self._nats_route.pub, exc)
        queued = [item for item in self._queue if item.route is self._nats_route]
        for item in queued:
            self._queue.remove(item)
            fut = item.future
            if fut is not None and not fut.done():
                self._correlator.fail(fut.correlation_id, exc)
                failed += 1
        log.warning("NATS connection closed for good; %d NATS publishes failed", failed)

    async def close(self, cause: BaseException | None, *, deadline: float | None = None) -> None:
        """Fail every pending publish with `ConnectionClosedError` chained to ``cause``.

        Stops the sender, cancels the PublishAsync streams and unsubscribes the
        ack inbox, each bounded by ``deadline`` (event-loop time). Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        if self._nats_pub is not None:
            self._nats_pub.stop_flushes()
        if self._detour is not None:
            self._detour.close()
        self._slots.closed = True  # a stream that breaks now gives nothing back
        self._fast_ok = False
        if deadline is None:
            deadline = self._loop.time() + self._options.close_timeout
        exc = errors.ConnectionClosedError(
            "the client was closed" if cause is None else f"the client was closed: {cause}"
        )
        exc.__cause__ = cause
        failed = self._correlator.close(exc)
        self._timeouts.close()
        if failed:
            log.info("close: %d publishes were still pending and failed: %s", failed, exc)
        self._queue.clear()
        self._slots.wake_sender()  # an idle sender sees _closed and returns
        sender, self._sender = self._sender, None
        if sender is not None and not await sender.stop(_left(deadline)):
            log.warning("close: the publisher's sender did not stop in time")
        await self._leaders.close(exc, deadline)
        if self._nats_route is not None:
            await self._nats_route.close(exc, deadline)

    def stats(self) -> PublishStats:
        return PublishStats(
            pending=len(self._correlator),
            unknown_acks=self._correlator.unknown_acks,
            undecodable_acks=self._nats_pub.undecodable_acks if self._nats_pub else 0,
            mismatched_acks=self._nats_pub.mismatched_acks if self._nats_pub else 0,
            nats_detours=self._detour.strand.detours if self._detour else 0,
        )


def _left(deadline: float) -> float:
    return max(deadline - asyncio.get_running_loop().time(), 0.0)


async def _ack_of(send: Awaitable[AckFuture]) -> Ack | None:
    """What the publish ``send`` queues is acked with."""
    return await (await send)
