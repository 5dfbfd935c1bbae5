"""Each hook into a dependency's internals falls back to its public path when they differ.

nats-py and h2 are used through private attributes (docs/compatibility.md lists them and
the versions `make test-deps` proves). Here each hook gets internals of another shape,
as a future release might have, and must then leave the work to the public path, say so
once at DEBUG, and deliver the same messages and bytes as that path does on its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import h2.config
import h2.connection
import nats.aio.client
import pytest
from nats.protocol.parser import Parser
from test_h2_fastpath import (
    CallPlan,
    SendPlan,
    cut,
    frames_of,
    open_client,
    outcome,
    send_run,
    server_frames,
)
from test_nats_fastparse import Conn as ParserConn
from test_nats_raw import PendingConn, Sub

from liftbridge_client._transport import nats as transport_nats
from liftbridge_client._transport import nats_shortcuts as shortcuts
from liftbridge_client._transport.h2 import connection as h2conn

# ------------------------------------------------------------------ nats-py: acks


class OtherMsgConn(ParserConn):
    """A nats-py whose ``_process_msg`` grew a parameter (the router would drop it)."""

    async def _process_msg(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: bytes | None,
        extra: object = None,
    ) -> None:
        await super()._process_msg(sid, subject, reply, data, headers)


READS = [
    b"MSG _INBOX.a 3 5\r\nhello\r\nPING\r\nMSG a.b 5 reply.to 2\r\nhi\r\nMSG _INB",
    b"OX.a 3 0\r\n\r\nHMSG _INBOX.a 3 12 14\r\nNATS/1.0\r\n\r\nok\r\nMSG _INBOX.a 3 3\r\nend\r\n",
]


async def _deliveries(conn: ParserConn, routed: bool) -> list[tuple[Any, ...]]:
    handler = lambda d: conn.events.append(("msg", 3, d, None))  # noqa: E731
    assert shortcuts.route_sid(cast(Any, conn), Sub(3), handler) is routed
    for read in READS:
        await conn._ps.parse(read)
    return conn.events


@pytest.fixture
def fresh_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees the first (logged) fallback of each hook."""
    monkeypatch.setattr(transport_nats, "_logged", set())
    monkeypatch.setattr(h2conn, "_fallback_logged", False)


@pytest.mark.usefixtures("fresh_logs")
async def test_a_changed_process_msg_leaves_acks_to_nats_py(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")
    routed = await _deliveries(ParserConn(), routed=True)
    plain = await _deliveries(OtherMsgConn(), routed=False)
    assert plain == routed  # the same messages, in the same order, by nats-py's own path
    assert [e[0] for e in plain].count("msg") == 5
    again = OtherMsgConn()
    assert not shortcuts.route_sid(cast(Any, again), Sub(3), print)
    assert "_process_msg" not in vars(again)  # nothing was replaced
    records = [r for r in caplog.records if "routing acks" in r.getMessage()]
    assert len(records) == 1  # once per process, not per connection
    assert records[0].levelno == logging.DEBUG
    assert "_process_msg takes" in records[0].getMessage()


@pytest.mark.usefixtures("fresh_logs")
async def test_a_parser_that_no_longer_calls_process_msg_routes_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")
    routed = await _deliveries(ParserConn(), routed=True)
    monkeypatch.setattr(shortcuts, "_PARSER_CALLS_PROCESS_MSG", False)
    assert await _deliveries(ParserConn(), routed=False) == routed
    assert "its parser does not call _process_msg" in caplog.text


def test_the_parser_check_reads_nats_py_s_parser() -> None:
    assert shortcuts._PARSER_CALLS_PROCESS_MSG  # this nats-py's parser calls nc._process_msg
    assert "_process_msg" in Parser.parse.__code__.co_names


@pytest.mark.usefixtures("fresh_logs")
async def test_a_parser_of_another_shape_keeps_nats_py_s_parse(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")
    routed = await _deliveries(ParserConn(), routed=True)
    # A nats-py without the parser state the walk starts from.
    monkeypatch.setattr(shortcuts, "_CONTROL_LINE", None)
    conn = ParserConn()
    assert await _deliveries(conn, routed=True) == routed  # routed by _process_msg only
    assert "parse" not in vars(conn._ps)
    assert "parsing acks" in caplog.text


# ------------------------------------------------------------------ nats-py: publishing


@pytest.mark.usefixtures("fresh_logs")
@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda c: setattr(c, "_pending", (b"",)), "no _pending list"),
        (lambda c: setattr(c, "_max_pending_size", 1e6), "_max_pending_size is not an int"),
        (lambda c: delattr(c, "_flush_queue"), "no _flush_queue"),
        (lambda c: setattr(c, "_flush_pending", lambda: None), "no coroutine _flush_pending"),
        (lambda c: setattr(c, "stats", None), "no stats dict"),
    ],
    ids=["pending", "limit", "queue", "flusher", "stats"],
)
async def test_pub_buffer_leaves_publishing_to_nats_py_when_internals_differ(
    change: Any, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")
    conn = PendingConn()
    change(conn)
    buf = shortcuts.PubBuffer(cast(Any, conn))
    buf.learn("s")
    assert not buf.append("s", b"x")  # the caller then awaits nc.publish
    assert not buf.unflushed
    await buf.kick()  # nothing queued: nothing touched
    assert conn.flushes == 0
    assert why in caplog.text
    shortcuts.PubBuffer(cast(Any, PendingConn()))  # a fit one: no second record
    assert caplog.text.count("publishing goes through") == 1


@pytest.mark.usefixtures("fresh_logs")
async def test_pub_buffer_without_nats_py_s_connected_status(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")
    conn = PendingConn()
    monkeypatch.delattr(nats.aio.client.Client, "CONNECTED")
    buf = shortcuts.PubBuffer(cast(Any, conn))
    buf.learn("s")
    assert not buf.append("s", b"x")
    assert "has no CONNECTED status" in caplog.text


# ------------------------------------------------------------------ nats-py: closing


@pytest.mark.usefixtures("fresh_logs")
async def test_closing_without_nats_py_s_tasks_or_socket_does_nothing_of_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")

    class Renamed:
        def __init__(self) -> None:
            self._tasks = {"reader": asyncio.get_running_loop().create_future()}
            self._transport = object()  # connected, but no _io_writer under it

    nc = cast(Any, Renamed())
    assert transport_nats.nats_tasks(nc) == []
    transport_nats.abort_nats_transport(nc)  # nothing to cancel or abort: no error
    assert not nc._tasks["reader"].cancelled()
    assert "waiting for nats-py's tasks is left to nats-py's close()" in caplog.text
    assert "aborting the socket is left to nats-py's close()" in caplog.text
    nc._tasks["reader"].cancel()


async def test_nats_py_s_tasks_are_found_and_cancelled() -> None:
    loop = asyncio.get_running_loop()
    nc = nats.aio.client.Client()
    aborted: list[bool] = []

    class Raw:
        def abort(self) -> None:
            aborted.append(True)

    class Writer:
        transport = Raw()

    class Transport:
        _io_writer = Writer()

    reader = loop.create_task(asyncio.sleep(10))
    cast(Any, nc)._reading_task = reader
    cast(Any, nc)._transport = Transport()
    assert transport_nats.nats_tasks(nc) == [reader]
    transport_nats.abort_nats_transport(nc)
    await asyncio.sleep(0)
    assert reader.cancelled()
    assert aborted == [True]


# ------------------------------------------------------------------ h2


class BytesBufferH2(h2.connection.H2Connection):
    """An h2 whose outgoing buffer is bytes, as in h2 3.x (the fast path extends a bytearray)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._data_to_send = b""  # type: ignore[assignment]


PLANS = [
    CallPlan(messages=[b"a" * 50, b"", b"b" * 300], cuts=[7, 90], pads=[0, 3], end="ok"),
    CallPlan(messages=[b"c" * 20] * 9, cuts=[25], pads=[0], end="open"),
    CallPlan(messages=[b"d"], cuts=[1, 4], pads=[5], end="error"),
]
ORDER = list(range(60))
POINTS = [13, 200, 201, 777, 1500, 2048]


async def _receive(fast: bool) -> tuple[Any, ...]:
    """What a client connection delivers of PLANS, and what it answers, cut at POINTS."""
    conn, transport, calls = await open_client(fast, len(PLANS))
    hello = bytes(transport.out)
    sent, _ = server_frames(hello, PLANS, ORDER, headers_first=False)
    for piece in cut(sent, POINTS):
        conn.data_received(piece)
    outcomes = [outcome(c) for c in calls]
    for c in calls:
        while c._inbox:
            c._take()
    conn._flush()
    out = [f for f in frames_of(bytes(transport.out)) if f[0] in (6, 8)]  # PINGs, windows
    return outcomes, out, conn._fast_data


@pytest.mark.usefixtures("fresh_logs")
async def test_h2_with_another_send_buffer_takes_h2_s_own_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.h2.connection")
    plain = await _receive(fast=False)
    assert (await _receive(fast=True))[2]  # this h2 has what the fast path needs
    monkeypatch.setattr(h2.connection, "H2Connection", BytesBufferH2)
    changed = await _receive(fast=True)
    assert not changed[2]  # the fast path turned itself off
    assert changed == plain  # and h2 delivered the same messages, answers and windows
    assert [end for _, end in changed[0]] == ["ok", "open", "RESOURCE_EXHAUSTED"]
    assert [m for m, _ in changed[0]] == [p.messages for p in PLANS]
    await _receive(fast=True)
    records = [r for r in caplog.records if "_data_to_send is not a bytearray" in r.getMessage()]
    assert len(records) == 1
    assert records[0].levelno == logging.DEBUG


@pytest.mark.usefixtures("fresh_logs")
async def test_h2_streams_of_another_shape_take_h2_s_own_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.h2.connection")
    plain = await _receive(fast=False)
    real = h2conn._stream_internals
    assert real(object()) is not None  # a stand-in stream lacks everything
    monkeypatch.setattr(h2conn, "_stream_internals", lambda s: real(object()))
    changed = await _receive(fast=True)
    assert not changed[2]
    assert changed == plain
    assert "H2Stream has no _inbound_window_manager" in caplog.text


@pytest.mark.usefixtures("fresh_logs")
def test_h2_data_sent_with_another_send_buffer_is_what_h2_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = SendPlan(sizes=[10, 70_000, 0, 5], settings_window=30_000, grants=[1000, 50_000])
    plain = asyncio.run(send_run(False, plan))
    monkeypatch.setattr(h2.connection, "H2Connection", BytesBufferH2)
    assert asyncio.run(send_run(True, plan)) == plain


def test_this_h2_has_what_the_fast_path_needs() -> None:
    h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    assert h2conn._connection_internals(h2c) is None
    h2c.initiate_connection()
    h2c.send_headers(
        1, [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "a")]
    )
    assert h2conn._stream_internals(h2c.streams[1]) is None
