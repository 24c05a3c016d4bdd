"""`oncelog.spark.join_table`, Kafka Streams' KStream-KTable join, through the pipeline
runner on the tests' Spark session and a real broker: events joined with the table's
value for their key at processing time (an update after an event does not change it, a
tombstone removes the key), inner and left, and the table kept in the checkpoint's state
store across a restart."""

from __future__ import annotations

import textwrap
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from oncelog.spark.pipeline import PipelineSpec, Trigger, run_pipeline
from tests.support.kafka import create_topics
from tests.support.spark.topics import read_all

# The records' timestamps are ms after this: recent, so the broker's retention (7 days by
# default) never deletes them, as it did when they were ms after 1970.
BASE_MS = int(time.time() * 1000) - 600_000


def produce(bootstrap: str, records: list[tuple[str, bytes | None, bytes | None, int]]) -> None:
    """(topic, key, value or None for a tombstone, timestamp in ms after BASE_MS), in order,
    one partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, key, value, timestamp in records:
        producer.produce(topic, value, key=key, partition=0, timestamp=BASE_MS + timestamp)
    assert producer.flush(30) == 0


def enrich_file(directory: Path, table: str, how: str) -> str:
    path = directory / f"enrich_{uuid.uuid4().hex[:6]}.py"
    path.write_text(textwrap.dedent(f"""
        from pyspark.sql import functions as F
        from oncelog.spark import join_table

        def enrich(source):
            joined = join_table(source, "{table}", how="{how}")
            reference = F.coalesce(F.col("table_value"), F.lit(b"-"))
            return joined.select("key", F.concat(F.col("value"), F.lit(b":"), reference).alias("value"))
    """))
    return f"{path}:enrich"


@pytest.mark.parametrize("how", ["inner", "left"])
def test_events_join_the_table_as_it_is_when_they_are_processed_and_the_table_survives_a_restart(
        spark, shared_broker, tmp_path, how):
    bootstrap = shared_broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    events, table, enriched = f"events-{suffix}", f"reference-data-{suffix}", f"enriched-{suffix}"
    create_topics(bootstrap, (events, 1), (table, 1), (enriched, 1))
    produce(bootstrap, [
        (table, b"A", b"A1", 1000), (table, b"C", b"C1", 1000),
        (events, b"A", b"e1", 2000), (events, b"B", b"eB", 2000), (events, None, b"eN", 2000),
        (table, b"A", b"A2", 3000), (events, b"A", b"e2", 4000),
        (table, b"A", None, 5000), (events, b"A", b"e3", 6000),
    ])
    spec = PipelineSpec(source_topic=f"{events},{table}", sink_topics=(enriched,),
                        checkpoint=str(tmp_path / "checkpoint"), bootstrap_servers=bootstrap,
                        transforms=(enrich_file(tmp_path, table, how),), trigger=Trigger.parse("available-now"),
                        progress="none")

    run_pipeline(spec, spark)  # one micro-batch: the order within it is the timestamps'
    produce(bootstrap, [(events, b"C", b"e4", 7000), (table, b"A", b"A3", 7000), (events, b"A", b"e5", 8000)])
    run_pipeline(spec, spark)  # the table (C1, A deleted) comes back from the checkpoint

    unmatched = {b"eB:-", b"e3:-", b"eN:-"} if how == "left" else set()  # eN has no key
    assert sorted(o.value for o in read_all(bootstrap, enriched)) == sorted(
        {b"e1:A1", b"e2:A2", b"e4:C1", b"e5:A3"} | unmatched)
