"""Subscriptions: an async iterator over one stream partition.

A `Subscription` holds one server-streaming Subscribe call at a time. Arguments are
validated, and the wire request and the meaning of each ending status are decided,
in `_subscribe` (no IO); this module does the IO: connecting, the handshake,
reading, resubscribing, closing.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple, Self, Unpack

import grpc
import grpc.aio

from liftbridge_client import _subscribe, _validate, errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client._cluster.metadata import Absence, MetadataCache
from liftbridge_client._native import speedups
from liftbridge_client._proto import api_pb2
from liftbridge_client._subscribe import (
    Action,
    Phase,
    Progress,
    ReverseReader,
    SubscribeArgs,
    SubscribeSpec,
    classify,
)
from liftbridge_client._transport.grpc import BrokerPool, map_rpc_error
from liftbridge_client._transport.h2 import ServerStreamCall
from liftbridge_client._transport.h2.connection import STREAM_WINDOW
from liftbridge_client.models import (
    Message,
    StartPosition,
    message_from_wire,
    owned_message_from_proto,
)
from liftbridge_client.options import ClientOptions, StreamTransport

if TYPE_CHECKING:
    from liftbridge_client._cluster.feature_probe import FeatureDetector

    GrpcSubscribeCall = grpc.aio.UnaryStreamCall[api_pb2.SubscribeRequest, api_pb2.Message]
    SubscribeCall = GrpcSubscribeCall | ServerStreamCall[api_pb2.Message]

_SUBSCRIBE_PATH = "/proto.API/Subscribe"
_decode_message = api_pb2.Message.FromString

log = logging.getLogger(__name__)

_plain_span = None if speedups is None else speedups.plain_span


class WireMessages(NamedTuple):
    """Messages of a subscription as their wire bytes (`Subscription._next_wire`): each
    an api.Message protobuf decodes without fail, offsets ``first`` to ``last``
    ascending."""

    raws: list[bytes]
    first: int
    last: int

    def __repr__(self) -> str:
        # Short, not the bytes: asyncio.Runner.run (3.11) builds the repr of the task
        # that returned it, result included, each time it checks its SIGINT handler.
        return f"<WireMessages {len(self.raws)} offsets {self.first}..{self.last}>"


__all__ = ["SubscribeArgs", "Subscription"]


class Subscription:
    """Messages of one partition, in offset order: ``async with`` it, ``async for`` over it.

    Created by `Client.subscribe`. ``async with`` establishes the subscription (the
    server's handshake has arrived), so a missing stream or partition raises
    `NotFoundError` there; ``async for`` alone also works and opens on first use.

    **How it ends.** With a stop position, iteration ends cleanly when the server
    says the stop was reached: ``end_reason`` is then a `StopPositionReached`. Reading
    a read-only partition to its end ends cleanly too (`ReadonlyPartitionEnd`), and so
    does ``stop=StopPosition.LATEST`` on an empty partition (`StopPositionReached`).
    A stream deleted while subscribed raises `StreamDeletedEnd`, and a partition
    paused while subscribed raises `PartitionPausedEnd`: both are abnormal for a
    reader, so they are raised, not swallowed; ``end_reason`` holds them as well.
    `close()` / `aclose()` (also from another task) ends iteration cleanly with
    ``end_reason`` None; so does leaving ``async with``.

    **Timeouts.** A read that is cancelled - ``asyncio.wait_for(anext(sub), t)``
    timing out, or `next` with a ``timeout`` - does not end the subscription: the
    read in flight is kept and the next read returns its message, so nothing is lost
    or repeated. `next(timeout=...)` is the helper for that (like nats-py's
    ``next_msg``).

    **Failover.** When the broker becomes unreachable (UNAVAILABLE), is no longer
    the partition leader, or closes the partition under the stream, the
    subscription refreshes metadata and subscribes again, with backoff, for at most
    ``ClientOptions.resubscribe_wait`` seconds, from the offset after the last
    message delivered (from the original start position if none was). Messages at
    or before the last delivered offset are never delivered again, so the reader
    sees no gap and no duplicate. If nothing was delivered yet, NEW_ONLY and LATEST
    are evaluated again on the new broker; ``stop=StopPosition.LATEST`` is always
    evaluated again (the server resolves it at each subscribe).

    **Reverse** (``reverse=True``, newest first) reads from the start position (at most
    the high watermark) down to the oldest message, then ends cleanly
    (`StopPositionReached`); an empty partition ends at once. Servers that honour
    ``SubscribeRequest.reverse`` (master) do it natively; on the others (v1.9.0 ignores
    the field) the client emulates it with forward windows
    (`_subscribe.ReverseReader`), which gives the same messages in the same order. Which
    one a broker does is probed once (`Client.features`).
    """

    def __init__(
        self,
        metadata: MetadataCache,
        pool: BrokerPool,
        options: ClientOptions,
        stream: str,
        partition: int = 0,
        *,
        on_close: Callable[[Subscription], None] | None = None,
        features: FeatureDetector | None = None,
        **kw: Unpack[SubscribeArgs],
    ) -> None:
        self._spec = SubscribeSpec.build(stream, partition, kw, now_ns=time.time_ns())
        # Reverse reads are decided on first open: native (the server reads backwards) or
        # emulated by forward windows. Without a detector the request goes out as asked.
        self._features = features
        self._reverse_decided = features is None or not self._spec.reverse
        self._emulated: ReverseReader | None = None
        self._metadata = metadata
        self._pool = pool
        self._options = options
        self._on_close = on_close
        self._call: SubscribeCall | None = None
        self._opening: SubscribeCall | None = None  # a call still waiting for its handshake
        self._pending: api_pb2.Message | None = None  # a message that arrived as the first
        # A read of self._call in flight, kept when the reader is cancelled (a timeout):
        # the next read takes its result. grpc.aio cancels the whole call when a read()
        # is cancelled, so reads run in a task of their own, shielded.
        self._inflight: asyncio.Future[object] | None = None
        self._address: str | None = None
        self._established = False  # a handshake arrived at least once
        self._finished = False  # ended or failed for good: iteration is over
        self._closed = False
        self._end_reason: errors.SubscriptionEnded | None = None
        self._progress = Progress.for_spec(self._spec)
        self._resubscribes = 0
        self._lock = asyncio.Lock()
        self._receive_window = STREAM_WINDOW

    def __repr__(self) -> str:
        state = "closed" if self._closed else "ended" if self._finished else "open"
        return (
            f"<Subscription {self._spec.stream}/{self._spec.partition} {state} "
            f"last_offset={self._progress.last} broker={self._address}>"
        )

    # ------------------------------------------------------------ state

    @property
    def stream(self) -> str:
        return self._spec.stream

    @property
    def partition(self) -> int:
        return self._spec.partition

    @property
    def end_reason(self) -> errors.SubscriptionEnded | None:
        """Why the server ended the subscription; None while it runs or after `close()`."""
        return self._end_reason

    @property
    def last_offset(self) -> int | None:
        """Offset of the last message delivered; None before the first."""
        return self._progress.last

    @property
    def broker(self) -> str | None:
        """Address of the broker currently (or last) read from."""
        return self._address

    @property
    def resubscribes(self) -> int:
        """How many times the subscription was established again after a failure."""
        return self._resubscribes

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def _past_stop(self) -> int | None:
        """The first offset the server sent past the stop offset, which ended the read
        (`StopPositionReached`): where the partition goes on after offsets up to the stop
        offset that compaction or retention removed. None otherwise."""
        return self._progress.past

    def _use_receive_window(self, size: int) -> None:
        """Open the h2 stream with a ``size``-byte receive window instead of 1 MiB: what a
        reader that stops reading holds at most, and twice what each flow-control write
        (WINDOW_UPDATE) hands back, so a long fast read (the Spark source's tasks) writes
        fewer of them; each can wake the server and cost the reader its core. Before the
        subscription opens; grpc.aio sizes its own. Internal until a user needs it."""
        if not STREAM_WINDOW <= size <= 2**31 - 1:
            raise errors.InvalidInputError(
                f"a receive window must be {STREAM_WINDOW} to 2**31 - 1 bytes, got {size}"
            )
        self._receive_window = size

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        try:
            async with self._lock:
                await self._ensure_open()
        except asyncio.CancelledError:
            if not self._closed or _being_cancelled():
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel the gRPC call and end iteration (a reader in another task stops). Idempotent."""
        if not self._closed:
            self._closed = True
            self._release()
            if self._emulated is not None:
                await self._emulated.close()

    async def aclose(self) -> None:
        """The same as `close` (for ``contextlib.aclosing`` and async-generator habits)."""
        await self.close()

    async def next(self, timeout: float | datetime.timedelta | None = None) -> Message:
        """The next message, waiting at most ``timeout`` seconds (None: no limit).

        `LiftbridgeTimeoutError` when nothing came in time: the subscription stays
        open and a later call returns the message that was on its way. At the end of
        the subscription it raises why it ended (a `SubscriptionEnded`, e.g.
        `StopPositionReached`), or `ConnectionClosedError` after `close`.
        """
        if timeout is not None:
            timeout = _validate.seconds("timeout", timeout, allow_zero=True)
        try:
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        except StopAsyncIteration:
            if self._end_reason is not None:
                raise self._end_reason from None
            raise errors.ConnectionClosedError(f"{self!r} is closed") from None
        except TimeoutError:
            raise errors.LiftbridgeTimeoutError(
                f"no message on {self.stream}/{self.partition} within {timeout}s"
            ) from None

    def _release(self) -> None:
        """Drop the call and leave the client's registry (once)."""
        self._drop_call()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)

    def _drop_call(self) -> None:
        calls = (self._call, self._opening)
        self._call = self._opening = None
        self._pending = None
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            inflight.add_done_callback(_retrieve)
            inflight.cancel()
        for call in calls:
            if call is not None:
                call.cancel()

    async def _read_call(self, call: SubscribeCall) -> object:
        """``call.read()`` that survives the reader's cancellation (see ``_inflight``)."""
        if type(call) is ServerStreamCall:
            return await call.read()  # h2 reads are cancellation-safe by themselves
        inflight = self._inflight
        if inflight is None:
            inflight = self._inflight = asyncio.ensure_future(call.read())
        try:
            result = await asyncio.shield(inflight)
        except asyncio.CancelledError:
            if inflight.cancelled() and self._inflight is inflight:
                self._inflight = None  # the call itself was cancelled: nothing to keep
            raise  # our reader was cancelled: keep the read for the next one
        except BaseException:
            self._inflight = None
            raise
        self._inflight = None
        return result

    # ------------------------------------------------------------ iteration

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        call = self._call
        if (
            type(call) is ServerStreamCall
            and self._pending is None
            and not self._closed
            and not self._lock.locked()
        ):
            # h2 with a message already received: nothing to wait for, so no lock needed.
            try:
                # Made into a Message straight from its bytes (no protobuf object between).
                ready = call.read_nowait_as(message_from_wire)
            except grpc.RpcError:
                ready = None  # the call failed: the path below reads the failure and acts on it
            if ready is not None:
                if self._progress.accept(ready.offset):
                    return ready
                self._dropped(ready.offset)
        try:
            async with self._lock:
                # Hot path inlined (one coroutine frame less per message): read from an
                # established call; everything else (opening, a kept first message, a
                # broken stream's aftermath, the end) goes through _next().
                while True:
                    call = self._call
                    if call is None or self._pending is not None or self._closed:
                        return await self._next()
                    try:
                        if type(call) is ServerStreamCall:  # h2: no task per read needed
                            pb: object = await call.read()
                        else:
                            pb = await self._read_call(call)
                    except grpc.RpcError as exc:
                        self._broken(exc)
                        continue
                    if not isinstance(pb, api_pb2.Message):
                        self._broken(None)
                        continue
                    if self._progress.accept(pb.offset):
                        return owned_message_from_proto(pb)  # pb is never used again
                    self._dropped(pb.offset)
        except asyncio.CancelledError:
            if self._closed and not _being_cancelled():
                raise StopAsyncIteration from None  # close() cancelled the call under us
            raise  # our reader was cancelled (a timeout): the subscription stays open

    async def _next_protos(self, limit: int) -> list[api_pb2.Message]:
        """The next messages as their decoded protobufs (wire field names), for readers that
        build columns rather than `Message` objects (the Spark source): at least one,
        waiting for it as ``async for`` does, plus up to ``limit`` in all of those that have
        arrived already; ``[]`` where iteration would stop. The same guarantees as
        iterating (failover, no replayed offset). Forward subscriptions only."""
        if self._spec.reverse:
            raise ValueError("_next_protos() reads forward subscriptions only")
        call = self._call
        if (
            type(call) is ServerStreamCall
            and self._pending is None
            and not self._closed
            and not self._lock.locked()
        ):
            try:
                out = self._accepted(call.read_ready(limit))
            except grpc.RpcError:
                out = []  # the call failed: the path below reads the failure and acts on it
            if out:
                return out
        try:
            async with self._lock:
                while True:
                    call = self._call
                    if call is None or self._pending is not None or self._closed:
                        got = await self._next_proto()
                        assert not isinstance(got, Message)  # forward: never emulated
                        return [got]
                    try:
                        if type(call) is ServerStreamCall:
                            out = self._accepted(call.read_ready(limit))
                            if out:
                                return out
                            pb: object = await call.read()
                        else:
                            pb = await self._read_call(call)
                    except grpc.RpcError as exc:
                        self._broken(exc)
                        continue
                    if not isinstance(pb, api_pb2.Message):
                        self._broken(None)
                        continue
                    if self._progress.accept(pb.offset):
                        return [pb]
                    self._dropped(pb.offset)
        except StopAsyncIteration:
            return []
        except asyncio.CancelledError:
            if self._closed and not _being_cancelled():
                return []  # close() cancelled the call under us
            raise

    async def _next_wire(self, limit: int) -> WireMessages | list[api_pb2.Message]:
        """`_next_protos`, except that messages already here over h2, all of the plain
        shape (protobuf would decode them alike) in ascending offsets past what was
        delivered, come as their wire bytes, undecoded: the Spark source makes its columns
        of them in C. Anything else comes decoded, as from `_next_protos`."""
        while True:
            call = self._call
            if (
                _plain_span is None
                or type(call) is not ServerStreamCall
                or self._pending is not None
                or self._closed
                or self._lock.locked()
                or self._spec.reverse
            ):
                break
            raws = call.take_ready(limit)
            if not raws:
                try:
                    async with self._lock:  # one reader waits on the call at a time
                        ready = await call.wait_ready()
                except asyncio.CancelledError:
                    if self._closed and not _being_cancelled():
                        return []  # close() cancelled the call under us
                    raise
                if ready:
                    continue  # (and check again: the subscription may have changed)
                break  # ended or failed: _next_protos reads how, and acts
            span = _plain_span(raws)
            progress = self._progress
            if span is not None and span[1] <= progress.ceiling and progress.accept(span[0]):
                first, last = span
                if last != first:
                    progress.accept(last)  # ascending: every offset between is new
                return WireMessages(raws, first, last)
            try:
                out = self._accepted(call.decode_all(raws))
            except grpc.RpcError:
                break  # the call failed: _next_protos reads the failure and acts
            if out:
                return out
        return await self._next_protos(limit)

    def _accepted(self, pbs: list[api_pb2.Message]) -> list[api_pb2.Message]:
        """``pbs`` without replayed offsets (recording the others as delivered)."""
        accept = self._progress.accept
        out = [pb for pb in pbs if accept(pb.offset)]
        if len(out) < len(pbs):
            self._dropped(pbs[0].offset, len(pbs) - len(out))
        return out

    async def _next(self) -> Message:
        got = await self._next_proto()
        if isinstance(got, Message):
            return got  # a reverse read's emulation delivers Messages
        return owned_message_from_proto(got)  # never used again

    async def _next_proto(self) -> api_pb2.Message | Message:
        """The next message's protobuf (a `Message` when reverse reads are emulated);
        StopAsyncIteration at the end."""
        while True:
            if self._closed or self._finished:
                raise StopAsyncIteration
            if self._emulated is not None:
                return await self._next_emulated(self._emulated)
            if self._call is None:
                await self._ensure_open()
                continue
            pb, self._pending = self._pending, None
            if pb is None:
                pb = await self._read(self._call)
                if pb is None:
                    continue  # the stream broke: resubscribe, or it ended
            if not self._progress.accept(pb.offset):
                self._dropped(pb.offset)
                continue
            return pb

    def _dropped(self, offset: int, count: int = 1) -> None:
        """``count`` offsets received (from ``offset`` on) were not delivered: replays, or
        offsets past the stop offset, which end the read."""
        if self._progress.past is None:
            log.debug("%r: dropped %d replayed offset(s), received from %d", self, count, offset)
        elif not self._finished:
            self._conclude(
                Action.END,
                errors.StopPositionReached(
                    f"{self.stream}/{self.partition}: offset {self._progress.ceiling} was "
                    "the stop offset (compacted or removed: the server sent offsets past it)"
                ),
            )

    async def _next_emulated(self, reader: ReverseReader) -> Message:
        message = await reader.next()
        if self._closed:
            raise StopAsyncIteration
        if message is None:
            last = self._progress.last
            self._conclude(
                Action.END,
                errors.StopPositionReached(
                    f"{self.stream}/{self.partition}: reverse read reached the oldest "
                    f"message{'' if last is None else f' (offset {last})'}"
                ),
            )
            raise StopAsyncIteration
        self._progress.last = message.offset
        return message

    async def _read(self, call: SubscribeCall) -> api_pb2.Message | None:
        try:
            pb = await self._read_call(call)
        except grpc.RpcError as exc:
            self._broken(exc)
            return None
        if isinstance(pb, api_pb2.Message):
            return pb
        self._broken(None)
        return None

    def _broken(self, exc: grpc.RpcError | None) -> None:
        """The call failed (``exc``) or ended with an OK status (None): resubscribe or end."""
        if self._closed:
            return
        err: errors.LiftbridgeError
        if exc is not None:
            err = map_rpc_error(exc)
            err.__cause__ = exc
        else:
            # An OK status mid-stream: the server stopped serving it (e.g. shutting down).
            err = errors.UnavailableError("the server ended the subscription stream")
        self._drop_call()
        verdict = classify(err, self._spec, Phase.STREAMING)
        if verdict.action in (Action.RESUBSCRIBE, Action.CHECK_DELETED, Action.CHECK_PAUSED):
            log.info("%r: stream broke (%s); resubscribing", self, err)
            return
        self._conclude(verdict.action, verdict.error)

    def _conclude(self, action: Action, error: errors.LiftbridgeError) -> None:
        """End for good: cleanly (END) or by raising ``error``."""
        self._finished = True
        if isinstance(error, errors.SubscriptionEnded) and action is not Action.FAIL:
            self._end_reason = error
        self._release()
        if action is not Action.END:
            raise error

    # ------------------------------------------------------------ (re)subscribing

    async def _ensure_open(self) -> None:
        if self._call is not None or self._closed or self._finished:
            return
        if not self._reverse_decided:
            handled = await self._start_reverse()  # a failure leaves it undecided
            self._reverse_decided = True
            if handled:
                return
        phase = Phase.RESUBSCRIBING if self._established else Phase.OPENING
        resume_at: int | None = None
        last = self._progress.last
        if last is not None:
            resume_at = self._progress.resume_at(self._spec)
            if resume_at is None:  # the stop offset (or the oldest, reversed) was delivered
                self._conclude(
                    Action.END,
                    errors.StopPositionReached(
                        f"{self.stream}/{self.partition}: offset {last} was the last"
                    ),
                )
                return
        loop = asyncio.get_running_loop()
        policy = self._options.retry
        deadline = None
        if phase is Phase.RESUBSCRIBING:
            deadline = loop.time() + self._options.resubscribe_wait
        attempt = 0
        absence = Absence()  # of the partition from the metadata, after NOT_FOUND
        while not self._closed:
            attempt += 1
            if phase is Phase.RESUBSCRIBING or attempt > 1:
                await self._refresh_metadata(deadline)
            try:
                await self._subscribe_once(resume_at, deadline)
            except errors.LiftbridgeError as exc:
                if self._closed:  # close() cancelled the call (h2 reports it as CANCELLED)
                    return
                if phase is Phase.OPENING and type(exc) is errors.NotFoundError:
                    # The server's own NOT_FOUND: a restarted broker says so too.
                    exc = self._metadata.not_found(self._spec.stream, exc)
                verdict = classify(exc, self._spec, phase)
                if verdict.action is Action.CHECK_DELETED:
                    # Deleted only once the metadata has not listed the partition in a few
                    # answers over a few seconds: a restarting node answers NOT_FOUND, and
                    # metadata without the stream, until it has reloaded its streams.
                    if deadline is None:  # opening: as long as a resubscription would try
                        deadline = loop.time() + self._options.resubscribe_wait
                    refreshed = await self._refresh_metadata(deadline)
                    absence.note(self._listed() if refreshed else None)
                    if absence.proven:
                        self._conclude(Action.END_RAISE, verdict.error)
                        return
                    log.info("%r: %s; metadata: %s: trying again", self, exc, self._seen(absence))
                elif verdict.action is Action.CHECK_PAUSED:
                    refreshed = await self._refresh_metadata(deadline)
                    if not refreshed or self._paused():
                        self._conclude(Action.END_RAISE, verdict.error)
                        return
                    log.info("%r: %s, but the partition is not paused: trying again", self, exc)
                elif verdict.action is not Action.RESUBSCRIBE:
                    self._conclude(verdict.action, verdict.error)
                    return
                delay = policy.backoff(attempt) * random.uniform(1.0, 1.5)
                if (
                    attempt >= policy.attempts
                    if deadline is None
                    else loop.time() + delay >= deadline
                ):
                    if verdict.action is Action.CHECK_DELETED and absence.answers:
                        # Out of time, and no answer since the last NOT_FOUND listed it.
                        self._conclude(Action.END_RAISE, verdict.error)
                    log.warning("%r: giving up subscribing after %d attempts", self, attempt)
                    self._conclude(Action.FAIL, exc)
                log.debug("%r: subscribe attempt %d failed (%s)", self, attempt, exc)
                await asyncio.sleep(delay)
                continue
            if self._closed:  # closed while the handshake was on its way
                self._drop_call()
                return
            if phase is Phase.RESUBSCRIBING:
                self._resubscribes += 1
                log.info("%r: resubscribed at offset %s", self, resume_at)
            self._established = True
            return

    async def _start_reverse(self) -> bool:
        """Decide how to read backwards; True when handled here (emulated, or ended).

        An empty partition ends at once on every server (master would fail it with
        INTERNAL "segment not found"); a broker that honours reverse reads natively.
        """
        assert self._features is not None
        spec = self._spec
        info = await _admin.fetch_partition_metadata(
            self._metadata, self._options, spec.stream, spec.partition
        )
        high = info.high_watermark
        if high < 0:
            self._conclude(
                Action.END,
                errors.StopPositionReached(
                    f"{spec.stream}/{spec.partition}: the partition is empty"
                ),
            )
            return True
        address = await self._metadata.leader_address(spec.stream, spec.partition)
        if await self._features.reverse_native(address, spec.stream, spec.partition, high):
            log.debug("%r: the server reads backwards itself", self)
            return False
        oldest = await self._first_offset(StartPosition.EARLIEST, high)
        if oldest is None:  # emptied by retention since the metadata was read
            self._conclude(
                Action.END,
                errors.StopPositionReached(
                    f"{spec.stream}/{spec.partition}: the partition is empty"
                ),
            )
            return True
        top = high
        if spec.start is StartPosition.OFFSET:
            top = min(spec.start_offset, high)
        elif spec.start is StartPosition.EARLIEST:
            top = oldest
        elif spec.start is StartPosition.TIMESTAMP:
            at = await self._first_offset(StartPosition.TIMESTAMP, high)
            top = high if at is None else min(at, high)
        log.info(
            "%r: broker %s ignores reverse reads; emulating from offset %d down to %d",
            self,
            address,
            top,
            oldest,
        )
        self._emulated = ReverseReader(self._window, top, oldest, size=_subscribe.WINDOW)
        self._established = True
        self._address = address
        return True

    def _window(self, start: int, stop: int) -> Subscription:
        """A forward subscription of offsets ``start``..``stop`` (for the emulation)."""
        return Subscription(
            self._metadata,
            self._pool,
            self._options,
            self._spec.stream,
            self._spec.partition,
            start_offset=start,
            stop_offset=stop,
            resume=self._spec.resume,
        )

    async def _first_offset(self, start: StartPosition, stop: int) -> int | None:
        """The offset of the first message from ``start`` up to ``stop``; None if none."""
        spec = self._spec
        args: SubscribeArgs = {"start": start, "stop_offset": stop}
        if start is StartPosition.TIMESTAMP:
            args["start_timestamp_ns"] = spec.start_timestamp_ns
        sub = Subscription(
            self._metadata, self._pool, self._options, spec.stream, spec.partition, **args
        )
        try:
            async with sub:
                async for message in sub:
                    return message.offset
        except errors.InvalidArgumentError:
            return None  # the start lies after the stop (a timestamp after every message)
        return None

    def _listed(self) -> bool:
        """The cached metadata lists this subscription's partition."""
        info = self._metadata.current.streams.get(self._spec.stream)
        return info is not None and self._spec.partition in info.partitions

    def _paused(self) -> bool:
        """The cached metadata says this subscription's partition is paused."""
        info = self._metadata.current.streams.get(self._spec.stream)
        part = None if info is None else info.partitions.get(self._spec.partition)
        return part is not None and part.paused

    async def _refresh_metadata(self, deadline: float | None) -> bool:
        """Refresh the cached metadata; False when no answer came."""
        try:
            async with asyncio.timeout_at(deadline):
                await self._metadata.refresh()
        except (errors.LiftbridgeError, TimeoutError) as exc:  # the attempt says what matters
            log.debug("%r: metadata refresh failed: %s", self, exc)
            return False
        return True

    @staticmethod
    def _seen(absence: Absence) -> str:
        return f"not listed by {absence}" if absence.answers else "listed"

    async def _subscribe_once(self, resume_at: int | None, deadline: float | None) -> None:
        """One Subscribe call, up to its handshake, within ``rpc_timeout`` (and ``deadline``)."""
        spec = self._spec
        timeout = self._options.rpc_timeout
        if deadline is not None:
            timeout = max(0.01, min(timeout, deadline - asyncio.get_running_loop().time()))
        address = "?"
        limit = asyncio.timeout(timeout)
        try:
            async with limit:
                if spec.read_isr_replica:
                    address = await self._metadata.replica_address(spec.stream, spec.partition)
                else:
                    address = await self._metadata.leader_address(spec.stream, spec.partition)
                call = self._opening = self._open_call(address, spec.request(resume_at))
                try:
                    first = await call.read()
                except BaseException:
                    call.cancel()
                    raise
                finally:
                    self._opening = None
        except grpc.RpcError as exc:
            raise map_rpc_error(exc) from exc
        except TimeoutError:
            if not limit.expired():
                raise
            raise errors.LiftbridgeTimeoutError(
                f"Subscribe to {spec.stream}/{spec.partition} on {address}: "
                f"no handshake within {timeout:.3g}s"
            ) from None
        if not isinstance(first, api_pb2.Message):
            call.cancel()
            raise errors.UnavailableError(
                f"{address} ended the Subscribe call before its handshake"
            )
        self._call = call
        self._address = address
        if first.ByteSize():  # not the empty handshake: a message (kept for the reader)
            self._pending = first

    def _open_call(self, address: str, request: api_pb2.SubscribeRequest) -> SubscribeCall:
        if self._options.stream_transport is StreamTransport.H2:
            return self._pool.h2().server_stream(
                address,
                _SUBSCRIBE_PATH,
                request.SerializeToString(),
                _decode_message,
                window=self._receive_window,
            )
        return self._pool.stub(address).Subscribe(request)


def _retrieve(fut: asyncio.Future[object]) -> None:
    """Mark a dropped read's outcome as seen (its call was cancelled on purpose)."""
    if not fut.cancelled():
        fut.exception()


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
