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
from liftbridge_client.packing import MAGIC, PackedRow, pack, packed_headers
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
def partitions(draw: st.DrawFn) -> list[bytes]:
    """The wire bytes of messages at offsets 0.. of one partition, as exactly-once
    producers write them, and then some: packs whose clocks overlap the producer's last
    ones (a retried pack: the read delivers only its new rows), values that look packed
    without being packs, other headers, two subjects, and now and then a bogus UUID entry
    earlier on the wire than the real one (the last entry of a name wins)."""
    producers = [bytes([0, 0, 0, 0, 0, p]) for p in range(draw(st.integers(1, 3)))]
    clocks = dict.fromkeys(producers, 1000)
    # Half the partitions hold no pack and no packed-looking value: any of those makes the
    # C columns decline a whole batch, and the C path is the one under test.
    packing = draw(st.booleans())
    raws: list[bytes] = []
    for _ in range(draw(st.integers(1, 40))):
        producer = draw(st.sampled_from(producers))
        kind = draw(
            st.sampled_from(["continue", "continue", "ack", "outside", "none", "resend", "overlap"])
        )
        if kind == "resend" and raws:
            raws.append(draw(st.sampled_from(raws)))  # a copy: same UUID, a later offset
            continue
        headers: dict[str, bytes] = {}
        # Now and then a value that looks packed: the C columns decline the whole batch.
        looks_packed = packing and draw(st.integers(0, 11)) == 0
        value = draw(
            st.sampled_from([MAGIC, MAGIC + b"x"]) if looks_packed else st.binary(max_size=16)
        )
        if kind == "ack":
            back = draw(st.sampled_from([0, 0, 1, 16]))  # back: rolls the open span back
            ack = clocks[producer] - back
            headers[UUID_HEADER] = build_uuid_bytes(producer, ack, Flags.ACK_TXN)
            value = b""
        elif kind in ("continue", "outside", "overlap"):
            flags = Flags.OUTSIDE_TXN if kind == "outside" else Flags.CONTINUE_TXN
            rows = draw(st.integers(1, 3)) if packing and draw(st.integers(0, 3)) == 0 else 1
            step = draw(st.integers(1, rows)) if kind == "overlap" else rows
            clocks[producer] += step
            headers[UUID_HEADER] = build_uuid_bytes(producer, clocks[producer], flags)
            if rows > 1:  # a pack of rows takes that many clock values
                value = pack([PackedRow(b"v%d" % i, b"k%d" % i) for i in range(rows)])
                headers.update(packed_headers(rows))
                headers[CLOCKS_HEADER] = str(rows).encode()
        if draw(st.integers(0, 3)) == 0:
            headers["other"] = b"o"
        raw = api_pb2.Message(
            key=draw(st.sampled_from([b"", b"key", b"other"])),
            value=value,
            subject=draw(st.sampled_from(["orders.subj", "orders.other"])),
            timestamp=1_764_150_000_000_000_000 + len(raws),
            headers=headers,
        ).SerializeToString()
        if UUID_HEADER in headers and draw(st.integers(0, 5)) == 0:
            raw = api_pb2.Message(headers={UUID_HEADER: b"bogus"}).SerializeToString() + raw
        raws.append(raw)
    # Each message's offset, appended: protobuf takes the last occurrence of a field.
    return [raw + api_pb2.Message(offset=i).SerializeToString() for i, raw in enumerate(raws)]


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


@settings(max_examples=examples(400), deadline=None)
@given(
    raws=partitions(),
    cuts=st.lists(st.integers(1, 39), max_size=4),
    decoded=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_the_wire_path_yields_the_protobuf_paths_rows(
    raws: list[bytes], cuts: list[int], decoded: list[bool]
) -> None:
    """Chunked anywhere; on the wire path a chunk may also come decoded (the subscription
    hands over protobufs when a message is not of the plain shape)."""
    bounds = sorted({0, len(raws), *(c for c in cuts if c < len(raws))})
    pieces = [raws[a:b] for a, b in itertools.pairwise(bounds)]
    decode = api_pb2.Message.FromString
    as_protos = [[decode(raw) for raw in piece] for piece in pieces]
    mixed = [
        [decode(raw) for raw in piece]
        if as_decoded
        else WireMessages(piece, decode(piece[0]).offset, decode(piece[-1]).offset)
        for piece, as_decoded in zip(pieces, decoded, strict=False)
    ]
    from_protos = _read(as_protos, False, len(raws))
    from_wire = _read(mixed, True, len(raws))
    assert from_wire.equals(from_protos)
    # Committed rows only: no ACK_TXN message is ever a row.
    pbs = [decode(raw) for raw in raws]
    assert from_wire.num_rows <= sum(int(pb.headers.get(CLOCKS_HEADER, b"1")) for pb in pbs)
