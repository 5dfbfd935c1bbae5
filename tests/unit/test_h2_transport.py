"""The h2 stream transport against a scripted HTTP/2 server (tests/unit/h2_server.py).

Real sockets, real HTTP/2 frames; the server plays the moves a gRPC server rarely
chooses on demand: trailers-only answers, padding, resets, GOAWAY, a dropped socket,
a compressed message, a window that only the consumer's reads reopen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import grpc
import h2.events
import pytest
from google.protobuf.message import DecodeError
from h2.errors import ErrorCodes
from h2_server import H2Server, ServerStream

from liftbridge_client import errors
from liftbridge_client._transport.grpc import map_rpc_error
from liftbridge_client._transport.h2 import BidiStreamCall, H2Pool, H2RpcError, ServerStreamCall
from liftbridge_client._transport.h2.connection import STREAM_WINDOW, Connection
from liftbridge_client._transport.h2.framing import encode_message
from liftbridge_client.options import ClientOptions
from liftbridge_client.testing import wait_until

PATH = "/proto.API/Subscribe"
Script = Callable[[ServerStream], Coroutine[object, object, None]]
Serve = Callable[..., Awaitable[tuple[H2Server, H2Pool]]]


def identity(raw: bytes) -> bytes:
    return raw


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    stack: list[tuple[H2Server, H2Pool]] = []

    async def start(script: Script, **options: object) -> tuple[H2Server, H2Pool]:
        server = await H2Server(script).__aenter__()
        pool = H2Pool(ClientOptions(connect_timeout=2.0, **options))  # type: ignore[arg-type]
        stack.append((server, pool))
        return server, pool

    yield start
    for server, pool in stack:
        await pool.close()
        await server.__aexit__(None, None, None)


def call(pool: H2Pool, server: H2Server, timeout: float | None = None) -> ServerStreamCall[bytes]:
    return pool.server_stream(server.address, PATH, b"request", identity, timeout=timeout)


async def read_all(c: ServerStreamCall[bytes]) -> list[bytes]:
    out = []
    async with asyncio.timeout(5):
        while (m := await c.read()) is not None:
            out.append(m)
    return out


async def test_messages_cut_anywhere_and_padded_then_ok(serve: Serve) -> None:
    async def script(s: ServerStream) -> None:
        await s.ended.wait()
        s.respond()
        stream = b"".join(encode_message(b"m%d" % i) for i in range(50))
        for i in range(0, len(stream), 7):  # frames that split messages and heads
            s.data(stream[i : i + 7], pad=i % 3 * 5)
        s.trailers(0)

    server, pool = await serve(script)
    c = call(pool, server)
    assert await read_all(c) == [b"m%d" % i for i in range(50)]
    assert await c.code() is grpc.StatusCode.OK
    request = server.requests[0]
    assert bytes(request.body) == encode_message(b"request")
    assert request.headers[b":path"] == PATH.encode()
    assert request.headers[b"te"] == b"trailers"
    assert request.headers[b"content-type"] == b"application/grpc"
    assert b"grpc-timeout" not in request.headers
    assert b"grpc-accept-encoding" not in request.headers  # so nothing may come compressed


async def test_trailers_only_is_the_typed_error(serve: Serve) -> None:
    async def script(s: ServerStream) -> None:
        s.trailers_only(5, b"No such partition")

    server, pool = await serve(script)
    c = call(pool, server)
    with pytest.raises(H2RpcError) as info:
        await c.read()
    mapped = map_rpc_error(info.value)
    assert isinstance(mapped, errors.NotFoundError)
    assert mapped.details == "No such partition"


async def test_messages_before_an_error_status_are_read_first(
    serve: Serve,
) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        s.message(b"a")
        s.trailers(8, b"Stop%20offset%20reached")

    server, pool = await serve(script)
    c = call(pool, server)
    assert await c.read() == b"a"
    with pytest.raises(H2RpcError) as info:
        await c.read()
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.details() == "Stop offset reached"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (ErrorCodes.REFUSED_STREAM, errors.UnavailableError),
        (ErrorCodes.CANCEL, errors.RequestCancelledError),
        (ErrorCodes.INTERNAL_ERROR, errors.InternalServerError),
    ],
)
async def test_a_reset_from_the_server(
    serve: Serve, code: ErrorCodes, expected: type[errors.LiftbridgeError]
) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        s.reset(code)

    server, pool = await serve(script)
    with pytest.raises(H2RpcError) as info:
        await call(pool, server).read()
    assert isinstance(map_rpc_error(info.value), expected)


async def test_goaway_fails_open_calls_unavailable_and_new_calls_use_a_new_connection(
    serve: Serve,
) -> None:
    first = asyncio.Event()

    async def script(s: ServerStream) -> None:
        s.respond()
        s.message(b"hello")
        if not first.is_set():
            first.set()
            await asyncio.sleep(0.05)
            s.conn.goaway(ErrorCodes.ENHANCE_YOUR_CALM, debug=b"too_many_pings")
        else:
            s.trailers(0)

    server, pool = await serve(script)
    c = call(pool, server)
    assert await c.read() == b"hello"
    with pytest.raises(H2RpcError) as info:
        await c.read()
    mapped = map_rpc_error(info.value)
    assert isinstance(mapped, errors.UnavailableError)
    assert "too_many_pings" in str(mapped)
    assert await read_all(call(pool, server)) == [b"hello"]
    assert len(server.connections) == 2


async def test_a_lost_connection_is_unavailable_after_what_arrived(
    serve: Serve,
) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        s.message(b"a")
        await asyncio.sleep(0.05)
        s.conn.drop()

    server, pool = await serve(script)
    c = call(pool, server)
    assert await c.read() == b"a"
    with pytest.raises(H2RpcError) as info:
        await c.read()
    assert isinstance(map_rpc_error(info.value), errors.UnavailableError)


async def test_connect_refused_is_unavailable() -> None:
    pool = H2Pool(ClientOptions(connect_timeout=2.0))
    try:
        c = pool.server_stream("127.0.0.1:1", PATH, b"", identity)
        with pytest.raises(H2RpcError) as info:
            await c.read()
        assert isinstance(map_rpc_error(info.value), errors.UnavailableError)
    finally:
        await pool.close()


async def test_a_connection_that_failed_to_set_up_is_unavailable_not_a_hang(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio only logs an exception raised in connection_made (uvloop's transports once
    made it raise): the call fails at once instead of waiting for answers that never come."""

    async def script(stream: ServerStream) -> None:
        stream.respond()

    server, pool = await serve(script)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))

    def broken(self: Connection, transport: asyncio.BaseTransport) -> None:
        raise RuntimeError("set-up bug")

    monkeypatch.setattr(Connection, "connection_made", broken)
    try:
        c = call(pool, server)
        with pytest.raises(H2RpcError) as info:
            async with asyncio.timeout(5):
                await c.read()
        assert isinstance(map_rpc_error(info.value), errors.UnavailableError)
        assert "setting up HTTP/2" in info.value.details()
        assert any(isinstance(ctx.get("exception"), RuntimeError) for ctx in reported)
    finally:
        loop.set_exception_handler(None)


async def test_cancel_sends_rst_stream_cancel(serve: Serve) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        s.message(b"a")
        await asyncio.Event().wait()

    server, pool = await serve(script)
    c = call(pool, server)
    assert await c.read() == b"a"
    reader = asyncio.create_task(c.read())
    await wait_until(lambda: c.waiting, what="the reader waiting")
    assert c.cancel()
    with pytest.raises(H2RpcError) as info:
        await reader
    assert info.value.code() is grpc.StatusCode.CANCELLED
    assert c.cancelled()
    await wait_until(
        lambda: server.requests[0].reset_code == ErrorCodes.CANCEL, what="RST_STREAM CANCEL"
    )
    assert not c.cancel()  # once


async def test_a_cancelled_read_loses_nothing(serve: Serve) -> None:
    go = asyncio.Event()

    async def script(s: ServerStream) -> None:
        s.respond()
        await go.wait()
        s.message(b"late")
        s.trailers(0)

    server, pool = await serve(script)
    c = call(pool, server)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(c.read(), 0.1)
    go.set()
    assert await read_all(c) == [b"late"]


async def test_deadline_is_sent_as_grpc_timeout_and_enforced(
    serve: Serve,
) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        await asyncio.Event().wait()

    server, pool = await serve(script)
    c = call(pool, server, timeout=0.2)
    with pytest.raises(H2RpcError) as info:
        await c.read()
    assert isinstance(map_rpc_error(info.value), errors.DeadlineExceededError)
    assert server.requests[0].headers[b"grpc-timeout"] == b"200000u"
    await wait_until(lambda: server.requests[0].reset_code == ErrorCodes.CANCEL, what="reset")


async def test_a_compressed_message_is_refused_and_the_call_reset(
    serve: Serve,
) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        s.data(b"\x01\x00\x00\x00\x02zz")
        await asyncio.Event().wait()

    server, pool = await serve(script)
    with pytest.raises(H2RpcError) as info:
        await call(pool, server).read()
    assert "compressed" in info.value.details()
    await wait_until(lambda: server.requests[0].reset_code == ErrorCodes.CANCEL, what="reset")


@pytest.mark.parametrize("window", [STREAM_WINDOW, 4 * STREAM_WINDOW], ids=["default", "4x"])
async def test_the_window_reopens_only_as_the_consumer_reads(serve: Serve, window: int) -> None:
    """A consumer that stops reading stops the server after one stream window (the
    call's own, when it asks for a larger one)."""
    payload = b"x" * 1000
    total = 4 * window // len(payload)
    blocked = asyncio.Event()

    async def script(s: ServerStream) -> None:
        s.respond()
        for _ in range(total):
            while s.send_window() < len(payload) + 5:
                blocked.set()
                await s.wait_window()
            s.message(payload)
        s.trailers(0)

    server, pool = await serve(script)
    c = pool.server_stream(server.address, PATH, b"request", identity, window=window)
    assert await c.read() == payload
    async with asyncio.timeout(5):
        await blocked.wait()
    await asyncio.sleep(0.1)  # the server would go on here if anything reopened its window
    stalled_at = server.requests[0].sent
    assert stalled_at <= window + len(payload) + 5
    assert stalled_at >= window // 2
    assert len(await read_all(c)) == total - 1  # reading reopens it: everything arrives
    assert server.requests[0].sent == total * (len(payload) + 5)


def stream_window_updates(server: H2Server, stream_id: int) -> list[int]:
    """The increments of the WINDOW_UPDATEs the client sent for ``stream_id``."""
    return [
        ev.delta or 0
        for ev in server.events
        if isinstance(ev, h2.events.WindowUpdated) and ev.stream_id == stream_id
    ]


async def test_a_larger_window_hands_back_the_same_bytes_in_fewer_updates(serve: Serve) -> None:
    """The flow-control writes of a long read: with a 4x window, a quarter as many
    WINDOW_UPDATEs (plus the one that opens it, sent with the headers), for the same bytes."""
    payload = b"y" * 1000
    total = 8 * STREAM_WINDOW // len(payload)

    async def script(s: ServerStream) -> None:
        s.respond()
        for _ in range(total):
            while s.send_window() < len(payload) + 5:
                await s.wait_window()
            s.message(payload)
        s.trailers(0)

    counts = {}
    for window in (STREAM_WINDOW, 4 * STREAM_WINDOW):
        server, pool = await serve(script)
        c = pool.server_stream(server.address, PATH, b"request", identity, window=window)
        assert len(await read_all(c)) == total
        updates = stream_window_updates(server, server.requests[0].stream_id)
        if window > STREAM_WINDOW:
            assert updates[0] == window - STREAM_WINDOW  # opened with the request
            updates = updates[1:]
        assert all(u >= window // 2 for u in updates)  # h2 hands back half at a time
        counts[window] = len(updates)
    assert counts[STREAM_WINDOW] >= 12  # 8 MiB read, 512 KiB per update
    assert counts[4 * STREAM_WINDOW] <= counts[STREAM_WINDOW] // 3


async def test_read_ready_takes_what_arrived_and_a_bad_message_fails_after_the_good_ones(
    serve: Serve,
) -> None:
    """read_ready: up to the limit, without waiting; a message that does not decode ends
    the call, but the ones before it are still returned and the failure comes next."""
    sent = asyncio.Event()

    async def script(s: ServerStream) -> None:
        s.respond()
        for i in range(5):
            s.message(b"m%d" % i)
        s.message(b"bad")
        s.message(b"m6")
        sent.set()
        await asyncio.Event().wait()

    def decode(raw: bytes) -> bytes:
        if raw == b"bad":
            raise DecodeError("not a message")
        return raw

    server, pool = await serve(script)
    c = pool.server_stream(server.address, PATH, b"request", decode)
    assert c.read_ready(10) == []  # not started: nothing is here, nothing waits
    assert await c.read() == b"m0"
    async with asyncio.timeout(5):
        await sent.wait()
    await wait_until(lambda: c.read_ready(0) == [] and len(c._inbox) == 6, what="arrival")
    assert c.read_ready(2) == [b"m1", b"m2"]
    assert c.read_ready(10) == [b"m3", b"m4"]  # the bad one ends it; m6 is dropped
    with pytest.raises(H2RpcError) as info:
        await c.read()
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert "failed to parse" in info.value.details()
    await wait_until(lambda: server.requests[0].reset_code == ErrorCodes.CANCEL, what="reset")


async def test_concurrent_calls_share_one_connection(serve: Serve) -> None:
    async def script(s: ServerStream) -> None:
        s.respond()
        s.message(bytes(s.body[5:]))
        s.trailers(0)

    server, pool = await serve(script)
    calls = [pool.server_stream(server.address, PATH, b"r%d" % i, identity) for i in range(5)]
    results = await asyncio.gather(*(read_all(c) for c in calls))
    assert results == [[b"r%d" % i] for i in range(5)]
    assert len(server.connections) == 1


async def test_keepalive_pings_only_while_a_call_is_open(serve: Serve) -> None:
    done = asyncio.Event()

    async def script(s: ServerStream) -> None:
        s.respond()
        await done.wait()
        s.trailers(0)

    server, pool = await serve(script, keepalive_time=0.05)
    c = call(pool, server)
    reader = asyncio.create_task(read_all(c))
    await wait_until(lambda: server.pings() >= 2, what="keepalive pings")
    done.set()
    assert await reader == []
    await asyncio.sleep(0.2)
    quiet = server.pings()
    await asyncio.sleep(0.2)
    assert server.pings() == quiet  # no call open: no ping


async def test_writes_wait_for_the_send_window_and_unsent_messages_come_back_whole(
    serve: Serve,
) -> None:
    """PublishAsync's side: no more than the server's window leaves; a message the window
    cut finishes later, and only messages not begun are taken back (none of them sent)."""

    async def script(stream: ServerStream) -> None:
        stream.respond()
        await stream.ended.wait()
        stream.trailers()

    server, pool = await serve(script)
    server.hold = True
    c: BidiStreamCall[bytes] = pool.bidi_stream(server.address, "/proto.API/PublishAsync", identity)
    await c.start()
    messages = [bytes([i]) * 1000 for i in range(100)]  # 1005 bytes each on the wire
    for m in messages[:50]:
        c.write(m)
    c.push()
    for m in messages[50:]:
        assert c.try_write(encode_message(m))
    await wait_until(lambda: server.requests and len(server.requests[0].body) >= 65535)
    [stream] = server.requests
    await asyncio.sleep(0.05)
    assert len(stream.body) == 65535  # the initial window and not a byte more
    assert c.queued == 100 * 1005 - 65535
    # 65 whole messages left, the 66th was cut: the 34 after it are taken back whole.
    assert c.take_unsent() == [encode_message(m) for m in messages[66:]]
    assert c.queued == 66 * 1005 - 65535
    c.done_writing()
    stream.release()
    async with asyncio.timeout(5):
        await stream.ended.wait()
    assert bytes(stream.body) == b"".join(encode_message(m) for m in messages[:66])
    assert not c.try_write(encode_message(b"late"))  # half-closed: refused, not raised


async def test_try_write_refuses_past_the_high_water_mark(serve: Serve) -> None:
    async def script(stream: ServerStream) -> None:
        stream.respond()
        await stream.ended.wait()

    server, pool = await serve(script)
    server.hold = True  # nothing leaves beyond the first window
    c: BidiStreamCall[bytes] = pool.bidi_stream(server.address, "/proto.API/PublishAsync", identity)
    assert c.try_write(encode_message(b"x"))  # not started: it waits in the call
    assert c.queued == 6
    await c.start()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert c.queued == 0  # sent once the call started
    chunk = encode_message(bytes(64 * 1024))
    written = 0
    while c.try_write(chunk):
        written += 1
        c.push()
    assert c.queued > 1024 * 1024  # refused only once more than the high-water mark waits
    assert c.queued - len(chunk) <= 1024 * 1024
    assert written == 17
    c.cancel()
    assert not c.try_write(chunk)  # ended
