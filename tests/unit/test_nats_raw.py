"""The raw ack route into nats-py's parser (liftbridge_client._transport.nats_shortcuts)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import nats.aio.client
import pytest

from liftbridge_client._transport.nats_shortcuts import PubBuffer, route_sid, unroute_sid


class Sub:
    def __init__(self, sid: int) -> None:
        self._id = sid


class Conn:
    """What the router needs of nats-py's Client: ``_process_msg`` and ``stats``."""

    def __init__(self) -> None:
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.slow: list[tuple[int, bytes, bytes | None]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.stats["in_msgs"] += 1
        self.slow.append((sid, data, headers))


async def test_routed_sid_goes_to_the_handler_the_rest_to_nats_py() -> None:
    conn = Conn()
    got: list[bytes] = []
    assert route_sid(cast(Any, conn), Sub(7), got.append)
    assert route_sid(cast(Any, conn), Sub(7), got.append)  # installing twice: one router
    await conn._process_msg(7, b"_INBOX.x", b"", b"ack1", b"")
    await conn._process_msg(8, b"other", b"", b"m", b"")  # another subscription
    await conn._process_msg(7, b"_INBOX.x", b"", b"with-headers", b"NATS/1.0\r\nA: b\r\n\r\n")
    await conn._process_msg(7, b"_INBOX.x", b"", b"ack2", None)
    assert got == [b"ack1", b"ack2"]
    assert [(sid, data) for sid, data, _ in conn.slow] == [(8, b"m"), (7, b"with-headers")]
    assert conn.stats == {"in_msgs": 4, "in_bytes": 8}  # counted on both paths
    unroute_sid(cast(Any, conn), Sub(7))
    await conn._process_msg(7, b"_INBOX.x", b"", b"ack3", b"")
    assert got == [b"ack1", b"ack2"]
    assert conn.slow[-1] == (7, b"ack3", b"")


async def test_a_failing_handler_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    conn = Conn()

    def broken(data: bytes) -> None:
        raise RuntimeError("bug")

    assert route_sid(cast(Any, conn), Sub(1), broken)
    with caplog.at_level(logging.ERROR, logger="liftbridge_client._transport.nats_shortcuts"):
        await conn._process_msg(1, b"s", b"", b"x", b"")
    assert "handler of NATS subscription 1 failed" in caplog.text


def test_nothing_is_routed_without_a_parser_hook_or_a_sid() -> None:
    class Bare:
        pass

    assert not route_sid(cast(Any, Bare()), Sub(1), print)
    assert not route_sid(cast(Any, Conn()), object(), print)
    unroute_sid(cast(Any, Bare()), Sub(1))  # nothing routed: nothing to do


class PendingConn:
    """What PubBuffer needs of nats-py's Client: its pending list, limits and flusher."""

    def __init__(self, *, max_pending: int = 1000) -> None:
        self._status = nats.aio.client.Client.CONNECTED
        self._pending: list[bytes] = []
        self._pending_data_size = 0
        self._max_pending_size = max_pending
        self._flush_queue: asyncio.Queue[None] = asyncio.Queue()
        self.stats = {"out_msgs": 0, "out_bytes": 0}
        self.flushes = 0

    async def _flush_pending(self) -> None:
        self.flushes += 1


async def test_pub_buffer_appends_nats_commands_once_a_subject_was_accepted() -> None:
    conn = PendingConn()
    buf = PubBuffer(cast(Any, conn))
    assert not buf.append("a.b", b"x")  # nats-py has not validated the subject yet
    buf.learn("a.b")
    assert buf.append("a.b", b"hello")
    assert buf.append("a.b", b"")
    assert conn._pending == [b"PUB a.b 5\r\nhello\r\n", b"PUB a.b 0\r\n\r\n"]
    assert conn._pending_data_size == sum(map(len, conn._pending))
    assert conn.stats == {"out_msgs": 2, "out_bytes": 5}
    assert buf.unflushed
    await buf.kick()
    await buf.kick()  # nothing new: the flusher is not woken again
    assert conn.flushes == 1
    assert not buf.unflushed


async def test_pub_buffer_leaves_reconnects_limits_and_busy_flushers_to_nats_py() -> None:
    conn = PendingConn(max_pending=30)
    buf = PubBuffer(cast(Any, conn))
    buf.learn("s")
    assert buf.append("s", b"0123456789")  # 22 bytes
    assert not buf.append("s", b"0123456789")  # over the pending limit: nats-py force-flushes
    conn._status = 0  # reconnecting (or anything but CONNECTED): nats-py's buffering rules
    assert not buf.append("s", b"")
    assert len(conn._pending) == 1
    conn._flush_queue.put_nowait(None)  # the flusher is already due: no second wake-up
    await buf.kick()
    assert conn.flushes == 0


def test_pub_buffer_is_off_on_a_stand_in_connection() -> None:
    class Bare:
        pass

    buf = PubBuffer(cast(Any, Bare()))
    buf.learn("s")
    assert not buf.append("s", b"x")


class Socket:
    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.backlog


class Writer:
    def __init__(self, backlog: int) -> None:
        self.transport = Socket(backlog)
        self.written: list[bytes] = []

    def writelines(self, data: list[bytes]) -> None:
        self.written.extend(data)


class Transport:
    def __init__(self, backlog: int) -> None:
        self._io_writer = Writer(backlog)


async def test_pub_buffer_writes_at_once_when_the_socket_has_no_backlog() -> None:
    conn = PendingConn()
    conn._transport = Transport(backlog=0)  # type: ignore[attr-defined]
    buf = PubBuffer(cast(Any, conn))
    buf.learn("s")
    assert buf.append("s", b"a")
    assert buf.append("s", b"b")
    await buf.kick()
    writer = conn._transport._io_writer  # type: ignore[attr-defined]
    assert writer.written == [b"PUB s 1\r\na\r\n", b"PUB s 1\r\nb\r\n"]  # in order
    assert conn._pending == []
    assert conn._pending_data_size == 0
    assert conn.flushes == 0  # nats-py's flusher was not needed
    # A backlog on the socket (or a closing one): nats-py's flusher paces the writes.
    for backlog, closing in ((10, False), (0, True)):
        writer.transport.backlog, writer.transport.closing = backlog, closing
        assert buf.append("s", b"c")
        await buf.kick()
        assert len(writer.written) == 2
    assert conn.flushes == 2
    assert len(conn._pending) == 2
