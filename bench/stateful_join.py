"""Scenario 8t's join: events joined with the table that follows bench-reference-data
(oncelog.spark.join_table), the event's value and the table's joined as Kafka Streams'
`(event, ref) -> event + ":" + ref` does."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from oncelog.spark import join_table


def enrich(source: DataFrame) -> DataFrame:
    joined = join_table(source, "bench-reference-data")
    return joined.select("key", F.concat("value", F.lit(b":"), "table_value").alias("value"))
