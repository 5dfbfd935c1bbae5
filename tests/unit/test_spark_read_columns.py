"""The read task's Arrow batches, built column by column from the subscription's protobufs,
hold exactly the rows the `Message` API describes: keys (empty reads as null, as always),
values (empty stays empty), the headers a `Message` shows (the server's subject and reply
headers taken out), subjects, offsets, and timestamps floored to microseconds in UTC.
Packed messages give their rows. The oracle is written row by row from `Message`."""

from __future__ import annotations

import itertools
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from budget import examples
from google.protobuf.message import DecodeError
from hypothesis import given, settings

from liftbridge_client._proto import api_pb2
from liftbridge_client.models import owned_message_from_proto
from liftbridge_client.packing import MAGIC, PackedRow, pack, packed_headers
from liftbridge_client.spark import _read
from liftbridge_client.spark._read import _batch_of, _protos_batch
from liftbridge_client.spark._schema import arrow_schema
from liftbridge_client.subscription import WireMessages

# The module as built, imported directly, so that its functions are tested also in a
# process that runs the client without it (LIFTBRIDGE_CLIENT_PURE).
try:
    from liftbridge_client import _speedups as speedups
except ImportError:
    speedups = None  # type: ignore[assignment]

STREAM, PARTITION = "orders", 3
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def proto(offset: int, **fields: object) -> api_pb2.Message:
    pb = api_pb2.Message(
        stream=STREAM,
        partition=PARTITION,
        offset=offset,
        subject="orders.subj",
        timestamp=1_764_150_000_123_456_789 + offset,
    )
    for name, value in fields.items():
        if name == "headers":
            assert isinstance(value, dict)
            pb.headers.update(value)
        else:
            setattr(pb, name, value)
    return pb


def protos() -> list[api_pb2.Message]:
    return [
        proto(0, key=b"k0", value=b"v0"),
        proto(1, value=b""),  # no key, an empty value
        proto(2, key=b"", value=b"\x00\xff"),  # an empty key reads as null
        # the server's own subject and reply headers, and a writer's
        proto(3, value=b"h", headers={"subject": b"orders.subj", "reply": b"", "a": b"1"}),
        # a writer's "subject" header that is not the message's subject stays
        proto(4, value=b"s", headers={"subject": b"other", "b": b""}),
        proto(5, value=b"t", subject="orders.other", timestamp=999),  # sub-microsecond
        proto(6, value=b"LBP1 but no packed header"),
    ]


def expected_rows(pbs: list[api_pb2.Message], headers: bool) -> list[dict[str, object]]:
    rows = []
    for pb in pbs:
        m = owned_message_from_proto(pb)
        row: dict[str, object] = {
            "key": m.key or None,
            "value": m.value,
            "stream": m.stream,
            "subject": m.subject,
            "partition": m.partition,
            "offset": m.offset,
            "timestamp": EPOCH + timedelta(microseconds=m.timestamp_ns // 1000),
        }
        if headers:
            row["headers"] = [{"key": k, "value": v} for k, v in m.headers.items()]
        rows.append(row)
    return rows


@pytest.mark.parametrize("headers", [False, True], ids=["plain", "headers"])
def test_columns_hold_exactly_what_the_messages_say(headers: bool) -> None:
    pbs = protos()
    batch = _protos_batch(pbs, STREAM, PARTITION, headers)
    assert batch.schema == arrow_schema(headers)
    assert batch.to_pylist() == expected_rows(pbs, headers)
    assert batch.column(0).null_count == 6  # every key but k0: absent, or empty
    assert batch.column(1).null_count == 0  # an empty value is not null
    if headers:
        assert batch.column(7).to_pylist()[3] == [{"key": "a", "value": b"1"}]
        assert sorted(batch.column(7).to_pylist()[4], key=str) == [
            {"key": "b", "value": b""},
            {"key": "subject", "value": b"other"},
        ]


def test_timestamps_before_1970_floor_like_python() -> None:
    pbs = [proto(0, value=b"a", timestamp=-1), proto(1, value=b"b", timestamp=-1_000_001)]
    got = _protos_batch(pbs, STREAM, PARTITION, False).column(6).cast(pa.int64()).to_pylist()
    assert got == [-1, -1001]


def test_an_empty_list_is_an_empty_batch_of_the_schema() -> None:
    for headers in (False, True):
        batch = _protos_batch([], STREAM, PARTITION, headers)
        assert batch.num_rows == 0
        assert batch.schema == arrow_schema(headers)


@pytest.mark.parametrize("headers", [False, True], ids=["plain", "headers"])
def test_packed_messages_give_their_rows_among_plain_ones(headers: bool) -> None:
    rows = [
        PackedRow(b"r0", b"k"),
        PackedRow(b"", None, {"x": b"1"}),
        PackedRow(b"r2", b"", {}),
    ]
    pbs = [
        proto(10, key=b"plain", value=b"p"),
        proto(11, value=pack(rows), headers={**packed_headers(3), "subject": b"orders.subj"}),
        proto(12, value=b"q"),
    ]
    batch = _protos_batch(pbs, STREAM, PARTITION, headers)
    # The same as the Message-based builder (read_committed reads use it)...
    assert (
        batch.to_pylist()
        == _batch_of([owned_message_from_proto(pb) for pb in pbs], headers).to_pylist()
    )
    got = batch.to_pylist()
    # ... and what a reader expects: each row with its pack's offset and timestamp.
    assert [r["offset"] for r in got] == [10, 11, 11, 11, 12]
    assert [r["key"] for r in got] == [b"plain", b"k", None, b"", None]
    assert [r["value"] for r in got] == [b"p", b"r0", b"", b"r2", b"q"]
    assert got[1]["timestamp"] == got[3]["timestamp"]
    if headers:
        assert [r["headers"] for r in got][1:4] == [[], [{"key": "x", "value": b"1"}], []]


# ---- the accelerator's columns from wire bytes (message_columns, plain_span) ------------

needs_c = pytest.mark.skipif(
    speedups is None and not os.environ.get("CI"), reason="the C accelerator is not built"
)


def _wire_batch(
    wire: WireMessages, end: int, stream: str, partition: int, *, ordered: bool = True
) -> tuple[pa.RecordBatch, int] | None:
    """The read task's `_wire_batch` with the accelerator as built, also where the
    client runs without it."""
    with mock.patch.object(_read, "_message_columns", speedups.message_columns):
        return _read._wire_batch(wire.raws, end, stream, partition, ordered=ordered)


def plain_span(raws: list[bytes]) -> tuple[int, int] | None:
    return speedups.plain_span(raws)


def _message_columns(raws: list[bytes], end: int, magic: bytes) -> Any:
    return speedups.message_columns(raws, end, magic)


_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_messages: st.SearchStrategy[list[dict[str, Any]]] = st.lists(
    st.builds(
        dict,
        gap=st.integers(min_value=1, max_value=3),
        key=st.binary(max_size=12),
        value=st.one_of(st.binary(max_size=40), st.just(MAGIC), st.binary().map(MAGIC.__add__)),
        subject=st.one_of(st.just("orders.subj"), _texts),
        timestamp=st.one_of(st.integers(min_value=0, max_value=2**63 - 1), st.just(0)),
        headers=st.one_of(st.just({}), st.dictionaries(_texts, st.binary(max_size=5), max_size=2)),
        reply=st.one_of(st.just(""), _texts),
    ),
    min_size=1,
    max_size=30,
)


def _wire(drawn: list[dict[str, Any]], start: int) -> list[bytes]:
    out, offset = [], start
    for fields in drawn:
        offset += fields["gap"]
        out.append(
            proto(
                offset,
                key=fields["key"],
                value=fields["value"],
                subject=fields["subject"],
                timestamp=fields["timestamp"],
                replySubject=fields["reply"],
                headers=fields["headers"],
            ).SerializeToString()
        )
    return out


@needs_c
@settings(max_examples=examples(400), deadline=None)
@given(drawn=_messages, start=st.integers(min_value=-1, max_value=2**40), cut=st.integers(0, 40))
def test_wire_columns_are_the_protobuf_paths_columns(
    drawn: list[dict[str, Any]], start: int, cut: int
) -> None:
    """Any plain messages: the batch made from their bytes is the batch made from their
    protobufs (below ``end``), or the accelerator declines (packed-looking values)."""
    raws = _wire(drawn, start)
    pbs = [api_pb2.Message.FromString(raw) for raw in raws]
    end = pbs[0].offset + cut
    assert plain_span(raws) == (pbs[0].offset, pbs[-1].offset)
    made = _wire_batch(WireMessages(raws, pbs[0].offset, pbs[-1].offset), end, STREAM, PARTITION)
    below = [pb for pb in pbs if pb.offset < end]
    if any(pb.value.startswith(MAGIC) for pb in below):
        assert made is None  # left to the path that unpacks
        return
    assert made is not None
    batch, size = made
    assert batch.equals(_protos_batch(below, STREAM, PARTITION, False))
    assert size == sum(len(pb.key) + len(pb.value) for pb in below)


@needs_c
@settings(max_examples=examples(300), deadline=None)
@given(drawn=_messages, order=st.randoms(use_true_random=False))
def test_unordered_wire_columns_are_the_protobuf_paths_columns(
    drawn: list[dict[str, Any]], order: Any
) -> None:
    """``ordered=False`` (a read_committed read's rows, each transaction at its commit):
    offsets in any order, even repeated, make the protobuf path's rows in that order."""
    raws = _wire(drawn, 0)
    order.shuffle(raws)
    if len(raws) > 1 and order.random() < 0.3:
        raws.append(raws[0])  # a message delivered twice is still a row each time
    pbs = [api_pb2.Message.FromString(raw) for raw in raws]
    made = _wire_batch(WireMessages(raws, 0, 0), 2**63 - 1, STREAM, PARTITION, ordered=False)
    if any(pb.value.startswith(MAGIC) for pb in pbs):
        assert made is None
        return
    assert made is not None
    assert made[0].equals(_protos_batch(pbs, STREAM, PARTITION, False))
    ascending = all(a.offset < b.offset for a, b in itertools.pairwise(pbs))
    in_order = _wire_batch(WireMessages(raws, 0, 0), 2**63 - 1, STREAM, PARTITION)
    assert (in_order is not None) == ascending  # ordered (the default) declines the rest
    # Unordered rows have no cut: a row at or past ``end`` makes it decline, never drop.
    end = order.choice(pbs).offset
    cut = _wire_batch(WireMessages(raws, 0, 0), end, STREAM, PARTITION, ordered=False)
    assert cut is None


@needs_c
@settings(max_examples=examples(400), deadline=None)
@given(drawn=_messages, data=st.data())
def test_wire_columns_decline_what_protobuf_would_read_otherwise(
    drawn: list[dict[str, Any]], data: st.DataObject
) -> None:
    """Mangled bytes, offsets out of order, other types: None (protobuf decides), or,
    when the mangled bytes are still of the plain shape, protobuf's own reading."""
    raws = _wire(drawn, 0)
    i = data.draw(st.integers(0, len(raws) - 1))
    how = data.draw(st.sampled_from(["flip", "cut", "swap", "dup", "tail"]))
    raw = bytearray(raws[i])
    if how == "flip" and raw:
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif how == "tail":
        raw += data.draw(st.binary(min_size=1, max_size=6))
    raws[i] = bytes(raw)
    if how == "swap" and len(raws) > 1:
        raws[0], raws[-1] = raws[-1], raws[0]
    if how == "dup":
        raws.insert(i, raws[i])  # the same offset twice: not ascending
    span = plain_span(raws)
    made = _wire_batch(WireMessages(raws, 0, 0), 2**62, STREAM, PARTITION)
    try:
        pbs = [api_pb2.Message.FromString(r) for r in raws]
    except DecodeError:
        assert span is None
        assert made is None
        return
    if span is None:
        assert made is None
        return
    assert all(a.offset < b.offset for a, b in itertools.pairwise(pbs))
    assert span == (pbs[0].offset, pbs[-1].offset)
    if any(pb.value.startswith(MAGIC) for pb in pbs):
        assert made is None
        return
    assert made is not None
    assert made[0].equals(_protos_batch(pbs, STREAM, PARTITION, False))


@needs_c
def test_wire_columns_refuse_other_types_and_keep_refcounts() -> None:
    raws = [proto(1, key=b"k", value=b"v").SerializeToString()]
    with pytest.raises(TypeError):
        _message_columns(tuple(raws), 5, MAGIC)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _message_columns(raws, "5", MAGIC)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        plain_span(tuple(raws))  # type: ignore[arg-type]
    assert _message_columns([bytearray(raws[0])], 5, MAGIC) is None  # type: ignore[list-item]
    assert plain_span([]) is None
    made = _message_columns([], 5, MAGIC)
    assert made is not None
    assert made[0] == 0
    _message_columns(raws, 5, MAGIC)  # the subject it keeps for the next call is made
    before = sys.getrefcount(raws[0])
    for _ in range(3000):
        _message_columns(raws, 5, MAGIC)
        plain_span(raws)
    after = sys.getrefcount(raws[0])  # outside the assert, which holds a reference
    assert after == before


@needs_c
def test_wire_columns_end_before_every_offset_takes_no_row() -> None:
    raws = [proto(offset, value=b"v").SerializeToString() for offset in (0, 1)]
    assert [_message_columns(raws, end, MAGIC)[0] for end in (-(2**63), -1, 0, 1, 2)] == [
        0,
        0,
        0,
        1,
        2,
    ]


@needs_c
def test_wire_columns_hold_their_rows_bytes_while_a_collection_runs_python_code() -> None:
    """Python code that a collection runs during the call (a gc callback here, a
    __del__ in life) empties the caller's list: nothing the call still reads is freed."""
    import gc

    raws = [
        bytes(
            bytearray(proto(i, value=bytes([65 + i]) * 4000, subject=f"s{i}").SerializeToString())
        )
        for i in range(4)
    ]
    expected = b"".join(bytes([65 + i]) * 4000 for i in range(4))
    armed = [False]
    emptied: list[int] = []

    def empty(phase: str, info: dict[str, int]) -> None:
        if armed[0] and raws:
            raws.clear()
            emptied.append(len([bytes(4100) for _ in range(50)]))  # reuse the memory

    thresholds = gc.get_threshold()
    gc.callbacks.append(empty)
    gc.collect()
    try:
        gc.set_threshold(1, 1, 1)  # a collection at the call's first allocation
        armed[0] = True
        made = speedups.message_columns(raws, 2**62, MAGIC)
    finally:
        armed[0] = False
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(empty)
    assert emptied  # the list was emptied during the call
    assert made is not None
    assert made[0] == 4
    assert made[4] == expected
