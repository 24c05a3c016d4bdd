"""The pipeline the Iceberg sink tests run: read a topic with the oncelog source
(read_committed), upper-case the values, keep where each record came from and which
micro-batch and task attempt wrote it, and write into `format("oncelog-iceberg")`.

Imported by the in-process tests, and run as a script by the fault tests:

    python tests/support/spark/iceberg_pipeline.py '<json config>'

config: {"query": {start_query keyword arguments}, "master": "local[2,4]", "conf": {...}}.
The script builds its own SparkSession, runs the query with Trigger.AvailableNow until it
ends, and exits 0; a failed query exits 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # `tests.support` as a package when run as a script (the driver process)

from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType

from tests.support.spark.pipeline_parts import read_source, run_queries

FAILED_FIRST_ATTEMPT = "injected failure of a first attempt"


def catalog_options(warehouse_dir: str) -> dict[str, str]:
    """A SQLite catalog and a local warehouse under `warehouse_dir`."""
    return {"catalog.type": "sql", "catalog.uri": f"sqlite:///{warehouse_dir}/catalog.db",
            "catalog.warehouse": f"file://{warehouse_dir}/warehouse"}


def transformed(stream, fail_partitions: tuple[int, ...] = ()):
    """upper(value) with its source partition, offset and timestamp, the micro-batch id and
    the task attempt. A task reading one of `fail_partitions` fails on its first attempt (at a
    record some way into its rows), so Spark retries it.

    In local mode such an attempt has not handed the sink any rows yet (Spark feeds the
    sink's Python worker through a buffer that the failure discards), so it writes no file;
    the attempts that do leave files behind are those killed with the driver, and the
    commit's cleanup of them is what the kill runs check."""
    failing = frozenset(fail_partitions)

    def batch_of(partition, offset):
        from pyspark import TaskContext

        context = TaskContext.get()
        if partition in failing and context.attemptNumber() == 0 and offset % 10 == 9:
            raise RuntimeError(FAILED_FIRST_ATTEMPT)
        return int(context.getLocalProperty("streaming.sql.batchId"))

    def attempt_of(partition):
        from pyspark import TaskContext

        return TaskContext.get().attemptNumber()

    return stream.select(
        F.col("key").cast("string").alias("key"),
        F.upper(F.col("value").cast("string")).alias("value"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
        F.col("timestamp"),
        F.udf(batch_of, LongType())(F.col("partition"), F.col("offset")).alias("batch"),
        F.udf(attempt_of, IntegerType())(F.col("partition")).alias("attempt"),
    )


def start_query(spark, *, bootstrap: str, source: str, table: str, warehouse_dir: str, checkpoint: str,
                max_offsets: int = 20, fail_partitions=(), extra_options: dict | None = None):
    stream = read_source(spark, bootstrap=bootstrap, source=source, max_offsets=max_offsets)
    writer = (transformed(stream, tuple(fail_partitions)).writeStream.format("oncelog-iceberg")
              .option("table", table)
              .option("checkpointLocation", checkpoint)
              .trigger(availableNow=True))
    for key, value in {**catalog_options(warehouse_dir), **(extra_options or {})}.items():
        writer = writer.option(key, value)
    return writer.start()


def main(config: dict) -> int:
    def start(spark):
        return [("query", start_query(spark, **config["query"]))]

    return run_queries("oncelog-iceberg-pipeline", config, start)


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
