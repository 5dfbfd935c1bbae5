"""PublishAsync over the h2 stream transport (``ClientOptions.stream_transport="h2"``).

The same `PublishStream` contract (correlation, breaking, taking back what was never
written, closing); what differs is the write path: every request queued in one
event-loop iteration is encoded into one buffer and leaves in one pass, as far as the
HTTP/2 send windows allow (the rest waits for the server's WINDOW_UPDATE), instead of
one awaited grpc.aio write per request.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from liftbridge_client import errors
from liftbridge_client._correlation import AckFuture, Correlator
from liftbridge_client._errors_map import map_rpc_error
from liftbridge_client._grpc import BrokerPool
from liftbridge_client._grpc_publish import OutageLog, PublishStream, Spawn, Unwritten
from liftbridge_client._h2 import BidiStreamCall
from liftbridge_client._proto import api_pb2

log = logging.getLogger(__name__)

__all__ = ["H2PublishStream"]

_PATH = "/proto.API/PublishAsync"


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
            address, _PATH, api_pb2.PublishResponse.FromString
        )

    def submit_raw(
        self, raw: bytes, fut: AckFuture, resolve_on_write: bool, on_unwritten: Unwritten
    ) -> None:
        """`submit` of a request serialized already (the publisher's plain hot path)."""
        self._submit(raw, fut, resolve_on_write, on_unwritten)

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
        write = call.write
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
                    write(req if isinstance(req, bytes) else req.SerializeToString())
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
