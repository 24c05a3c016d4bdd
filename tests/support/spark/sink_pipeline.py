"""The pipeline the sink tests run: read a topic with the oncelog source, upper-case the
values (a map-only transform), tag each record with its micro-batch id in a `batch`
header, and write into the oncelog sink.

Imported by the in-process tests, and run as a script by the kill tests:

    python tests/support/spark/sink_pipeline.py '<json config>'

config: {"queries": [{start_query keyword arguments}], "master": "local[2,4]",
"conf": {Spark settings}}. The
script builds its own SparkSession, runs every query with Trigger.AvailableNow until it
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
from pyspark.sql.types import BinaryType

from tests.support.spark.pipeline_parts import read_source, run_queries

FAILED_FIRST_ATTEMPT = "injected failure of a first attempt"


def tagged(stream, fail_partitions: tuple[int, ...] = ()):
    """upper(value), the key, and `batch` and `attempt` headers (the micro-batch and the
    task attempt that wrote the record). A task reading one of `fail_partitions` fails on
    its first attempt (after some of its rows went to the sink), so Spark retries it."""
    failing = frozenset(fail_partitions)

    def batch_tag(partition, offset):
        from pyspark import TaskContext

        context = TaskContext.get()
        if partition in failing and context.attemptNumber() == 0 and offset % 5 == 4:
            raise RuntimeError(FAILED_FIRST_ATTEMPT)
        return context.getLocalProperty("streaming.sql.batchId").encode()

    def attempt_tag(partition):
        from pyspark import TaskContext

        return str(TaskContext.get().attemptNumber()).encode()

    tag = F.udf(batch_tag, BinaryType())(F.col("partition"), F.col("offset"))
    attempt = F.udf(attempt_tag, BinaryType())(F.col("partition"))
    return stream.select(
        F.col("key"),
        F.upper(F.col("value").cast("string")).alias("value"),
        F.array(F.struct(F.lit("batch").alias("key"), tag.alias("value")),
                F.struct(F.lit("attempt").alias("key"), attempt.alias("value"))).alias("headers"),
    )


def start_query(spark, *, bootstrap: str, source: str, output: str, mode: str, checkpoint: str,
                max_offsets: int = 20, fail_partitions=(), prefix: str = "oncelog-sink",
                query_name: str | None = None, cluster_timeout_ms: int = 60000):
    stream = read_source(spark, bootstrap=bootstrap, source=source, max_offsets=max_offsets)
    writer = (tagged(stream, tuple(fail_partitions)).writeStream.format("oncelog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", output)
              .option("mode", mode)
              .option("transactionalIdPrefix", prefix)
              .option("clusterTimeoutMs", cluster_timeout_ms)
              .option("checkpointLocation", checkpoint)
              .trigger(availableNow=True))
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def main(config: dict) -> int:
    def start(spark):
        return [(f"query {query.name}", query) for query in (start_query(spark, **q) for q in config["queries"])]

    return run_queries("oncelog-sink-pipeline", config, start)


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
