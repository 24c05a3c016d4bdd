"""`format("oncelog-iceberg")`: an exactly-once sink from Spark into Apache Iceberg tables,
through PySpark's Python Data Source API and pyiceberg (no JVM Iceberg runtime). See
docs/iceberg.md.

    (stream.writeStream.format("oncelog-iceberg")
        .option("table", "db.orders")
        .option("catalog.type", "sql")
        .option("catalog.uri", "sqlite:////data/catalog.db")
        .option("catalog.warehouse", "file:///data/warehouse")
        .option("checkpointLocation", "/data/checkpoints/orders")
        .start())

This module only names the data source, so that registering it (oncelog.spark.session)
costs no pyiceberg import; the writers are in oncelog.spark.iceberg.writers.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from oncelog.spark.iceberg.options import FORMAT_NAME, IcebergSinkError


class OncelogIcebergDataSource(DataSource):
    """The data source Spark finds under `format("oncelog-iceberg")`: write only (read the
    table with pyiceberg, DuckDB or Spark's own Iceberg connector)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        raise IcebergSinkError(
            f"{FORMAT_NAME} is a sink only: read the table with pyiceberg or Spark's Iceberg runtime")

    def streamWriter(self, schema: StructType, overwrite: bool):
        """Driver: the writer of one micro-batch (oncelog.spark.iceberg.writers)."""
        from oncelog.spark.iceberg.writers import stream_writer

        return stream_writer(self.options, schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool):
        """Driver: the writer of a batch `df.write.format("oncelog-iceberg")`."""
        from oncelog.spark.iceberg.writers import batch_writer

        return batch_writer(self.options, schema, overwrite)
