"""Routed MSGs served from the socket's StreamReader (liftbridge_client._transport.nats_shortcuts).

Once nats-py's read task has parsed one read of a connection, the reader's ``feed_data``
serves routed MSGs as the bytes arrive, while nothing of the connection waits to be parsed.
Here protocol bytes cut into arbitrary reads arrive on a real ``asyncio.StreamReader``
read by a loop shaped like nats-py's ``_read_loop``, with the event loop let run (or not)
between reads, and with a PING whose processing awaits (so that nats-py's parse is
part-way when more bytes come): every handler call, message, PING, PONG, INFO and -ERR
must come out as nats-py's own parser gives them, in the same order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from test_nats_fastparse import Conn, _op, fast_conn


class Transport:
    def __init__(self) -> None:
        self._io_reader = asyncio.StreamReader()


class SlowPingConn(Conn):
    """nats-py answers a PING by awaiting its flusher: the parse is suspended part-way."""

    async def _process_ping(self) -> None:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.events.append(("ping",))


async def _read_loop(conn: Any, transport: Transport) -> None:
    # nats-py's _read_loop: read what the reader has, parse it, until the end of file.
    while True:
        data = await transport._io_reader.read(65536)
        if not data:
            return
        await conn._ps.parse(data)


async def _plain(reads: list[bytes]) -> SlowPingConn:
    conn = SlowPingConn()
    for read in reads:
        await conn._ps.parse(read)
    return conn


async def _through_reader(reads: list[bytes], pauses: list[int]) -> tuple[SlowPingConn, int]:
    """Feed ``reads`` as data_received would, the event loop running ``pauses[i]`` rounds
    after the i-th; returns the connection and how many reads nats-py's parse saw."""
    conn = fast_conn_of(SlowPingConn)
    transport = Transport()
    conn._transport = transport
    parses = 0
    parse = conn._ps.parse

    async def counted(data: bytes = b"") -> None:
        nonlocal parses
        parses += 1
        await parse(data)

    conn._ps.parse = counted
    task = asyncio.create_task(_read_loop(conn, transport))
    for i, read in enumerate(reads):
        transport._io_reader.feed_data(read)
        for _ in range(pauses[i % len(pauses)] if pauses else 1):
            await asyncio.sleep(0)
    transport._io_reader.feed_eof()
    await asyncio.wait_for(task, 5)
    return conn, parses


def connected() -> Any:
    """A connection with routes, in nats-py's CONNECTED state."""
    conn: Any = fast_conn()
    conn._status = Client.CONNECTED
    return conn


def fast_conn_of(cls: type[Conn]) -> Any:
    conn = connected()
    conn.__class__ = cls  # the same routes, on a connection whose PING awaits
    return conn


@st.composite
def _reads(draw: st.DrawFn) -> list[bytes]:
    """Protocol ops as reads: mostly one op per read (so that reads arrive while nats-py's
    parse of an earlier one is part-way), some cut in two, some run together."""
    ops = draw(st.lists(_op(), max_size=30))
    reads: list[bytes] = []
    for op in ops:
        how = draw(st.sampled_from(["alone", "alone", "cut", "joined"]))
        if how == "joined" and reads:
            reads[-1] += op
        elif how == "cut":
            at = draw(st.integers(0, len(op)))
            reads += [op[:at], op[at:]]
        else:
            reads.append(op)
    return [read for read in reads if read]


@settings(max_examples=examples(300), deadline=None)
@given(reads=_reads(), pauses=st.lists(st.integers(0, 3), max_size=8))
def test_reads_served_from_the_reader_deliver_what_nats_py_delivers(
    reads: list[bytes], pauses: list[int]
) -> None:
    async def both() -> None:
        plain = await _plain(reads)
        fast, _ = await _through_reader(reads, pauses)
        assert fast.events == plain.events
        assert fast.stats == plain.stats
        assert bytes(fast._ps.buf) == bytes(plain._ps.buf)

    asyncio.run(both())


def test_acks_after_the_first_read_skip_the_read_task() -> None:
    acks = [b"MSG _INBOX.a 3 2\r\nk%d\r\n" % i for i in range(10)]
    # The first two reads arrive before the read task runs: it takes both from the reader
    # in one read. Once it has parsed that, acks are served as they arrive, whole or cut.
    reads = [acks[0], acks[1], acks[2], acks[3][:7], acks[3][7:], *acks[4:]]

    async def go() -> tuple[Conn, int]:
        return await _through_reader(reads, [0, 1, 1, 1, 1])

    fast, parses = asyncio.run(go())
    assert [e[2] for e in fast.events] == [b"k%d" % i for i in range(10)]
    assert parses == 1  # the first two reads, together; then none


def test_a_new_connection_s_reader_is_served_once_read() -> None:
    async def go() -> list[tuple[Any, ...]]:
        conn = connected()
        first, second = await _taken_over(conn), Transport()
        conn._transport = second  # nats-py reconnected: a new socket, a new reader
        first._io_reader.feed_data(b"MSG a 3 1\r\nx\r\n")  # the former socket: not served
        assert bytes(first._io_reader._buffer) == b"MSG a 3 1\r\nx\r\n"  # type: ignore[attr-defined]
        second._io_reader.feed_data(b"MSG a 3 1\r\nb\r\n")  # not hooked yet: stays there
        assert second._io_reader._buffer  # type: ignore[attr-defined]
        await _read_loop_once(conn, second)
        second._io_reader.feed_data(b"MSG a 3 1\r\nc\r\n")
        assert not second._io_reader._buffer  # type: ignore[attr-defined]
        events: list[tuple[Any, ...]] = conn.events
        return events

    events = asyncio.run(go())
    assert [e[2] for e in events] == [b"a", b"b", b"c"]


async def _read_loop_once(conn: Any, transport: Transport) -> None:
    await conn._ps.parse(await transport._io_reader.read(65536))


async def _taken_over(conn: Any) -> Transport:
    """A new socket for ``conn`` whose first read (ack ``a``) nats-py's read task parsed:
    from then on its reader serves acks itself."""
    transport = Transport()
    conn._transport = transport
    transport._io_reader.feed_data(b"MSG a 3 1\r\na\r\n")
    await _read_loop_once(conn, transport)
    return transport


def test_a_stand_in_transport_leaves_reading_to_nats_py() -> None:
    async def go() -> None:
        conn = connected()
        conn._transport = object()  # a websocket transport, say: no StreamReader
        await conn._ps.parse(b"MSG a 3 1\r\na\r\n")
        assert [e[2] for e in conn.events] == [b"a"]

    asyncio.run(go())


def test_a_payload_that_looks_like_a_routed_msg_is_nats_py_s() -> None:
    # nats-py has the line of an unrouted MSG (sid 5) and waits for its payload, which
    # reads like a routed MSG: it is sid 5's payload, not an ack.
    payload = b"MSG a 3 1\r\nx\r\n"
    reads = [b"MSG a 5 %d\r\n" % len(payload), payload + b"\r\n", b"MSG a 3 1\r\ny\r\n"]

    async def both() -> None:
        plain = await _plain(reads)
        fast, _ = await _through_reader(reads, [1])
        assert plain.events == [("msg", 5, payload, None), ("msg", 3, b"y", None)]
        assert fast.events == plain.events

    asyncio.run(both())


def test_a_broken_connection_s_reads_are_left_to_nats_py_and_its_parser_reset() -> None:
    # nats-py finds the connection broken (force_reconnect, _process_op_err): RECONNECTING,
    # its parser reset, and the old socket may still deliver a read in the same round, cut
    # in the middle of an ack. None of it may reach the new connection's parse.
    async def go() -> list[tuple[Any, ...]]:
        conn = connected()
        old, new = await _taken_over(conn), Transport()
        conn._status = Client.RECONNECTING
        conn._ps.reset()
        old._io_reader.feed_data(b"MSG a 3 1\r\nb\r\nMSG a 3 40\r\nyyy")
        assert not conn._ps.buf  # all of it went to the old reader, which nobody reads
        conn._ps.buf.extend(b"MSG a 3 9\r\nz")  # and a stale tail the reset did not see
        conn._transport = new
        conn._status = Client.CONNECTED
        new._io_reader.feed_data(b"MSG a 3 1\r\nc\r\nPING\r\n")
        await _read_loop_once(conn, new)
        new._io_reader.feed_data(b"MSG a 3 1\r\nd\r\n")
        events: list[tuple[Any, ...]] = conn.events
        return events

    assert asyncio.run(go()) == [
        ("msg", 3, b"a", None),
        ("msg", 3, b"c", None),
        ("ping",),
        ("msg", 3, b"d", None),
    ]


def test_a_read_that_is_not_bytes_goes_to_nats_py_unchanged() -> None:
    # Windows' proactor loop hands data_received a bytearray.
    async def go() -> None:
        conn = connected()
        transport = await _taken_over(conn)
        transport._io_reader.feed_data(bytearray(b"MSG a 3 1\r\nb\r\n"))
        assert bytes(transport._io_reader._buffer) == b"MSG a 3 1\r\nb\r\n"  # type: ignore[attr-defined]
        await _read_loop_once(conn, transport)
        assert [e[2] for e in conn.events] == [b"a", b"b"]

    asyncio.run(go())
