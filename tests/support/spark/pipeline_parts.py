"""What the Spark tests' two pipelines share (sink_pipeline.py, iceberg_pipeline.py): their
source stream (`read_source`), and their main() as a driver process, started by
driver_runs.py and the speculation tests (`run_queries`: build the SparkSession, start the
queries, wait for each to end under Trigger.AvailableNow, report a failed one on stderr,
say `pipeline finished` and stop Spark; 1 when a query failed)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

# How long the driver keeps a query's checkpoint history: the kill tests restart from it.
DRIVER_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.streaming.minBatchesToRetain": "10",
}


def read_source(spark: SparkSession, *, bootstrap: str, source: str, max_offsets: int) -> DataFrame:
    """The source topic from its start, at most `max_offsets` records per micro-batch."""
    return (spark.readStream.format("oncelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", max_offsets)
            .load())


def run_queries(app_name: str, config: dict, start: Callable[[SparkSession], list[tuple[str, StreamingQuery]]]) -> int:
    """`start(spark)` starts the queries and names each for its failure line (`query`, or
    `query <name>`: the tests read `<label> failed: <why>`). config: "master" (default
    local[2,4]) and "conf" (Spark settings over DRIVER_CONF)."""
    from oncelog.spark.session import build_session

    spark = build_session(app_name, master=config.get("master", "local[2,4]"),
                          conf={**DRIVER_CONF, **config.get("conf", {})}, log_level="ERROR")
    queries = start(spark)
    failed = 0
    for label, query in queries:
        try:
            query.awaitTermination()
        except Exception as error:  # noqa: BLE001 (a failed query is reported; the test restarts the pipeline)
            print(f"{label} failed: {str(error)[:2000]}", file=sys.stderr, flush=True)
            failed = 1
    print("pipeline finished", flush=True)
    spark.stop()
    return failed
