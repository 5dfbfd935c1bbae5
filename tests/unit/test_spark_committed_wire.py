"""A read_committed task yields the same rows from the messages' wire bytes as from their
protobufs.

With the C accelerator the task sequences each message from its bytes (`eo_fields`) and
makes the columns of the committed ones in C (`message_columns`, in commit order); without
it, from protobufs. Hypothesis draws a partition's messages (producers' transactions,
rolled back or committed, re-sent copies, messages outside any transaction, messages
without a UUID, packs, keys or none) and the chunks they arrive in; the task runs on both
and its Arrow batches, joined, must be equal, row for row.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any
from unittest import mock

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from budget import examples
from hypothesis import given, settings

from liftbridge_client._proto import api_pb2
from liftbridge_client.exactly_once.publisher import CLOCKS_HEADER, UUID_HEADER
from liftbridge_client.exactly_once.uuids import Flags, build_uuid_bytes
from liftbridge_client.packing import PackedRow, pack, packed_headers
from liftbridge_client.spark import _committed
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._options import SourceOptions
from liftbridge_client.spark._read import RangePartition
from liftbridge_client.spark._schema import arrow_schema
from liftbridge_client.subscription import WireMessages

try:
    from liftbridge_client import _speedups as speedups
except ImportError:
    speedups = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(
    speedups is None and not os.environ.get("CI"), reason="the C accelerator is not built"
)

STREAM, PARTITION = "orders", 0


@st.composite
def partitions(draw: st.DrawFn) -> list[api_pb2.Message]:
    """Messages at offsets 0.. of one partition, as exactly-once producers write them."""
    producers = [bytes([0, 0, 0, 0, 0, p]) for p in range(draw(st.integers(1, 3)))]
    clocks = dict.fromkeys(producers, 1000)
    messages: list[api_pb2.Message] = []
    for _ in range(draw(st.integers(1, 40))):
        producer = draw(st.sampled_from(producers))
        kind = draw(st.sampled_from(["continue", "continue", "ack", "outside", "none", "resend"]))
        headers: dict[str, bytes] = {}
        value = draw(st.binary(max_size=16))
        if kind == "resend" and messages:
            messages.append(draw(st.sampled_from(messages)))  # a copy: same UUID, new offset
            continue
        if kind == "ack":
            back = draw(st.sampled_from([0, 0, 16]))  # 16 back: rolls the open span back
            headers[UUID_HEADER] = build_uuid_bytes(
                producer, clocks[producer] - back, Flags.ACK_TXN
            )
            value = b""
        elif kind in ("continue", "outside"):
            flags = Flags.CONTINUE_TXN if kind == "continue" else Flags.OUTSIDE_TXN
            rows = draw(st.integers(1, 3)) if draw(st.integers(0, 5)) == 0 else 1
            clocks[producer] += 16 * rows
            headers[UUID_HEADER] = build_uuid_bytes(producer, clocks[producer], flags)
            if rows > 1:  # a pack of rows takes that many clock values
                value = pack([PackedRow(b"k%d" % i, b"v%d" % i) for i in range(rows)])
                headers.update(packed_headers(rows))
                headers[CLOCKS_HEADER] = str(rows).encode()
        messages.append(
            api_pb2.Message(
                key=draw(st.sampled_from([b"", b"key", b"other"])),
                value=value,
                subject="orders.subj",
                timestamp=1_764_150_000_000_000_000 + len(messages),
                headers=headers,
            )
        )
    out = []
    for offset, pb in enumerate(messages):
        copy = api_pb2.Message()
        copy.CopyFrom(pb)
        copy.offset = offset
        out.append(copy)
    return out


class _Runtime:
    """No client: the range is small enough that no transaction needs a replay."""

    client = None

    def run(self, coro: Any) -> Any:
        coro.close()
        raise AssertionError("a replay was not expected")


def _read(chunks: list[Any], wire: bool, end: int) -> pa.Table:
    def fake_chunks(part: RangePartition, runtime: Any, *, wire: bool) -> Iterator[Any]:
        assert wire is expected_wire
        yield from chunks

    expected_wire = wire
    options = SourceOptions.parse(
        {"brokers": "127.0.0.1:1", "stream": STREAM, "isolation": "read_committed"},
        streaming=False,
    )
    part = RangePartition(PartitionRange(STREAM, PARTITION, 0, end), options)
    with mock.patch.multiple(
        _committed,
        _chunks=fake_chunks,
        new_runtime=lambda options: _Runtime(),
        end_runtime=lambda options, runtime, ok: None,
        _eo_fields=speedups.eo_fields if wire else None,
    ):
        batches = list(_committed.read_committed_range(part))
    return pa.Table.from_batches(batches, schema=arrow_schema(False))


@settings(max_examples=examples(300), deadline=None)
@given(pbs=partitions(), cuts=st.lists(st.integers(1, 39), max_size=4))
def test_the_wire_path_yields_the_protobuf_paths_rows(
    pbs: list[api_pb2.Message], cuts: list[int]
) -> None:
    bounds = sorted({0, len(pbs), *(c for c in cuts if c < len(pbs))})
    pieces = [pbs[a:b] for a, b in itertools.pairwise(bounds)]
    wire_chunks = [
        WireMessages([pb.SerializeToString() for pb in piece], piece[0].offset, piece[-1].offset)
        for piece in pieces
    ]
    from_protos = _read(pieces, False, len(pbs))
    from_wire = _read(wire_chunks, True, len(pbs))
    assert from_wire.equals(from_protos)
    # Committed rows only: no ACK_TXN message is ever a row.
    assert from_wire.num_rows <= sum(int(pb.headers.get(CLOCKS_HEADER, b"1")) for pb in pbs)
