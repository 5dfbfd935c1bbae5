"""PublishAsync over the h2 stream transport (``StreamTransport.H2``): `H2PublishStream`.

The same contract as `_publish.grpc.PublishStream` (correlation, breaking, taking back
what was never written, closing); what differs:

- writing: a request with nothing waiting ahead of it goes to the call as a gRPC message
  at once (the writer task only serves what had to wait); everything written in one
  event-loop iteration leaves in one pass, as far as the HTTP/2 send windows allow (the
  rest waits for the server's WINDOW_UPDATE), instead of one awaited grpc.aio write per
  request;
- reading: responses settle their publishes as the connection receives them (the call's
  sink), the common ack straight from its bytes.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from google.protobuf.message import DecodeError

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client._publish.grpc import NotFoundJudge, PublishStream, Spawn, Unwritten
from liftbridge_client._publish.outages import OutageLog
from liftbridge_client._publish.wire import answer_ack
from liftbridge_client._transport.grpc import BrokerPool, map_rpc_error
from liftbridge_client._transport.h2 import BidiStreamCall, H2RpcError
from liftbridge_client._transport.h2.framing import encode_message
from liftbridge_client.models import Ack

__all__ = ["H2PublishStream"]

log = logging.getLogger(__name__)

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
        not_found: NotFoundJudge | None = None,
    ) -> None:
        super().__init__(
            address,
            pool.stub(address),
            correlator,
            spawn=spawn,
            outages=outages,
            not_found=not_found,
        )
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
        Ack decoded only if read (`wire.answer_ack`); anything else is decoded and
        dispatched as over grpc.aio.
        """
        if not self._answered:
            self._answered = True
            self._outages.answered(self.address)
        resolve = self._correlator.resolve
        for raw in responses:
            plain = answer_ack(raw, Ack)
            if plain is not None:
                resolve(plain[0], plain[1])
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
        self._submit(message, fut, resolve_on_write, on_unwritten)

    def submit(
        self,
        req: api_pb2.PublishRequest,
        fut: AckFuture,
        resolve_on_write: bool,
        on_unwritten: Unwritten,
    ) -> None:
        # Overrides submit itself (not the base's _submit): the base class never calls
        # back into this module.
        if not self._outbox and not resolve_on_write:
            self.submit_raw(encode_message(req.SerializeToString()), fut, False, on_unwritten)
        else:
            self._submit(req, fut, resolve_on_write, on_unwritten)

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
