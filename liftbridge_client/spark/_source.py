"""The data source Spark instantiates for ``format("liftbridge")``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from liftbridge_client.errors import InvalidInputError
from liftbridge_client.spark._options import (
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    SinkOptions,
    SourceOptions,
    check_known,
    get_option,
)
from liftbridge_client.spark._schema import check_sink_schema, read_schema_ddl

if TYPE_CHECKING:
    from liftbridge_client.spark._batch import BatchReader, BatchWriter
    from liftbridge_client.spark._streaming import StreamReader, StreamWriter

# The readers and writers (and the client under them) are imported when Spark asks for
# one: the processes that only ask for the schema do not load them.

__all__ = ["LiftbridgeDataSource"]


def _include_headers(options: Any) -> bool:
    raw = get_option(options, "includeHeaders")
    return raw is not None and raw.strip().lower() == "true"


class LiftbridgeDataSource(DataSource):
    """Liftbridge streams as a Spark data source (batch and streaming, read and write).

    Cheap to construct: Spark builds it in short-lived processes, so nothing connects here.
    """

    @classmethod
    def name(cls) -> str:
        return "liftbridge"

    def schema(self) -> str:
        # Spark asks for the schema when a read is loaded, on the driver, and reports an
        # error here as it is; the same error from a streaming reader's constructor ends
        # under pyspark's own UnboundLocalError (pyspark 4.3 stops a reader it never made).
        # Reads and writes may share an options map, so only names neither knows fail here;
        # each side's own parse checks the rest.
        check_known(self.options, sorted({*SOURCE_OPTIONS, *SINK_OPTIONS}), "read")
        return read_schema_ddl(_include_headers(self.options))

    def reader(self, schema: Any) -> BatchReader:
        from liftbridge_client.spark._batch import BatchReader

        return BatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> StreamReader:
        from liftbridge_client.spark._streaming import StreamReader

        return StreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> BatchWriter:
        from liftbridge_client.spark._batch import BatchWriter

        if overwrite:
            raise InvalidInputError("Liftbridge streams are append-only: use mode('append')")
        options = SinkOptions.parse(self.options)
        return BatchWriter(options, check_sink_schema(schema, stream_option=options.stream))

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamWriter:
        # Complete and update modes append their result rows, as the Kafka sink does.
        from liftbridge_client.spark._streaming import StreamWriter

        options = SinkOptions.parse(self.options, streaming=True)
        return StreamWriter(options, check_sink_schema(schema, stream_option=options.stream))
