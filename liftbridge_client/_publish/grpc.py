"""PublishAsync on grpc.aio (`PublishStream`), and the unary PublishToSubject.

`PublishStream` is one long-lived PublishAsync call to one broker. Requests
carry correlation ids; the server answers each (unless the ack policy is NONE)
with a ``PublishResponse`` whose ``asyncError`` - checked first - or ``ack``
settles the matching future in the `Correlator`. A stream that breaks fails
exactly the publishes written on it (`ConnectionClosedError` chained to the
mapped gRPC error) and is replaced by a fresh one on next use; the broker's outage
is paced by `_publish.outages.OutageLog`. The h2 stream transport's stream
(`_publish.h2.H2PublishStream`) keeps this contract; `_publish.leaders.LeaderRoute`
routes publishes to either.

The stream's reader and writer are supervised tasks (`_tasks`); closing stops
them within a deadline. PublishToSubject (unary) always carries a deadline:
without one the server publishes and returns no ack at all. The deadline is the
ack wait, so a missing ack surfaces as `AckTimeoutError`. Unary ``Publish`` is not
used: PublishAsync does the same with one stream per broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import anyio
import grpc
import grpc.aio

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.outages import OutageLog
from liftbridge_client._tasks import TaskHandle
from liftbridge_client._transport.grpc import (
    Stub,
    ack_error,
    async_error,
    map_rpc_error,
    publish_status_error,
)
from liftbridge_client.models import Ack, ack_from_proto

__all__ = [
    "MAX_REQUEST_BYTES",
    "NotFoundJudge",
    "PublishStream",
    "Spawn",
    "Unwritten",
    "check_request_size",
    "publish_to_subject",
]

log = logging.getLogger(__name__)

_ACK_OK = api_pb2.Ack.OK
# grpc-go's default limit on a received message: a bigger request kills the
# whole PublishAsync stream (RESOURCE_EXHAUSTED), so it is refused here first.
MAX_REQUEST_BYTES = 4 * 1024 * 1024


# Receives the publishes a broken stream was given but never wrote, oldest first.
_Unwritten = Callable[[list[tuple[api_pb2.PublishRequest, AckFuture]]], None]
# Starts a supervised background task (`TaskSupervisor.spawn`).
_Spawn = Callable[..., TaskHandle]
Spawn = _Spawn
Unwritten = _Unwritten
# Turns a broker's NOT_FOUND for a stream into the error to report (`MetadataCache.not_found`).
NotFoundJudge = Callable[[str, errors.NotFoundError], errors.NotFoundError]


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
        not_found: NotFoundJudge | None = None,
    ) -> None:
        self.address = address
        self._not_found = not_found
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
            judge, stream = self._not_found, None if fut is None else fut.stream
            err = async_error(resp.asyncError, cid, stream)
            if (
                judge is not None
                and stream is not None
                and isinstance(err, errors.NotFoundError)
                and err.details.startswith("no such stream")  # not "no such partition"
            ):
                err = judge(stream, err)
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
