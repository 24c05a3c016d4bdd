"""The seeds' branches as a pipeline transform: events whose value contains HIGH go to
`high-priority-events`, those containing NORMAL to `normal-priority-events` (others to
neither, as Kafka Streams' `branch` drops what no predicate takes), written by one query:

    oncelog pipeline run --source input-events \\
        --sink high-priority-events,normal-priority-events --mode batch \\
        --transform examples/branch.py:branch --checkpoint /tmp/branch

With `--mode batch` each micro-batch's records appear in both topics at once (the Kafka
Streams application's transaction covers both too).

`branch` returns one DataFrame per topic, `{topic: DataFrame}`: Spark reads the
micro-batch's input once for each of them (and counts its rows once for each in the
progress). `branch_by_column` gives the same output from one read, naming each row's
topic in a `topic` column.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

HIGH, NORMAL = "high-priority-events", "normal-priority-events"


def branch(events: DataFrame) -> dict[str, DataFrame]:
    value = F.col("value").cast("string")
    kept = events.where(F.col("value").isNotNull()).select("key", "value", "headers")
    return {
        HIGH: kept.where(value.contains("HIGH")),
        NORMAL: kept.where(~value.contains("HIGH") & value.contains("NORMAL")),
    }


def branch_by_column(events: DataFrame) -> DataFrame:
    value = F.col("value").cast("string")
    topic = F.when(value.contains("HIGH"), HIGH).when(value.contains("NORMAL"), NORMAL)
    return (events.where(F.col("value").isNotNull()).withColumn("topic", topic)
            .where(F.col("topic").isNotNull()).select("key", "value", "headers", "topic"))
