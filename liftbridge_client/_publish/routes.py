"""How a publish leaves the client: one `Route` interface, three ways out.

A newcomer's map: the publish is queued and sent in `_publish.publisher`, leaves here, and
is acked in `_publish.acks`. This module holds, in order: the queued `Item` and the
`Route` and `Slots` protocols; the pacing of broken brokers (`OutageLog`); NATS
(`NatsPublisher`); PublishAsync on grpc.aio (`PublishStream`) and on h2
(`H2PublishStream`); and the two routes over them (`NatsRoute`, `LeaderRoute`).

Item, Route, Slots
------------------

The queued publish (`Item`), the `Route` it leaves the client by, and the `Slots` a
route's one-step publish takes from the publisher. Pure types: the routes that implement
them follow.

Outages
-------

Broker outages as the publisher sees them: what to log, and when to try a broker again.

A PublishAsync stream that breaks before its broker ever answered it (connection refused,
reset while opening) says the broker cannot take publishes now. Opening the next stream
at once made the publisher spin while a dead leader was still named in the metadata:
the h2 transport gives back the publishes it never wrote, so each one went back to the
queue, was routed again (a metadata refresh each time) and broke again, some 500 times a
second until its ack wait ran out. Here every such failure in a row pushes the next
attempt at that broker further out (`RetryPolicy.backoff`); an answered stream ends the
outage. No I/O: the caller passes the time.

NATS
----

Enveloped publishes straight on NATS, with acks on one inbox per client.

A message goes out as an enveloped ``Message`` on its partition's subject
(partition 0: the stream's subject; partition N: ``<subject>.N``) carrying the
client's ack inbox and a correlation id. The partition leader appends it and
publishes an enveloped ``Ack`` to that inbox; `NatsPublisher` decodes it and
hands it to the `Correlator` by ``Ack.correlationId``.

What the server does NOT answer: a publish to a paused partition (nobody
subscribes to its subject until it is resumed) or to a read-only one, and a
publish on a subject no stream listens on. After the ack wait, `TimeoutCheck` (`_publish.publisher`)
asks the metadata which of these it was and raises the error that names it.
Error acks (``Ack.ackError``) come whatever the ack policy and are turned into
typed errors by `ack_error`.

Undecodable messages on the inbox are dropped, counted in `undecodable_acks`
and logged at debug level.

Anyone allowed to publish on the inbox subject can send it an Ack. One naming a
pending correlation id settles that publish only if it also names the stream and
the subject the message was published on (the server always fills both); any
other is counted in `mismatched_acks` and dropped, and the publish keeps waiting
for its real ack. See docs/security.md for what this does not prevent.

gRPC (grpc.aio)
---------------

Publishing through the gRPC API: PublishAsync streams and PublishToSubject.

`PublishStream` is one long-lived PublishAsync call to one broker. Requests
carry correlation ids; the server answers each (unless the ack policy is NONE)
with a ``PublishResponse`` whose ``asyncError`` - checked first - or ``ack``
settles the matching future in the `Correlator`. A stream that breaks fails
exactly the publishes written on it (`ConnectionClosedError` chained to the
mapped gRPC error) and is replaced by a fresh one on next use.

The stream's reader and writer are supervised tasks (`_tasks`); closing stops
them within a deadline. PublishToSubject (unary) always carries a deadline:
without one the server publishes and returns no ack at all. The deadline is the
ack wait, so a missing ack surfaces as `AckTimeoutError`. Unary ``Publish`` is not
used: PublishAsync does the same with one stream per broker.

gRPC (h2)
---------

PublishAsync over the h2 stream transport (``StreamTransport.H2``).

The same `PublishStream` contract (correlation, breaking, taking back what was never
written, closing); what differs:

- writing: a request with nothing waiting ahead of it goes to the call as a gRPC message
  at once (the writer task only serves what had to wait); everything written in one
  event-loop iteration leaves in one pass, as far as the HTTP/2 send windows allow (the
  rest waits for the server's WINDOW_UPDATE), instead of one awaited grpc.aio write per
  request;
- reading: responses settle their publishes as the connection receives them (the call's
  sink), the common ack straight from its bytes.

Routes
------

Routes: the ways a prepared publish leaves the client.

`Publisher` owns what every publish shares - the checks, the in-flight window, the FIFO
queue and its one sender task. A route owns one way out, and the publisher asks it, never
which kind it is:

- `NatsRoute`: enveloped messages on the partition's NATS subject (one per client);
- `LeaderRoute`: PublishAsync streams, one per partition leader, over h2 or grpc.aio
  (`StreamTransport`), with the routes to them cached per metadata snapshot, and the
  pacing of leaders that refused a stream (`OutageLog`).

Every route implements `Route` (above):

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
import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio
import grpc
import grpc.aio
import nats.aio.client
import nats.aio.msg
import nats.aio.subscription
import nats.errors
from google.protobuf.message import DecodeError

from liftbridge_client import envelope, errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.wire import plain_ack, plain_publish_request
from liftbridge_client._tasks import TaskHandle
from liftbridge_client._transport.grpc import (
    BrokerPool,
    Stub,
    ack_error,
    async_error,
    map_rpc_error,
    publish_status_error,
)
from liftbridge_client._transport.h2 import BidiStreamCall, H2RpcError
from liftbridge_client._transport.h2.framing import encode_message
from liftbridge_client._transport.nats import PubBuffer, route_sid, unroute_sid
from liftbridge_client.envelope import (
    MESSAGE_HEADERS_TAG,
    REQUEST_HEADERS_TAG,
    plain_header_entries,
)
from liftbridge_client.models import (
    Ack,
    AckPolicy,
    Metadata,
    StreamInfo,
    ack_from_proto,
    ack_from_wire,
)
from liftbridge_client.options import RetryPolicy
from liftbridge_client.partitioning import Partitioner

__all__ = [
    "MAX_PLAIN_VALUE",
    "MAX_REQUEST_BYTES",
    "MIN_RETRY_DELAY",
    "H2PublishStream",
    "Item",
    "LeaderRoute",
    "NatsPublisher",
    "NatsRoute",
    "OutageLog",
    "PublishStream",
    "Route",
    "Slots",
    "check_request_size",
    "map_nats_error",
    "publish_to_subject",
]


# ---- Item, Route, Slots ----------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Item:
    """One publish between the call and the wire."""

    stream: str
    value: bytes
    key: bytes | None
    headers: Mapping[str, bytes] | None
    partition: int | None  # explicit, or chosen by _complete
    partitioner: Partitioner | None
    ack_policy: AckPolicy
    expected_offset: int
    correlation_id: str
    route: Route  # where it leaves the client
    subject: str = ""  # NATS: the partition's subject
    payload: bytes | None = None  # NATS: the enveloped message
    request: api_pb2.PublishRequest | None = None  # gRPC
    future: AckFuture | None = None

    @property
    def ready(self) -> bool:
        return self.payload is not None or self.request is not None


class Slots(Protocol):
    """What the routes share with the publisher: correlation ids, the ack wait, the
    window's full flag and the sender's queue."""

    cid_prefix: str  # correlation ids are cid_prefix + next(cid_counter)
    cid_counter: Iterator[int]
    ack_wait: float  # seconds, ClientOptions.ack_wait

    def window_full(self) -> None:
        """A one-step publish found no free slot in the window (the general path waits)."""
        ...

    def wake_sender(self) -> None: ...

    def queue(self, item: Item) -> None:
        """Put a registered publish at the tail of the sender's queue and wake it."""
        ...

    def requeue(self, items: list[Item]) -> None:
        """Put publishes back at the head of the queue, in order, and wake the sender."""
        ...


class Route(Protocol):
    """One way out for publishes: NATS, or the partition leaders' PublishAsync streams
    (the module's "Routes" section says what each method does)."""

    @property
    def usable(self) -> bool: ...

    def prepare(self, item: Item, info: StreamInfo) -> None: ...

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
    ) -> AckFuture | None: ...

    def submit(self, item: Item, fut: AckFuture) -> bool: ...

    async def send(self, item: Item, fut: AckFuture) -> None: ...

    async def close(self, exc: BaseException, deadline: float) -> None: ...


log = logging.getLogger(__name__)


# ---- Outages ---------------------------------------------------------------------------

# A policy may ask for no backoff at all; a broker that refuses at once would then be
# retried in a busy loop. This floor keeps the retries of one broker below 100 a second.
MIN_RETRY_DELAY = 0.01


class OutageLog:
    """Per broker: one WARNING per outage (not one per broken stream) and its retry pace.

    An outage starts with the first broken stream of an address and ends when a stream
    to it answers (one INFO line). While streams break unanswered, `retry_at` says when
    the next may be opened.
    """

    def __init__(
        self, policy: RetryPolicy | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self._policy = policy or RetryPolicy()
        self._clock = clock
        self._down: dict[str, int] = {}  # address -> streams broken in this outage
        self._unanswered: dict[str, int] = {}  # address -> unanswered breaks in a row
        self._retry_at: dict[str, float] = {}

    def broke(
        self, address: str, cause: BaseException, failed: int, *, answered: bool = True
    ) -> None:
        """A stream to ``address`` broke (``answered``: the broker had answered it)."""
        count = self._down.get(address)
        if count is None:
            self._down[address] = 1
            log.warning(
                "PublishAsync stream to %s broke (%s); %d pending publishes failed",
                address,
                cause,
                failed,
            )
        else:
            self._down[address] = count + 1
            log.debug("PublishAsync stream to %s broke again (%s)", address, cause)
        if answered or self._clock is None:
            # It was working: the next stream may be tried at once.
            self._unanswered.pop(address, None)
            self._retry_at.pop(address, None)
            return
        n = self._unanswered.get(address, 0) + 1
        self._unanswered[address] = n
        self._retry_at[address] = self._clock() + max(self._policy.backoff(n), MIN_RETRY_DELAY)

    def answered(self, address: str) -> None:
        """A stream to ``address`` got its first answer: the outage, if any, is over."""
        self._unanswered.pop(address, None)
        self._retry_at.pop(address, None)
        count = self._down.pop(address, None)
        if count is not None:
            log.info("PublishAsync to %s works again (%d broken streams meanwhile)", address, count)

    def down(self, address: str) -> bool:
        """True from a broken stream to ``address`` until one to it answers."""
        return address in self._down

    def retry_at(self, address: str) -> float | None:
        """When a new stream to ``address`` may be opened; None if it may be now."""
        at = self._retry_at.get(address)
        if at is None or self._clock is None or at <= self._clock():
            return None
        return at


# ---- NATS ------------------------------------------------------------------------------

_ACK_OK = api_pb2.Ack.OK
WRITE_EVERY = 256  # appends between writes in a burst (about 70 KB of 256 B messages)


def map_nats_error(exc: nats.errors.Error, subject: str) -> errors.LiftbridgeError:
    """A nats-py publish failure as one of ours (the caller chains ``exc``)."""
    if isinstance(exc, nats.errors.MaxPayloadError):
        return errors.MessageTooLargeError(
            f"message for {subject!r} exceeds the NATS server's max_payload; nothing was sent"
        )
    if isinstance(exc, nats.errors.BadSubjectError):
        return errors.InvalidInputError(f"NATS rejected the subject {subject!r}")
    if isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.ConnectionDrainingError):
        return errors.ConnectionClosedError(f"NATS connection is closed ({exc!r})")
    if isinstance(exc, nats.errors.OutboundBufferLimitError):
        return errors.ConnectionClosedError(
            "NATS connection is reconnecting and its outbound buffer is full"
        )
    return errors.PublishError(f"NATS publish to {subject!r} failed: {exc!r}")


class NatsPublisher:
    """Publishes enveloped messages on an existing nats-py connection."""

    def __init__(self, nc: nats.aio.client.Client, correlator: Correlator, *, crc: bool) -> None:
        self._nc = nc
        self._correlator = correlator
        self._crc = crc
        self.inbox = nc.new_inbox()  # unique per client: _INBOX.<nuid> (or the custom prefix)
        self._sub: nats.aio.subscription.Subscription | None = None
        self.undecodable_acks = 0
        self.mismatched_acks = 0
        # True: acks come straight from nats-py's parser (`_transport.nats.route_sid`).
        self.raw_acks = False
        self._buffer = PubBuffer(nc)

    def __repr__(self) -> str:
        return f"<NatsPublisher inbox={self.inbox!r} subscribed={self._sub is not None}>"

    async def start(self) -> None:
        """Subscribe the ack inbox (and make sure the server has seen the subscription)."""
        if self._sub is None:
            self._sub = await self._nc.subscribe(self.inbox, cb=self._on_ack)
            # Acks straight from nats-py's parser to dispatch (no Msg, queue or task per
            # ack); the callback above only serves when that is not possible.
            self.raw_acks = route_sid(self._nc, self._sub, self.dispatch)
            await self._nc.flush()

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is None:
            return
        unroute_sid(self._nc, sub)
        if self._nc.is_closed:
            return
        try:
            await sub.unsubscribe()
        except nats.errors.Error as exc:  # e.g. the connection is going away too
            log.debug("unsubscribing ack inbox %s failed: %r", self.inbox, exc)

    # ------------------------------------------------------------ outgoing

    def encode(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        correlation_id: str,
        ack_policy: int,
        expected_offset: int,
    ) -> bytes:
        """The enveloped Message for ``subject``; MessageTooLargeError if NATS would refuse it.

        With ack policy NONE no ack inbox is set: the server then sends nothing,
        not even error acks, which would only arrive after the future resolved.
        """
        inbox = "" if ack_policy == api_pb2.NONE else self.inbox
        if not key and not headers and expected_offset == -1 and not self._crc:
            payload = envelope.encode_message_plain(value, inbox, correlation_id, ack_policy)
        else:
            payload = envelope.encode_message(
                value,
                key=key or b"",
                headers=headers,
                ack_inbox=inbox,
                correlation_id=correlation_id,
                ack_policy=ack_policy,
                expected_offset=expected_offset,
                crc=self._crc,
            )
        limit = self._nc.max_payload
        if len(payload) > limit:
            raise errors.MessageTooLargeError(
                f"enveloped message of {len(payload)} bytes exceeds the NATS max_payload of "
                f"{limit} bytes; nothing was sent"
            )
        return payload

    def encode_plain(
        self,
        subject: str,
        value: bytes,
        correlation_id: str,
        ack_policy: int,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        header_entries: bytes = b"",
    ) -> bytes:
        """`encode` of a message with no offset check (the hot path): ``header_entries``
        are ``headers`` as `envelope.plain_header_entries` encodes them."""
        if not self._crc:
            inbox = "" if ack_policy == api_pb2.NONE else self.inbox
            payload = envelope.encode_message_plain(
                value, inbox, correlation_id, ack_policy, key or b"", header_entries, headers
            )
            if len(payload) <= self._nc.max_payload:
                return payload
        # With a CRC, or too large for NATS (encode raises, worded as for every publish).
        return self.encode(
            subject,
            value,
            key=key,
            headers=headers,
            correlation_id=correlation_id,
            ack_policy=ack_policy,
            expected_offset=-1,
        )

    async def send(self, subject: str, payload: bytes) -> None:
        """Hand the bytes to nats-py (its buffer; its flusher writes them out)."""
        try:
            await self._nc.publish(subject, payload)
        except nats.errors.Error as exc:
            raise map_nats_error(exc, subject) from exc
        self._buffer.learn(subject)

    def send_nowait(self, subject: str, payload: bytes) -> bool:
        """`send` without awaiting, when nothing would differ (see `PubBuffer`); then
        `kick` must follow before the caller waits. False: use `send`."""
        return self._buffer.append(subject, payload)

    def send_nowait_batched(self, subject: str, payload: bytes) -> bool:
        """`send_nowait`, writing every `WRITE_EVERY` appends (the wire gets the
        first of a long burst while the rest is being built)."""
        buffer = self._buffer
        if not buffer.append(subject, payload):
            return False
        if buffer.appended >= WRITE_EVERY:
            buffer.write_now()
        return True

    @property
    def unflushed(self) -> bool:
        """`send_nowait` queued bytes that nats-py's flusher was not woken for yet."""
        return self._buffer.unflushed

    async def kick(self) -> None:
        """Wake nats-py's flusher for what `send_nowait` queued."""
        await self._buffer.kick()

    # ------------------------------------------------------------ incoming

    async def _on_ack(self, msg: nats.aio.msg.Msg) -> None:
        self.dispatch(msg.data)

    def dispatch(self, data: bytes) -> None:
        """Decode one ack-inbox message and settle its publish."""
        try:
            pb = envelope.decode_ack(data)
            ack = ack_from_proto(pb)
        except (errors.ProtocolError, ValueError) as exc:
            self.undecodable_acks += 1
            log.debug("dropped undecodable message on ack inbox %s: %s", self.inbox, exc)
            return
        cid = pb.correlationId
        fut = self._correlator.get(cid)
        if fut is not None and (
            (expect := fut.expect) is None or expect[0] != pb.stream or expect[1] != pb.msgSubject
        ):
            # Not the ack of this publish (forged, or another stream's ack routed here).
            self.mismatched_acks += 1
            level = logging.WARNING if self.mismatched_acks == 1 else logging.DEBUG
            log.log(
                level,
                "dropped an ack on inbox %s for correlation id %r naming stream %r subject %r; "
                "the publish went to %r (first of such acks warns; see Client.stats())",
                self.inbox,
                cid,
                pb.stream,
                pb.msgSubject,
                fut.expect,
            )
            return
        if pb.ackError == _ACK_OK:  # the common case, without the ack_error call
            self._correlator.resolve(cid, ack)
            return
        failure = ack_error(pb)
        assert failure is not None  # only OK maps to None
        if not self._correlator.fail(cid, failure):
            log.warning("error ack for a publish no longer pending: %s", failure)


# ---- gRPC (grpc.aio) -------------------------------------------------------------------

# grpc-go's default limit on a received message: a bigger request kills the
# whole PublishAsync stream (RESOURCE_EXHAUSTED), so it is refused here first.
MAX_REQUEST_BYTES = 4 * 1024 * 1024


# Receives the publishes a broken stream was given but never wrote, oldest first.
_Unwritten = Callable[[list[tuple[api_pb2.PublishRequest, AckFuture]]], None]
# Starts a supervised background task (`TaskSupervisor.spawn`).
_Spawn = Callable[..., TaskHandle]
Spawn = _Spawn
Unwritten = _Unwritten


def check_request_size(req: api_pb2.PublishRequest | api_pb2.PublishToSubjectRequest) -> None:
    """Refuse a request the server's gRPC limit would reject (and a stream with it)."""
    if len(req.value) + len(req.key) > MAX_REQUEST_BYTES - 65536 or req.headers:
        size = req.ByteSize()
        if size > MAX_REQUEST_BYTES:
            raise errors.MessageTooLargeError(
                f"publish request of {size} bytes exceeds the gRPC limit of "
                f"{MAX_REQUEST_BYTES} bytes; nothing was sent"
            )


class PublishStream:
    """One PublishAsync call to one broker; futures it carries are tagged with it."""

    def __init__(
        self,
        address: str,
        stub: Stub,
        correlator: Correlator,
        *,
        spawn: _Spawn,
        outages: OutageLog | None = None,
    ) -> None:
        self.address = address
        self._stub = stub
        self._correlator = correlator
        self._spawn = spawn
        self._outages = outages or OutageLog()
        self._answered = False
        # The broker took the call (known on h2 only): a stream of NONE publishes, which
        # is never answered, still counts as working when it breaks (`OutageLog.broke`).
        self._opened = False
        self._call: grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse]
        self._reader: TaskHandle | None = None
        self._writer: TaskHandle | None = None
        # Submitted, not yet written: (request, future, resolve-on-write for ack policy NONE);
        # the h2 stream also takes requests serialized already as gRPC messages (bytes).
        self._outbox: deque[tuple[api_pb2.PublishRequest | bytes, AckFuture, bool]] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._on_unwritten: _Unwritten | None = None
        self.broken: errors.LiftbridgeError | None = None
        self.closed = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("broken" if self.broken else "open")
        return f"<PublishStream {self.address} {state}>"

    @property
    def usable(self) -> bool:
        return self._reader is not None and not self.closed and self.broken is None

    def open(self) -> None:
        """Start the call and its reader; the first write sends the headers."""
        self._call = self._stub.PublishAsync()
        self._reader = self._spawn(self._read, name=f"lb-publish-async-{self.address}")

    def submit(
        self,
        req: api_pb2.PublishRequest,
        fut: AckFuture,
        resolve_on_write: bool,
        on_unwritten: _Unwritten,
    ) -> None:
        """Queue ``req`` for this stream's writer task (no await; written in submit order).

        ``fut`` becomes owned by the stream. With ``resolve_on_write`` (ack policy
        NONE) the future resolves to None once written. If the stream breaks,
        futures submitted but not yet written are taken back (ownership cleared)
        and handed to ``on_unwritten``, oldest first, for a new stream to carry.
        """
        self._submit(req, fut, resolve_on_write, on_unwritten)

    def _submit(
        self,
        req: api_pb2.PublishRequest | bytes,
        fut: AckFuture,
        resolve_on_write: bool,
        on_unwritten: _Unwritten,
    ) -> None:
        if self.broken is not None:
            raise errors.ConnectionClosedError(
                f"PublishAsync stream to {self.address} broke"
            ) from self.broken
        fut.owner = self
        self._on_unwritten = on_unwritten
        self._outbox.append((req, fut, resolve_on_write))
        if self._writer is None:
            self._writer = self._spawn(
                self._write_loop, name=f"lb-publish-async-writer-{self.address}"
            )
        else:
            wake = self._wake
            if wake is not None and not wake.done():
                wake.set_result(None)

    async def _write_loop(self) -> None:
        """The stream's single writer: drains the outbox, one awaited write at a time."""
        outbox, resolve, call = self._outbox, self._correlator.resolve, self._call
        loop = asyncio.get_running_loop()
        while True:
            if not outbox:
                self._wake = loop.create_future()
                await self._wake
                continue
            req, fut, resolve_on_write = outbox.popleft()
            if fut.done():
                continue  # cancelled or timed out before it went out: never sent
            assert not isinstance(req, bytes)  # only the h2 stream takes serialized ones
            try:
                await call.write(req)
            except grpc.RpcError as exc:
                self._break(map_rpc_error(exc))
                return
            except asyncio.InvalidStateError as exc:  # written after the call finished
                # The reader saw why the call ended (and broke the stream with it);
                # otherwise the call died under us: a transport failure, retriable.
                self._break(errors.UnavailableError(f"PublishAsync call ended: {exc}"))
                return
            except Exception as exc:  # an unexpected library error: this publish fails
                log.exception("publish %s failed unexpectedly", fut.correlation_id)
                if not fut.done():
                    failure = errors.PublishError(f"publish failed: {exc!r}")
                    failure.__cause__ = exc
                    self._correlator.fail(fut.correlation_id, failure)
                continue
            if resolve_on_write and not fut.done():
                resolve(fut.correlation_id, None)

    async def _read(self) -> None:
        call, dispatch = self._call, self.dispatch
        try:
            while True:
                resp = await call.read()
                if not isinstance(resp, api_pb2.PublishResponse):  # EOF: the call ended cleanly
                    self._break(errors.UnavailableError("the server ended the PublishAsync call"))
                    return
                if not self._answered:
                    self._answered = True
                    self._outages.answered(self.address)
                dispatch(resp)
        except grpc.RpcError as exc:
            if not self.closed:
                self._break(map_rpc_error(exc))
        except asyncio.CancelledError:
            if not self.closed:
                self._break(errors.RequestCancelledError("PublishAsync reader cancelled"))
            raise

    def dispatch(self, resp: api_pb2.PublishResponse) -> None:
        """Settle the publish a response answers: asyncError first, then the ack."""
        correlator = self._correlator
        if resp.HasField("asyncError"):
            cid = resp.correlationId
            fut = correlator.get(cid)
            err = async_error(resp.asyncError, cid, None if fut is None else fut.stream)
            if not correlator.fail(cid, err):
                log.warning("PublishAsync error for a publish no longer pending: %s", err)
            return
        pb = resp.ack
        cid = resp.correlationId or pb.correlationId
        failure = None if pb.ackError == _ACK_OK else ack_error(pb)
        if failure is not None:
            if not correlator.fail(cid, failure):
                log.warning("error ack for a publish no longer pending: %s", failure)
            return
        try:
            ack = ack_from_proto(pb)
        except ValueError as exc:
            correlator.fail(cid, errors.PayloadDecodeError(f"bad ack from the server: {exc}"))
            return
        correlator.resolve(cid, ack)

    def _break(self, cause: errors.LiftbridgeError) -> None:
        """Fail what this stream carries; the publisher opens a new stream on next use."""
        if self.broken is not None:
            return
        self.broken = cause
        self._take_back_unwritten()
        # Keep the cause's class: an UNAVAILABLE stream stays a retriable UnavailableError,
        # so callers can tell "retry after the leader moved" from "the client was closed".
        message = f"PublishAsync stream to {self.address} broke: {cause}"
        exc: errors.LiftbridgeError
        if isinstance(cause, errors.ServerError):
            exc = type(cause)(message, details=cause.details)
        else:
            exc = errors.ConnectionClosedError(message)
        exc.__cause__ = cause
        failed = self._correlator.fail_owned(self, exc)
        self._outages.broke(self.address, cause, failed, answered=self._answered or self._opened)

    def _take_back_unwritten(self) -> None:
        """Give futures submitted but never written back to the publisher (in order)."""
        unwritten = [
            (api_pb2.PublishRequest.FromString(req[5:]) if isinstance(req, bytes) else req, fut)
            for req, fut, _ in self._outbox
            if not fut.done()
        ]
        self._outbox.clear()
        for _, fut in unwritten:
            fut.owner = None
        if unwritten and self._on_unwritten is not None:
            self._on_unwritten(unwritten)

    async def close(self, exc: BaseException | None = None, *, timeout: float = 1.0) -> None:
        """Cancel the call, stop the reader and the writer (bounded). Owned publishes fail.

        Owned are those written on it and those submitted but not written yet; they
        fail with ``exc`` (none given: unwritten ones go back to the publisher).
        """
        self.closed = True
        if exc is not None:
            self._correlator.fail_owned(self, exc)
        else:
            self._take_back_unwritten()
        self._outbox.clear()
        writer, self._writer = self._writer, None
        reader, self._reader = self._reader, None
        if reader is not None:
            self._call.cancel()
        for task in (writer, reader):
            if task is not None and not await task.stop(timeout):
                log.warning("PublishAsync task %s did not stop in time", task.name)
        if reader is not None:
            # grpc.aio settles a cancelled call in a task of its own: wait for it, so no
            # task outlives close().
            with anyio.move_on_after(timeout):
                await self._call.code()
                for _ in range(3):  # the status task wakes with code(): let it end
                    await asyncio.sleep(0)


async def publish_to_subject(
    stub: Stub, req: api_pb2.PublishToSubjectRequest, timeout: float
) -> Ack | None:
    """PublishToSubject, always with a deadline; the first stream's ack, or None for NONE.

    With no stream on the subject nothing answers: `AckTimeoutError` after ``timeout``.
    """
    check_request_size(req)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        resp = await stub.PublishToSubject(req, timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        if code is grpc.StatusCode.CANCELLED and loop.time() - started >= timeout * 0.9:
            # The server can reset the call at the deadline (RST_STREAM CANCEL) before the
            # client's own deadline reports DEADLINE_EXCEEDED: the same silence.
            raise errors.AckTimeoutError(f"no ack within the deadline ({timeout}s)") from exc
        raise publish_status_error(exc) from exc
    return _unary_ack(resp.ack if resp.HasField("ack") else None)


def _unary_ack(pb: api_pb2.Ack | None) -> Ack | None:
    if pb is None:
        return None
    failure = ack_error(pb)  # PublishToSubject passes error acks through as they are
    if failure is not None:
        raise failure
    try:
        return ack_from_proto(pb)
    except ValueError as exc:
        raise errors.PayloadDecodeError(f"bad ack from the server: {exc}") from exc


# ---- gRPC (h2) -------------------------------------------------------------------------

_PATH = "/proto.API/PublishAsync"
# What may wait unsent in the call before the writer waits for the server's window. The
# publisher's in-flight window bounds it already (what is not in the call waits in the
# outbox instead), so this is generous: the one-step path writes to the call while the
# server's receive window, not this mark, holds data back.
_SEND_HIGH_WATER = 16 * 1024 * 1024


class H2PublishStream(PublishStream):
    """One PublishAsync call over h2 to one broker."""

    def __init__(
        self,
        address: str,
        pool: BrokerPool,
        correlator: Correlator,
        *,
        spawn: Spawn,
        outages: OutageLog | None = None,
    ) -> None:
        super().__init__(address, pool.stub(address), correlator, spawn=spawn, outages=outages)
        self._h2call: BidiStreamCall[api_pb2.PublishResponse] = pool.h2().bidi_stream(
            address,
            _PATH,
            api_pb2.PublishResponse.FromString,
            sink=self._on_responses,
            send_high_water=_SEND_HIGH_WATER,
        )

    def _on_responses(self, responses: list[bytes]) -> None:
        """Settle the publishes the responses of one received chunk answer (the call's sink).

        The common response, an ack without error, is settled from its bytes with an
        Ack decoded only if read (`plain_ack`); anything else is decoded and
        dispatched as over grpc.aio.
        """
        if not self._answered:
            self._answered = True
            self._outages.answered(self.address)
        resolve = self._correlator.resolve
        for raw in responses:
            plain = plain_ack(raw)
            if plain is not None:
                resolve(plain[0], ack_from_wire(plain[1]))
                continue
            try:
                resp = api_pb2.PublishResponse.FromString(raw)
            except DecodeError as exc:  # the call fails with it, as when a read cannot parse
                raise H2RpcError(
                    grpc.StatusCode.INTERNAL, f"failed to parse a response message: {exc}"
                ) from exc
            self.dispatch(resp)

    def submit_raw(
        self, message: bytes, fut: AckFuture, resolve_on_write: bool, on_unwritten: Unwritten
    ) -> None:
        """`submit` of a request serialized already as a gRPC message (the publisher's
        plain hot path)."""
        # With nothing queued for the writer (so nothing ahead of it) and the call open
        # with room, the request goes to the call at once, as the writer would have
        # written it next; it leaves with the call's next write-out, as far as the send
        # window allows: no queue entry and no wake-up of the writer per message.
        if (
            not self._outbox
            and not resolve_on_write
            and self.broken is None
            and self._h2call.try_write(message)
        ):
            fut.owner = self
            self._on_unwritten = on_unwritten
            return
        super()._submit(message, fut, resolve_on_write, on_unwritten)

    def _submit(
        self,
        req: api_pb2.PublishRequest | bytes,
        fut: AckFuture,
        resolve_on_write: bool,
        on_unwritten: Unwritten,
    ) -> None:
        if isinstance(req, bytes):
            self.submit_raw(req, fut, resolve_on_write, on_unwritten)
        elif not self._outbox and not resolve_on_write:
            self.submit_raw(encode_message(req.SerializeToString()), fut, False, on_unwritten)
        else:
            super()._submit(req, fut, resolve_on_write, on_unwritten)

    def _take_back_unwritten(self) -> None:
        # Messages the one-step path wrote that no pump handed to the connection yet are
        # unwritten too: they go back first (they came before anything in the outbox).
        unsent = self._h2call.take_unsent()
        if unsent:
            get = self._correlator.get
            back = []
            for message in unsent:
                fut = get(api_pb2.PublishRequest.FromString(message[5:]).correlationId)
                if fut is not None and fut.owner is self and not fut.done():
                    back.append((message, fut, False))
            self._outbox.extendleft(reversed(back))
        super()._take_back_unwritten()

    def open(self) -> None:
        """Start the reader; the writer connects the call on the first submit."""
        # The base class's reader and close() use only read(), cancel() and code(),
        # which the h2 call has with grpc.aio's meaning.
        self._call = self._h2call  # type: ignore[assignment]
        self._reader = self._spawn(self._read, name=f"lb-publish-async-{self.address}")

    async def _write_loop(self) -> None:
        """The stream's single writer: queues everything submitted, then waits for room."""
        call, outbox, resolve = self._h2call, self._outbox, self._correlator.resolve
        loop = asyncio.get_running_loop()
        try:
            await call.start()
        except grpc.RpcError as exc:
            self._break(map_rpc_error(exc))
            return
        self._opened = True
        write, write_message = call.write, call.write_message
        while True:
            if not outbox:
                self._wake = loop.create_future()
                await self._wake
                continue
            while outbox:
                req, fut, resolve_on_write = outbox.popleft()
                if fut.done():
                    continue  # cancelled or timed out before it went out: never sent
                try:
                    if isinstance(req, bytes):
                        write_message(req)
                    else:
                        write(req.SerializeToString())
                except grpc.RpcError as exc:
                    outbox.appendleft((req, fut, resolve_on_write))  # never written
                    self._break(map_rpc_error(exc))
                    return
                if resolve_on_write and not fut.done():
                    resolve(fut.correlation_id, None)
            call.push()  # everything queued in this pass leaves in one write
            try:
                await call.drain()  # send flow control: wait while too much is unsent
            except grpc.RpcError as exc:
                self._break(map_rpc_error(exc))
                return
            except Exception as exc:  # an unexpected library error
                log.exception("PublishAsync writer to %s failed unexpectedly", self.address)
                self._break(errors.UnavailableError(f"PublishAsync writer failed: {exc!r}"))
                return


# ---- Routes ----------------------------------------------------------------------------

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
