"""oncelog on Apache Spark, through PySpark's Python Data Source API.

    from oncelog.spark import build_session
    spark = build_session()            # local[2], a Java 17+ found for you, format registered
    df = (spark.readStream.format("oncelog")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "orders").load())

`register(spark)` makes `format("oncelog")` available in a session built elsewhere.
`join_table(source, "reference-data")` is Kafka Streams' KStream-KTable join
(oncelog.spark.table_join).
"""

from __future__ import annotations

import os
from typing import Any

from oncelog.kio_import import import_kio_without_hypothesis

if os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER":  # a pipeline's worker: started often
    import_kio_without_hypothesis()

__all__ = ["FORMAT_NAME", "OncelogDataSource", "build_session", "join_table", "register"]

FORMAT_NAME = "oncelog"


def __getattr__(name: str) -> Any:
    # Lazy: importing oncelog.spark must not import pyspark until it is used.
    if name == "OncelogDataSource":
        from oncelog.spark.source.data_source import OncelogDataSource

        return OncelogDataSource
    if name == "join_table":
        from oncelog.spark.table_join import join_table

        return join_table
    if name in ("build_session", "register"):
        from oncelog.spark import session

        return getattr(session, name)
    raise AttributeError(name)
