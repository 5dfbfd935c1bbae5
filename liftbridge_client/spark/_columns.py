"""A write's Arrow batches as columns of publish arguments (executor side).

The sink's writers take pyspark's Arrow batches (`DataSourceArrowWriter`), so no Spark
``Row`` is built per row: each column is checked and converted once per batch (Arrow
casts and one ``to_pylist``), and the publishing loops over the lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, repeat
from typing import Any, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from liftbridge_client import errors
from liftbridge_client.spark._rows import PublishedRow

__all__ = ["Columns", "batch_columns", "rows_as_batches"]

_T = TypeVar("_T")

_new_row = cast(Callable[[type[PublishedRow], tuple[Any, ...]], PublishedRow], tuple.__new__)


@dataclass(slots=True)
class Columns:
    """Rows to publish, column-wise: item ``i`` of each list is row ``i``."""

    values: list[bytes]
    streams: list[str] | str  # one name for every row, or one per row
    keys: list[bytes | None] | None = None
    partitions: list[int | None] | None = None
    headers: list[dict[str, bytes] | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def stream_of(self, i: int) -> str:
        streams = self.streams
        return streams if isinstance(streams, str) else streams[i]

    def slice(self, start: int, stop: int) -> Columns:
        def part(column: list[_T] | None) -> list[_T] | None:
            return None if column is None else column[start:stop]

        streams = self.streams
        return Columns(
            self.values[start:stop],
            streams if isinstance(streams, str) else streams[start:stop],
            part(self.keys),
            part(self.partitions),
            part(self.headers),
        )

    def rows(self) -> Iterator[PublishedRow]:
        """One `PublishedRow` per row (the modes that handle rows one by one)."""
        n = len(self.values)
        keys = self.keys or [None] * n
        partitions = self.partitions or [None] * n
        headers = self.headers or [None] * n
        streams = self.streams
        each = [streams] * n if isinstance(streams, str) else streams
        fields = zip(each, self.values, keys, partitions, headers, repeat(1, n), strict=True)
        # tuple.__new__ makes each row in C: the named tuple's own __new__ is Python code,
        # a good part of a row's cost in the exactly-once sink.
        return map(_new_row, repeat(PublishedRow), fields)


def _as_binary(name: str, column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``column`` as Arrow binary: strings are cast (UTF-8 bytes, the same buffers)."""
    kind = column.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return column
    if pa.types.is_null(kind):  # every cell null (rows_as_batches infers no type then)
        return column.cast(pa.binary())
    if pa.types.is_string(kind):
        return column.cast(pa.binary())
    if pa.types.is_large_string(kind):
        return column.cast(pa.large_binary())
    raise errors.InvalidInputError(f"column {name!r} must be binary or string, got {kind}")


def _headers(column: pa.Array) -> list[dict[str, bytes] | None]:
    """The ``headers`` column (array<struct<key, value>>) as one dict (or None) per row."""
    result: list[dict[str, bytes] | None] = []
    for entries in column.to_pylist():
        if entries is None:
            result.append(None)
            continue
        headers: dict[str, bytes] = {}
        for entry in entries:
            key, raw = entry["key"], entry["value"]
            if not isinstance(key, str) or not key:
                raise errors.InvalidInputError(f"a header key must be a non-empty string: {key!r}")
            if raw is None:
                headers[key] = b""
            elif isinstance(raw, str):
                headers[key] = raw.encode()
            else:
                headers[key] = bytes(raw)
        result.append(headers)
    return result


def batch_columns(
    batch: pa.RecordBatch, columns: Mapping[str, int], stream_option: str | None
) -> Columns:
    """The publishes of one Arrow batch, by the column indices the schema check found;
    `InvalidInputError` for a null value, a row without a stream, a bad header key."""
    value = _as_binary("value", batch.column(columns["value"]))
    if value.null_count:
        raise errors.InvalidInputError("column 'value' is null in a row to write")
    streams: list[str] | str
    if stream_option:
        streams = stream_option
    else:
        stream = batch.column(columns["stream"]) if "stream" in columns else None
        if stream is None or stream.null_count or pc.any(pc.equal(stream, "")).as_py():
            raise errors.InvalidInputError("a row to write has no stream (null 'stream' column)")
        distinct = pc.unique(stream)
        # One stream for the whole batch (the common case): no name per row.
        streams = distinct[0].as_py() if len(distinct) == 1 else stream.to_pylist()
    result = Columns(value.to_pylist(), streams)
    if (k := columns.get("key")) is not None:
        key = _as_binary("key", batch.column(k))
        if key.null_count < len(key):
            result.keys = key.to_pylist()
    if (p := columns.get("partition")) is not None:
        partition = batch.column(p)
        if partition.null_count < len(partition):
            result.partitions = partition.to_pylist()
    if (h := columns.get("headers")) is not None:
        header = batch.column(h)
        if header.null_count < len(header):
            result.headers = _headers(header)
    return result


def rows_as_batches(
    rows: Iterable[Sequence[Any]], columns: Mapping[str, int], size: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """Spark rows as Arrow batches of the sink's columns (in ``columns``' order), for a
    pyspark without an Arrow writer (the streaming one came with 4.1)."""
    names = list(columns)
    indices = [columns[name] for name in names]
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        arrays = []
        for name, index in zip(names, indices, strict=True):
            cells = [row[index] for row in chunk]
            if name == "headers":
                cells = [
                    None if h is None else [{"key": e[0], "value": e[1]} for e in h] for h in cells
                ]
            arrays.append(pa.array(cells))
        yield pa.record_batch(arrays, names=names)
