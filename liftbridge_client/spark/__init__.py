"""A PySpark data source for Liftbridge: ``format("liftbridge")``, batch and streaming.

Needs the ``spark`` extra (pyspark >= 4.0 with pyarrow) and Java 17+. Register it once
per session::

    from liftbridge_client.spark import register
    register(spark)
    df = spark.read.format("liftbridge").option("brokers", "127.0.0.1:9292") \\
        .option("stream", "orders").load()

See docs/spark.md for the options, the schema and the delivery guarantees.
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "liftbridge_client.spark needs pyspark >= 4.0 and pyarrow: "
        "pip install 'liftbridge-client[spark]'"
    ) from exc

from liftbridge_client.spark._source import LiftbridgeDataSource

__all__ = ["LiftbridgeDataSource", "register"]


def register(spark: Any) -> None:
    """Register the "liftbridge" format with a SparkSession."""
    spark.dataSource.register(LiftbridgeDataSource)
