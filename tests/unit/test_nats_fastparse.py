"""The routed-MSG fast parse (`_transport.nats_shortcuts`) against nats-py's own parser.

The same protocol bytes, cut into arbitrary reads, go to a parser with the
fast path installed and to a plain nats-py parser; every handler, message,
PING, PONG, INFO and -ERR must come out the same, in the same order, and a
protocol error must be raised by both or neither.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any, cast

import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nats.protocol.parser import AWAITING_MSG_PAYLOAD, Parser
from test_nats_raw import Sub

from liftbridge_client._transport.nats_shortcuts import route_sid, serve_routed

ROUTED = (3, 11)  # the subscription ids with a raw handler


class Conn:
    """The callbacks nats-py's parser calls, recording what arrives, in order."""

    def __init__(self) -> None:
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.events: list[tuple[Any, ...]] = []
        self._ps = Parser(self)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        self.events.append(("msg", sid, data, headers))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.events.append(("info", json.dumps(info, sort_keys=True)))

    async def _process_err(self, err: str) -> None:
        self.events.append(("err", err))


def fast_conn() -> Conn:
    conn = Conn()
    for sid in ROUTED:
        handler = lambda d, s=sid: conn.events.append(("msg", s, d, None))  # noqa: E731
        assert route_sid(cast(Any, conn), Sub(sid), handler)
    return conn


_payload = st.binary(max_size=40)
_sid = st.sampled_from([3, 11, 5, 300])
_subject = st.sampled_from([b"_INBOX.abc", b"a.b.c", b"x"])


@st.composite
def _op(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            [
                "msg",
                "msg",
                "msg",
                "msg_reply",
                "hmsg",
                "ping",
                "pong",
                "ok",
                "info",
                "err",
                "tabmsg",
            ]
        )
    )
    if kind in ("msg", "msg_reply", "tabmsg"):
        data = draw(_payload)
        reply = b" reply.to" if kind == "msg_reply" else b""
        sep = b"\t" if kind == "tabmsg" else b" "
        sid = draw(_sid)
        line = b"MSG" + sep + draw(_subject) + b" %d%s %d\r\n" % (sid, reply, len(data))
        return line + data + b"\r\n"
    if kind == "hmsg":
        head = b"NATS/1.0\r\nA: b\r\n\r\n"
        data = draw(_payload)
        sid = draw(_sid)
        line = b"HMSG x %d %d %d\r\n" % (sid, len(head), len(head) + len(data))
        return line + head + data + b"\r\n"
    return {
        "ping": b"PING\r\n",
        "pong": b"PONG\r\n",
        "ok": b"+OK\r\n",
        "info": b'INFO {"server_id":"s","max_payload":1048576}\r\n',
        "err": b"-ERR 'Slow Consumer'\r\n",
    }[kind]


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


async def _feed(conn: Conn, reads: list[bytes]) -> BaseException | None:
    try:
        for read in reads:
            await conn._ps.parse(read)
    except Exception as exc:  # nats-py raises ProtocolError, and others on some garbage
        return exc
    return None


def _run(reads: list[bytes]) -> tuple[Conn, Conn, BaseException | None, BaseException | None]:
    async def both() -> tuple[Conn, Conn, BaseException | None, BaseException | None]:
        plain, fast = Conn(), fast_conn()
        e1 = await _feed(plain, reads)
        e2 = await _feed(fast, reads)
        return plain, fast, e1, e2

    return asyncio.run(both())


@settings(max_examples=examples(300), deadline=None)
@given(ops=st.lists(_op(), max_size=30), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_the_fast_parse_delivers_what_nats_py_delivers(ops: list[bytes], cuts: list[int]) -> None:
    data = b"".join(ops)
    plain, fast, e1, e2 = _run(_cut(data, cuts))
    assert e1 is None
    assert e2 is None
    assert fast.events == plain.events
    assert fast.stats == plain.stats
    assert bytes(fast._ps.buf) == bytes(plain._ps.buf)  # nothing lost or invented


@settings(max_examples=examples(300), deadline=None)
@given(
    ops=st.lists(_op(), max_size=8),
    noise=st.binary(max_size=30),
    at=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
)
# Found in one run: the noise makes the size 10 with 2 bytes left, and both parsers wait.
@example(ops=[b"MSG _INBOX.abc 3 0\r\n\r\n"], noise=b"1", at=17, cuts=[])
def test_garbage_is_nats_py_s_to_judge(
    ops: list[bytes], noise: bytes, at: int, cuts: list[int]
) -> None:
    data = b"".join(ops)
    at %= len(data) + 1
    data = data[:at] + noise + data[at:]
    plain, fast, e1, e2 = _run(_cut(data, cuts))
    assert type(e1) is type(e2)
    if e1 is None:
        assert fast.events == plain.events
        if bytes(fast._ps.buf) != bytes(plain._ps.buf):
            # Both wait for the rest of a message whose size the garbage changed: nats-py
            # has taken its MSG line (AWAITING_MSG_PAYLOAD), the fast parse keeps the line
            # in its buffer until the payload is all there. The same bytes must then bring
            # both to the same place.
            assert plain._ps.state == AWAITING_MSG_PAYLOAD, (fast._ps.buf, plain._ps.buf)
            short = plain._ps.needed - len(plain._ps.buf)  # -1: only the LF is missing
            more = b"z" * max(short, 0) + b"\r\n"[max(-short, 0) :] + b"PING\r\n"
            plain, fast, e1, e2 = _run([*_cut(data, cuts), more])
            assert type(e1) is type(e2)
            assert fast.events == plain.events
            if e1 is None:
                assert bytes(fast._ps.buf) == bytes(plain._ps.buf)
    else:  # both gave up; what came before the garbage arrived the same on both
        n = min(len(fast.events), len(plain.events))
        assert fast.events[:n] == plain.events[:n]


@pytest.mark.parametrize(
    "line",
    [
        b"MSG a 3 2 \r\n",  # whitespace after the size: nats-py refuses the line
        b"MSG a 3 2\x0b\r\n",
        b"MSG a 3 r 2\t\r\n",
        b"MSG a 3 r \r2\r\n",  # CR between a reply subject and the size: refused too
        b"MSG a 3 r\n2\r\n",
        b"MSG a 3 \x00\r2\r\n",  # found by the garbage test above (a NUL as reply)
        b"MSG a 3\r 2\r\n",  # CR between the sid and the size: accepted by both
        b"MSG a\t3 2\r\n",
        b"MSG  a \x0c3  2\r\n",
    ],
)
def test_odd_whitespace_in_a_routed_msg_line_is_judged_as_nats_py_judges_it(line: bytes) -> None:
    reads = [line + b"hi\r\nPING\r\n"]
    plain, fast, e1, e2 = _run(reads)
    assert type(e1) is type(e2)
    assert fast.events == plain.events


def test_serve_routed_stops_at_what_it_does_not_serve() -> None:
    got: list[bytes] = []
    table = {3: got.append}
    data = b"MSG a 3 2\r\nhi\r\nMSG a 3 r 1\r\nx\r\nPING\r\nMSG a 3 1\r\ny\r\n"
    pos, partial = serve_routed(data, table)
    assert got == [b"hi", b"x"]
    assert data[pos:].startswith(b"PING")
    assert not partial
    assert serve_routed(b"MSG a 3 5\r\nab", table) == (0, True)  # payload cut
    assert serve_routed(b"MSG a 3", table) == (0, True)  # control line cut
    assert serve_routed(b"MS", table) == (0, True)
    assert serve_routed(b"MSG a 4 1\r\nz\r\n", table) == (0, False)  # not routed
    assert serve_routed(b"MSG a x 1\r\nz\r\n", table) == (0, False)  # malformed: nats-py's
    assert serve_routed(b"MSG a 3 1 \r\nz\r\n", table) == (0, False)  # space after the size
    assert serve_routed(b"MSG a 3 r \r1\r\nz\r\n", table) == (0, False)  # CR before it
    assert serve_routed(b"MSG " + b"a" * 5000, table) == (0, False)  # over the line limit


def test_a_failing_handler_is_logged_and_the_walk_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    got: list[bytes] = []

    def handler(data: bytes) -> None:
        if data == b"bad":
            raise RuntimeError("bug")
        got.append(data)

    data = b"MSG a 1 3\r\nbad\r\nMSG a 1 2\r\nok\r\n"
    assert serve_routed(data, {1: handler}) == (len(data), False)
    assert got == [b"ok"]
    assert "handler of NATS subscription 1 failed" in caplog.text
