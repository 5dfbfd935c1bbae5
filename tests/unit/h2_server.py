"""A scripted HTTP/2 gRPC server for the h2 transport's unit tests (built on ``h2``).

Each request runs ``handler(stream)``; the handler answers with raw HTTP/2 moves -
headers, DATA (padded or not, cut anywhere), trailers, RST_STREAM, GOAWAY, closing
the socket - which a real gRPC server would not let a test choose. What the client
did is recorded: its requests, resets, pings and window updates. With ``hold`` it
hands back no send window until told (``ServerStream.release``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import h2.config
import h2.connection
import h2.events
from h2.errors import ErrorCodes

from liftbridge_client._transport.h2.framing import encode_message

Handler = Callable[["ServerStream"], Coroutine[object, object, None]]


@dataclass
class ServerStream:
    conn: ServerConnection
    stream_id: int
    headers: dict[bytes, bytes]
    body: bytearray = field(default_factory=bytearray)
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # the client half-closed
    reset_code: int | None = None
    window: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0  # DATA bytes sent
    held: int = 0  # received bytes not handed back to the client's send window (hold mode)

    def respond(self, end: bool = False, status: bytes = b"200") -> None:
        self.conn.h2.send_headers(
            self.stream_id,
            [(b":status", status), (b"content-type", b"application/grpc")],
            end_stream=end,
        )
        self.conn.flush()

    def data(self, raw: bytes, pad: int = 0) -> None:
        self.conn.h2.send_data(self.stream_id, raw, pad_length=pad or None)
        self.sent += len(raw)
        self.conn.flush()

    def message(self, payload: bytes) -> None:
        self.data(encode_message(payload))

    def trailers(self, status: int = 0, message: bytes = b"") -> None:
        headers = [(b"grpc-status", str(status).encode())]
        if message:
            headers.append((b"grpc-message", message))
        self.conn.h2.send_headers(self.stream_id, headers, end_stream=True)
        self.conn.flush()

    def trailers_only(self, status: int, message: bytes = b"") -> None:
        headers = [
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            (b"grpc-status", str(status).encode()),
            (b"grpc-message", message),
        ]
        self.conn.h2.send_headers(self.stream_id, headers, end_stream=True)
        self.conn.flush()

    def reset(self, code: ErrorCodes) -> None:
        self.conn.h2.reset_stream(self.stream_id, code)
        self.conn.flush()

    def release(self) -> None:
        """Hand back the send window held so far (``H2Server.hold``)."""
        self.conn.h2.acknowledge_received_data(self.held, self.stream_id)
        self.held = 0
        self.conn.flush()

    def send_window(self) -> int:
        return self.conn.h2.local_flow_control_window(self.stream_id)

    async def wait_window(self) -> None:
        self.window.clear()
        await self.window.wait()


class ServerConnection:
    def __init__(
        self, server: H2Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ):
        self.server = server
        self.reader = reader
        self.writer = writer
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.streams: dict[int, ServerStream] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def goaway(
        self, code: ErrorCodes, last_stream_id: int | None = None, debug: bytes = b""
    ) -> None:
        self.h2.close_connection(code, additional_data=debug, last_stream_id=last_stream_id)
        self.flush()

    def drop(self) -> None:
        """Close the socket without a word (a crash, a network failure)."""
        self.writer.transport.abort()

    async def run(self) -> None:
        self.h2.initiate_connection()
        self.flush()
        while True:
            data = await self.reader.read(65536)
            if not data:
                break
            for ev in self.h2.receive_data(data):
                self.server.events.append(ev)
                if isinstance(ev, h2.events.RequestReceived):
                    stream = ServerStream(self, ev.stream_id, dict(ev.headers or []))
                    self.streams[ev.stream_id] = stream
                    self.server.requests.append(stream)
                    task = asyncio.create_task(self.server.handler(stream))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                elif isinstance(ev, h2.events.DataReceived):
                    stream = self.streams[ev.stream_id]
                    stream.body += ev.data or b""
                    if self.server.hold:
                        stream.held += ev.flow_controlled_length or 0
                    else:
                        self.h2.acknowledge_received_data(
                            ev.flow_controlled_length or 0, ev.stream_id
                        )
                elif isinstance(ev, h2.events.StreamEnded):
                    self.streams[ev.stream_id].ended.set()
                elif isinstance(ev, h2.events.StreamReset):
                    stream = self.streams[ev.stream_id]
                    stream.reset_code = ev.error_code
                    stream.window.set()
                elif isinstance(ev, h2.events.WindowUpdated):
                    for stream in self.streams.values():
                        stream.window.set()
            self.flush()


class H2Server:
    """``async with H2Server(handler) as server``: ``server.address`` serves on 127.0.0.1."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[ServerStream] = []
        self.connections: list[ServerConnection] = []
        self.events: list[h2.events.Event] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.hold = False  # True: received DATA is not acknowledged until stream.release()

    @property
    def address(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection(self, reader, writer)
        self.connections.append(conn)
        with contextlib.suppress(ConnectionError, h2.exceptions.ProtocolError):
            await conn.run()
        for task in list(conn.tasks):
            task.cancel()
        writer.close()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        for conn in self.connections:
            conn.writer.transport.abort()
            for task in list(conn.tasks):
                task.cancel()
        self._server.close()
        await self._server.wait_closed()

    def pings(self) -> int:
        return sum(isinstance(ev, h2.events.PingReceived) for ev in self.events)
