"""gRPC calls on HTTP/2 streams, and the connections they use.

In order: the calls; the TCP options of a connection; the pool of connections.

Calls
-----

gRPC calls on one HTTP/2 stream: server streaming and bidirectional.

A call parses its DATA into messages as they arrive (`MessageSplitter`) and keeps
them until the application reads them. Flow control is paced by the reader: the
bytes of a message are handed back to the server's window (WINDOW_UPDATE) only
when the application takes the message, so a consumer that stops reading stops
the server after one window (plus at most one message being assembled). Reads
are cancellation-safe: a cancelled ``read()`` loses nothing.

``cancel()`` sends RST_STREAM CANCEL. Failures are `H2RpcError` with the status
grpc.aio would report; messages that arrived before a server-side failure are
still read first.

Socket options
--------------

Socket options of the client's own TCP connections to brokers.

A subscription only receives: when packets to and from its broker are dropped (a firewall,
a dead link, a host gone without a reset), nothing tells it, and HTTP/2 pings cannot be
sent often enough to tell it either, because the server (grpc-go's enforcement policy)
closes a connection that pings more than once per 5 minutes while it sends no data. The
kernel can: keepalive probes are answered by the peer's kernel, never counted as pings,
and ``TCP_USER_TIMEOUT`` drops a connection whose sent bytes stay unacknowledged. A
paused broker process still has its kernel answer, so only a cut network trips them.

Pool
----

One h2 connection per broker address, opened on first use (TLS with ALPN "h2").
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Generic, Protocol, TypeVar

from google.protobuf.message import DecodeError
from grpc import StatusCode

from liftbridge_client import errors
from liftbridge_client._transport.h2.connection import STREAM_WINDOW, Connection, Headers
from liftbridge_client._transport.h2.framing import (
    DEFAULT_MAX_MESSAGE,
    H2RpcError,
    MessageSplitter,
    encode_message,
    status_error,
)
from liftbridge_client.options import ClientOptions, TLSConfig

__all__ = [
    "SEND_HIGH_WATER",
    "BidiStreamCall",
    "H2Pool",
    "ServerStreamCall",
    "detect_dead_peer",
    "tls_context",
]

log = logging.getLogger(__name__)

# ---- Calls -----------------------------------------------------------------------------

T = TypeVar("T")
U = TypeVar("U")
Connect = Callable[[], Awaitable[Connection]]
Decode = Callable[[bytes], T]

# Window bytes handed back in batches of at least 1/16 of the call's receive window (or
# when the reader has caught up), so a window update is not computed per message; complete
# messages held beyond the window stop it from reopening.
_ACK_SHARE: Final = 16
# A writer waits while more than this is queued and not yet sent (send window full).
SEND_HIGH_WATER: Final = 1024 * 1024


class _Call(Generic[T]):
    """The receiving half, shared by both kinds of call."""

    def __init__(
        self,
        connect: Connect,
        path: str,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        max_message: int = DEFAULT_MAX_MESSAGE,
        sink: Callable[[list[bytes]], None] | None = None,
        window: int = STREAM_WINDOW,
    ) -> None:
        self._connect = connect
        self._window = max(window, STREAM_WINDOW)  # the receive window (see start_stream)
        self._ack_batch = self._window // _ACK_SHARE
        # Takes the messages of each received chunk as they arrive, in order, instead of
        # the reader (which then only learns how the call ended): the window goes back at
        # once.
        self._sink = sink
        self._path = path.encode()
        self._decode = decode
        self._timeout = timeout
        self._splitter = MessageSplitter(max_message)
        self._inbox: deque[bytes] = deque()
        self._held = 0  # bytes (with their 5-byte heads) of the messages in _inbox
        self._unacked = 0  # received bytes not yet handed back to the window
        self._conn: Connection | None = None
        self._sid = 0
        self._trailers: Headers = []
        self._error: H2RpcError | None = None
        self._ended = False  # the server ended the call with an OK status
        self._waiter: asyncio.Future[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._starting: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        state = "failed" if self._error else "ended" if self._ended else "open"
        return f"<{type(self).__name__} {self._path.decode()} stream={self._sid} {state}>"

    def done(self) -> bool:
        """The call ended (OK or not), whether or not everything was read."""
        return self._error is not None or self._ended

    def cancelled(self) -> bool:
        """The client cancelled the call."""
        return self._error is not None and self._error.code() is StatusCode.CANCELLED

    async def code(self) -> StatusCode | None:
        """The call's status code once it ended (None while it runs), like grpc.aio's."""
        if self._ended:
            return StatusCode.OK
        return self._error.code() if self._error is not None else None

    @property
    def waiting(self) -> bool:
        """A reader is waiting for the next message."""
        return self._waiter is not None

    # ------------------------------------------------------------ starting

    async def _ensure_started(self) -> None:
        if self._conn is not None or self._error is not None:
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
            # Its failure is the call's error (raised by reads); mark it seen even when the
            # reader that started it was cancelled meanwhile.
            self._starting.add_done_callback(_seen)
        # Shielded: a reader cancelled while the connection opens leaves it opening.
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        try:
            conn = await self._connect()
        except H2RpcError as exc:
            self._fail(exc)
            raise
        if self._error is not None:  # cancelled meanwhile
            return
        self._sid = conn.start_stream(self, self._path, self._timeout, self._window)
        self._conn = conn
        if self._timeout is not None:
            self._deadline = asyncio.get_running_loop().call_later(self._timeout, self._expire)
        self._started()

    def _started(self) -> None:
        """Send what must go right after the headers."""

    # ------------------------------------------------------------ StreamHandler

    def on_headers(self, headers: Headers, end: bool) -> None:
        if end:  # trailers-only: the status is in these headers
            self._trailers = headers
            return
        for name, value in headers:
            if name == b":status" and value != b"200":
                self._fail(status_error(headers) or H2RpcError(StatusCode.UNKNOWN, ""), True)
                return
            if name == b"content-type" and not value.startswith(b"application/grpc"):
                self._fail(
                    H2RpcError(StatusCode.UNKNOWN, f"unexpected content-type {value!r}"), True
                )
                return

    def on_data(self, data: bytes, flow_controlled: int) -> None:
        self._unacked += flow_controlled
        if self._error is None:
            try:
                messages = self._splitter.feed(data)
            except H2RpcError as exc:
                self._fail(exc, True)
                return
            sink = self._sink
            if messages and sink is not None:
                try:
                    sink(messages)
                except H2RpcError as exc:  # the sink refused a message (cannot parse it)
                    self._fail(exc, True)
                    return
                except Exception as exc:  # a bug in the sink: end this call, not the connection
                    log.exception("%s: handling a received message failed", self)
                    self._fail(H2RpcError(StatusCode.INTERNAL, f"handling failed: {exc!r}"), True)
                    return
            elif messages:
                self._inbox.extend(messages)
                self._held += sum(map(len, messages)) + 5 * len(messages)
                waiter = self._waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
        self._settle()

    def on_trailers(self, headers: Headers) -> None:
        self._trailers = headers

    def on_end(self) -> None:
        if self._error is not None:
            return
        error = status_error(self._trailers)
        if error is not None:
            self._fail(error)
            return
        self._ended = True
        self._finished()

    def on_failed(self, error: H2RpcError) -> None:
        self._fail(error)

    def on_window(self) -> None:
        """The send window grew (only writers care)."""

    # ------------------------------------------------------------ receiving

    def _settle(self) -> None:
        """Hand back to the window what no held message accounts for (partial, padding)."""
        excess = self._unacked - self._held
        if (
            excess > 0
            and (excess >= self._ack_batch or not self._inbox)
            and self._held <= self._window
        ):
            self._unacked -= excess
            conn = self._conn
            if conn is not None:
                conn.ack(self._sid, excess)

    def _take(self) -> bytes:
        raw = self._inbox.popleft()
        self._held -= len(raw) + 5
        if self._unacked - self._held >= self._ack_batch or not self._inbox:
            self._settle()
        return raw

    async def _read_raw(self) -> bytes | None:
        """The next message's bytes; None when the call ended OK."""
        while True:
            if self._inbox:
                return self._take()
            if self._error is not None:
                raise self._error
            if self._ended:
                return None
            if self._conn is None:
                await self._ensure_started()
                continue
            await self._arrival()

    async def wait_ready(self) -> bool:
        """Wait until a message is here (True), without taking it; False at once when the
        call ended, failed or did not start (the next read says which)."""
        while not self._inbox:
            if self._error is not None or self._ended or self._conn is None:
                return False
            await self._arrival()
        return True

    async def _arrival(self) -> None:
        """Until the next message or the call's end wakes the reader (`on_data`, the
        end's handling)."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def read_nowait(self) -> T | None:
        """The next message if one is here already (None otherwise); no suspension."""
        return self.read_nowait_as(self._decode)

    def read_nowait_as(self, decode: Callable[[bytes], U]) -> U | None:
        """`read_nowait` with ``decode`` in place of the call's own (the same message, made
        into another type); a `DecodeError` from it fails the call as there."""
        if not self._inbox:
            return None
        raw = self._take()
        try:
            return decode(raw)
        except DecodeError as exc:
            error = H2RpcError(StatusCode.INTERNAL, f"failed to parse a response message: {exc}")
            self._fail(error, True)
            raise error from exc

    def read_ready(self, limit: int) -> list[T]:
        """Up to ``limit`` messages that are here already (no suspension), decoded; their
        window goes back once for all of them, not per message. A message that fails to
        decode fails the call: the ones before it are returned, the failure is raised by
        the next read (at once if it was the first)."""
        return self.decode_all(self.take_ready(limit))

    def take_ready(self, limit: int) -> list[bytes]:
        """`read_ready`'s messages as their wire bytes, not decoded (`decode_all` does
        that later, or the caller reads them itself)."""
        inbox = self._inbox
        n = min(limit, len(inbox))
        if n <= 0:
            return []
        if n == len(inbox):
            raws = list(inbox)
            inbox.clear()
        else:
            raws = [inbox.popleft() for _ in range(n)]
        self._held -= sum(map(len, raws)) + 5 * n
        self._settle()
        return raws

    def decode_all(self, raws: list[bytes]) -> list[T]:
        """Messages from `take_ready` decoded, failing the call as `read_ready` does."""
        if not raws:
            return []
        decode = self._decode
        try:
            return [decode(raw) for raw in raws]
        except DecodeError as exc:
            error = H2RpcError(StatusCode.INTERNAL, f"failed to parse a response message: {exc}")
            out: list[T] = []
            for raw in raws:  # the good ones before it (rare: only after a decode failure)
                try:
                    out.append(decode(raw))
                except DecodeError:
                    break
            self._fail(error, True)
            if not out:
                raise error from exc
            return out

    async def read(self) -> T | None:
        """The next message; None when the call ended with an OK status."""
        inbox = self._inbox
        if inbox:  # the hot path: a message is here already
            raw = self._take()
        else:
            got = await self._read_raw()
            if got is None:
                return None
            raw = got
        try:
            return self._decode(raw)
        except DecodeError as exc:
            error = H2RpcError(StatusCode.INTERNAL, f"failed to parse a response message: {exc}")
            self._fail(error, True)
            raise error from exc

    # ------------------------------------------------------------ ending

    def cancel(self) -> bool:
        """Cancel the call (RST_STREAM CANCEL); False if it had already ended."""
        if self.done():
            self._inbox.clear()
            self._release_all()
            return False
        self._fail(H2RpcError(StatusCode.CANCELLED, "cancelled by the client"), True)
        return True

    def _expire(self) -> None:
        self._deadline = None
        if not self.done():
            self._fail(H2RpcError(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), True)

    def _fail(self, error: H2RpcError, reset: bool = False) -> None:
        if self.done():
            return
        self._error = error
        if error.code() is StatusCode.CANCELLED or reset:
            self._inbox.clear()  # nobody reads a call the client gave up
        conn = self._conn
        if reset and conn is not None:
            conn.reset(self._sid)
        self._release_all()
        self._finished()

    def _release_all(self) -> None:
        """Give back the window of everything dropped or still unread after the end."""
        self._held = sum(map(len, self._inbox)) + 5 * len(self._inbox)
        excess = self._unacked - self._held
        if excess > 0:
            self._unacked -= excess
            if self._conn is not None:
                self._conn.ack(self._sid, excess)

    def _finished(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _seen(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


class ServerStreamCall(_Call[T]):
    """One request, a stream of responses (Subscribe); starts on the first ``read()``."""

    def __init__(
        self,
        connect: Connect,
        path: str,
        request: bytes,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        max_message: int = DEFAULT_MAX_MESSAGE,
        window: int = STREAM_WINDOW,
    ) -> None:
        super().__init__(
            connect, path, decode, timeout=timeout, max_message=max_message, window=window
        )
        self._request = encode_message(request)

    def _started(self) -> None:
        assert self._conn is not None
        # A request fits the initial window (64 KiB) unless huge; then it waits for room.
        sent = self._conn.send(self._sid, self._request, True)
        self._request = self._request[sent:]

    def on_window(self) -> None:
        if self._request and self._conn is not None and not self.done():
            sent = self._conn.send(self._sid, self._request, True)
            self._request = self._request[sent:]


class BidiStreamCall(_Call[T]):
    """A stream of requests and one of responses (PublishAsync).

    ``write()`` queues without awaiting; everything queued in one event-loop
    iteration leaves in one pass, as far as the send windows allow (the rest
    waits for WINDOW_UPDATE). ``drain()`` waits while too much is queued. With a
    ``sink``, responses go to it as they arrive, and ``read()`` only says how
    the call ended.
    """

    def __init__(
        self,
        connect: Connect,
        path: str,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        max_message: int = DEFAULT_MAX_MESSAGE,
        sink: Callable[[list[bytes]], None] | None = None,
        send_high_water: int = SEND_HIGH_WATER,
    ) -> None:
        super().__init__(connect, path, decode, timeout=timeout, max_message=max_message, sink=sink)
        self._high_water = send_high_water
        self._out: deque[bytes] = deque()  # whole messages, no byte of them sent yet
        self._out_size = 0
        self._backlog = b""  # the rest of a message the send window cut
        self._half_closed = False
        self._end_sent = False
        self._pump_pending = False
        self._room: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Open the stream (connects if needed); writes may be queued before."""
        await self._ensure_started()
        if self._error is not None:
            raise self._error

    @property
    def queued(self) -> int:
        """Bytes written but not yet sent (the send window is full or the loop did not run)."""
        return self._out_size + len(self._backlog)

    def try_write(self, message: bytes) -> bool:
        """`write_message` if the call has not ended and has room (at most the high-water
        mark queued), else False: a writer that must not wait takes another way. Before
        the call is connected the message waits in it and leaves once it is."""
        if (
            self._error is not None
            or self._ended
            or self._half_closed
            or self._out_size + len(self._backlog) > self._high_water
        ):
            return False
        self._queue(message)
        return True

    def write(self, payload: bytes) -> None:
        """Queue one message; `H2RpcError` if the call has ended."""
        self.write_message(encode_message(payload))

    def write_message(self, message: bytes) -> None:
        """`write` of a gRPC message framed already (its 5-byte head included)."""
        if self._error is not None:
            raise self._error
        if self._ended or self._half_closed:
            raise H2RpcError(StatusCode.INTERNAL, "write after the call was half-closed")
        self._queue(message)

    def _queue(self, message: bytes) -> None:
        self._out.append(message)
        self._out_size += len(message)
        if not self._pump_pending:
            self._schedule_pump()

    def take_unsent(self) -> list[bytes]:
        """Take back the messages written but not yet handed to the connection (no byte
        of them left), oldest first; they will not be sent."""
        out = list(self._out)
        self._out.clear()
        self._out_size = 0
        return out

    def push(self) -> None:
        """Send what is queued now, as far as the windows allow (no wait for the next
        loop iteration: a writer calls it once it has queued all it had)."""
        if self._conn is not None:
            self._pump()

    def done_writing(self) -> None:
        """Half-close once everything queued is sent."""
        self._half_closed = True
        self._schedule_pump()

    async def drain(self) -> None:
        """Wait while more than the high-water mark is queued; raise if the call failed."""
        while self.queued > self._high_water:
            if self._error is not None:
                raise self._error
            room = self._room = asyncio.get_running_loop().create_future()
            try:
                await room
            finally:
                self._room = None
        if self._error is not None:
            raise self._error

    def _started(self) -> None:
        self._schedule_pump()

    def on_window(self) -> None:
        self._pump()

    def _schedule_pump(self) -> None:
        if not self._pump_pending and self._conn is not None:
            self._pump_pending = True
            self._conn.schedule_pump(self._pump)

    def _pump(self) -> None:
        self._pump_pending = False
        conn = self._conn
        if conn is None or self.done():
            return
        sid, out = self._sid, self._out
        if out or self._backlog:
            # Only what the send windows take now is joined and sent; the rest stays as
            # it is (joining everything queued on each pass copied up to the high-water
            # mark per pass while the server's window was the limit).
            take = conn.room(sid)
            if take > 0:
                parts = []
                backlog = self._backlog
                if backlog:
                    parts.append(backlog[:take])
                    self._backlog = backlog[take:]
                    take -= len(parts[0])
                if take >= self._out_size:  # the common case: everything fits
                    parts.extend(out)
                    out.clear()
                    self._out_size = 0
                else:
                    while take > 0:
                        message = out.popleft()
                        self._out_size -= len(message)
                        if len(message) > take:
                            parts.append(message[:take])
                            self._backlog = message[take:]
                            break
                        parts.append(message)
                        take -= len(message)
                data = b"".join(parts)
                last = self._half_closed and not self._backlog and not out
                sent = conn.send(sid, data, last)
                if sent < len(data):  # the windows shrank meanwhile (not expected)
                    self._backlog = data[sent:] + self._backlog
                elif last:
                    self._end_sent = True
        elif self._half_closed and not self._end_sent:
            conn.send(sid, b"", True)
            self._end_sent = True
        room = self._room
        if room is not None and not room.done() and self.queued <= self._high_water:
            room.set_result(None)

    def _finished(self) -> None:
        super()._finished()
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)


# ---- Socket options --------------------------------------------------------------------


class _Sock(Protocol):
    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...


def detect_dead_peer(sock: _Sock | None, seconds: float | None) -> bool:
    """Make the kernel drop the connection of ``sock`` about ``seconds`` after its peer
    stopped answering (idle or not). False where the platform lacks the options (the
    connection then relies on HTTP/2 keepalive pings alone) or when ``seconds`` is None."""
    if sock is None or seconds is None:
        return False
    idle = max(1, int(seconds / 2))
    interval = max(1, int(seconds / 6))
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    # Linux names; macOS has TCP_KEEPALIVE for the idle time, Windows none of these.
    for name, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPALIVE", idle),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", max(1000, int(seconds * 1000))),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            options.append((socket.IPPROTO_TCP, option, value))
    try:
        for level, option, value in options:
            sock.setsockopt(level, option, value)
    except OSError as exc:  # e.g. a platform that names an option but refuses it
        log.debug("could not set TCP keepalive options: %s", exc)
        return False
    return len(options) > 1


# ---- Pool ------------------------------------------------------------------------------


def tls_context(tls: TLSConfig) -> ssl.SSLContext:
    """The client TLS context for a `TLSConfig`: its CA (or the system's), its
    certificate for mutual TLS, and ALPN "h2" (gRPC needs HTTP/2)."""
    ctx = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    if tls.cert_file is not None and tls.key_file is not None:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    ctx.set_alpn_protocols(["h2"])
    return ctx


class H2Pool:
    """Connections for the h2 stream transport, shared by all calls to a broker."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._conns: dict[str, Connection] = {}
        self._opening: dict[str, asyncio.Future[Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    def server_stream(
        self,
        address: str,
        path: str,
        request: bytes,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        window: int = STREAM_WINDOW,
    ) -> ServerStreamCall[T]:
        """A server-streaming call to ``address``; it connects and starts on its first read.
        ``window``: its receive window (at least `STREAM_WINDOW`; see `Connection.start_stream`)."""
        self._check_open()
        return ServerStreamCall(
            lambda: self.connection(address), path, request, decode, timeout=timeout, window=window
        )

    def bidi_stream(
        self,
        address: str,
        path: str,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        sink: Callable[[list[bytes]], None] | None = None,
        send_high_water: int = SEND_HIGH_WATER,
    ) -> BidiStreamCall[T]:
        """A bidirectional call to ``address``; ``await call.start()`` opens it."""
        self._check_open()
        return BidiStreamCall(
            lambda: self.connection(address),
            path,
            decode,
            timeout=timeout,
            sink=sink,
            send_high_water=send_high_water,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ConnectionClosedError("client is closed")

    async def connection(self, address: str) -> Connection:
        """The usable connection to ``address``, opened if needed (concurrent callers share it)."""
        conn = self._conns.get(address)
        if conn is not None and conn.usable:
            return conn
        if self._closed:
            raise H2RpcError(StatusCode.UNAVAILABLE, "client is closed")
        opening = self._opening.get(address)
        if opening is None:
            opening = self._opening[address] = asyncio.ensure_future(self._open(address))
            opening.add_done_callback(lambda f: self._opened(address, f))
        return await asyncio.shield(opening)

    def _opened(self, address: str, fut: asyncio.Future[Connection]) -> None:
        if self._opening.get(address) is fut:
            del self._opening[address]
        if fut.cancelled() or fut.exception() is not None:
            return
        conn = fut.result()
        if self._closed:
            conn.close()
            return
        # A connection it replaces is draining (GOAWAY): it closes once its streams end.
        self._conns[address] = conn

    async def _open(self, address: str) -> Connection:
        options = self._options
        target = options.resolve(address)
        host, _, port_text = target.rpartition(":")
        host = host.strip("[]")
        tls = options.tls
        ssl_ctx: ssl.SSLContext | None = None
        server_hostname: str | None = None
        authority = target
        if tls is not None:
            if self._ssl is None:
                self._ssl = tls_context(tls)
            ssl_ctx = self._ssl
            server_hostname = tls.server_name or host
            if tls.server_name:
                authority = tls.server_name
        loop = asyncio.get_running_loop()

        def factory() -> Connection:
            scheme = "https" if ssl_ctx is not None else "http"
            return Connection(address, authority, scheme, options.keepalive_time)

        try:
            async with asyncio.timeout(options.connect_timeout):
                transport, conn = await loop.create_connection(
                    factory, host, int(port_text), ssl=ssl_ctx, server_hostname=server_hostname
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise H2RpcError(
                StatusCode.UNAVAILABLE,
                f"failed to connect to all addresses; {target}: {exc or type(exc).__name__}",
            ) from exc
        if not conn.made:  # connection_made raised (asyncio logged it): nothing was set up
            transport.close()
            raise H2RpcError(
                StatusCode.UNAVAILABLE, f"setting up HTTP/2 with {target} failed (see the log)"
            )
        if ssl_ctx is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            protocol = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
            if protocol != "h2":
                transport.close()
                raise H2RpcError(
                    StatusCode.UNAVAILABLE,
                    f"{target} did not agree to HTTP/2 over TLS (ALPN chose {protocol!r})",
                )
        detect_dead_peer(transport.get_extra_info("socket"), options.dead_peer_timeout)
        log.debug("h2 connection to %s (%s) open", address, target)
        return conn

    async def forget(self, address: str) -> None:
        """Close the connection to a broker that left the cluster."""
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for opening in list(self._opening.values()):
            opening.cancel()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                async with asyncio.timeout(self._options.close_timeout):
                    await conn.lost
            except TimeoutError:
                log.warning("%r did not close in time", conn)
