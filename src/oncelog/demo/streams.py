"""The seeds' Kafka Streams application (`ExactlyOnceStreamExample`), whole, as one
oncelog pipeline: `oncelog demo --stateful` runs it, examples/event_streams.py shows it.

From the source `input-events,reference-data` (both topics read_committed, together):
- **windowed counts**: events per key in 5-minute tumbling windows on the record
  timestamp, a state store in Spark's checkpoint. In update output mode each micro-batch
  writes every window it changed, once, with its new count: key `<key>@<window start,
  epoch ms>`, value the count as text, so a compacted `windowed-counts` holds the latest
  count of every window;
- **branches**: events whose value contains HIGH to `high-priority-events`, the others
  containing NORMAL to `normal-priority-events` (Kafka Streams' `branch`: the first
  predicate that matches wins; what none matches goes nowhere);
- **the join**: each event joined with the table that follows the compacted topic
  `reference-data` (oncelog.spark.join_table, Kafka Streams' KStream-KTable inner join:
  the table's value when the event is processed), `event:reference` to `enriched-events`.

Events without a key or a value are skipped by all three, as Kafka Streams' count and
join skip them (the seeds filter null values before branching).

    oncelog pipeline run --source input-events,reference-data \\
        --sink windowed-counts,high-priority-events,normal-priority-events,enriched-events \\
        --output-mode update --mode batch --transform oncelog.demo.streams:event_streams \\
        --checkpoint /tmp/event-streams

One query writes all four topics, so in batch mode each micro-batch's records appear in
all four at once, as the Kafka Streams application's transaction (exactly_once_v2) covers
everything one commit interval produced. The query needs the RocksDB state store
(join_table's transformWithState), which the runner's session uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from oncelog.demo.topics import COUNTS_TOPIC, ENRICHED_TOPIC, EVENTS_TOPIC, HIGH_TOPIC, NORMAL_TOPIC, REFERENCE_TOPIC
from oncelog.spark.table_join import join_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

WINDOW = "5 minutes"


def event_streams(source: DataFrame) -> dict[str, DataFrame]:
    """The application's four outputs, `{topic: DataFrame}` (run in update output mode)."""
    events = source.where((F.col("topic") == EVENTS_TOPIC) & F.col("key").isNotNull() & F.col("value").isNotNull())
    return {
        COUNTS_TOPIC: windowed_counts(events),
        **branches(events),
        ENRICHED_TOPIC: enriched(source.where((F.col("topic") == REFERENCE_TOPIC) | F.col("value").isNotNull())),
    }


def windowed_counts(events: DataFrame) -> DataFrame:
    """Per key and 5-minute window of the record timestamp: key `<key>@<start ms>`, value the count."""
    window = F.window("timestamp", WINDOW)
    counts = events.groupBy(F.col("key"), window.alias("window")).count()
    return counts.select(
        F.concat(F.col("key").cast("string"), F.lit("@"), F.unix_millis(F.col("window.start")).cast("string"))
        .alias("key"),
        F.col("count").cast("string").alias("value"),
    )


def branches(events: DataFrame) -> dict[str, DataFrame]:
    value = F.col("value").cast("string")
    kept = events.select("key", "value")
    return {
        HIGH_TOPIC: kept.where(value.contains("HIGH")),
        NORMAL_TOPIC: kept.where(~value.contains("HIGH") & value.contains("NORMAL")),
    }


def enriched(source: DataFrame) -> DataFrame:
    """`event:reference` for each event whose key the table holds when it is processed.
    `source` holds the events and the table's topic (tombstones included)."""
    joined = join_table(source, REFERENCE_TOPIC, how="inner")
    return joined.select(
        "key", F.concat(F.col("value").cast("string"), F.lit(":"), F.col("table_value").cast("string")).alias("value"))
