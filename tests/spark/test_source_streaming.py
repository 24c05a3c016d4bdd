"""spark.readStream.format("oncelog") against a real broker: micro-batches bounded by
maxOffsetsPerTrigger, Trigger.AvailableNow, restarts from a checkpoint, and partitions or
topics that appear while a query runs."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest


def stream(spark, kafka, **options: str):
    reader = spark.readStream.format("oncelog").option(
        "kafka.bootstrap.servers", kafka.bootstrap_servers
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(frame, checkpoint) -> list[tuple[int, list[tuple[str, int, int, bytes]]]]:
    """Run a Trigger.AvailableNow query to its end; return each micro-batch's id and rows
    (topic, partition, offset, value), as foreachBatch saw them."""
    batches: list[tuple[int, list]] = []

    def collect(batch_frame, batch_id):
        rows = batch_frame.select("topic", "partition", "offset", "value").collect()
        batches.append((batch_id, [tuple(row) for row in rows]))

    query = (
        frame.writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    assert query.awaitTermination(120), "AvailableNow query did not finish"
    assert query.exception() is None
    return batches


def records_of(batches) -> list[tuple[str, int, int, bytes]]:
    return [row for _, rows in batches for row in rows]


def test_available_now_reads_every_record_once_in_batches_bounded_by_max_offsets(
    spark, kafka, topic, tmp_path
):
    kafka.create_topic(topic, partitions=2)
    produced = kafka.produce_values(topic, 50, partitions=2)

    batches = run_available_now(
        stream(
            spark, kafka, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="10"
        ),
        tmp_path / "checkpoint",
    )

    assert [len(rows) for _, rows in batches] == [10] * 5
    assert sorted((p, o, v) for _, p, o, v in records_of(batches)) == sorted(
        (record.partition, record.offset, record.value) for record in produced
    )


def test_restart_from_checkpoint_continues_without_rereading(spark, kafka, topic, tmp_path):
    kafka.create_topic(topic, partitions=2)
    first = kafka.produce_values(topic, 20, partitions=2, prefix="first")
    checkpoint = tmp_path / "checkpoint"
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "15"}

    first_run = run_available_now(stream(spark, kafka, **options), checkpoint)
    second = kafka.produce_values(topic, 20, partitions=2, prefix="second")
    second_run = run_available_now(stream(spark, kafka, **options), checkpoint)
    third_run = run_available_now(stream(spark, kafka, **options), checkpoint)

    assert sorted(v for *_, v in records_of(first_run)) == sorted(r.value for r in first)
    assert sorted(v for *_, v in records_of(second_run)) == sorted(r.value for r in second)
    assert records_of(third_run) == []
    assert second_run[0][0] == first_run[-1][0] + 1  # batch ids carry on from the checkpoint


def test_starting_offsets_latest_is_fixed_by_the_first_run(spark, kafka, topic, tmp_path):
    """ "latest" means the end of the log when the query first started, even when that first
    run had nothing to read; a restart does not move it."""
    kafka.create_topic(topic)
    kafka.produce_values(topic, 5, prefix="before")
    checkpoint = tmp_path / "checkpoint"

    first_run = run_available_now(stream(spark, kafka, subscribe=topic), checkpoint)
    after = kafka.produce_values(topic, 3, prefix="after")
    second_run = run_available_now(stream(spark, kafka, subscribe=topic), checkpoint)

    assert records_of(first_run) == []
    assert sorted(v for *_, v in records_of(second_run)) == sorted(r.value for r in after)


def test_new_partitions_and_matching_topics_are_read_from_their_first_record(spark, kafka, topic):
    kafka.create_topic(topic)
    kafka.produce_values(topic, 3, prefix="old")
    table = f"picked_up_{uuid.uuid4().hex[:8]}"
    pattern = topic.replace("-", "[-]") + "(-late)?"
    query = (
        stream(spark, kafka, subscribePattern=pattern, startingOffsets="earliest")
        .select("topic", "partition", "offset", "value")
        .writeStream.format("memory")
        .queryName(table)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        kafka.add_partitions(topic, 3)
        kafka.create_topic(topic + "-late")
        kafka.produce(
            topic, [{"value": b"new-p1", "partition": 1}, {"value": b"new-p2", "partition": 2}]
        )
        kafka.produce_values(topic + "-late", 2, prefix="late")
        _wait_for_rows(spark, query, table, 7)
    finally:
        query.stop()

    rows = [tuple(row) for row in spark.table(table).collect()]
    assert sorted(rows) == sorted(
        [(topic, 0, offset, f"old{offset}".encode()) for offset in range(3)]
        + [(topic, 1, 0, b"new-p1"), (topic, 2, 0, b"new-p2")]
        + [(topic + "-late", 0, offset, f"late{offset}".encode()) for offset in range(2)]
    )


def _wait_for_rows(spark, query, table: str, count: int) -> None:
    # processAllAvailable only knows about partitions the last latestOffset saw; new ones
    # appear on the next trigger, so wait for the rows themselves (with a generous bound).
    for _ in range(60):
        query.processAllAvailable()
        if spark.table(table).count() >= count:
            return
        query.awaitTermination(0.5)
    raise AssertionError(f"{table} never reached {count} rows: {spark.table(table).collect()}")


def test_records_are_neither_lost_nor_duplicated_while_producing_during_the_query(
    spark, kafka, topic, tmp_path
):
    kafka.create_topic(topic, partitions=2)
    table = f"live_{uuid.uuid4().hex[:8]}"
    query = (
        stream(spark, kafka, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="25")
        .select("partition", "offset", "value")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    produced = []
    try:
        for round_number in range(4):
            produced += kafka.produce_values(topic, 30, partitions=2, prefix=f"r{round_number}-")
            query.processAllAvailable()
    finally:
        query.stop()

    values = [row.value for row in spark.table(table).collect()]
    assert Counter(values) == Counter(record.value for record in produced)
    progress_rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(progress_rows) <= 25


def test_streaming_query_on_missing_topic_fails_naming_it(spark, kafka, tmp_path):
    missing = f"no-such-topic-{uuid.uuid4().hex[:6]}"
    query = (
        stream(spark, kafka, subscribe=missing)
        .writeStream.format("memory")
        .queryName(f"missing_{uuid.uuid4().hex[:8]}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(
        Exception, match=f"topic '{missing}' named by option subscribe does not exist"
    ):
        query.awaitTermination(60)
    query.stop()


def test_offsets_in_the_checkpoint_are_canonical_json(spark, kafka, topic, tmp_path):
    kafka.create_topic(topic, partitions=11)
    kafka.produce_values(topic, 22, partitions=11)
    checkpoint = tmp_path / "checkpoint"

    run_available_now(stream(spark, kafka, subscribe=topic, startingOffsets="earliest"), checkpoint)

    batch_files = [path for path in (checkpoint / "offsets").iterdir() if path.name.isdigit()]
    last_offset_file = max(batch_files, key=lambda path: int(path.name))
    offsets = json.loads(last_offset_file.read_text().splitlines()[-1])
    assert offsets == {topic: {str(p): 2 for p in range(11)}}
    assert last_offset_file.read_text().splitlines()[-1] == json.dumps(offsets, sort_keys=True)


def test_read_committed_stream_stops_at_open_transaction_and_skips_aborted_records(
    spark, kafka, coordinator_writes, topic, tmp_path
):
    """Offsets 0-2 plain, 3-6 an open transaction, 7-8 plain: the stream reads only up to
    the last stable offset (3). After the ABORT marker (offset 9) the next run reads 7-8,
    never the aborted records, and ends although offset 9 is a marker. A committed
    transaction after that is read."""
    kafka.create_topic(topic)
    checkpoint = tmp_path / "checkpoint"
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    kafka.produce_values(topic, 3, prefix="before")
    coordinator_writes.transactional_records(
        topic, [b"aborted%d" % i for i in range(4)], producer_id=9001
    )
    kafka.produce_values(topic, 2, prefix="after")

    while_open = run_available_now(stream(spark, kafka, **options), checkpoint)
    assert coordinator_writes.marker(topic, commit=False, producer_id=9001).base_offset == 9
    after_abort = run_available_now(stream(spark, kafka, **options), checkpoint)
    coordinator_writes.transactional_records(
        topic, [b"committed0", b"committed1"], producer_id=9002
    )
    coordinator_writes.marker(topic, commit=True, producer_id=9002)
    after_commit = run_available_now(stream(spark, kafka, **options), checkpoint)

    assert [(o, v) for _, _, o, v in records_of(while_open)] == [
        (0, b"before0"),
        (1, b"before1"),
        (2, b"before2"),
    ]
    assert [(o, v) for _, _, o, v in records_of(after_abort)] == [(7, b"after0"), (8, b"after1")]
    assert [(o, v) for _, _, o, v in records_of(after_commit)] == [
        (10, b"committed0"),
        (11, b"committed1"),
    ]


def test_deleted_topic_fails_the_query_unless_fail_on_data_loss_is_false(
    spark, kafka, topic, tmp_path
):
    kafka.create_topic(topic)
    kafka.produce_values(topic, 3)
    checkpoint = tmp_path / "checkpoint"
    run_available_now(stream(spark, kafka, subscribe=topic, startingOffsets="earliest"), checkpoint)
    kafka.delete_topic(topic)

    query = (
        stream(spark, kafka, subscribe=topic)
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(lambda frame, batch_id: None)
        .start()
    )
    with pytest.raises(
        Exception, match=f"partitions {topic}-0 were being read but no longer exist"
    ):
        query.awaitTermination(60)
    tolerant = run_available_now(
        stream(spark, kafka, subscribe=topic, failOnDataLoss="false"), checkpoint
    )

    assert records_of(tolerant) == []
