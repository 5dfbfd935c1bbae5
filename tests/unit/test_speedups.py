"""The C accelerator (liftbridge_client/_speedups.c) against its pure-Python twins.

Generated inputs go to both: the MSG walk must hand the same payloads to the same handlers
and return the same position, and report the same handler failures; the ack scans (an
enveloped Ack on NATS, a PublishResponse over h2) must vouch only for bytes protobuf decodes
to the same fields, and for every answer of the plain shape the server sends; the PUB
command must carry encode_message_plain's bytes. (The PublishRequest builder is tested
beside its twin in test_publish_wire.py.) When CI is set the module must be there
(a build that lost its compiler would otherwise test the twins twice and ship without it).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any, cast

import pytest
from budget import examples
from google.protobuf.message import DecodeError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from liftbridge_client import _native, envelope, models
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.wire import plain_answer, plain_publish_request
from liftbridge_client._transport import nats_shortcuts as transport
from liftbridge_client._transport.h2 import framing
from liftbridge_client.errors import InvalidInputError, ProtocolError
from liftbridge_client.exactly_once import mapping, uuids
from liftbridge_client.exactly_once.sequencer import Envelope, PartitionRef
from liftbridge_client.models import (
    Ack,
    AckPolicy,
    Message,
    ack_from_proto,
    ack_from_wire,
    owned_message_from_proto,
)

# The module as built, imported directly: its functions are tested against their twins
# also in a process that runs the client without it (LIFTBRIDGE_CLIENT_PURE).
try:
    from liftbridge_client import _speedups as speedups
except ImportError:
    speedups = None  # type: ignore[assignment]
needs_c = pytest.mark.skipif(
    speedups is None and not os.environ.get("CI"), reason="the C accelerator is not built"
)


def test_the_accelerator_is_built_in_ci_and_serves_unless_turned_off() -> None:
    pure = os.environ.get(_native.PURE_ENV, "") not in ("", "0")
    assert _native.ACTIVE is (speedups is not None and not pure)
    if os.environ.get("CI"):
        assert speedups is not None, (
            "CI is set but liftbridge_client._speedups did not import: the install did "
            "not compile liftbridge_client/_speedups.c (see hatch_build.py)"
        )


def test_pure_env_turns_it_off() -> None:
    import subprocess
    import sys

    code = "from liftbridge_client import _native; print(_native.ACTIVE)"
    env = {**os.environ, _native.PURE_ENV: "1"}
    argv = [sys.executable, "-c", code]
    out = subprocess.run(argv, check=False, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# ---- the MSG walk --------------------------------------------------------------------

ROUTED = {3: "a", 11: "b"}


def frame(draw: st.DrawFn) -> bytes:
    """One protocol item: mostly MSGs (routed or not, odd spacing, odd sizes), else junk."""
    kind = draw(st.sampled_from(["msg"] * 6 + ["ping", "junk", "hmsg"]))
    if kind == "ping":
        return b"PING\r\n"
    if kind == "junk":
        return draw(st.binary(max_size=12))
    payload = draw(st.binary(max_size=40))
    sid = draw(st.sampled_from([b"3", b"11", b"003", b"7", b"x", b"00000000000000000003"]))
    sp = draw(st.sampled_from([b" ", b"\t", b"  ", b" \x0b"]))
    reply = draw(st.sampled_from([b"", b"_INBOX.r" + sp, b"r\r" + sp]))
    size = str(len(payload)).encode()
    size = draw(
        st.sampled_from([size, size, b"0" + size, str(len(payload) + 1).encode(), b"-1", b"9" * 20])
    )
    tail = draw(st.sampled_from([b"", b"", b" ", b"\t"]))
    head = b"HMSG " if kind == "hmsg" else b"MSG "
    return head + b"subj" + sp + sid + sp + reply + size + tail + b"\r\n" + payload + b"\r\n"


@st.composite
def reads(draw: st.DrawFn) -> bytes:
    data = b"".join(frame(draw) for _ in range(draw(st.integers(0, 6))))
    cut = draw(st.integers(0, len(data)))
    return data[:cut]


def walk(
    serve: Callable[..., tuple[int, bool]], data: bytes, fail_at: int
) -> tuple[Any, list[Any], dict[str, int], list[Any]]:
    calls: list[Any] = []
    reports: list[Any] = []

    def handler(name: str) -> Callable[[bytes], None]:
        def handle(payload: bytes) -> None:
            calls.append((name, payload))
            if len(calls) == fail_at:
                raise ValueError(f"handler bug at call {fail_at}")

        return handle

    table = {sid: handler(name) for sid, name in ROUTED.items()}
    counts = {"in_msgs": 0, "in_bytes": 0}
    result = serve(data, table, counts, lambda sid, exc: reports.append((sid, repr(exc))))
    return result, calls, counts, reports


def python_serve(data: bytes, table: Any, counts: Any, report: Any) -> tuple[int, bool]:
    # The twin logs a handler's failure itself; record it the way the C walk reports it.
    original = transport.log.exception

    def logged(msg: str, sid: int) -> None:
        import sys

        report(sid, sys.exc_info()[1])

    transport.log.exception = logged  # type: ignore[assignment,method-assign]
    try:
        return transport.serve_routed(data, table, counts)
    finally:
        transport.log.exception = original  # type: ignore[method-assign]


@needs_c
@settings(max_examples=examples(1500), deadline=None)
@given(data=reads(), fail_at=st.integers(0, 4))
@example(data=b"MSG s 3 2\r\nhi\r\nMSG s 11 0\r\n\r\n", fail_at=0)
@example(data=b"MSG s 3 0000000000000000002\r\nhi\r\n", fail_at=0)
@example(data=b"MS", fail_at=0)
@example(data=b"MSG s 3 r\r 2\r\nhi\r\n", fail_at=0)
def test_the_walk_matches_its_twin(data: bytes, fail_at: int) -> None:
    assert speedups is not None
    assert walk(speedups.serve_routed, data, fail_at) == walk(python_serve, data, fail_at)


@needs_c
def test_the_walk_raises_what_is_not_an_exception_and_keeps_counts() -> None:
    assert speedups is not None
    seen: list[bytes] = []

    def stop(payload: bytes) -> None:
        seen.append(payload)
        raise KeyboardInterrupt

    counts = {"in_msgs": 0, "in_bytes": 0}
    with pytest.raises(KeyboardInterrupt):
        speedups.serve_routed(b"MSG s 3 2\r\nhi\r\nMSG s 3 2\r\nho\r\n", {3: stop}, counts, print)
    assert seen == [b"hi"]
    assert counts == {"in_msgs": 1, "in_bytes": 2}


@needs_c
def test_the_walk_refuses_other_types() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.serve_routed(bytearray(b"MSG"), {}, None, print)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.serve_routed(b"MSG", [], None, print)  # type: ignore[arg-type]


# ---- the ack scan --------------------------------------------------------------------

text = st.text(max_size=24)
int64 = st.integers(0, 2**63 - 1)


@st.composite
def plain_acks(draw: st.DrawFn) -> api_pb2.Ack:
    return api_pb2.Ack(
        stream=draw(text),
        partitionSubject=draw(text),
        msgSubject=draw(text),
        offset=draw(int64),
        ackInbox=draw(text),
        correlationId=draw(text),
        ackPolicy=draw(st.sampled_from([p.value for p in AckPolicy])),
        receptionTimestamp=draw(int64),
        commitTimestamp=draw(int64),
        ackError=cast(Any, draw(st.integers(0, 4))),
    )


def enveloped(payload: bytes) -> bytes:
    return envelope.encode(envelope.MsgType.ACK, payload)


@needs_c
@settings(max_examples=examples(800), deadline=None)
@given(pb=plain_acks())
def test_the_scan_vouches_for_every_plain_ack(pb: api_pb2.Ack) -> None:
    assert speedups is not None
    data = enveloped(pb.SerializeToString())
    fields = speedups.scan_ack(data, Ack)
    assert fields is not None
    assert fields[:5] == (pb.correlationId, pb.stream, pb.msgSubject, pb.ackError, pb.ackPolicy)
    made = fields[5]
    assert type(made) is Ack
    assert made.offset == pb.offset  # read by the scan, before any decode
    # The Ack the twin makes of the same bytes, and protobuf's, field for field.
    assert made == ack_from_wire(data[envelope.HEADER_LEN :]) == ack_from_proto(pb)
    assert made.offset == pb.offset  # and after the decode


@needs_c
def test_the_scans_acks_are_acks_and_are_freed() -> None:
    import gc
    import pickle
    import sys
    from dataclasses import FrozenInstanceError

    assert speedups is not None
    pb = api_pb2.Ack(
        stream="s", msgSubject="s", offset=41, correlationId="c", ackPolicy=api_pb2.ALL
    )
    data = enveloped(pb.SerializeToString())
    fields = speedups.scan_ack(data, Ack)
    assert fields is not None
    made = fields[5]
    with pytest.raises(FrozenInstanceError):
        made.offset = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(made)) == made == ack_from_proto(pb)
    assert hash(made) == hash(ack_from_proto(pb))
    assert "offset=41" in repr(made)
    answer = api_pb2.PublishResponse(ack=pb, correlationId="c").SerializeToString()
    del fields, made
    gc.collect()
    refs = sys.getrefcount(Ack), sys.getrefcount(data), sys.getrefcount(answer)
    for _ in range(2000):
        speedups.scan_ack(data, Ack)
        speedups.plain_response(answer, Ack)
    gc.collect()
    assert (sys.getrefcount(Ack), sys.getrefcount(data), sys.getrefcount(answer)) == refs


@needs_c
def test_the_scans_acks_are_left_out_of_the_collectors_count() -> None:
    """Slots that cannot lead back to the ack: the collector need not track it, before
    or after its fields are decoded; a subclass with a __dict__ could hold anything and
    stays tracked."""
    import gc

    assert speedups is not None
    pb = api_pb2.Ack(stream="s", msgSubject="m", offset=7, correlationId="c")
    data = enveloped(pb.SerializeToString())
    answer = api_pb2.PublishResponse(ack=pb, correlationId="c").SerializeToString()
    for made in (
        speedups.scan_ack(data, Ack)[5],  # type: ignore[index]
        speedups.pending_ack(data, Ack, {"c": Entry(("s", "m"))})[1],  # type: ignore[index]
        speedups.plain_response(answer, Ack)[1],  # type: ignore[index]
    ):
        assert type(made) is Ack
        assert not gc.is_tracked(made)
        assert made.msg_subject == "m"
        assert made.offset == 7
        assert not gc.is_tracked(made)
        assert made == ack_from_proto(pb)

    class Open:
        __slots__ = ("__dict__", "_decoded", "_offset", "_raw")

    try:
        made = speedups.scan_ack(data, Open)[5]  # type: ignore[index]
        assert type(made) is Open
        assert gc.is_tracked(made)
        made.loop = made  # type: ignore[attr-defined]  # a cycle through its dict
        del made
        assert gc.collect() >= 1
    finally:
        speedups.scan_ack(data, Ack)  # the class the client uses, back


@needs_c
def test_the_scans_take_only_a_class_with_the_acks_slots() -> None:
    assert speedups is not None
    data = enveloped(api_pb2.Ack(correlationId="c").SerializeToString())

    class Other:
        __slots__ = ("_decoded", "_raw")

    with pytest.raises(TypeError, match="_offset"):
        speedups.scan_ack(data, Other)

    class Borrowed:  # another class's slot descriptors in its namespace: not its slots
        _decoded = vars(Ack)["_decoded"]
        _offset = vars(Ack)["_offset"]
        _raw = vars(Ack)["_raw"]

    with pytest.raises(TypeError, match="_decoded"):
        speedups.scan_ack(data, Borrowed)
    with pytest.raises(TypeError):
        speedups.scan_ack(data, "Ack")  # type: ignore[arg-type]
    assert speedups.scan_ack(data, Ack) is not None  # and the right class still serves


def edited(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with a few edits: flips, cuts, insertions, foreign fields."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "insert", "field"]))
        at = draw(st.integers(0, len(data)))
        if how == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[at:]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        else:
            field = draw(st.integers(0, 20))
            wire = draw(st.integers(0, 7))
            body = draw(st.binary(max_size=11))
            data += bytes([(field << 3 | wire) & 0xFF]) + body
    return bytes(data)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _wide_varint(value: int, width: int) -> bytes:
    """``value`` as a varint of at least ``width`` bytes (padded with continuation bytes:
    the same value, read by protobuf only up to its own length limits)."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value and len(out) >= width:
            break
        out[-1] |= 0x80
    return bytes(out)


@st.composite
def widened(draw: st.DrawFn, payload: bytes, strings: tuple[int, ...]) -> bytes:
    """``payload`` (a message's top-level fields) with wire forms protobuf may refuse
    although the values are plain: one field's tag or length written in more bytes than
    needed (upb reads at most 5), or an invalid UTF-8 copy of a string field (one of
    ``strings``) ahead of the field, which protobuf checks although a later copy wins."""
    fields: list[tuple[int, bytes | None, bytes]] = []  # tag, length varint, value bytes
    at = 0
    while at < len(payload):
        tag, body = _varint(payload, at)
        if tag & 7 == 0:
            _, end = _varint(payload, body)
            fields.append((tag, None, payload[body:end]))
        else:
            size, start = _varint(payload, body)
            fields.append((tag, payload[body:start], payload[start : start + size]))
            end = start + size
        at = end
    out = [_wide_varint(tag, 1) + (prefix or b"") + value for tag, prefix, value in fields]
    how = draw(st.sampled_from(["tag", "length", "again", "none"]))
    if fields and how in ("tag", "length"):
        i = draw(st.integers(0, len(fields) - 1))
        tag, prefix, value = fields[i]
        width = draw(st.integers(1, 7))
        if how == "tag":
            out[i] = _wide_varint(tag, width) + (prefix or b"") + value
        elif prefix is not None:
            out[i] = _wide_varint(tag, 1) + _wide_varint(len(value), width) + value
    elif how == "again":
        number = draw(st.sampled_from(strings))
        bad = draw(st.sampled_from([b"\x80", b"\xed\xa0\x80", b"a\xff"]))
        out.insert(draw(st.integers(0, len(out))), bytes([number << 3 | 2, len(bad)]) + bad)
    return b"".join(out)


@st.composite
def mangled(draw: st.DrawFn) -> bytes:
    """A plain ack's bytes with a few edits (`edited`), or wire forms only protobuf's
    limits refuse (`widened`)."""
    payload = draw(widened(draw(plain_acks()).SerializeToString(), (1, 2, 3, 5, 6)))
    return edited(draw, enveloped(payload)) if draw(st.booleans()) else enveloped(payload)


@needs_c
@settings(max_examples=examples(3000), deadline=None)
@given(data=st.one_of(mangled(), st.binary(max_size=40)))
@example(data=enveloped(b"\x50\xff\xff\xff\xff\x0f"))  # ackError 2**32-1: int32 in protobuf
@example(data=enveloped(b"\x32\x02\xed\xa0"))  # a surrogate in correlationId
@example(data=enveloped(b"\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))  # offset -1
@example(data=enveloped(b"\x32\x01a\x32\x01b"))  # the last occurrence wins
def test_the_scan_vouches_only_for_what_protobuf_decodes_alike(data: bytes) -> None:
    assert speedups is not None
    fields = speedups.scan_ack(data, Ack)
    if fields is None:
        return  # protobuf decides (the pure path, tested on its own)
    try:
        pb = envelope.decode_ack(data)
    except ProtocolError as exc:
        raise AssertionError(f"the scan vouched for bytes protobuf refuses: {exc}") from None
    assert fields[:5] == (pb.correlationId, pb.stream, pb.msgSubject, pb.ackError, pb.ackPolicy)
    assert fields[5].offset == pb.offset
    if pb.ackPolicy in {p.value for p in AckPolicy}:
        assert fields[5] == ack_from_wire(data[envelope.HEADER_LEN :]) == ack_from_proto(pb)


@needs_c
@pytest.mark.parametrize(
    "data",
    [
        b"",
        envelope.encode(envelope.MsgType.PUBLISH, b""),  # another type
        envelope.encode(envelope.MsgType.ACK, b"", crc=True),  # with a CRC: protobuf's path
        enveloped(b"\x58\x00"),  # field 11: unknown to this client
        enveloped(b"\x0a\x05ab"),  # a string longer than what is left
    ],
)
def test_the_scan_leaves_other_shapes_to_protobuf(data: bytes) -> None:
    assert speedups is not None
    assert speedups.scan_ack(data, Ack) is None


# ---- the ack scan with its lookup: pending_ack ---------------------------------------


class Entry:
    """A registry entry as the scan sees one: what its ack must name, in ``expect``."""

    __slots__ = ("expect",)

    def __init__(self, expect: object) -> None:
        self.expect = expect


_KNOWN_POLICIES = {p.value for p in AckPolicy}


def _expected(pb: api_pb2.Ack) -> bool:
    """Whether pending_ack must settle the publish that expects this ack."""
    return pb.ackError == api_pb2.Ack.OK and pb.ackPolicy in _KNOWN_POLICIES


@needs_c
@settings(max_examples=examples(800), deadline=None)
@given(pb=plain_acks(), other=text)
def test_pending_ack_settles_exactly_the_publish_that_expects_it(
    pb: api_pb2.Ack, other: str
) -> None:
    assert speedups is not None
    data = enveloped(pb.SerializeToString())
    entry = Entry((pb.stream, pb.msgSubject))
    found = speedups.pending_ack(data, Ack, {pb.correlationId: entry})
    if not _expected(pb):
        assert found is None  # an error ack: protobuf's path words the error
        return
    assert found is not None
    assert found[0] is entry
    assert type(found[1]) is Ack
    assert found[1].offset == pb.offset
    assert found[1] == ack_from_proto(pb)
    # Anything else is left to protobuf's path: another id, another stream or subject.
    assert speedups.pending_ack(data, Ack, {}) is None
    assert speedups.pending_ack(data, Ack, {pb.correlationId + "x": entry}) is None
    for expect in (
        (pb.stream + "x", pb.msgSubject),
        (pb.stream, pb.msgSubject + "x"),
        (pb.msgSubject, pb.stream) if pb.msgSubject != pb.stream else None,
        (other, pb.msgSubject) if other != pb.stream else None,
        [pb.stream, pb.msgSubject],
        (pb.stream, pb.msgSubject, ""),
        (pb.stream.encode(), pb.msgSubject),
    ):
        assert speedups.pending_ack(data, Ack, {pb.correlationId: Entry(expect)}) is None


@needs_c
@settings(max_examples=examples(3000), deadline=None)
@given(data=st.one_of(mangled(), st.binary(max_size=40)))
@example(data=enveloped(b"\x50\x01"))  # an error ack
@example(data=enveloped(b"\x38\x03"))  # an ack policy this client does not know
def test_pending_ack_finds_only_what_protobufs_path_would_settle(data: bytes) -> None:
    assert speedups is not None
    try:
        pb: api_pb2.Ack | None = envelope.decode_ack(data)
    except ProtocolError:
        pb = None
    if pb is None:
        # Whatever id the bytes might seem to name: a registry holding it finds nothing.
        scanned = speedups.scan_ack(data, Ack)
        assert scanned is None
        assert speedups.pending_ack(data, Ack, {"": Entry(("", ""))}) is None
        return
    entry = Entry((pb.stream, pb.msgSubject))
    found = speedups.pending_ack(data, Ack, {pb.correlationId: entry})
    if found is not None:
        assert _expected(pb)
        assert found[0] is entry
        assert found[1] == ack_from_wire(data[envelope.HEADER_LEN :]) == ack_from_proto(pb)
    elif _expected(pb):
        # Only bytes the scan leaves to protobuf (a shape other than the server's).
        assert speedups.scan_ack(data, Ack) is None


@needs_c
def test_pending_ack_compares_text_as_utf8() -> None:
    assert speedups is not None
    pb = api_pb2.Ack(stream="strom-\u00e9\U0001f600", msgSubject="sub.\u4e2d", correlationId="c")
    data = enveloped(pb.SerializeToString())
    found = speedups.pending_ack(data, Ack, {"c": Entry((pb.stream, pb.msgSubject))})
    assert found is not None
    assert found[1].stream == pb.stream
    # A str UTF-8 cannot encode (a lone surrogate) matches nothing, and raises nothing.
    assert speedups.pending_ack(data, Ack, {"c": Entry(("\ud800", pb.msgSubject))}) is None
    decomposed = "strom-e\u0301\U0001f600"  # equal when normalized, not as text
    assert speedups.pending_ack(data, Ack, {"c": Entry((decomposed, pb.msgSubject))}) is None


@needs_c
def test_pending_ack_refuses_other_types_and_passes_errors_on() -> None:
    assert speedups is not None
    data = enveloped(api_pb2.Ack(stream="s", msgSubject="s", correlationId="c").SerializeToString())
    entry = Entry(("s", "s"))
    with pytest.raises(TypeError):
        speedups.pending_ack(bytearray(data), Ack, {"c": entry})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.pending_ack(data, Ack, [("c", entry)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.pending_ack(data, Ack)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="_decoded"):
        speedups.pending_ack(data, Entry, {"c": entry})

    class Raising:
        @property
        def expect(self) -> object:
            raise LookupError("no expect")

    with pytest.raises(LookupError, match="no expect"):
        speedups.pending_ack(data, Ack, {"c": Raising()})
    with pytest.raises(AttributeError):
        speedups.pending_ack(data, Ack, {"c": object()})
    assert speedups.pending_ack(data, Ack, {"c": entry}) is not None  # and it still serves


@needs_c
def test_pending_ack_keeps_no_reference() -> None:
    import gc
    import sys

    assert speedups is not None
    data = enveloped(api_pb2.Ack(stream="s", msgSubject="s", correlationId="c").SerializeToString())
    entry, other = Entry(("s", "s")), Entry(("s", "t"))
    entries = {"c": entry}
    gc.collect()
    refs = [sys.getrefcount(x) for x in (Ack, data, entry, other, entries)]
    for _ in range(2000):
        speedups.pending_ack(data, Ack, entries)
        speedups.pending_ack(data, Ack, {"c": other})
        speedups.pending_ack(data, Ack, {})
    gc.collect()
    assert [sys.getrefcount(x) for x in (Ack, data, entry, other, entries)] == refs


# ---- the gRPC messages of a call's DATA bytes: split_messages --------------------------


@st.composite
def grpc_streams(draw: st.DrawFn) -> bytes:
    """gRPC messages back to back, now and then one flagged or cut, or bytes appended."""
    out = b""
    for _ in range(draw(st.integers(0, 6))):
        flag = draw(st.sampled_from([0, 0, 0, 0, 1, 2, 0x80]))
        payload = draw(st.binary(max_size=40))
        out += bytes([flag]) + len(payload).to_bytes(4, "big") + payload
    if draw(st.booleans()):
        out = out[: draw(st.integers(0, len(out)))]
    return out + draw(st.binary(max_size=6))


def _outcome(splitter: framing.MessageSplitter, pieces: list[bytes]) -> list[object]:
    seen: list[object] = []
    for piece in pieces:
        try:
            seen.append(splitter.feed(piece))
        except framing.H2RpcError as exc:
            seen.append((exc.code(), exc.details()))
            break
    seen.append(splitter.buffered)
    return seen


@needs_c
@settings(max_examples=examples(2000), deadline=None)
@given(data=st.one_of(grpc_streams(), st.binary(max_size=60)), limit=st.integers(-1, 50))
@example(data=b"\x00\xff\xff\xff\xff", limit=50)  # a head naming 4 GiB
@example(data=b"\x00\x00\x00\x00\x00" * 3, limit=0)  # empty messages at the limit 0
def test_split_messages_matches_its_twin(data: bytes, limit: int) -> None:
    assert speedups is not None
    assert speedups.split_messages(data, limit) == framing.split_messages_twin(data, limit)


@needs_c
@settings(max_examples=examples(500), deadline=None)
@given(
    data=grpc_streams(), cuts=st.lists(st.integers(0, 300), max_size=5), limit=st.integers(0, 50)
)
def test_the_splitter_reads_alike_with_either_walk(
    data: bytes, cuts: list[int], limit: int
) -> None:
    assert speedups is not None
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    kept = framing.split_messages
    try:
        framing.split_messages = framing.split_messages_twin
        pure = _outcome(framing.MessageSplitter(limit), pieces)
        framing.split_messages = speedups.split_messages
        compiled = _outcome(framing.MessageSplitter(limit), pieces)
    finally:
        framing.split_messages = kept
    assert compiled == pure


@needs_c
def test_split_messages_refuses_other_types() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.split_messages(bytearray(5), 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.split_messages(b"", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.split_messages(b"")  # type: ignore[call-arg]
    with pytest.raises(OverflowError):
        speedups.split_messages(b"", 1 << 70)


# ---- a run of one stream's DATA frames: data_run --------------------------------------

_RUN_HEAD = bytes([0, 0]) + (7).to_bytes(4, "big")  # DATA, no flags, stream 7


@st.composite
def frame_runs(draw: st.DrawFn) -> tuple[bytes, int]:
    """HTTP/2 frames back to back, mostly DATA of stream 7 without flags, now and then one
    of another type, flags or stream, or longer than the limit; cut anywhere, and an offset
    to start from (sometimes past a frame's start)."""
    out = draw(st.binary(max_size=12))
    start = len(out) if draw(st.booleans()) else draw(st.integers(0, len(out)))
    for _ in range(draw(st.integers(0, 8))):
        payload = draw(st.binary(max_size=30))
        head = draw(
            st.sampled_from(
                [_RUN_HEAD] * 4
                + [
                    bytes([0, 1]) + (7).to_bytes(4, "big"),  # END_STREAM
                    bytes([0, 8]) + (7).to_bytes(4, "big"),  # PADDED
                    bytes([0, 0]) + (9).to_bytes(4, "big"),  # another stream
                    bytes([8, 0]) + (7).to_bytes(4, "big"),  # WINDOW_UPDATE
                ]
            )
        )
        out += len(payload).to_bytes(3, "big") + head + payload
    if draw(st.booleans()):
        out = out[: draw(st.integers(start, len(out)))]
    return out, start


@needs_c
@settings(max_examples=examples(2000), deadline=None)
@given(
    run=st.one_of(frame_runs(), st.tuples(st.binary(max_size=60), st.just(0))),
    max_frame=st.integers(0, 40),
)
@example(run=(b"\xff\xff\xff" + _RUN_HEAD, 0), max_frame=1 << 24)  # a head naming 16 MiB
@example(run=((b"\x00\x00\x00" + _RUN_HEAD) * 3, 0), max_frame=0)  # empty frames
def test_data_run_matches_its_twin(run: tuple[bytes, int], max_frame: int) -> None:
    assert speedups is not None
    data, start = run
    got = speedups.data_run(data, start, _RUN_HEAD, max_frame)
    assert got == framing.data_run_twin(data, start, _RUN_HEAD, max_frame)
    payload, flow, end = got
    assert start <= end <= len(data)
    assert flow == len(payload)  # no padding: a frame's length is its payload's


@needs_c
def test_data_run_refuses_other_inputs() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.data_run(bytearray(9), 0, _RUN_HEAD, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.data_run(b"", 0, b"\x00" * 5, 10)  # a head is 6 bytes
    with pytest.raises(TypeError):
        speedups.data_run(b"", 0, _RUN_HEAD)  # type: ignore[call-arg]
    for walk in (speedups.data_run, framing.data_run_twin):
        with pytest.raises(ValueError, match="out of range"):
            walk(b"abc", 4, _RUN_HEAD, 10)
        with pytest.raises(ValueError, match="out of range"):
            walk(b"abc", -1, _RUN_HEAD, 10)
    with pytest.raises(OverflowError):
        speedups.data_run(b"abc", 1 << 70, _RUN_HEAD, 10)


# ---- the headers of a plain publish ---------------------------------------------------


@needs_c
def test_the_header_limits_are_the_envelopes() -> None:
    assert speedups is not None
    assert speedups.MAX_PLAIN_HEADERS == envelope.MAX_PLAIN_HEADERS
    assert speedups.MAX_HEADER_KEY_BYTES == envelope.MAX_HEADER_KEY_BYTES


class _Str(str):
    pass


class _Bytes(bytes):
    pass


names = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["lbspark-id", "eo-uuid", "\ud800", "é" * 40, "x" * 32767, "x" * 32768]),
    st.builds(_Str, st.text(max_size=3)),
    st.integers(),
)
values = st.one_of(
    st.binary(max_size=200),
    st.binary(min_size=127, max_size=129),
    st.builds(_Bytes, st.binary(max_size=3)),
    st.builds(bytearray, st.binary(max_size=3)),
    st.text(max_size=3),
    st.none(),
)


@needs_c
@settings(max_examples=examples(1500), deadline=None)
@given(
    headers=st.one_of(
        st.dictionaries(names, values, max_size=10),
        st.dictionaries(st.text(max_size=8), st.binary(max_size=20), max_size=9),
        st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)), max_size=2),
        st.none(),
    ),
    tag=st.sampled_from([envelope.MESSAGE_HEADERS_TAG, envelope.REQUEST_HEADERS_TAG]),
)
@example(headers={"\ud800": b""}, tag=envelope.MESSAGE_HEADERS_TAG)  # a lone surrogate
@example(headers={"x" * 32767: b"v"}, tag=envelope.MESSAGE_HEADERS_TAG)  # the longest name
@example(headers={"x" * 32768: b"v"}, tag=envelope.MESSAGE_HEADERS_TAG)  # one byte over
@example(headers={str(i): b"" for i in range(9)}, tag=envelope.MESSAGE_HEADERS_TAG)
def test_the_header_entries_are_the_twins(headers: Any, tag: int) -> None:
    assert speedups is not None
    got = speedups.header_entries(headers, tag)
    assert got == envelope.plain_header_entries_twin(headers, tag)
    if got:
        # And they are protobuf's map: what the server decodes is the dict.
        request = api_pb2.PublishRequest.FromString(got if tag == 0x2A else b"")
        message = api_pb2.Message.FromString(got if tag == 0x4A else b"")
        assert dict((request if tag == 0x2A else message).headers) == headers


@needs_c
def test_header_entries_refuse_a_tag_beyond_one_byte() -> None:
    assert speedups is not None
    with pytest.raises(ValueError, match="one byte"):
        speedups.header_entries({}, 0x80)


# ---- the exactly-once key mapping's hash -----------------------------------------------


@needs_c
@settings(max_examples=examples(500), deadline=None)
@given(data=st.binary(max_size=300))
@example(data=b"")
@example(data=b"\xff" * 64)
def test_fnv1a_32_is_the_twins(data: bytes) -> None:
    assert speedups is not None
    assert speedups.fnv1a_32(data) == mapping.fnv1a_32(data)


@needs_c
def test_fnv1a_32_takes_only_exact_bytes() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.fnv1a_32(bytearray(b"k"))  # type: ignore[arg-type]
    # The mapping hashes other bytes-likes with the twin.
    assert mapping.modulo_index(bytearray(b"key-7"), 5) == mapping.modulo_index(b"key-7", 5)  # type: ignore[arg-type]


# ---- the read_committed reader's UUID split and envelopes -----------------------------


@needs_c
@settings(max_examples=examples(1500), deadline=None)
@given(raw=st.binary(min_size=16, max_size=16))
@example(raw=b"\xff" * 16)  # every clock bit: the twin masks to 64 bits, C wraps
@example(raw=bytes(16))
def test_uuid_fields_is_the_twins(raw: bytes) -> None:
    assert speedups is not None
    assert speedups.uuid_fields(raw) == uuids.fields_of_twin(raw) == uuids.fields_of(raw)


@needs_c
@settings(max_examples=examples(1500), deadline=None)
@given(
    producer=st.binary(min_size=6, max_size=6),
    clock=st.integers(0, 2**64 - 1),
    flags=st.integers(0, 0x3FF),
)
@example(producer=b"\xff" * 6, clock=2**64 - 1, flags=0x3FF)
@example(producer=bytes(6), clock=0, flags=0)
def test_uuid_bytes_is_the_twins(producer: bytes, clock: int, flags: int) -> None:
    assert speedups is not None
    raw = speedups.uuid_bytes(producer, clock, flags)
    assert raw == uuids.uuid_bytes_of_twin(producer, clock, flags)
    assert raw == uuids.uuid_bytes_of(producer, clock, flags)
    assert uuids.fields_of(raw) == (producer, clock, flags)  # and back


@needs_c
@pytest.mark.parametrize(
    ("producer", "clock", "flags"),
    [
        (bytes(5), 1, 0),  # not 6 bytes
        (bytearray(6), 1, 0),  # not exact bytes
        (bytes(6), -1, 0),
        (bytes(6), 2**64, 0),
        (bytes(6), 1, -1),
        (bytes(6), 1, 0x400),
        (bytes(6), 1, True),  # bool is no flags value
        (bytes(6), 1.0, 0),
        (bytes(6), 1, 2**70),
    ],
)
def test_uuid_bytes_leaves_the_rest_to_the_twin(
    producer: object, clock: object, flags: object
) -> None:
    assert speedups is not None
    assert speedups.uuid_bytes(producer, clock, flags) is None
    with pytest.raises(TypeError, match="3 arguments"):
        speedups.uuid_bytes(bytes(6), 1)  # type: ignore[call-arg]


@needs_c
@pytest.mark.parametrize(
    "raw", [b"", bytes(15), bytes(17), bytearray(16), memoryview(bytes(16)), "x" * 16, None]
)
def test_uuid_fields_leaves_everything_but_16_exact_bytes_to_the_twin(raw: object) -> None:
    assert speedups is not None
    assert speedups.uuid_fields(raw) is None
    if isinstance(raw, bytes | bytearray | memoryview) and len(raw) == 16:
        assert uuids.fields_of(raw) == uuids.fields_of_twin(bytes(raw))  # type: ignore[arg-type]
    else:
        with pytest.raises((InvalidInputError, TypeError)):
            uuids.fields_of(raw)  # type: ignore[arg-type]


@needs_c
@settings(max_examples=examples(300), deadline=None)
@given(
    begin=st.integers(-(2**63), 2**63 - 1),
    uuid=st.binary(max_size=20),
    message=st.one_of(st.none(), st.binary(max_size=8), st.integers()),
    ticks=st.integers(0, 2**40),
    skip=st.integers(0, 2**20),
)
def test_new_slotted_makes_what_the_class_makes(
    begin: int, uuid: bytes, message: object, ticks: int, skip: int
) -> None:
    import pickle
    from dataclasses import FrozenInstanceError

    assert speedups is not None
    ref = PartitionRef("s", 3)
    args = (ref, begin, begin + 1, uuid, message, ticks, skip)
    made = speedups.new_slotted(Envelope, *args)
    twin = _native.new_slotted_twin(Envelope, *args)
    assert type(made) is Envelope
    assert made == twin == Envelope(*args)
    assert hash(made) == hash(twin)
    assert repr(made) == repr(twin)
    assert pickle.loads(pickle.dumps(made)) == made
    with pytest.raises(FrozenInstanceError):
        made.begin = 0  # type: ignore[misc]


@needs_c
def test_new_slotted_takes_every_slot_of_a_class_of_its_own_and_frees() -> None:
    import gc
    import sys

    assert speedups is not None
    ref = PartitionRef("s", 0)
    with pytest.raises(TypeError, match="7 slot values, got 6"):
        speedups.new_slotted(Envelope, ref, 0, 1, b"", None, 1)
    with pytest.raises(TypeError, match="7 slot values, got 8"):
        speedups.new_slotted(Envelope, ref, 0, 1, b"", None, 1, 0, 0)
    untyped: Any = speedups.new_slotted
    with pytest.raises(TypeError, match="class first"):
        untyped("Envelope", ref)
    with pytest.raises(TypeError, match="class first"):
        untyped()

    class Plain:  # no __slots__
        pass

    class Listed:
        __slots__ = ["a"]  # a list, not the tuple the C reads

    class Borrowed:  # another class's slot descriptor in its namespace: not its slot
        __slots__ = ()
        partition = vars(Envelope)["partition"]

    class Named:
        __slots__ = ("partition",)

    setattr(Named, "__slots__", ("nope",))  # names a slot it lacks  # noqa: B010
    for cls, what in ((Plain, "__slots__"), (Listed, "__slots__"), (Named, "no slot nope")):
        with pytest.raises(TypeError, match=what):
            speedups.new_slotted(cls, 1)
    setattr(Borrowed, "__slots__", ("partition",))  # noqa: B010
    with pytest.raises(TypeError, match="no slot partition"):
        speedups.new_slotted(Borrowed, ref)
    # The class it served before is still served (the failed lookups cached nothing).
    assert speedups.new_slotted(Envelope, ref, 0, 1, b"u", None, 1, 0) == Envelope(ref, 0, 1, b"u")
    value = b"v" * 100
    gc.collect()
    refs = sys.getrefcount(Envelope), sys.getrefcount(value)
    for _ in range(2000):
        speedups.new_slotted(Envelope, ref, 0, 1, value, value, 1, 0)
    gc.collect()
    assert (sys.getrefcount(Envelope), sys.getrefcount(value)) == refs


# ---- the PUB command -----------------------------------------------------------------


@needs_c
@settings(max_examples=examples(800), deadline=None)
@given(
    value=st.binary(max_size=300),
    cid=st.text(max_size=140),
    inbox=st.sampled_from(["", "_INBOX.abc", "_INBOX." + "x" * 130]),
    policy=st.sampled_from([p.value for p in AckPolicy]),
    key=st.binary(max_size=140),
    entries=st.sampled_from([b"", b"\x4a\x06\x0a\x01k\x12\x01v"]),
    limit=st.sampled_from([10**6, 200, 0]),
)
def test_the_command_is_the_envelope_in_a_pub(
    value: bytes, cid: str, inbox: str, policy: int, key: bytes, entries: bytes, limit: int
) -> None:
    assert speedups is not None
    parts = envelope.plain_parts(inbox, policy, key)
    assert parts is not None
    got = speedups.publish_command(
        b"PUB s.1 ", parts[0], value, entries, parts[1], cid, parts[2], limit
    )
    # The key as an argument, on the keyless head (what the publisher sends): the same.
    keyless = envelope.plain_parts(inbox, policy)
    assert keyless is not None
    args = (b"PUB s.1 ", keyless[0], value, entries, keyless[1], cid, keyless[2], limit)
    assert speedups.publish_command(*args, key) == got
    if not value or not cid or not cid.isascii():
        assert got is None  # encode_message_plain's general path: not plain
        return
    payload = envelope.encode_message_plain(value, inbox, cid, policy, key, entries)
    if len(payload) > limit:
        assert got is None
        return
    assert got == b"PUB s.1 %d\r\n%s\r\n" % (len(payload), payload)
    # What the server reads back: the same message (headers as field 9 entries).
    decoded = envelope.decode_message(payload)
    assert (decoded.value, decoded.key, decoded.correlationId) == (value, key, cid)


@needs_c
def test_the_command_takes_a_key_only_on_a_head_it_knows() -> None:
    assert speedups is not None
    parts = envelope.plain_parts("_INBOX.abc", 0)
    assert parts is not None
    assert parts[0].endswith(b"\x1a")
    rest = (b"v", b"", parts[1], "cid", parts[2], 10**6)
    keyed = speedups.publish_command(b"PUB s ", parts[0], *rest, b"k")
    assert keyed is not None
    assert envelope.decode_message(keyed.split(b"\r\n")[1]).key == b"k"
    # A head that does not end in the value's tag: no guess, the general path.
    assert speedups.publish_command(b"PUB s ", parts[0][:-1], *rest, b"k") is None
    assert speedups.publish_command(b"PUB s ", b"", *rest, b"k") is None
    # An empty key is no key.
    assert speedups.publish_command(b"PUB s ", parts[0], *rest, b"") == speedups.publish_command(
        b"PUB s ", parts[0], *rest
    )
    with pytest.raises(TypeError, match="key as bytes"):
        speedups.publish_command(b"PUB s ", parts[0], *rest, bytearray(b"k"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="8 or 9 arguments"):
        speedups.publish_command(b"PUB s ", parts[0], *rest, b"k", b"")  # type: ignore[call-arg]


# ---- the PublishAsync answer ---------------------------------------------------------


@st.composite
def responses(draw: st.DrawFn) -> api_pb2.PublishResponse:
    ack = draw(plain_acks())
    cid = draw(st.sampled_from([ack.correlationId, ack.correlationId, "", "other"]))
    return api_pb2.PublishResponse(ack=ack, correlationId=cid)


@needs_c
@settings(max_examples=examples(800), deadline=None)
@given(resp=responses())
def test_the_answer_scan_takes_every_plain_answer(resp: api_pb2.PublishResponse) -> None:
    assert speedups is not None
    got = speedups.plain_response(resp.SerializeToString(), Ack)
    ack = resp.ack
    plain = (
        ack.ackError == 0 and resp.correlationId != "" and resp.correlationId == ack.correlationId
    )
    if not plain:
        assert got is None
        return
    assert got == (resp.correlationId, ack_from_proto(ack))
    assert got[1].offset == ack.offset
    # Where the quick twin vouches too, both say the same.
    quick = plain_answer(resp.SerializeToString(), Ack)
    assert quick is None or quick == got


@st.composite
def mangled_responses(draw: st.DrawFn) -> bytes:
    response = draw(responses())
    if response.HasField("ack") and draw(st.booleans()):  # protobuf's limits in the ack
        wide = draw(widened(response.ack.SerializeToString(), (1, 2, 3, 5, 6)))
        response.ClearField("ack")
        return b"\x0a" + _wide_varint(len(wide), 1) + wide + response.SerializeToString()
    data = bytearray(response.SerializeToString())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
    return bytes(data)


@needs_c
@settings(max_examples=examples(3000), deadline=None)
@given(data=st.one_of(mangled_responses(), st.binary(max_size=40)))
@example(data=b"\x0a\x02\x32\x00\x1a\x00")  # no correlation id: the full path's
@example(data=b"\x1a\x01c\x0a\x03\x32\x01c")  # the id first: any field order is protobuf's
@example(data=b"\x0a\x05\x32\x01c\x38\x07\x1a\x01c")  # ack policy 7: unknown to this client
def test_the_answer_scan_vouches_only_for_what_protobuf_decodes_alike(data: bytes) -> None:
    assert speedups is not None
    got = speedups.plain_response(data, Ack)
    if got is None:
        return
    try:
        resp = api_pb2.PublishResponse.FromString(data)
    except DecodeError as exc:
        raise AssertionError(f"the scan vouched for bytes protobuf refuses: {exc}") from None
    assert not resp.HasField("asyncError")
    # The ack's own bytes (not re-encoded: a field may be spelt out at its default).
    assert got[0] == resp.correlationId
    assert got[1].offset == resp.ack.offset
    assert resp.ack.correlationId == resp.correlationId != ""
    assert resp.ack.ackError == 0
    assert got[1] == ack_from_proto(resp.ack)


@needs_c
@pytest.mark.parametrize("partition", [-1, 2**31, 2**64])
def test_the_request_leaves_partitions_protobuf_cannot_hold_to_the_general_path(
    partition: int,
) -> None:
    assert speedups is not None
    assert speedups.publish_request(b"v", "s", partition, "c", 0, b"", b"") is None


@needs_c
def test_the_request_refuses_what_is_not_utf8_as_its_twin_does() -> None:
    assert speedups is not None
    for args in ((b"v", "s\ud800", 0, "c"), (b"v", "s", 0, "c\ud800")):
        with pytest.raises(UnicodeEncodeError):
            plain_publish_request(*args, 0, b"", b"")
        with pytest.raises(UnicodeEncodeError):
            speedups.publish_request(*args, 0, b"", b"")


# ---- a subscribed message straight into models.Message: message_of -------------------


def _fields(msg: Message) -> tuple[object, ...]:
    """Everything a reader sees of a message, with each value's exact type."""
    values = (
        msg.stream,
        msg.partition,
        msg.offset,
        msg.value,
        msg.key,
        msg.timestamp_ns,
        msg.subject,
        msg.reply_subject,
        dict(msg.headers),
        dict(msg.raw_headers),
    )
    return (*values, *(type(v).__name__ for v in values))


def _via_protobuf(raw: bytes) -> Message:
    return owned_message_from_proto(api_pb2.Message.FromString(raw))


@st.composite
def plain_messages(draw: st.DrawFn) -> bytes:
    """A received message's bytes as the server sends them (the subject and reply headers
    of its own, mostly), sometimes merged with a second one: protobuf's last occurrence of
    a field wins, and map entries add up."""
    subject = draw(text)
    headers = draw(st.dictionaries(text, st.binary(max_size=12), max_size=3))
    if draw(st.booleans()):
        headers["subject"] = subject.encode() if draw(st.booleans()) else b"other"
        headers["reply"] = b"" if draw(st.booleans()) else draw(st.binary(max_size=4))
    pb = api_pb2.Message(
        offset=draw(int64),
        key=draw(st.binary(max_size=16)),
        value=draw(st.binary(max_size=300)),
        timestamp=draw(int64),
        stream=draw(text),
        partition=draw(st.integers(0, 2**31 - 1)),
        subject=subject,
        replySubject=draw(text),
        headers=headers,
        ackInbox=draw(text),
        correlationId=draw(text),
        ackPolicy=cast(Any, draw(st.sampled_from([0, 1, 2, 7]))),
    )
    raw = pb.SerializeToString()
    if draw(st.booleans()):
        raw += api_pb2.Message(
            stream=draw(text), offset=draw(int64), headers={draw(text): b"x"}
        ).SerializeToString()
    return raw


@needs_c
@settings(max_examples=examples(1000), deadline=None)
@given(raw=plain_messages())
def test_message_of_makes_every_plain_message_as_protobuf_does(raw: bytes) -> None:
    assert speedups is not None
    made = speedups.message_of(raw, Message, models._LazyHeaders, models._EMPTY)
    assert made is not None
    assert type(made) is Message
    assert _fields(made) == _fields(_via_protobuf(raw))
    assert made == _via_protobuf(raw) == models.message_from_wire(raw)


@st.composite
def mangled_messages(draw: st.DrawFn) -> bytes:
    """A message's bytes with a few edits (`edited`), or wire forms only protobuf's
    limits refuse (`widened`)."""
    raw = draw(widened(draw(plain_messages()), (5, 7, 8, 10, 11)))
    return edited(draw, raw) if draw(st.booleans()) else raw


@needs_c
@settings(max_examples=examples(3000), deadline=None)
@given(data=st.one_of(mangled_messages(), st.binary(max_size=60)))
@example(data=b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")  # offset -1: 10 bytes
@example(data=b"\x30\x80\x80\x80\x80\x08")  # partition 2**31: int32 wraps in protobuf
@example(data=b"\x2a\x02\xed\xa0")  # a surrogate in stream
@example(data=b"\x4a\x04\x0a\x02\xed\xa0")  # a surrogate in a header name
@example(data=b"\x4a\x02\x18\x01")  # a header entry with a field of its own
@example(data=b"\x2a\x01a\x2a\x01b")  # the last occurrence wins
@example(data=b"\x1a\x01v\x08\x05\x12\x00")  # an empty key field
def test_message_of_vouches_only_for_what_protobuf_decodes_alike(data: bytes) -> None:
    assert speedups is not None
    made = speedups.message_of(data, Message, models._LazyHeaders, models._EMPTY)
    try:
        expected = _via_protobuf(data)
    except DecodeError:
        assert made is None, "message_of made a message of bytes protobuf refuses"
        with pytest.raises(DecodeError):
            models.message_from_wire(data)  # the caller's path raises protobuf's error
        return
    if made is not None:
        assert _fields(made) == _fields(expected)
    assert _fields(models.message_from_wire(data)) == _fields(expected)


@needs_c
def test_message_of_leaves_negative_numbers_and_unknown_fields_to_protobuf() -> None:
    assert speedups is not None
    for pb in (
        api_pb2.Message(offset=-1),
        api_pb2.Message(timestamp=-5),
        api_pb2.Message(partition=-2),
    ):
        raw = pb.SerializeToString()
        assert speedups.message_of(raw, Message, models._LazyHeaders, models._EMPTY) is None
        assert _fields(models.message_from_wire(raw)) == _fields(_via_protobuf(raw))
    unknown = api_pb2.Message(offset=3).SerializeToString() + b"\x68\x01"  # field 13
    assert speedups.message_of(unknown, Message, models._LazyHeaders, models._EMPTY) is None
    assert models.message_from_wire(unknown).offset == 3


@needs_c
def test_message_of_keeps_headers_undecoded_and_frees_what_it_made() -> None:
    import gc
    import pickle
    import sys

    assert speedups is not None
    raw = api_pb2.Message(
        stream="s", subject="s", value=b"v", headers={"subject": b"s", "reply": b"", "a": b"1"}
    ).SerializeToString()
    made = speedups.message_of(raw, Message, models._LazyHeaders, models._EMPTY)
    assert made is not None
    assert made.headers._pb is raw  # type: ignore[attr-defined]  # held, not yet decoded
    assert dict(made.headers) == {"a": b"1"}
    assert made.headers._pb is None  # type: ignore[attr-defined]  # decoded once, let go
    assert dict(made.raw_headers) == {"a": b"1", "subject": b"s", "reply": b""}
    assert pickle.loads(pickle.dumps(made)) == made
    bare = api_pb2.Message(stream="s", value=b"v").SerializeToString()
    plain = speedups.message_of(bare, Message, models._LazyHeaders, models._EMPTY)
    assert plain is not None
    assert plain.headers is models._EMPTY
    del made, plain
    gc.collect()
    things = (Message, models._LazyHeaders, models._EMPTY, raw, bare)
    refs = [sys.getrefcount(x) for x in things]
    for _ in range(3000):
        speedups.message_of(raw, Message, models._LazyHeaders, models._EMPTY)
        speedups.message_of(bare, Message, models._LazyHeaders, models._EMPTY)
    gc.collect()
    assert [sys.getrefcount(x) for x in things] == refs


@needs_c
def test_message_of_refuses_other_types() -> None:
    assert speedups is not None
    raw = api_pb2.Message(stream="s").SerializeToString()
    with pytest.raises(TypeError):
        speedups.message_of(bytearray(raw), Message, models._LazyHeaders, models._EMPTY)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.message_of(raw, Message, models._LazyHeaders)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="slot"):
        speedups.message_of(raw, Ack, models._LazyHeaders, models._EMPTY)
    with pytest.raises(TypeError, match="slot"):
        speedups.message_of(raw, Message, Ack, models._EMPTY)
    with pytest.raises(TypeError):
        speedups.message_of(raw, "Message", models._LazyHeaders, models._EMPTY)  # type: ignore[arg-type]
    made = speedups.message_of(raw, Message, models._LazyHeaders, models._EMPTY)
    assert made is not None
    assert made.stream == "s"  # and the right classes still serve


def _header_twin(raw: bytes) -> tuple[dict[str, bytes], bytes, bytes]:
    pb = api_pb2.Message.FromString(raw)
    return dict(pb.headers), pb.subject.encode(), pb.replySubject.encode()


@needs_c
@settings(max_examples=examples(1000), deadline=None)
@given(raw=plain_messages())
def test_headers_of_reads_every_plain_message_s_map_as_protobuf_does(raw: bytes) -> None:
    assert speedups is not None
    found = speedups.headers_of(raw)
    assert found is not None
    assert found == _header_twin(raw)
    assert all(type(k) is str and type(v) is bytes for k, v in found[0].items())


@needs_c
@settings(max_examples=examples(3000), deadline=None)
@given(data=st.one_of(mangled_messages(), st.binary(max_size=60)))
@example(data=b"\x4a\x03\x0a\x01a\x4a\x05\x0a\x01a\x12\x00")  # a name twice: the last wins
@example(data=b"\x4a\x00")  # an empty entry: name "" and value b""
@example(data=b"\x4a\x03\x12\x01v")  # a value without a name
def test_headers_of_vouches_only_for_what_protobuf_decodes_alike(data: bytes) -> None:
    assert speedups is not None
    found = speedups.headers_of(data)
    try:
        expected = _header_twin(data)
    except DecodeError:
        assert found is None, "headers_of read a map of bytes protobuf refuses"
        return
    assert found is None or found == expected
    # A message made from these bytes reads the same headers either way.
    made = speedups.message_of(data, Message, models._LazyHeaders, models._EMPTY)
    if made is not None:
        assert _fields(made) == _fields(_via_protobuf(data))


@needs_c
def test_headers_of_refuses_other_types_and_frees() -> None:
    import gc
    import sys

    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.headers_of(bytearray(b"\x4a\x00"))  # type: ignore[arg-type]
    raw = api_pb2.Message(subject="s", headers={"a": b"1", "subject": b"s"}).SerializeToString()
    gc.collect()
    before = sys.getrefcount(raw)
    for _ in range(3000):
        speedups.headers_of(raw)
    gc.collect()
    assert sys.getrefcount(raw) == before


# ---- what a read_committed read sequences a message by: eo_fields ---------------------

_UUID, _CLOCKS = b"eo-uuid", b"eo-clocks"
_header_names = st.sampled_from(["eo-uuid", "eo-clocks", "other", "", "eo-uuid2", "EO-UUID"])


@st.composite
def eo_messages(draw: st.DrawFn) -> bytes:
    """An api.Message's bytes: headers drawn among the two names and others (a name may
    come twice on the wire: the last wins), now and then mangled."""
    pb = api_pb2.Message(
        offset=draw(st.integers(-(2**63), 2**63 - 1)),
        key=draw(st.binary(max_size=8)),
        value=draw(st.binary(max_size=24)),
        subject=draw(st.sampled_from(["", "s.subj"])),
    )
    raw = pb.SerializeToString()
    for _ in range(draw(st.integers(0, 4))):
        entry = api_pb2.Message(headers={draw(_header_names): draw(st.binary(max_size=18))})
        raw += entry.SerializeToString()  # appended map entries: protobuf merges them
    if draw(st.integers(0, 9)) == 0:
        cut = draw(st.integers(0, len(raw)))
        raw = raw[:cut] + draw(st.binary(max_size=3))
    return raw


@needs_c
@settings(max_examples=examples(2000), deadline=None)
@given(raw=eo_messages())
def test_eo_fields_matches_its_twin(raw: bytes) -> None:
    from liftbridge_client.spark._committed import eo_fields_twin

    assert speedups is not None
    got = speedups.eo_fields(raw, _UUID, _CLOCKS)
    twin = eo_fields_twin(raw, _UUID, _CLOCKS)
    if got is None:  # not the plain shape: protobuf decides (the caller decodes)
        try:
            pb = api_pb2.Message.FromString(raw)
        except DecodeError:
            assert twin is None
            return
        assert _plain_shape_refused(raw, pb)
        return
    assert got == twin


def _plain_shape_refused(raw: bytes, pb: api_pb2.Message) -> bool:
    """Whether the C scan may refuse bytes protobuf reads: message_of refuses them too."""
    return speedups is not None and (
        speedups.message_of(raw, Message, models._LazyHeaders, models._EMPTY) is None
    )


@needs_c
def test_eo_fields_refuses_other_types() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.eo_fields(bytearray(b"\x08\x01"), _UUID, _CLOCKS)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.eo_fields(b"\x08\x01", "eo-uuid", _CLOCKS)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.eo_fields(b"\x08\x01", _UUID)  # type: ignore[call-arg]
    assert speedups.eo_fields(b"\x08\x05", _UUID, _CLOCKS) == (5, None, None, 0)
