"""The read task's Arrow batches, built column by column from the subscription's protobufs,
hold exactly the rows the `Message` API describes: keys (empty reads as null, as always),
values (empty stays empty), the headers a `Message` shows (the server's subject and reply
headers taken out), subjects, offsets, and timestamps floored to microseconds in UTC.
Packed messages give their rows. The oracle is written row by row from `Message`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from liftbridge_client._proto import api_pb2
from liftbridge_client.models import owned_message_from_proto
from liftbridge_client.packing import PackedRow, pack, packed_headers
from liftbridge_client.spark._read import _batch_of, _protos_batch
from liftbridge_client.spark._schema import arrow_schema

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
