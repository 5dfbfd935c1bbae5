"""Publishing: NATS envelopes or gRPC, with acks correlated to futures.

`Publisher` composes the pieces:

- `partitioning`: which partition a message goes to;
- `_publish.acks.Correlator`: correlation id -> ack future, ack timeouts, the
  in-flight window (``ClientOptions.max_inflight``);
- `_publish.nats_route.NatsPublisher`: enveloped messages on the partition's NATS subject,
  acks on the client's inbox;
- `_publish.grpc_route`: PublishAsync streams (one per broker) and the unary calls.

Ordering. A plain publish with nothing queued ahead of it and the sender idle
takes one step in the call (`Publisher.send_direct`): over NATS it is appended
to nats-py's outgoing buffer (`_transport.nats_raw.PubBuffer`), over gRPC with the h2
transport it goes, serialized, to the PublishAsync stream to its leader (opened
from the cached metadata if needed; `H2PublishStream.submit_raw`). Every other
`publish`, `send` and `publish_nowait` call puts one item on a FIFO queue,
synchronously, before it returns (or, for `send`, once it has a window slot;
slots are granted first come, first served). One sender task drains the queue
in order. NATS items it writes itself, awaiting each write; a
gRPC item it hands (no await) to the outbox of the PublishAsync stream to the
partition's leader, whose single writer task awaits each write in turn. When
nothing is ahead of a gRPC item (the queue is empty and the sender idle) and
the route to its stream is known for the current metadata, the call hands it
to that outbox directly, saving the hop through the sender. Either way
messages reach the wire in call order: per NATS connection, and per
PublishAsync stream. Single writers are required because both writes are
coroutines (``nats.aio.client.Client.publish``, ``StreamStreamCall.write``) and
nats-py has no public synchronous way to append to its outgoing buffer (the
one-step path appends only when nothing would differ from nats-py's own). The
queues are plain deques and the writers wake through one future per idle
period, so the per-message cost is a future, a timer handle and one awaited
write - no task per message. A stream that breaks gives the requests it never
wrote back to the head of the queue, in order, for a new stream. Mixing
transports for one partition gives no order guarantee (the gRPC path goes
through a broker, the NATS path does not).

Transports: ``ClientOptions.transport`` (None: NATS when the client has a NATS
connection, else gRPC), overridden per call with ``transport=``.

Silence from the server surfaces after the ack wait (which counts from the call,
queueing included): over NATS, a publish to a paused partition (it is only
resumed by gRPC publishes and subscribes) or to a read-only one gets no ack at
all, and `_publish.timeouts` then checks the partition's metadata, once per
burst of timeouts, to raise `PartitionPausedError`, `ReadonlyPartitionError`,
`NotFoundError` or `NotLeaderError`, else an `AckTimeoutError` that says what
remains possible. Over gRPC the server resumes a paused partition and refuses a
read-only one (`ReadonlyPartitionError`). With ack
policy NONE nothing is ever acknowledged: the future resolves to None as soon
as the message is written.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
import secrets
from collections import deque
from collections.abc import Mapping
from typing import Any

import anyio
import nats.aio.client
import nats.errors

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.args import (
    FAST_KEYS,
    INT32_MAX,
    INT64_MAX,
    PUBLISH_KEYS,
    SUBJECT_KEYS,
    Item,
    PublishArgs,
    SubjectPublishArgs,
    ack_policy_arg,
    as_bytes,
    correlation_id_arg,
    headers_arg,
    reject_unknown,
    seconds_arg,
)
from liftbridge_client._publish.grpc_route import (
    MAX_REQUEST_BYTES,
    PublishStream,
    check_request_size,
    publish_to_subject,
)
from liftbridge_client._publish.h2_route import H2PublishStream
from liftbridge_client._publish.nats_route import NatsPublisher
from liftbridge_client._publish.outages import OutageLog
from liftbridge_client._publish.timeouts import TimeoutCheck
from liftbridge_client._publish.wire import plain_publish_request
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client._util import validate as _validate
from liftbridge_client._util.tasks import TaskHandle, TaskSupervisor
from liftbridge_client.models import Ack, AckPolicy, Metadata, PublishStats, StreamInfo
from liftbridge_client.options import ClientOptions, StreamTransport, Transport
from liftbridge_client.partitioning import KeyPartitioner, Partitioner, choose_partition

log = logging.getLogger(__name__)

__all__ = ["Partitioner", "PublishArgs", "Publisher", "SubjectPublishArgs"]

# The sender gets NATS bytes written this often in a long queue, and lets the ack
# readers run less often: the queue is bounded by max_inflight, and a sender that
# yields mid-queue lets new publishes queue behind it instead of taking the direct path.
_KICK_EVERY = 256
# Values up to this size cannot make a plain request exceed the server's gRPC limit.
MAX_PLAIN_VALUE = MAX_REQUEST_BYTES - 65536
_YIELD_EVERY = 4096
# Enum members as module constants: reading ``AckPolicy.NONE`` costs ~0.1 us (the enum
# class's attribute lookup), several times per publish on the hot paths.
_LEADER = AckPolicy.LEADER
_NONE = AckPolicy.NONE
_NATS = Transport.NATS


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
        self._nats_pub = (
            NatsPublisher(nats, self._correlator, crc=options.envelope_crc)
            if nats is not None
            else None
        )
        # A NATS publish that gets no ack is silence, not an answer: ask the metadata why.
        self._timeouts = TimeoutCheck(
            refresh=metadata.refresh,
            current=lambda: metadata.current,
            spawn=tasks.spawn,
            clock=self._loop.time,
        )
        if nats is not None:
            self._correlator.on_timeout = self._timeouts.take
        self._transport = options.transport or (_NATS if nats is not None else Transport.GRPC)
        self._cid_prefix = secrets.token_hex(8) + "-"
        self._cid_counter = itertools.count(1)
        self._window_was_full = False  # the last one-step publish found no free slot
        self._h2_streams = options.stream_transport is StreamTransport.H2
        self._requeue_bound = self._requeue  # one bound method, not one per publish
        self._queue: deque[Item] = deque()
        self._waker: asyncio.Future[None] | None = None
        self._sender: TaskHandle | None = None
        self._streams: dict[str, PublishStream] = {}
        # (stream, partition) -> the PublishStream to its leader, valid for one metadata
        # snapshot: lets _enqueue hand a gRPC publish straight to that stream's writer.
        self._routes: dict[tuple[str, int], PublishStream] = {}
        self._routes_metadata: object = None
        self._sender_idle = False
        self._nats_used = False
        self._nats_lost: BaseException | None = None  # nats-py gave up on the connection
        self._draining = False
        self._closed = False
        self._fast_ok = True  # False once closing, draining or NATS is lost: full checks
        self._outages = OutageLog(options.retry, self._loop.time)
        # gRPC publishes waiting for their leader's next retry (see _park).
        self._parked: list[Item] = []
        self._unpark_handle: asyncio.TimerHandle | None = None
        self._ack_wait = options.ack_wait

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

    async def publish(self, stream: str, value: bytes, **kw: Any) -> Ack | None:
        """Send one message and wait for its ack (None with ack policy NONE).

        Cancelling the caller withdraws the publish: if it was not written yet
        it never is, and its window slot is freed at once.
        """
        return await (await self.send(stream, value, **kw))

    async def send(self, stream: str, value: bytes, **kw: Any) -> AckFuture:
        """Wait for room in the in-flight window, queue the message, return its future."""
        self._window_was_full = False
        if (fut := self.send_direct(stream, value, kw)) is not None:
            return fut
        if self._window_was_full:
            # Only the window stood in the way: wait for a slot, then take the one-step
            # path with it (a pipelining publisher waits here all the time).
            await self._correlator.acquire()
            try:
                if (fut := self.send_direct(stream, value, kw, held=True)) is not None:
                    return fut
                item = await self._ready_item(stream, value, kw)
            except BaseException:
                self._correlator.release()
                raise
            return self._enqueue(item, kw)
        item = await self._ready_item(stream, value, kw)
        await self._correlator.acquire()
        return self._enqueue(item, kw)

    async def _ready_item(self, stream: str, value: bytes, kw: Mapping[str, Any]) -> Item:
        """The checked queue item, with the stream's metadata (looked up if not cached)."""
        item = self._prepare(stream, value, kw)
        if not item.ready:
            self._complete(item, await self._metadata.stream(stream))
        return item

    def publish_nowait(self, stream: str, value: bytes, **kw: Any) -> AckFuture:
        """Queue the message now; `InflightLimitError` if the window is full.

        Invalid input raises here. Only when the stream's metadata is not
        cached yet (the first publish to it) is it looked up by the sender;
        lookup failures, and a partition out of range, then fail the future.
        """
        if (fut := self.send_direct(stream, value, kw)) is not None:
            return fut
        item = self._prepare(stream, value, kw)
        self._correlator.try_acquire()
        return self._enqueue(item, kw)

    def send_direct(
        self, stream: str, value: bytes, kw: Mapping[str, Any], held: bool = False
    ) -> AckFuture | None:
        """The common publish in one step, or None: take the general path.

        ``held``: the caller holds a window slot for it already (and keeps it when
        None comes back). Without, None because the window is full sets
        ``_window_was_full``.

        Common means: nothing queued ahead of it (so order holds) and the sender
        idle, a slot free in the window, the stream's metadata cached, plain
        arguments (exact bytes, at most ``partition``, ``ack_policy`` and
        ``transport``), no partitioner to call; over gRPC, also the h2 stream
        transport and the partition's leader in the cached metadata (its
        PublishAsync stream is opened here if there is none). Then the message
        is encoded and registered here and handed to nats-py's buffer or that
        stream, skipping the queue item and
        the hop through the sender (woken only to write a NATS batch out). The
        bytes on the wire and every check are those of the general path.
        """
        if not kw:
            return self.send_plain(stream, value, None, _LEADER, None, held)
        known = ("partition" in kw) + ("ack_policy" in kw) + ("transport" in kw)
        if len(kw) != known:
            return None
        return self.send_plain(
            stream,
            value,
            kw.get("partition"),
            kw.get("ack_policy", _LEADER),
            kw.get("transport"),
            held,
        )

    def send_plain(
        self,
        stream: str,
        value: bytes,
        partition: int | None,
        ack_policy: AckPolicy,
        transport: Transport | None,
        held: bool = False,
    ) -> AckFuture | None:
        """`send_direct` for a publish whose only options are these three (None: defaults)."""
        if (
            self._queue
            or not self._sender_idle
            or not self._fast_ok
            or type(stream) is not str
            or type(value) is not bytes
            or type(ack_policy) is not AckPolicy
        ):
            return None
        if transport is None:
            transport = self._transport
        elif type(transport) is not Transport:
            return None
        info = self._metadata.current.streams.get(stream)
        if info is None:
            return None
        if partition is None:
            partitioner = self._options.partitioner
            if partitioner is not None and type(partitioner) is not KeyPartitioner:
                return None  # it may look at the value: the general path calls it
            partition = 0
        elif type(partition) is not int or not 0 <= partition < len(info.partitions):
            return None  # the general path says what is wrong with it
        if transport is _NATS:
            return self._direct_nats(stream, value, info, partition, ack_policy, held)
        return self._direct_h2(stream, value, partition, ack_policy, held)

    def _direct_nats(
        self,
        stream: str,
        value: bytes,
        info: StreamInfo,
        partition: int,
        ack_policy: AckPolicy,
        held: bool,
    ) -> AckFuture | None:
        nats_pub = self._nats_pub
        if nats_pub is None:
            return None
        correlator = self._correlator
        if not held and not correlator.take():
            self._window_was_full = True
            return None  # the general path waits (send) or raises (publish_nowait)
        subject = info.partition_subject(partition)
        cid = f"{self._cid_prefix}{next(self._cid_counter)}"
        try:
            payload = nats_pub.encode_plain(subject, value, cid, ack_policy)
        except BaseException:
            if not held:
                correlator.release()
            raise
        fut = correlator.register(cid, self._ack_wait)
        if not self._write_nats(nats_pub, stream, subject, payload, fut, ack_policy):
            # nats-py must take it (reconnecting, buffer full...): the sender does that.
            item = Item(stream, value, None, None, partition, None, ack_policy, -1, cid, True)
            item.subject = subject
            item.payload = payload
            item.future = fut
            self._queue.append(item)
            self._wake_sender()
        return fut

    def _direct_h2(
        self, stream: str, value: bytes, partition: int, ack_policy: AckPolicy, held: bool
    ) -> AckFuture | None:
        route = (
            self._routes.get((stream, partition))
            if self._routes_metadata is self._metadata.current
            else None
        )
        if route is None and self._h2_streams:
            route = self._route_now(stream, partition)
        if (
            not isinstance(route, H2PublishStream)
            or not route.usable
            or len(value) > MAX_PLAIN_VALUE
        ):
            return None
        cid = f"{self._cid_prefix}{next(self._cid_counter)}"
        message = plain_publish_request(value, stream, partition, cid, ack_policy)
        if message is None:
            return None
        correlator = self._correlator
        if not held and not correlator.take():
            self._window_was_full = True
            return None
        fut = correlator.register(cid, self._ack_wait)
        route.submit_raw(message, fut, ack_policy is _NONE, self._requeue_bound)
        return fut

    def _write_nats(
        self,
        nats_pub: NatsPublisher,
        stream: str,
        subject: str,
        payload: bytes,
        fut: AckFuture,
        ack_policy: AckPolicy,
    ) -> bool:
        """Append a registered NATS publish to nats-py's buffer, as the sender would.

        False when nats-py must take it itself (the sender does that); the idle
        sender is woken either way, to get the batch written.
        """
        if not nats_pub.send_nowait_batched(subject, payload):
            return False
        self._nats_used = True
        fut.owner = nats_pub  # lost with the NATS connection
        fut.expect = (stream, subject)  # what its ack must name
        if ack_policy is _NONE:
            self._correlator.resolve(fut.correlation_id, None)  # written: nothing will come
        self._wake_sender()
        return True

    def _wake_sender(self) -> None:
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def _prepare(self, stream: str, value: bytes, kw: Mapping[str, Any]) -> Item:
        """Validate everything client-side; nothing is sent for bad input."""
        # Fast path: exact bytes, a str stream and only ``partition``/``ack_policy`` (the
        # common keyword set) with values that need no conversion. Anything else, and
        # every error, goes through the full checks below.
        if (
            self._fast_ok
            and type(stream) is str
            and stream
            and type(value) is bytes
            and (not kw or kw.keys() <= FAST_KEYS)
        ):
            partition = kw.get("partition") if kw else None
            ack_policy = kw.get("ack_policy", _LEADER) if kw else _LEADER
            if (
                partition is None or (type(partition) is int and 0 <= partition <= INT32_MAX)
            ) and type(ack_policy) is AckPolicy:
                use_nats = self._transport is _NATS
                if not use_nats or self._nats_pub is not None:
                    item = Item(
                        stream,
                        value,
                        None,
                        None,
                        partition,
                        self._options.partitioner,
                        ack_policy,
                        -1,
                        f"{self._cid_prefix}{next(self._cid_counter)}",
                        use_nats,
                    )
                    return self._complete_if_known(item)
        return self._prepare_checked(stream, value, kw)

    def _prepare_checked(self, stream: str, value: bytes, kw: Mapping[str, Any]) -> Item:
        """`_prepare` with every argument checked and converted."""
        self._check_accepting()
        _validate.text("stream", stream)
        value = as_bytes("value", value)
        key: bytes | None = None
        headers: dict[str, bytes] | None = None
        partition: int | None = None
        partitioner = self._options.partitioner
        ack_policy = _LEADER
        expected_offset = -1
        transport = self._transport
        cid: str | None = None
        if kw:
            reject_unknown(kw, PUBLISH_KEYS)
            if (k := kw.get("key")) is not None:
                key = as_bytes("key", k)
            headers = headers_arg(kw.get("headers"))
            partition = kw.get("partition")
            if partition is not None:
                _validate.int_arg("partition", partition, 0, INT32_MAX)
            partitioner = kw.get("partitioner", partitioner)
            if partitioner is not None and not callable(partitioner):
                raise errors.InvalidInputError(f"partitioner must be callable, got {partitioner!r}")
            if "ack_policy" in kw:
                ack_policy = ack_policy_arg(kw["ack_policy"])
            if "expected_offset" in kw:
                expected_offset = _validate.int_arg(
                    "expected_offset (-1: no check)", kw["expected_offset"], -1, INT64_MAX
                )
                if expected_offset != -1 and ack_policy is _NONE:
                    raise errors.InvalidInputError(
                        "expected_offset needs an ack (ack_policy LEADER or ALL): with NONE "
                        "the outcome of the check could never be reported"
                    )
            if (t := kw.get("transport")) is not None:
                if not isinstance(t, Transport):
                    raise errors.InvalidInputError(f"transport must be a Transport, got {t!r}")
                transport = t
            if (c := kw.get("correlation_id")) is not None:
                cid = correlation_id_arg(c)
            seconds_arg("ack_wait", kw.get("ack_wait"), 0.0)  # checked here, used by _enqueue
        use_nats = transport is _NATS
        if use_nats and self._nats_lost is not None:
            raise errors.ConnectionClosedError(
                "the NATS connection is closed for good; publish with transport=Transport.GRPC"
            ) from self._nats_lost
        if use_nats and self._nats_pub is None:
            raise errors.InvalidInputError(
                "transport NATS needs a NATS connection: create the Client with "
                "nats_servers=[...], or publish with transport=Transport.GRPC"
            )
        if cid is None:
            cid = f"{self._cid_prefix}{next(self._cid_counter)}"
        item = Item(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            cid,
            use_nats,
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
        if item.use_nats:
            assert self._nats_pub is not None
            item.subject = info.partition_subject(partition)
            item.payload = self._nats_pub.encode(
                item.subject,
                item.value,
                key=item.key,
                headers=item.headers,
                correlation_id=item.correlation_id,
                ack_policy=item.ack_policy,
                expected_offset=item.expected_offset,
            )
        else:
            req = api_pb2.PublishRequest(
                value=item.value,
                stream=item.stream,
                partition=partition,
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

    def _enqueue(self, item: Item, kw: Mapping[str, Any]) -> AckFuture:
        """Register the future on the slot just acquired and wake the sender."""
        ack_wait = self._ack_wait
        if kw and (w := kw.get("ack_wait")) is not None:
            ack_wait = _validate.seconds("ack_wait", w)
        try:
            fut = self._correlator.register(item.correlation_id, ack_wait)
        except BaseException:
            self._correlator.release()
            raise
        item.future = fut
        if (
            item.use_nats
            and not self._queue
            and self._sender_idle
            and self._fast_ok
            and item.payload is not None
            and self._nats_pub is not None
            and self._write_nats(
                self._nats_pub, item.stream, item.subject, item.payload, fut, item.ack_policy
            )
        ):
            return fut  # nothing ahead of it: written as the sender would write it
        if not item.use_nats and not self._queue and self._sender_idle and item.request:
            # Nothing is ahead of it in the publisher (empty queue, sender idle): hand the
            # request straight to its stream's writer, saving a hop through the sender.
            route = (
                self._routes.get((item.stream, item.partition))  # type: ignore[arg-type]
                if self._routes_metadata is self._metadata.current
                else None
            )
            if route is not None and route.usable:
                route.submit(item.request, fut, item.ack_policy is _NONE, self._requeue)
                return fut
        self._queue.append(item)
        self._wake_sender()
        return fut

    # ------------------------------------------------------------ the sender

    async def _send_loop(self) -> None:
        queue = self._queue
        correlator = self._correlator
        nats_pub = self._nats_pub
        written = 0
        while not self._closed:
            if not queue:
                if nats_pub is not None and nats_pub.unflushed:
                    await nats_pub.kick()  # what send_nowait queued goes out now
                    continue
                self._waker = self._loop.create_future()
                self._sender_idle = True
                try:
                    await self._waker
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
                if item.use_nats:
                    assert self._nats_pub is not None
                    assert item.payload is not None
                    self._nats_used = True
                    fut.owner = self._nats_pub  # lost with the NATS connection
                    fut.expect = (item.stream, item.subject)  # what its ack must name
                    # nats-py swallows a CancelledError in a forced flush and returns
                    # normally: the loop condition re-checks _closed after this await.
                    if not self._nats_pub.send_nowait(item.subject, item.payload):
                        await self._nats_pub.send(item.subject, item.payload)
                else:
                    await self._send_grpc(item, fut)  # the stream's writer takes it from here
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
            if item.use_nats and item.ack_policy is _NONE and not fut.done():
                correlator.resolve(fut.correlation_id, None)
            written += 1
            if written % _KICK_EVERY == 0:
                if nats_pub is not None:
                    await nats_pub.kick()
                if written % _YIELD_EVERY == 0:
                    await asyncio.sleep(0)

    def _new_stream(self, address: str) -> PublishStream:
        if self._options.stream_transport is StreamTransport.H2:
            return H2PublishStream(
                address,
                self._pool,
                self._correlator,
                spawn=self._tasks.spawn,
                outages=self._outages,
            )
        return PublishStream(
            address,
            self._pool.stub(address),
            self._correlator,
            spawn=self._tasks.spawn,
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

    async def _send_grpc(self, item: Item, fut: AckFuture) -> None:
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
                await self._metadata.refresh()  # the leader may have moved
                address = await self._metadata.leader_address(item.stream, item.partition)
                if (retry_at := outages.retry_at(address)) is not None:
                    self._park(item, retry_at)
                    return
            stream = self._streams.get(address)
            if stream is None or not stream.usable:
                stream = self._open_stream(address)
        stream.submit(item.request, fut, item.ack_policy is _NONE, self._requeue)
        if metadata is self._metadata.current:  # no refresh in between: the route holds
            self._remember_route(metadata, item.stream, item.partition, stream)

    def _park(self, item: Item, retry_at: float) -> None:
        """Hold a gRPC publish whose leader refused its last stream until it may be tried
        again (`OutageLog.retry_at`); the others keep going. Later publishes to that leader
        park behind it, so their order holds."""
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
        if self._closed:
            return
        self._queue.extendleft(reversed(parked))
        self._wake_sender()

    def _requeue(self, unwritten: list[tuple[api_pb2.PublishRequest, AckFuture]]) -> None:
        """Publishes a broken stream never wrote: back to the head of the queue, in order."""
        if self._closed:
            return
        self._queue.extendleft(
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
                False,
                request=req,
                future=fut,
            )
            for req, fut in reversed(unwritten)
        )
        self._wake_sender()

    # ------------------------------------------------------------ subject publish

    async def publish_to_subject(self, subject: str, value: bytes, **kw: Any) -> Ack | None:
        """Publish to a NATS subject through a broker (unary PublishToSubject).

        Every stream on the subject stores the message; the first ack comes
        back. The call's deadline is the ack wait: with no stream on the
        subject, `AckTimeoutError`. Not counted in the in-flight window.
        """
        self._check_accepting()
        _validate.publish_subject(subject)
        value = as_bytes("value", value)
        reject_unknown(kw, SUBJECT_KEYS)
        key = as_bytes("key", kw["key"]) if kw.get("key") is not None else b""
        headers = headers_arg(kw.get("headers"))
        ack_policy = ack_policy_arg(kw.get("ack_policy", _LEADER))
        c = kw.get("correlation_id")
        cid = (
            correlation_id_arg(c)
            if c is not None
            else f"{self._cid_prefix}{next(self._cid_counter)}"
        )
        ack_wait = seconds_arg("ack_wait", kw.get("ack_wait"), self._options.ack_wait)
        req = api_pb2.PublishToSubjectRequest(
            subject=subject,
            key=key,
            value=value,
            headers=headers,
            correlationId=cid,
            ackPolicy=ack_policy,  # type: ignore[arg-type]
        )
        last: errors.LiftbridgeError | None = None
        for address in self._metadata.addresses():
            try:
                return await publish_to_subject(self._pool.stub(address), req, ack_wait)
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
        if self._nats_used and self._nats is not None and not self._nats.is_closed:
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            try:
                async with asyncio.timeout(left):
                    await self._nats.flush()
            except TimeoutError as exc:  # asyncio's, or nats-py's FlushTimeoutError
                raise errors.LiftbridgeTimeoutError(
                    f"flush: NATS did not answer in time ({exc!r})"
                ) from exc
            except nats.errors.Error as exc:
                raise errors.ConnectionClosedError(f"flush: NATS connection: {exc!r}") from exc

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

    def nats_lost(self, cause: BaseException) -> None:
        """nats-py closed the connection for good: fail every NATS publish now.

        Publishes already written wait for acks that can no longer come; queued
        ones can no longer be written. Both fail at once with `ConnectionClosedError`
        (chained to ``cause``) instead of at their ack wait. gRPC publishes go on.
        """
        if self._closed or self._nats_pub is None or self._nats_lost is not None:
            return
        self._nats_lost = cause
        self._fast_ok = False
        exc = errors.ConnectionClosedError(f"the NATS connection was closed: {cause}")
        exc.__cause__ = cause
        failed = self._correlator.fail_owned(self._nats_pub, exc)
        queued = [item for item in self._queue if item.use_nats]
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
        self._parked.clear()
        if self._unpark_handle is not None:
            self._unpark_handle.cancel()
            self._unpark_handle = None
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)  # an idle sender sees _closed and returns
        sender, self._sender = self._sender, None
        if sender is not None and not await sender.stop(_left(deadline)):
            log.warning("close: the publisher's sender did not stop in time")
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            await stream.close(exc, timeout=_left(deadline))
        if self._nats_pub is not None:
            with anyio.move_on_after(_left(deadline)):
                await self._nats_pub.close()

    def stats(self) -> PublishStats:
        return PublishStats(
            pending=len(self._correlator),
            unknown_acks=self._correlator.unknown_acks,
            undecodable_acks=self._nats_pub.undecodable_acks if self._nats_pub else 0,
            mismatched_acks=self._nats_pub.mismatched_acks if self._nats_pub else 0,
        )


def _left(deadline: float) -> float:
    return max(deadline - asyncio.get_running_loop().time(), 0.0)
