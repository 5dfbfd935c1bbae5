"""One HTTP/2 connection to a broker, shared by every gRPC stream to it.

An asyncio protocol around an ``h2`` state machine (the sans-IO statuses and message
framing are in `framing`). It is a buffered one: the socket is read into a buffer of the
connection's own (see ``_READ_BUFFER`` for why). Received bytes are parsed once per
chunk and each event goes to the stream it belongs to (a `StreamHandler`, one per
call); frames to send are written once per event-loop iteration, so many small writes
and window updates leave in one ``write``: what the calls send (their pumps) and what
the connection answers (window updates, PING answers) alike.

Keepalive pings go out every ``keepalive_time`` seconds only while streams are
open (the server counts pings without calls as abuse); an unanswered ping closes
the connection. GOAWAY stops new streams here; the streams it refused, and all
of them when it reports an error, fail UNAVAILABLE, as with grpc-core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Final, Protocol, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from grpc import StatusCode
from h2.errors import ErrorCodes
from h2.stream import H2Stream, StreamState

from liftbridge_client._transport.h2.framing import (
    H2RpcError,
    data_run,
    encode_timeout,
    from_reset,
)
from liftbridge_client._version import __version__

__all__ = ["CONNECTION_WINDOW", "STREAM_WINDOW", "Connection", "StreamHandler"]

log = logging.getLogger(__name__)

# Receive windows. A stream's window bounds what a consumer that stops reading can
# have buffered for it; the connection's is larger so that streams do not starve
# each other.
STREAM_WINDOW: Final = 1024 * 1024
CONNECTION_WINDOW: Final = 32 * 1024 * 1024
KEEPALIVE_TIMEOUT: Final = 10.0  # as the grpc.aio channels' keepalive_timeout_ms
_USER_AGENT: Final = f"liftbridge-client-h2/{__version__}".encode()

Headers = list[tuple[bytes, bytes]]

_MAX_WINDOW: Final = 2**31 - 1
# Stream states that take DATA from us (h2 raises in the others).
_SENDING: Final = frozenset({StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE})
_PING_ACK_HEAD: Final = b"\x00\x00\x08\x06\x01\x00\x00\x00\x00"  # length 8, PING, ACK, stream 0


class StreamHandler(Protocol):
    """What a call does with the events of its stream (called on the event loop)."""

    def on_headers(self, headers: Headers, end: bool) -> None: ...
    def on_data(self, data: bytes, flow_controlled: int) -> None: ...
    def on_trailers(self, headers: Headers) -> None: ...
    def on_end(self) -> None: ...
    def on_failed(self, error: H2RpcError) -> None: ...
    def on_window(self) -> None: ...


class _Batch:
    """The fast-path payloads of one stream in one received chunk."""

    __slots__ = ("entry", "flow", "parts")

    def __init__(self, entry: tuple[StreamHandler, H2Stream], payload: bytes, flow: int) -> None:
        self.entry = entry
        self.parts = [payload]
        self.flow = flow


# The fast path reads and writes h2 internals (h2 4.1 to 4.4 have them alike): checked once
# per connection, and for the first stream of each connection, else h2 does everything.
_fallback_logged = False


def _no_fast_path(address: str, why: str) -> None:
    global _fallback_logged  # noqa: PLW0603 - one DEBUG record per process, not per connection
    if not _fallback_logged:
        _fallback_logged = True
        log.debug(
            "h2 %s: %s; HTTP/2 to %s (and later connections) goes through h2's public API only",
            getattr(h2, "__version__", "?"),
            why,
            address,
        )


def _connection_internals(h2c: h2.connection.H2Connection) -> str | None:
    """What the fast path needs of h2's connection object and lacks; None: all there."""
    if not isinstance(getattr(h2c, "_data_to_send", None), bytearray):
        return "H2Connection._data_to_send is not a bytearray"
    manager = getattr(h2c, "_inbound_flow_control_window_manager", None)
    if not callable(getattr(manager, "window_consumed", None)):
        return "H2Connection has no inbound window manager with window_consumed()"
    if not isinstance(
        getattr(getattr(h2c, "incoming_buffer", None), "_headers_buffer", None), list
    ):
        return "H2Connection.incoming_buffer has no _headers_buffer list"
    if not isinstance(getattr(h2c, "streams", None), dict):
        return "H2Connection.streams is not a dict"
    for name in ("outbound_flow_control_window", "max_inbound_frame_size"):
        if type(getattr(h2c, name, None)) is not int:
            return f"H2Connection.{name} is not an int"
    return None


def _stream_internals(stream: object) -> str | None:
    """What the fast path needs of h2's stream object and lacks; None: all there."""
    manager = getattr(stream, "_inbound_window_manager", None)
    if not callable(getattr(manager, "window_consumed", None)):
        return "H2Stream has no _inbound_window_manager with window_consumed()"
    if not isinstance(getattr(getattr(stream, "state_machine", None), "state", None), StreamState):
        return "H2Stream.state_machine.state is not a StreamState"
    if type(getattr(stream, "outbound_flow_control_window", None)) is not int:
        return "H2Stream.outbound_flow_control_window is not an int"
    return None


def _headers(raw: object) -> Headers:
    """h2's headers (bytes, as configured) as a list of byte pairs."""
    return [(bytes(k), bytes(v)) for k, v in raw] if isinstance(raw, list) else []


# What the socket is read into: asyncio's plain protocols get a new ``recv(256 KiB)``
# for every read, which CPython allocates in full and glibc serves with mmap (8 us a
# read, against under 1 us here); a buffered one reads into this, and each read is
# copied out at its own size.
_READ_BUFFER: Final = 64 * 1024


class Connection(asyncio.BufferedProtocol):
    """An HTTP/2 client connection carrying gRPC streams."""

    def __init__(
        self,
        address: str,
        authority: str,
        scheme: str,
        keepalive: float | None,
        *,
        fast_data: bool = True,
    ) -> None:
        self.address = address
        self._authority = authority.encode()
        self._scheme = scheme.encode()
        self._keepalive = keepalive
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config=config)
        self._transport: asyncio.Transport | None = None
        # Set once connection_made completed: asyncio only logs an exception raised there,
        # and the pool must not hand out a connection that never spoke HTTP/2.
        self.made = False
        self._streams: dict[int, StreamHandler] = {}
        self._loop = asyncio.get_running_loop()
        self._flush_pending = False
        self._pumps: list[Callable[[], None]] = []  # run by the next write-out (_flush)
        self._pumping = False
        self._closed = False  # the socket is gone (or going)
        self._draining = False  # GOAWAY received or sent: no new streams
        self._ping_handle: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self.lost: asyncio.Future[None] = self._loop.create_future()
        # The fast DATA path (see data_received): streams whose response headers came,
        # with h2's stream object (its receive window is kept in step), and the tail of
        # a frame cut by the end of a chunk.
        self._fast_data = fast_data
        if fast_data:
            why = _connection_internals(self._h2)
            if why is not None:
                _no_fast_path(address, why)
                self._fast_data = False
        self._stream_checked = False  # the first stream's internals (see _fast_path_for)
        self._fast: dict[int, tuple[StreamHandler, H2Stream]] = {}
        self._rest = b""
        self._mid_headers = False
        self._read_into = memoryview(bytearray(_READ_BUFFER))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "draining" if self._draining else "open"
        return f"<h2 Connection {self.address} {state} streams={len(self._streams)}>"

    @property
    def usable(self) -> bool:
        """New streams may start on it."""
        return not self._closed and not self._draining

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self._transport = cast(asyncio.Transport, transport)
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
        self.made = True

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_into

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._read_into[:nbytes]))

    def data_received(self, data: bytes) -> None:
        """Route each complete frame: hot DATA frames straight to their call, the rest to h2.

        h2 parses every frame into objects and events (with a ``repr`` of each for its
        trace log), which costs more than the whole rest of a streamed message. A DATA
        frame without END_STREAM, on a stream whose response headers came, changes no
        HTTP/2 state but the receive windows: it is cut here, its windows are consumed
        in h2's own window managers (so h2's WINDOW_UPDATEs stay right), and the
        payloads of one chunk reach each call in one piece. The server's PINGs are
        answered here, and its WINDOW_UPDATEs added to h2's send windows here (grpc-go
        sends one of each per burst it receives: one-at-a-time publishing paid h2's
        parsing of both per publish). Every other frame, and any frame h2 must judge
        (END_STREAM, bad padding or sizes, an unknown stream, a window overflow, a
        header block waiting for its CONTINUATION), goes to h2 in order.
        tests/unit/test_h2_fastpath.py proves both paths deliver the same messages and
        leave the same windows and answers for any byte stream cut anywhere.
        """
        if self._rest:
            data = self._rest + data
            self._rest = b""
        if not self._fast_data or self._draining or self._mid_headers:
            self._feed_h2(data)
            self._schedule_flush()
            return
        size = len(data)
        fast = self._fast
        max_frame = self._h2.max_inbound_frame_size
        pending: dict[int, _Batch] = {}  # stream id -> its payloads in this chunk
        i = 0
        slow = 0  # [slow, i) are frames for h2, not yet given to it
        # The type, flags and stream id of the last frame taken here, when it had no flags,
        # and its batch: a server sends each message in a DATA frame of its own, so the
        # next frame usually continues the same batch (one comparison instead of parsing).
        last = b""
        batch: _Batch | None = None
        windowed: set[StreamHandler] | None = None  # calls whose send window grew
        while size - i >= 9:
            length = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2]
            end = i + 9 + length
            if end > size:
                break
            if last and batch is not None and data.startswith(last, i + 3) and length <= max_frame:
                payload, flow, i = data_run(data, i, last, max_frame)  # this frame and the
                batch.parts.append(payload)  # like ones after it: a read holds hundreds
                batch.flow += flow
                slow = i
                continue
            entry = None
            kind = data[i + 3]
            if kind == 0 and not data[i + 4] & 1 and length <= max_frame:
                sid = int.from_bytes(data[i + 5 : i + 9], "big") & 0x7FFFFFFF
                entry = fast.get(sid)
                if entry is not None and slow < i:
                    self._deliver(pending)
                    self._feed_h2(data[slow:i])  # may end the stream or the fast path
                    slow = i
                    entry = fast.get(sid) if not self._slow_now() else None
            elif (kind == 6 and length == 8) or (kind == 8 and length == 4):
                if slow < i:  # what came before is h2's first: it may close the connection
                    self._deliver(pending)
                    self._feed_h2(data[slow:i])
                    slow = i
                if not self._slow_now():
                    grew = self._control_frame(data, i, kind)
                    if grew is not None:
                        if grew:
                            if windowed is None:
                                windowed = set()
                            windowed.update(grew)
                        i = slow = end
                        last = b""
                        continue
            if entry is None:
                i = end
                last = b""  # a frame for h2 now lies between
                continue
            if data[i + 4] & 8:  # PADDED: the first payload byte is the padding length
                pad = data[i + 9] if length else 256
                if pad >= length:
                    i = end  # invalid padding: h2 raises the protocol error
                    continue
                payload = data[i + 10 : end - pad]
            else:
                payload = data[i + 9 : end]
            batch = pending.get(sid)
            if batch is None:
                batch = pending[sid] = _Batch(entry, payload, length)
            else:
                batch.parts.append(payload)
                batch.flow += length
            last = b"" if data[i + 4] else data[i + 3 : i + 9]
            i = slow = end
        self._deliver(pending)
        if slow < i:
            self._feed_h2(data[slow:i])
        if i < size:
            self._rest = data[i:]
        if windowed:
            streams = self._streams
            for handler in windowed:
                if handler in streams.values():
                    handler.on_window()
        # Written with what the calls woken by this chunk send next (a one-at-a-time
        # publisher's next request leaves with the answer to the server's PING).
        self._schedule_flush()

    def _slow_now(self) -> bool:
        """h2 must see every frame from here: the connection is closing, or a header
        block waits for its CONTINUATION (anything else then is h2's protocol error)."""
        return self._draining or self._mid_headers

    def _control_frame(self, data: bytes, i: int, kind: int) -> Sequence[StreamHandler] | None:
        """Handle the PING or WINDOW_UPDATE frame at ``i`` as h2 would; None: give it to h2.

        Returns the calls whose send window grew (none for a PING).
        """
        flags = data[i + 4]
        sid = int.from_bytes(data[i + 5 : i + 9], "big") & 0x7FFFFFFF
        h2c = self._h2
        if kind == 6:
            if flags & 1 or sid:  # a PING ACK (our keepalive's answer) or a bad PING
                return None
            # The answer, as h2 queues it: same payload, the ACK flag set.
            h2c._data_to_send += _PING_ACK_HEAD + data[i + 9 : i + 17]
            return ()
        increment = int.from_bytes(data[i + 9 : i + 13], "big") & 0x7FFFFFFF
        if not increment:
            return None  # a protocol error: h2 says which
        if not sid:
            window = h2c.outbound_flow_control_window + increment
            if window > _MAX_WINDOW:
                return None
            h2c.outbound_flow_control_window = window
            return list(self._streams.values())
        entry = self._fast.get(sid)
        if entry is None or entry[1].state_machine.state not in _SENDING:
            # A stream h2 knows more about (closed, not answered yet), or one we no longer
            # send on (h2 then ignores its window).
            return None
        handler, stream = entry
        window = stream.outbound_flow_control_window + increment
        if window > _MAX_WINDOW:
            return None  # h2 resets the stream
        stream.outbound_flow_control_window = window
        return (handler,)

    def _deliver(self, pending: dict[int, _Batch]) -> None:
        """Hand fast-path payloads to their calls, consuming h2's receive windows first."""
        if not pending:
            return
        conn_window = self._h2._inbound_flow_control_window_manager
        for sid, batch in pending.items():
            entry, parts, flow = batch.entry, batch.parts, batch.flow
            handler, stream = entry
            try:
                conn_window.window_consumed(flow)
                stream._inbound_window_manager.window_consumed(flow)
            except h2.exceptions.FlowControlError as exc:
                self._abort(H2RpcError(StatusCode.INTERNAL, f"HTTP/2 flow control error: {exc}"))
                break
            if self._fast.get(sid) is entry:
                handler.on_data(parts[0] if len(parts) == 1 else b"".join(parts), flow)
            else:  # the call went away meanwhile: give the bytes back, as h2 does
                self.ack(sid, flow)
        pending.clear()

    def _feed_h2(self, data: bytes) -> None:
        """Give complete frames (or anything, off the fast path) to h2 and route its events."""
        try:
            events = self._h2.receive_data(data)
        except Exception as exc:  # h2's ProtocolError, or its parsers' errors on garbage
            self._abort(H2RpcError(StatusCode.INTERNAL, f"HTTP/2 protocol error: {exc!r}"))
            return
        if self._fast_data:  # off the fast path, h2 judges every frame anyway
            self._mid_headers = bool(self._h2.incoming_buffer._headers_buffer)
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
                    ended = ev.stream_ended is not None
                    handler.on_headers(_headers(ev.headers), ended)
                    if not ended and ev.stream_id in streams and self._fast_path_for(ev.stream_id):
                        self._fast[ev.stream_id] = (handler, self._h2.streams[ev.stream_id])
            elif isinstance(ev, h2.events.TrailersReceived):
                handler = streams.get(ev.stream_id)
                if handler is not None:
                    handler.on_trailers(_headers(ev.headers))
            elif isinstance(ev, h2.events.StreamEnded):
                self._fast.pop(ev.stream_id, None)
                handler = streams.pop(ev.stream_id, None)
                if handler is not None:
                    handler.on_end()
            elif isinstance(ev, h2.events.StreamReset):
                self._fast.pop(ev.stream_id, None)
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

    def _fast_path_for(self, sid: int) -> bool:
        """Whether DATA of ``sid`` may take the fast path (its stream object checked once)."""
        if not self._fast_data:
            return False
        if not self._stream_checked:
            stream = self._h2.streams.get(sid)
            if stream is None:  # h2 dropped it (closed): the next stream is checked
                return False
            self._stream_checked = True
            why = _stream_internals(stream)
            if why is not None:
                _no_fast_path(self.address, why)
                self._fast_data = False
                self._fast.clear()
                return False
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        why = f"connection to {self.address} lost"
        self._fail_all(H2RpcError(StatusCode.UNAVAILABLE, f"{why} ({exc})" if exc else why))
        self._closed = True
        self._stop_keepalive()
        if not self.lost.done():
            self.lost.set_result(None)

    # ------------------------------------------------------------ streams

    def start_stream(
        self,
        handler: StreamHandler,
        path: bytes,
        timeout: float | None,
        window: int = STREAM_WINDOW,
    ) -> int:
        """Send a call's request headers; its events go to ``handler`` from now on.

        A ``window`` larger than `STREAM_WINDOW` opens this stream's receive window that
        far (a WINDOW_UPDATE in the same write as the headers): h2 then hands back half
        of it at a time, so a long read costs fewer flow-control writes."""
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
        if window > STREAM_WINDOW:
            h2c.increment_flow_control_window(window - STREAM_WINDOW, stream_id=sid)
        self._streams[sid] = handler
        self._arm_keepalive()
        self._schedule_flush()
        return sid

    def room(self, sid: int) -> int:
        """How many bytes of ``sid`` the send windows take now (0 once it ended)."""
        if self._closed or sid not in self._streams:
            return 0
        try:
            return self._h2.local_flow_control_window(sid)
        except h2.exceptions.NoSuchStreamError:  # and StreamClosedError
            return 0

    def send(self, sid: int, data: bytes | memoryview, end: bool) -> int:
        """Send what the flow-control windows allow of ``data``; how many bytes went.

        ``end`` half-closes the stream once all of ``data`` is sent.
        """
        if self._closed or sid not in self._streams:
            return 0
        h2c = self._h2
        size = len(data)
        sent = 0
        if (
            not end
            and self._fast_data
            and not self._draining
            and (self._stream_checked or self._fast_path_for(sid))
        ):
            stream = h2c.streams.get(sid)
            if stream is not None and stream.state_machine.state in _SENDING:
                return self._send_fast(stream, data, size)
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
            self._write_now()
            return sent
        self._write_now()
        return sent

    def _send_fast(self, stream: H2Stream, data: bytes | memoryview, size: int) -> int:
        """`send` without END_STREAM on an open stream: the DATA frames h2 would write
        (no padding), with its send windows kept, without building frame objects
        (h2's send_data cost ~20 us per call, most of a one-at-a-time publish's)."""
        h2c = self._h2
        room = min(h2c.outbound_flow_control_window, stream.outbound_flow_control_window, size)
        sent = 0
        if room > 0:
            frame_max = h2c.max_outbound_frame_size
            tail = b"\x00\x00" + stream.stream_id.to_bytes(4, "big")  # DATA, no flags, the id
            out = h2c._data_to_send
            view = memoryview(data) if room < size or room > frame_max else data
            while sent < room:
                n = min(frame_max, room - sent)
                out += n.to_bytes(3, "big") + tail
                out += view[sent : sent + n]
                sent += n
            h2c.outbound_flow_control_window -= sent
            stream.outbound_flow_control_window -= sent
        self._write_now()
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
        self._fast.pop(sid, None)
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

    def schedule_pump(self, pump: Callable[[], None]) -> None:
        """Have ``pump`` (a call's sender) run at the next write-out, just before it, so
        that what it sends leaves in the same write as everything else pending."""
        self._pumps.append(pump)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _write_now(self) -> None:
        """Write out now, unless a write-out is running the pumps (it writes after them)."""
        if not self._pumping:
            self._flush()

    def _flush(self) -> None:
        self._flush_pending = False
        if self._pumps:
            pumps, self._pumps = self._pumps, []
            self._pumping = True
            try:
                for pump in pumps:
                    try:
                        pump()
                    except Exception:  # a bug in one call's sender: the others still send
                        log.exception("sending on the HTTP/2 connection to %s failed", self.address)
            finally:
                self._pumping = False
        data = self._h2.data_to_send()
        transport = self._transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)

    def _fail_all(self, error: H2RpcError) -> None:
        streams = list(self._streams.values())
        self._streams.clear()
        self._fast.clear()
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
        self._fast.clear()  # h2 judges every frame from now on
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
