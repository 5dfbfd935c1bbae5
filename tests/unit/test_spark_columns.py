"""The sink's Arrow batches as columns: conversions, checks and the idempotent ids."""

from __future__ import annotations

import pyarrow as pa
import pytest

from liftbridge_client import errors
from liftbridge_client.spark._columns import Columns, batch_columns, rows_as_batches
from liftbridge_client.spark._idempotent import HEADER, TaskIdentity, WriteGuard, row_ids
from liftbridge_client.spark._rows import PublishedRow

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def _batch(**columns: pa.Array) -> tuple[pa.RecordBatch, dict[str, int]]:
    batch = pa.record_batch(list(columns.values()), names=list(columns))
    return batch, {name: i for i, name in enumerate(columns)}


def test_binary_and_string_columns_become_bytes_and_one_stream_is_kept_once() -> None:
    batch, idx = _batch(
        other=pa.array([1, 2]),
        value=pa.array(["a", "é"], pa.large_string()),
        key=pa.array([b"k", None], pa.binary()),
        stream=pa.array(["s", "s"]),
        partition=pa.array([None, 3], pa.int32()),
    )
    cols = batch_columns(batch, idx, None)
    assert cols.values == [b"a", "é".encode()]
    assert cols.keys == [b"k", None]
    assert cols.partitions == [None, 3]
    assert cols.streams == "s"
    assert cols.headers is None
    assert list(cols.rows()) == [
        PublishedRow("s", b"a", b"k", None, None),
        PublishedRow("s", "é".encode(), None, 3, None),
    ]


def test_columns_that_are_all_null_are_left_out_and_the_option_wins() -> None:
    batch, idx = _batch(
        value=pa.array([b"v"]),
        key=pa.array([None], pa.string()),
        stream=pa.array(["ignored"]),
        headers=pa.array([None], HEADERS),
    )
    cols = batch_columns(batch, idx, "opt")
    assert (cols.streams, cols.keys, cols.headers) == ("opt", None, None)


def test_rows_of_several_streams_keep_a_name_each() -> None:
    batch, idx = _batch(value=pa.array([b"1", b"2", b"3"]), stream=pa.array(["a", "b", "a"]))
    cols = batch_columns(batch, idx, None)
    assert cols.streams == ["a", "b", "a"]
    assert [cols.stream_of(i) for i in range(3)] == ["a", "b", "a"]
    part = cols.slice(1, 3)
    assert (part.values, part.streams) == ([b"2", b"3"], ["b", "a"])


@pytest.mark.parametrize(
    ("columns", "stream_option", "message"),
    [
        ({"value": pa.array([b"v", None])}, "s", "'value' is null"),
        ({"value": pa.array([b"v"]), "stream": pa.array([None], pa.string())}, None, "no stream"),
        ({"value": pa.array([b"v"]), "stream": pa.array([""])}, None, "no stream"),
        ({"value": pa.array([b"v"])}, None, "no stream"),
        ({"value": pa.array([1])}, "s", "must be binary or string"),
        (
            {
                "value": pa.array([b"v"]),
                "headers": pa.array([[{"key": "", "value": b"x"}]], HEADERS),
            },
            "s",
            "header key must be a non-empty string",
        ),
        (
            {
                "value": pa.array([b"v"]),
                "headers": pa.array([[{"key": None, "value": b"x"}]], HEADERS),
            },
            "s",
            "header key must be a non-empty string",
        ),
    ],
)
def test_bad_input_is_refused_with_the_typed_error(
    columns: dict[str, pa.Array], stream_option: str | None, message: str
) -> None:
    batch, idx = _batch(**columns)
    with pytest.raises(errors.InvalidInputError, match=message):
        batch_columns(batch, idx, stream_option)


def test_headers_become_dicts_with_null_and_string_values_as_bytes() -> None:
    kind = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.string())]))
    batch, idx = _batch(
        value=pa.array([b"1", b"2", b"3"]),
        headers=pa.array(
            [[{"key": "a", "value": "x"}, {"key": "b", "value": None}], None, []], kind
        ),
    )
    assert batch_columns(batch, idx, "s").headers == [{"a": b"x", "b": b""}, None, {}]


def test_spark_rows_become_batches_of_the_sink_columns() -> None:
    # pyspark 4.0's streaming writer gets rows: same columns, then the same checks.
    rows = [(b"v1", "x", "k1", None), (b"v2", "x", None, [("h", b"1")])]
    columns = {"value": 0, "key": 2, "headers": 3}
    batches = list(rows_as_batches(iter(rows), columns, size=1))
    assert len(batches) == 2
    names = {name: i for i, name in enumerate(columns)}
    got = [row for b in batches for row in batch_columns(b, names, "s").rows()]
    assert got == [
        PublishedRow("s", b"v1", b"k1", None, None),
        PublishedRow("s", b"v2", None, None, {"h": b"1"}),
    ]
    with pytest.raises(errors.InvalidInputError, match="'value' is null"):
        batch_columns(next(rows_as_batches(iter([(None,)]), {"value": 0})), {"value": 0}, "s")


def test_row_ids_depend_on_content_and_occurrence_not_on_order() -> None:
    ident = TaskIdentity("w", 3, 1)
    a = Columns([b"x", b"y", b"x"], "s", [b"k", None, b"k"], None, [{"h": b"1"}, None, None])
    ids = row_ids(ident, a, {})
    assert len(set(ids)) == 3
    assert all(i.startswith("w/3/1/") for i in ids)
    assert ids[0].endswith("/0")
    reordered = Columns([b"y", b"x", b"x"], "s", [None, b"k", b"k"], None, [None, None, None])
    again = row_ids(ident, reordered, {})
    assert again[0] == ids[1]  # the same row, wherever it comes
    assert ids[2].rsplit("/", 1)[0] == again[1].rsplit("/", 1)[0]  # same content, no header
    assert ids[0].rsplit("/", 1)[0] != ids[2].rsplit("/", 1)[0]  # the header counts


def test_mark_adds_the_id_header_and_drops_rows_published_before() -> None:
    guard = WriteGuard(
        None,  # type: ignore[arg-type]  # mark needs no client
        "s",
        TaskIdentity("w", 0, 0),
        attempt=1,
        timeout=1.0,
        wait_for_earlier=1.0,
    )
    chunk = Columns([b"a", b"b", b"c"], "s", None, [0, None, 1], [None, {"u": b"1"}, None])
    ids = row_ids(TaskIdentity("w", 0, 0), chunk, {})
    guard._published = {ids[1]}
    marked = guard.mark(chunk)
    assert marked.values == [b"a", b"c"]
    assert marked.partitions == [0, 1]
    assert marked.headers == [{HEADER: ids[0].encode()}, {HEADER: ids[2].encode()}]
