"""The read schema (Spark's and Arrow's, which must agree) and the sink's input columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from liftbridge_client.errors import InvalidInputError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["arrow_schema", "check_sink_schema", "read_schema_ddl"]

_BASE_DDL = (
    "key binary, value binary, stream string, subject string, partition int, "
    "offset long, timestamp timestamp"
)
_HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def read_schema_ddl(include_headers: bool) -> str:
    """The schema of rows read, as Spark DDL (Kafka's, with ``stream`` and ``subject``)."""
    return f"{_BASE_DDL}, {_HEADERS_DDL}" if include_headers else _BASE_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("stream", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


# The columns a sink reads, and the Spark type names each may have.
SINK_COLUMNS = {
    "value": {"binary", "string"},
    "key": {"binary", "string"},
    "stream": {"string"},
    "partition": {"int", "bigint", "smallint", "tinyint"},
    "headers": {"array<struct<key:string,value:binary>>", "array<struct<key:string,value:string>>"},
}


def check_sink_schema(schema: StructType, *, stream_option: str | None) -> dict[str, int]:
    """The index of each sink column present; `InvalidInputError` for a missing ``value``,
    a wrongly typed column, or no stream (neither the option nor a column)."""
    indices: dict[str, int] = {}
    for index, field in enumerate(schema.fields):
        name = field.name.lower()
        if name not in SINK_COLUMNS:
            continue  # other columns are ignored, as by the Kafka sink
        type_name = field.dataType.simpleString()
        if type_name not in SINK_COLUMNS[name]:
            allowed = " or ".join(sorted(SINK_COLUMNS[name]))
            raise InvalidInputError(f"column {field.name!r} must be {allowed}, got {type_name}")
        indices[name] = index
    if "value" not in indices:
        raise InvalidInputError("a 'value' column (binary or string) is required to write")
    if stream_option is None and "stream" not in indices:
        raise InvalidInputError("set the option 'stream' or give a 'stream' column to write")
    return indices
