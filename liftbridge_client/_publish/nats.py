"""The NATS way out: enveloped publishes straight on NATS, with acks on one inbox per client.

A message goes out as an enveloped ``Message`` on its partition's subject
(partition 0: the stream's subject; partition N: ``<subject>.N``) carrying the
client's ack inbox and a correlation id. The partition leader appends it and
publishes an enveloped ``Ack`` to that inbox; `NatsPublisher` decodes it and
hands it to the `Correlator` by ``Ack.correlationId``. `NatsRoute` is the `Route`
over it: through nats-py's outgoing buffer (`_transport.nats_shortcuts.PubBuffer`) when nothing
would differ from nats-py's own publish, else by the publisher's sender.

What the server does NOT answer: a publish to a paused partition (nobody
subscribes to its subject until it is resumed) or to a read-only one, and a
publish on a subject no stream listens on. After the ack wait, `TimeoutCheck`
(`_publish.timeouts`) asks the metadata which of these it was and raises the error
that names it. Error acks (``Ack.ackError``) come whatever the ack policy and are
turned into typed errors by `ack_error`.

Undecodable messages on the inbox are dropped, counted in `undecodable_acks`
and logged at debug level.

Anyone allowed to publish on the inbox subject can send it an Ack. One naming a
pending correlation id settles that publish only if it also names the stream and
the subject the message was published on (the server always fills both); any
other is counted in `mismatched_acks` and dropped, and the publish keeps waiting
for its real ack. See docs/security.md for what this does not prevent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import anyio
import nats.aio.client
import nats.aio.msg
import nats.aio.subscription
import nats.errors

from liftbridge_client import envelope, errors
from liftbridge_client._native import speedups
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.route import Item, Slots
from liftbridge_client._transport.grpc import ack_error
from liftbridge_client._transport.nats_shortcuts import PubBuffer, route_sid, unroute_sid
from liftbridge_client.envelope import MESSAGE_HEADERS_TAG, plain_header_entries
from liftbridge_client.models import Ack, AckPolicy, StreamInfo, ack_from_proto

__all__ = ["WRITE_EVERY", "NatsPublisher", "NatsRoute", "map_nats_error"]

log = logging.getLogger(__name__)

_ACK_OK = api_pb2.Ack.OK
_pending_ack = None if speedups is None else speedups.pending_ack
_publish_command = None if speedups is None else speedups.publish_command
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
        self._entries = correlator.entries  # looked up in by the C ack scan
        self._crc = crc
        self.inbox = nc.new_inbox()  # unique per client: _INBOX.<nuid> (or the custom prefix)
        self._sub: nats.aio.subscription.Subscription | None = None
        self.undecodable_acks = 0
        self.mismatched_acks = 0
        # True: acks come straight from nats-py's parser (`_transport.nats_shortcuts.route_sid`).
        self.raw_acks = False
        self._buffer = PubBuffer(nc)
        # envelope.plain_parts of a keyless publish, by ack policy (command_plain).
        self._plain_parts: dict[int, tuple[bytes, bytes, bytes]] = {}
        self._flushes: set[anyio.CancelScope] = set()  # the flush() calls under way

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

    def command_plain(
        self,
        subject: str,
        value: bytes,
        correlation_id: str,
        ack_policy: int,
        key: bytes | None,
        header_entries: bytes,
    ) -> bytes | None:
        """The PUB command carrying `encode_plain`'s bytes, built in one piece by the C
        accelerator, for `append_command`; None without the accelerator, with a CRC, or
        whenever nats-py's buffer would not take it now: `encode_plain` then."""
        if _publish_command is None or self._crc:
            return None
        pub_head = self._buffer.head(subject)
        if pub_head is None:
            return None
        parts = self._plain_parts.get(ack_policy)
        if parts is None:
            inbox = "" if ack_policy == api_pb2.NONE else self.inbox
            parts = envelope.plain_parts(inbox, ack_policy)
            if parts is None:
                return None
            self._plain_parts[ack_policy] = parts  # the same for every publish: C adds a key
        return _publish_command(
            pub_head,
            parts[0],
            value,
            header_entries,
            parts[1],
            correlation_id,
            parts[2],
            self._nc.max_payload,
            key or b"",
        )

    @property
    def closed(self) -> bool:
        """nats-py closed the connection (the client did, or nats-py gave up on it)."""
        return bool(self._nc.is_closed)

    async def flush(self, timeout: float | None) -> None:
        """A round trip to the NATS server after what was written (nats-py's flush).

        Returns early, without an error, once `stop_flushes` is called: the client is
        closing, and a server that stopped answering would keep it waiting.
        """
        scope = anyio.CancelScope()
        self._flushes.add(scope)
        try:
            with scope:
                async with asyncio.timeout(timeout):
                    await self._nc.flush()
        except TimeoutError as exc:  # asyncio's, or nats-py's FlushTimeoutError
            raise errors.LiftbridgeTimeoutError(
                f"flush: NATS did not answer in time ({exc!r})"
            ) from exc
        except nats.errors.Error as exc:
            raise errors.ConnectionClosedError(f"flush: NATS connection: {exc!r}") from exc
        finally:
            self._flushes.discard(scope)

    def stop_flushes(self) -> None:
        """End every `flush` under way (the client is closing)."""
        for scope in self._flushes:
            scope.cancel()

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
        return self._buffer.append(subject, payload, WRITE_EVERY)

    def append_command(self, cmd: bytes) -> bool:
        """`send_nowait_batched` of a command from `command_plain`."""
        return self._buffer.append_command(cmd, WRITE_EVERY)

    @property
    def unflushed(self) -> bool:
        """`send_nowait` queued bytes that nats-py's flusher was not woken for yet."""
        return self._buffer.unflushed

    async def kick(self) -> None:
        """Wake nats-py's flusher for what `send_nowait` queued."""
        await self._buffer.kick()

    def write_now(self) -> bool:
        """Write what `send_nowait` queued now, when nats-py's flusher is not due and the
        socket has nothing queued (`PubBuffer.write_now`); False: `kick` must follow."""
        return self._buffer.write_now()

    # ------------------------------------------------------------ incoming

    async def _on_ack(self, msg: nats.aio.msg.Msg) -> None:
        self.dispatch(msg.data)

    def dispatch(self, data: bytes) -> None:
        """Decode one ack-inbox message and settle its publish."""
        found = _pending_ack(data, Ack, self._entries) if _pending_ack is not None else None
        if found is None:
            # Not a success ack of the plain shape for a pending publish that expects it
            # (or no accelerator): protobuf decodes it, and the lookup decides.
            self._dispatch_decoded(data)
            return
        # The C scan checked every byte protobuf would and matched the ack to its publish
        # as below: the Ack it made decodes when a field other than its offset is read.
        self._correlator.settle(found[0], found[1])

    def _dispatch_decoded(self, data: bytes) -> None:
        """`dispatch` through protobuf's decode: every ack without the accelerator, and
        with it, error acks, acks for no pending publish (late, duplicated, foreign) or
        naming another stream or subject than it expects, and whatever the scan did not
        vouch for."""
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
            self._mismatched(cid, pb.stream, pb.msgSubject, fut)
            return
        if pb.ackError == _ACK_OK:  # the common case, without the ack_error call
            self._correlator.resolve(cid, ack)
            return
        failure = ack_error(pb)
        assert failure is not None  # only OK maps to None
        if not self._correlator.fail(cid, failure):
            log.warning("error ack for a publish no longer pending: %s", failure)

    def _mismatched(self, cid: str, stream: str, subject: str, fut: AckFuture) -> None:
        # Not the ack of this publish (forged, or another stream's ack routed here).
        self.mismatched_acks += 1
        level = logging.WARNING if self.mismatched_acks == 1 else logging.DEBUG
        log.log(
            level,
            "dropped an ack on inbox %s for correlation id %r naming stream %r subject %r; "
            "the publish went to %r (first of such acks warns; see Client.stats())",
            self.inbox,
            cid,
            stream,
            subject,
            fut.expect,
        )


_NONE = AckPolicy.NONE
_MAX_EXPECTS = 4096


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
        # (stream, subject) an ack must name, by subject: one tuple per partition rather
        # than one per publish, which the garbage collector would count (see _expect)
        self._expects: dict[str, tuple[str, str]] = {}

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
        pub = self.pub
        try:
            cmd = pub.command_plain(subject, value, cid, ack_policy, key, entries)
            if cmd is None:
                payload = pub.encode_plain(subject, value, cid, ack_policy, key, headers, entries)
        except BaseException:
            if not held:
                correlator.release()
            raise
        fut = correlator.register(cid, slots.ack_wait)
        if cmd is not None:
            if pub.append_command(cmd):
                self._written(stream, subject, fut, ack_policy, wake=not self._lone_write())
                return fut
            payload = cmd[cmd.index(b"\r\n") + 2 : -2]  # the buffer is full: the sender's
        elif self._write(stream, subject, payload, fut, ack_policy):
            return fut
        # nats-py must take it (reconnecting, buffer full...): the sender does that.
        item = Item(stream, value, key, headers, partition, None, ack_policy, -1, cid, self)
        item.subject = subject
        item.payload = payload
        item.future = fut
        slots.put(item)
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
        self._written(stream, subject, fut, ack_policy, wake=not self._lone_write())
        return True

    def _lone_write(self) -> bool:
        """Write nats-py's buffer now if the publish just appended is the only one in
        flight (one at a time): from the caller's task, instead of one event-loop
        iteration later from the sender's, about a quarter of such a publish's round
        trip. A burst still leaves its later publishes to the sender, in one write. True:
        written, the sender has nothing to do."""
        return self._correlator.held == 1 and self.pub.write_now()

    def _written(
        self,
        stream: str,
        subject: str,
        fut: AckFuture,
        ack_policy: AckPolicy,
        wake: bool = True,
    ) -> None:
        """What follows a registered publish's append to nats-py's buffer (``wake``: the
        sender has it to write)."""
        self.used = True
        fut.owner = self.pub  # lost with the NATS connection
        expect = self._expects.get(subject)  # _expect's hit, without its call
        fut.expect = (
            expect if expect is not None and expect[0] == stream else self._expect(stream, subject)
        )
        if ack_policy is _NONE:
            self._correlator.resolve(fut.correlation_id, None)  # written: nothing will come
        if wake:
            self._slots.wake_sender()

    def _expect(self, stream: str, subject: str) -> tuple[str, str]:
        """What the ack of a publish to ``subject`` of ``stream`` must name, shared by
        every publish there. (Two streams may listen on one subject: the last one wins.)"""
        expects = self._expects
        expect = expects.get(subject)
        if expect is not None and expect[0] == stream:
            return expect
        if len(expects) >= _MAX_EXPECTS:
            expects.clear()  # a bound on what a client writing to many subjects keeps
        expect = expects[subject] = (stream, subject)
        return expect

    async def send(self, item: Item, fut: AckFuture) -> None:
        assert item.payload is not None
        self.used = True
        fut.owner = self.pub
        fut.expect = self._expect(item.stream, item.subject)
        # nats-py swallows a CancelledError in a forced flush and returns normally: the
        # sender's loop condition re-checks that the publisher is open after this await.
        if not self.pub.send_nowait(item.subject, item.payload):
            await self.pub.send(item.subject, item.payload)
        if item.ack_policy is _NONE and not fut.done():
            self._correlator.resolve(fut.correlation_id, None)

    async def close(self, exc: BaseException, deadline: float) -> None:
        with anyio.move_on_after(_left(deadline)):
            await self.pub.close()
