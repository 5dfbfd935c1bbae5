"""One HTTP/2 connection to a broker, shared by every gRPC stream to it.

An asyncio Protocol around an ``h2`` state machine. Received bytes are parsed
once per chunk and each event goes to the stream it belongs to (a `StreamHandler`,
one per call); frames to send are written once per event-loop iteration, so
many small writes and window updates leave in one ``write``.

Keepalive pings go out every ``keepalive_time`` seconds only while streams are
open (the server counts pings without calls as abuse); an unanswered ping closes
the connection. GOAWAY stops new streams here; the streams it refused, and all
of them when it reports an error, fail UNAVAILABLE, as with grpc-core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final, Protocol

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from grpc import StatusCode
from h2.errors import ErrorCodes

from liftbridge_client._h2.status import H2RpcError, encode_timeout, from_reset
from liftbridge_client._version import __version__

log = logging.getLogger(__name__)

__all__ = ["CONNECTION_WINDOW", "STREAM_WINDOW", "Connection", "StreamHandler"]

# Receive windows. A stream's window bounds what a consumer that stops reading can
# have buffered for it; the connection's is larger so that streams do not starve
# each other.
STREAM_WINDOW: Final = 1024 * 1024
CONNECTION_WINDOW: Final = 32 * 1024 * 1024
KEEPALIVE_TIMEOUT: Final = 10.0  # as the grpc.aio channels' keepalive_timeout_ms
_USER_AGENT: Final = f"liftbridge-client-h2/{__version__}".encode()

Headers = list[tuple[bytes, bytes]]


class StreamHandler(Protocol):
    """What a call does with the events of its stream (called on the event loop)."""

    def on_headers(self, headers: Headers, end: bool) -> None: ...
    def on_data(self, data: bytes, flow_controlled: int) -> None: ...
    def on_trailers(self, headers: Headers) -> None: ...
    def on_end(self) -> None: ...
    def on_failed(self, error: H2RpcError) -> None: ...
    def on_window(self) -> None: ...


def _headers(raw: object) -> Headers:
    """h2's headers (bytes, as configured) as a list of byte pairs."""
    return [(bytes(k), bytes(v)) for k, v in raw] if isinstance(raw, list) else []


class Connection(asyncio.Protocol):
    """An HTTP/2 client connection carrying gRPC streams."""

    def __init__(self, address: str, authority: str, scheme: str, keepalive: float | None) -> None:
        self.address = address
        self._authority = authority.encode()
        self._scheme = scheme.encode()
        self._keepalive = keepalive
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config=config)
        self._transport: asyncio.Transport | None = None
        self._streams: dict[int, StreamHandler] = {}
        self._loop = asyncio.get_running_loop()
        self._flush_pending = False
        self._closed = False  # the socket is gone (or going)
        self._draining = False  # GOAWAY received or sent: no new streams
        self._ping_handle: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self.lost: asyncio.Future[None] = self._loop.create_future()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "draining" if self._draining else "open"
        return f"<h2 Connection {self.address} {state} streams={len(self._streams)}>"

    @property
    def usable(self) -> bool:
        """New streams may start on it."""
        return not self._closed and not self._draining

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        h2c = self._h2
        h2c.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 1024 * 1024,
            },
        )
        h2c.initiate_connection()
        h2c.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._abort(H2RpcError(StatusCode.INTERNAL, f"HTTP/2 protocol error: {exc}"))
            return
        streams = self._streams
        for ev in events:
            # Most frequent first: DATA, then the ends of calls.
            if isinstance(ev, h2.events.DataReceived):
                sid = ev.stream_id
                handler = streams.get(sid)
                if handler is not None:
                    handler.on_data(ev.data or b"", ev.flow_controlled_length or 0)
                else:
                    self.ack(sid, ev.flow_controlled_length or 0)
            elif isinstance(ev, h2.events.ResponseReceived):
                handler = streams.get(ev.stream_id)
                if handler is not None:
                    handler.on_headers(_headers(ev.headers), ev.stream_ended is not None)
            elif isinstance(ev, h2.events.TrailersReceived):
                handler = streams.get(ev.stream_id)
                if handler is not None:
                    handler.on_trailers(_headers(ev.headers))
            elif isinstance(ev, h2.events.StreamEnded):
                handler = streams.pop(ev.stream_id, None)
                if handler is not None:
                    handler.on_end()
            elif isinstance(ev, h2.events.StreamReset):
                handler = streams.pop(ev.stream_id, None)
                if handler is not None:
                    handler.on_failed(from_reset(ev.error_code))
            elif isinstance(ev, h2.events.WindowUpdated):
                if ev.stream_id:
                    handler = streams.get(ev.stream_id)
                    if handler is not None:
                        handler.on_window()
                else:
                    for handler in list(streams.values()):
                        handler.on_window()
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                for handler in list(streams.values()):
                    handler.on_window()
            elif isinstance(ev, h2.events.PingAckReceived):
                if self._ping_timeout is not None:
                    self._ping_timeout.cancel()
                    self._ping_timeout = None
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self._goaway(ev)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        why = f"connection to {self.address} lost"
        self._fail_all(H2RpcError(StatusCode.UNAVAILABLE, f"{why} ({exc})" if exc else why))
        self._closed = True
        self._stop_keepalive()
        if not self.lost.done():
            self.lost.set_result(None)

    # ------------------------------------------------------------ streams

    def start_stream(self, handler: StreamHandler, path: bytes, timeout: float | None) -> int:
        """Send a call's request headers; its events go to ``handler`` from now on."""
        if not self.usable:
            raise H2RpcError(StatusCode.UNAVAILABLE, f"connection to {self.address} is closing")
        h2c = self._h2
        try:
            sid = h2c.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError:
            self._draining = True
            raise H2RpcError(
                StatusCode.UNAVAILABLE, f"connection to {self.address} used up its stream ids"
            ) from None
        headers = [
            (b":method", b"POST"),
            (b":scheme", self._scheme),
            (b":path", path),
            (b":authority", self._authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"user-agent", _USER_AGENT),
        ]
        if timeout is not None:
            headers.append((b"grpc-timeout", encode_timeout(timeout)))
        try:
            h2c.send_headers(sid, headers)
        except h2.exceptions.TooManyStreamsError:
            raise H2RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"{self.address} allows no more concurrent streams on this connection",
            ) from None
        self._streams[sid] = handler
        self._arm_keepalive()
        self._schedule_flush()
        return sid

    def send(self, sid: int, data: bytes | memoryview, end: bool) -> int:
        """Send what the flow-control windows allow of ``data``; how many bytes went.

        ``end`` half-closes the stream once all of ``data`` is sent.
        """
        if self._closed or sid not in self._streams:
            return 0
        h2c = self._h2
        size = len(data)
        sent = 0
        try:
            while sent < size:
                room = min(h2c.local_flow_control_window(sid), h2c.max_outbound_frame_size)
                if room <= 0:
                    break
                room = min(room, size - sent)
                last = sent + room == size
                h2c.send_data(sid, data[sent : sent + room], end_stream=end and last)
                sent += room
            if end and size == 0:
                h2c.end_stream(sid)
        except h2.exceptions.ProtocolError:  # the stream closed under us
            self._schedule_flush()
            return sent
        self._schedule_flush()
        return sent

    def ack(self, sid: int, size: int) -> None:
        """The application consumed ``size`` received bytes of ``sid``: the server may send more."""
        if self._closed or size <= 0:
            return
        try:
            self._h2.acknowledge_received_data(size, sid)
        except (h2.exceptions.StreamClosedError, h2.exceptions.NoSuchStreamError, KeyError):
            return
        self._schedule_flush()

    def reset(self, sid: int, code: ErrorCodes = ErrorCodes.CANCEL) -> None:
        """End ``sid`` with RST_STREAM (default CANCEL); its handler hears nothing more."""
        if self._streams.pop(sid, None) is None or self._closed:
            return
        try:
            self._h2.reset_stream(sid, code)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return
        self._schedule_flush()
        self._close_if_drained()

    def close(self) -> None:
        """Send GOAWAY and close the socket; open streams fail UNAVAILABLE."""
        if self._closed:
            return
        self._draining = True
        self._fail_all(H2RpcError(StatusCode.UNAVAILABLE, "the client closed the connection"))
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.close_connection()
        self._flush()
        self._closed = True
        self._stop_keepalive()
        if self._transport is not None:
            self._transport.close()

    # ------------------------------------------------------------ internals

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        data = self._h2.data_to_send()
        transport = self._transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)

    def _fail_all(self, error: H2RpcError) -> None:
        streams = list(self._streams.values())
        self._streams.clear()
        for handler in streams:
            handler.on_failed(error)

    def _abort(self, error: H2RpcError) -> None:
        log.warning("closing the HTTP/2 connection to %s: %s", self.address, error.details())
        self._fail_all(error)
        self._draining = True
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def _goaway(self, ev: h2.events.ConnectionTerminated) -> None:
        self._draining = True
        code = ev.error_code
        try:
            name = ErrorCodes(code).name if code is not None else "?"
        except ValueError:
            name = str(code)
        extra = ev.additional_data.decode("utf-8", "replace") if ev.additional_data else ""
        error = H2RpcError(
            StatusCode.UNAVAILABLE,
            f"GOAWAY from {self.address} ({name}{': ' + extra if extra else ''})",
        )
        last = ev.last_stream_id if ev.last_stream_id is not None else 0
        if code != ErrorCodes.NO_ERROR:
            last = 0  # the server is closing the connection: nothing more will come
        (log.info if code == ErrorCodes.NO_ERROR else log.warning)("%s", error.details())
        for sid in [s for s in self._streams if s > last]:
            self._streams.pop(sid).on_failed(error)
        self._close_if_drained()

    def _close_if_drained(self) -> None:
        if self._draining and not self._streams and self._transport is not None:
            self._flush()
            self._transport.close()

    # ------------------------------------------------------------ keepalive

    def _arm_keepalive(self) -> None:
        if self._keepalive is not None and self._ping_handle is None and not self._closed:
            self._ping_handle = self._loop.call_later(self._keepalive, self._ping)

    def _ping(self) -> None:
        self._ping_handle = None
        if self._closed or not self._streams:
            return  # the next stream arms it again
        try:
            self._h2.ping(b"lbkeepal")
        except h2.exceptions.ProtocolError:
            return
        self._flush()
        if self._ping_timeout is None:
            self._ping_timeout = self._loop.call_later(KEEPALIVE_TIMEOUT, self._ping_unanswered)
        self._arm_keepalive()

    def _ping_unanswered(self) -> None:
        self._ping_timeout = None
        self._abort(
            H2RpcError(
                StatusCode.UNAVAILABLE,
                f"{self.address} did not answer a keepalive ping within {KEEPALIVE_TIMEOUT}s",
            )
        )

    def _stop_keepalive(self) -> None:
        for handle in (self._ping_handle, self._ping_timeout):
            if handle is not None:
                handle.cancel()
        self._ping_handle = self._ping_timeout = None
