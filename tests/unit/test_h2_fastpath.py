"""The fast DATA path of the h2 connection is h2's own parsing, only faster.

A differential property test: an h2 server connection writes arbitrary frame
sequences (several calls, gRPC messages split across DATA frames, padding,
PINGs, WINDOW_UPDATEs, trailers, trailers-only answers, resets) and the bytes,
cut at arbitrary points, go to two client connections - one with the fast path,
one giving every frame to h2. Both must deliver the same messages, end every call
the same way, leave the same receive and send windows and answer the same PINGs.
A fuzz run then feeds arbitrary bytes after a valid start: nothing escapes but the
client's typed errors. The send side: the DATA frames written without h2 are the
bytes h2 writes, with the same windows left.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from budget import examples
from h2.errors import ErrorCodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client._transport.grpc import map_rpc_error
from liftbridge_client._transport.h2.calls import BidiStreamCall, ServerStreamCall
from liftbridge_client._transport.h2.connection import Connection
from liftbridge_client._transport.h2.framing import H2RpcError, encode_message

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


@dataclass
class CallPlan:
    messages: list[bytes]
    cuts: list[int]  # DATA payload sizes cutting the call's message stream
    pads: list[int]  # padding per DATA frame (0: not padded)
    end: str  # "ok" | "error" | "reset" | "open" | "trailers-only"


call_plans = st.builds(
    CallPlan,
    messages=st.lists(st.binary(max_size=120), max_size=8),
    cuts=st.lists(st.integers(min_value=1, max_value=90), min_size=1, max_size=6),
    pads=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=6),
    end=st.sampled_from(["ok", "error", "reset", "open", "trailers-only"]),
)


def server_bytes(client_hello: bytes, plans: list[CallPlan], order: list[int]) -> bytes:
    """What an h2 server sends for ``plans`` (frames interleaved by ``order``)."""
    return server_frames(client_hello, plans, order, headers_first=False)[0]


def server_frames(
    client_hello: bytes, plans: list[CallPlan], order: list[int], headers_first: bool
) -> tuple[bytes, int]:
    """`server_bytes`, and where the response headers end when ``headers_first`` sends
    every call's headers before anything else (else 0)."""
    server = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None)
    )
    server.initiate_connection()
    server.receive_data(client_hello)
    sids = [1 + 2 * i for i in range(len(plans))]
    steps: list[list[Any]] = []
    for sid, plan in zip(sids, plans, strict=True):
        if plan.end == "trailers-only":
            steps.append([("trailers-only", sid)])
            continue
        ops: list[Any] = [("headers", sid)]
        stream = b"".join(encode_message(m) for m in plan.messages)
        i = k = 0
        while i < len(stream):
            size = plan.cuts[k % len(plan.cuts)]
            ops.append(("data", sid, stream[i : i + size], plan.pads[k % len(plan.pads)]))
            i += size
            k += 1
        ops.append((plan.end, sid))
        steps.append(ops)
    out = bytearray(server.data_to_send())
    queues = [list(s) for s in steps]
    if headers_first:
        for q in queues:
            if q and q[0][0] == "headers":
                apply(server, q.pop(0))
        out += server.data_to_send()
    headers_end = len(out) if headers_first else 0
    for pick in order:  # interleave the calls, with control frames between
        live = [q for q in queues if q]
        if not live:
            break
        q = live[pick % len(live)]
        op = q.pop(0)
        apply(server, op)
        if pick % 5 == 0:
            server.ping(b"%08d" % pick)
        if pick % 7 == 0:
            server.increment_flow_control_window(1000)
        if pick % 3 == 0 and op[0] in {"headers", "data"}:
            server.increment_flow_control_window(1 + pick, stream_id=op[1])
        out += server.data_to_send()
    for q in queues:
        for op in q:
            apply(server, op)
            out += server.data_to_send()
    return bytes(out), headers_end


def apply(server: h2.connection.H2Connection, op: tuple[Any, ...]) -> None:
    kind, sid = op[0], op[1]
    if kind == "headers":
        server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
    elif kind == "data":
        server.send_data(sid, op[2], pad_length=op[3] or None)
    elif kind == "ok":
        server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    elif kind == "error":
        server.send_headers(
            sid,
            [(b"grpc-status", b"8"), (b"grpc-message", b"Stop offset reached")],
            end_stream=True,
        )
    elif kind == "reset":
        server.reset_stream(sid, ErrorCodes.INTERNAL_ERROR)
    elif kind == "trailers-only":
        server.send_headers(
            sid,
            [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", b"5")],
            end_stream=True,
        )


async def open_client(fast: bool, calls: int) -> tuple[Connection, FakeTransport, list[Any]]:
    conn = Connection("test:1", "test:1", "http", None, fast_data=fast)
    transport = FakeTransport()
    conn.connection_made(transport)

    async def connect() -> Connection:
        return conn

    opened = []
    for i in range(calls):
        call = ServerStreamCall(connect, "/p", b"r%d" % i, bytes)
        await call._ensure_started()
        opened.append(call)
    await asyncio.sleep(0)  # the coalesced flush
    return conn, transport, opened


def outcome(call: ServerStreamCall[bytes]) -> tuple[list[bytes], str]:
    got = list(call._inbox)
    error = call._error
    end = "open" if not call.done() else ("ok" if error is None else error.code().name)
    return got, end


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


async def run_both(
    plans: list[CallPlan], order: list[int], points: list[int], headers_first: bool = False
) -> None:
    results = []
    hello = b""
    for fast in (True, False):
        conn, transport, calls = await open_client(fast, len(plans))
        if not hello:
            hello = bytes(transport.out)
        else:
            assert bytes(transport.out) == hello  # both clients said the same
        sent, headers_end = server_frames(hello, plans, order, headers_first)
        if headers_end:  # the headers arrive first, alone: later DATA takes the fast path
            conn.data_received(sent[:headers_end])
            sent = sent[headers_end:]
        for piece in cut(sent, points):
            conn.data_received(piece)
        outcomes = [outcome(c) for c in calls]
        for c in calls:  # read everything: each path then gave the whole window back
            while c._inbox:
                c._take()
        h2c = conn._h2
        windows = [
            h2c._inbound_flow_control_window_manager.current_window_size
            + h2c._inbound_flow_control_window_manager._bytes_processed,
            h2c.outbound_flow_control_window,
            *(
                (sid, h2c.streams[sid].outbound_flow_control_window)
                for sid in sorted(h2c.streams)
                if not h2c.streams[sid].closed
            ),
        ]
        conn._flush()
        answers = [f for f in frames_of(bytes(transport.out)) if f[0] == 6]  # PING answers
        results.append((outcomes, windows, answers))
    assert results[0] == results[1]
    for plan, (got, _) in zip(plans, results[0][0], strict=True):
        if plan.end in {"ok", "error", "open"}:
            assert got == plan.messages  # and both paths delivered every message


def frames_of(out: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream id, payload) of each frame a client wrote, after its preface."""
    assert out.startswith(PREFACE)
    frames = []
    i = len(PREFACE)
    while i < len(out):
        length = int.from_bytes(out[i : i + 3], "big")
        sid = int.from_bytes(out[i + 5 : i + 9], "big")
        frames.append((out[i + 3], out[i + 4], sid, out[i + 9 : i + 9 + length]))
        i += 9 + length
    assert i == len(out)
    return frames


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(call_plans, min_size=1, max_size=3),
    st.lists(st.integers(min_value=0, max_value=1000), max_size=40),
    st.lists(st.integers(min_value=0), max_size=30),
)
def test_the_fast_path_delivers_what_h2_delivers(
    plans: list[CallPlan], order: list[int], points: list[int]
) -> None:
    asyncio.run(run_both(plans, order, points))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.builds(
            CallPlan,
            messages=st.lists(st.binary(max_size=120), max_size=12),
            cuts=st.lists(st.integers(min_value=1, max_value=130), min_size=1, max_size=6),
            pads=st.lists(st.sampled_from([0, 0, 0, 0, 1, 9]), min_size=1, max_size=4),
            end=st.sampled_from(["ok", "error", "reset", "open"]),
        ),
        min_size=1,
        max_size=3,
    ),
    st.lists(st.integers(min_value=0, max_value=1000), max_size=40),
    st.lists(st.integers(min_value=0), max_size=30),
)
def test_runs_of_plain_data_frames_after_the_headers(
    plans: list[CallPlan], order: list[int], points: list[int]
) -> None:
    """As a server streams: the headers first, then mostly unpadded DATA frames, one
    message or part of one each, of one call after another (the fast path's shortcut)."""
    asyncio.run(run_both(plans, order, points, headers_first=True))


async def fuzz(prefix_plans: list[CallPlan], garbage: list[bytes]) -> None:
    conn, transport, calls = await open_client(True, len(prefix_plans))
    start = server_bytes(bytes(transport.out), prefix_plans, [])
    conn.data_received(start[: len(start) // 2])
    for piece in garbage:
        conn.data_received(piece)  # never raises: a broken stream aborts the connection
    for call in calls:
        if call._error is not None:
            assert isinstance(call._error, H2RpcError)
            assert isinstance(map_rpc_error(call._error), errors.ServerError)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(call_plans, min_size=1, max_size=2), st.lists(st.binary(max_size=80), max_size=8))
def test_fuzz_arbitrary_bytes_only_end_calls_with_typed_errors(
    plans: list[CallPlan], garbage: list[bytes]
) -> None:
    asyncio.run(fuzz(plans, garbage))


def test_a_frame_header_that_claims_a_huge_data_frame_goes_to_h2() -> None:
    async def go() -> None:
        conn, transport, (call,) = await open_client(True, 1)
        start = server_bytes(bytes(transport.out), [CallPlan([b"a"], [100], [0], "open")], [])
        conn.data_received(start)
        assert list(call._inbox) == [b"a"]
        # DATA on stream 1 longer than the 16 KiB frame limit: a connection error, from h2.
        conn.data_received(b"\x01\x00\x00\x00\x00\x00\x00\x00\x01" + b"x" * 65536)
        assert call._error is not None
        assert call._error.code().name == "INTERNAL"

    asyncio.run(go())


def test_frames_inside_a_header_block_are_h2_protocol_errors_on_both_paths() -> None:
    """A header block waiting for its CONTINUATION takes no other frame: a PING, a
    WINDOW_UPDATE or DATA there ends the connection, with or without the fast path,
    whether it comes in the block's chunk or in the next."""
    block = b"\x40\x0bgrpc-status\x010"  # one literal header, new name, no indexing
    # Trailers on stream 1 without END_HEADERS (flags: END_STREAM only).
    headers = len(block).to_bytes(3, "big") + b"\x01\x01\x00\x00\x00\x01" + block

    async def go(fast: bool, intruder: bytes, split: bool) -> tuple[list[bytes], str]:
        conn, transport, (call,) = await open_client(fast, 1)
        plan = [CallPlan([b"a"], [100], [0], "open")]
        conn.data_received(server_bytes(bytes(transport.out), plan, []))
        if split:
            conn.data_received(headers)
            conn.data_received(intruder)
        else:
            conn.data_received(headers + intruder)
        return outcome(call)

    ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"
    window = b"\x00\x00\x04\x08\x00\x00\x00\x00\x01" + (100).to_bytes(4, "big")
    data = b"\x00\x00\x06\x00\x00\x00\x00\x00\x01" + encode_message(b"b")
    for intruder in (ping, window, data):
        for split in (False, True):
            fast = asyncio.run(go(True, intruder, split))
            assert fast == asyncio.run(go(False, intruder, split))
            assert fast == ([b"a"], "INTERNAL")


@dataclass
class SendPlan:
    sizes: list[int]  # bytes per send() call
    settings_window: int  # the server's initial stream window
    grants: list[int]  # WINDOW_UPDATEs (stream, then connection) between sends


send_plans = st.builds(
    SendPlan,
    sizes=st.lists(st.integers(min_value=0, max_value=40_000), min_size=1, max_size=8),
    settings_window=st.integers(min_value=0, max_value=70_000),
    grants=st.lists(st.integers(min_value=0, max_value=50_000), max_size=8),
)


async def send_run(fast: bool, plan: SendPlan) -> tuple[list[int], bytes, list[int]]:
    conn = Connection("test:1", "test:1", "http", None, fast_data=fast)
    transport = FakeTransport()
    conn.connection_made(transport)

    async def connect() -> Connection:
        return conn

    call = BidiStreamCall(connect, "/p", bytes)  # open both ways: DATA may go out
    await call.start()
    await asyncio.sleep(0)
    hello = bytes(transport.out)
    server = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None)
    )
    server.initiate_connection()
    server.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: plan.settings_window})
    server.receive_data(hello)
    server.send_headers(1, [(b":status", b"200"), (b"content-type", b"application/grpc")])
    conn.data_received(server.data_to_send())
    transport.out.clear()
    sent = []
    for k, size in enumerate(plan.sizes):
        payload = bytes((k + j) % 251 for j in range(size))
        sent.append(conn.send(1, payload if k % 2 else memoryview(payload), False))
        if k < len(plan.grants) and plan.grants[k]:
            if k % 2:
                server.increment_flow_control_window(plan.grants[k])
            else:
                server.increment_flow_control_window(plan.grants[k], stream_id=1)
            conn.data_received(server.data_to_send())
    conn._flush()
    h2c = conn._h2
    windows = [h2c.outbound_flow_control_window, h2c.streams[1].outbound_flow_control_window]
    return sent, bytes(transport.out), windows


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(send_plans)
def test_data_sent_without_h2_is_what_h2_sends(plan: SendPlan) -> None:
    fast, slow = asyncio.run(send_run(True, plan)), asyncio.run(send_run(False, plan))
    assert fast == slow
    sent, out, _ = fast
    data = b"".join(f[3] for f in frames_of(PREFACE + out) if f[0] == 0)
    expected = b"".join(
        bytes((k + j) % 251 for j in range(size))[:n]
        for k, (size, n) in enumerate(zip(plan.sizes, sent, strict=True))
    )
    assert data == expected  # every byte reported sent went out, in order
    assert first_send_took_its_room(plan, sent)


def first_send_took_its_room(plan: SendPlan, sent: list[int]) -> bool:
    """The first send went out as far as the initial windows allowed."""
    first_room = min(plan.settings_window, 65535, plan.sizes[0])
    return sent[0] == first_room


def test_a_ping_answer_leaves_with_what_the_woken_caller_sends() -> None:
    """grpc-go sends a PING with every burst it receives: a one-at-a-time publisher's
    next request and the answer go out in one write, not two."""

    async def go() -> None:
        conn = Connection("test:1", "test:1", "http", None)
        transport = FakeTransport()
        writes: list[bytes] = []
        transport.write = lambda data: writes.append(bytes(data))  # type: ignore[method-assign]
        conn.connection_made(transport)

        async def connect() -> Connection:
            return conn

        call = BidiStreamCall(connect, "/p", bytes)
        await call.start()
        await asyncio.sleep(0)
        server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        server.initiate_connection()
        server.receive_data(b"".join(writes))
        server.send_headers(1, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        conn.data_received(server.data_to_send())
        await asyncio.sleep(0)
        writes.clear()
        server.ping(b"bdp-ping")
        conn.data_received(server.data_to_send())
        assert call.try_write(encode_message(b"next request"))  # the woken publisher
        await asyncio.sleep(0)
        assert len(writes) == 1
        events = server.receive_data(writes[0])
        kinds = [type(e).__name__ for e in events]
        assert kinds == ["PingAckReceived", "DataReceived"]
        assert events[0].ping_data == b"bdp-ping"  # type: ignore[attr-defined]
        assert events[1].data == encode_message(b"next request")  # type: ignore[attr-defined]

    asyncio.run(go())


def test_a_failing_sender_does_not_stop_the_others_or_the_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> None:
        conn = Connection("test:1", "test:1", "http", None)
        transport = FakeTransport()
        conn.connection_made(transport)
        transport.out.clear()
        ran: list[str] = []

        def broken() -> None:
            raise RuntimeError("a bug in a sender")

        conn.schedule_pump(broken)
        conn.schedule_pump(lambda: ran.append("next"))
        conn._h2.ping(b"12345678")  # something to write
        await asyncio.sleep(0)
        assert ran == ["next"]
        assert frames_of(PREFACE + bytes(transport.out)) == [(6, 0, 0, b"12345678")]

    asyncio.run(go())
    assert "a bug in a sender" in caplog.text
