"""spark.read.format("oncelog") against a real broker: what was produced comes back, column
for column, within the requested offsets."""

from __future__ import annotations

import datetime
import json
import time


def read_topic(spark, kafka, topic: str, **options: str):
    reader = spark.read.format("oncelog").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
    reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def local_time(timestamp_ms: int) -> datetime.datetime:
    # PySpark hands timestamps to Python as naive datetimes in the process's local time.
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000)  # noqa: DTZ006 (naive and local, as PySpark's)


def test_batch_read_returns_every_column_as_produced(spark, kafka, topic):
    kafka.create_topic(topic, partitions=2)
    base_ms = int(time.time() * 1000) - 60_000
    produced = kafka.produce(
        topic,
        [
            {
                "key": b"k0",
                "value": b"v0",
                "partition": 0,
                "timestamp": base_ms,
                "headers": [("h1", b"a"), ("h2", None)],
            },
            {"key": None, "value": b"v1", "partition": 1, "timestamp": base_ms + 1},
            {
                "key": b"k2",
                "value": None,
                "partition": 0,
                "timestamp": base_ms + 2,
                "headers": [("h1", b"")],
            },
            {"key": b"\x00\xff", "value": b"\x01" * 3000, "partition": 1, "timestamp": base_ms + 3},
        ],
    )

    rows = read_topic(spark, kafka, topic, includeHeaders="true").collect()

    assert read_topic(spark, kafka, topic, includeHeaders="true").columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = sorted(
        (
            row.partition,
            row.offset,
            row.key,
            row.value,
            row.topic,
            row.timestamp,
            row.timestampType,
            None if row.headers is None else tuple((h.key, h.value) for h in row.headers),
        )
        for row in rows
    )
    expected = sorted(
        (p.partition, p.offset, p.key, p.value, topic, local_time(p.timestamp_ms), 0, p.headers)
        for p in produced
    )
    assert got == expected


def test_batch_read_without_include_headers_has_the_seven_kafka_columns(spark, kafka, topic):
    kafka.create_topic(topic)
    kafka.produce(topic, [{"value": b"x", "headers": [("h", b"v")]}])

    frame = read_topic(spark, kafka, topic)

    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert [row.value for row in frame.collect()] == [b"x"]


def test_log_append_time_topic_reports_timestamp_type_1(spark, kafka, topic):
    kafka.create_topic(topic, **{"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    kafka.produce(topic, [{"value": b"x", "timestamp": 1_000}])

    (row,) = read_topic(spark, kafka, topic).collect()

    assert row.timestampType == 1
    assert row.timestamp >= local_time(before_ms - 1000)


def test_batch_read_respects_starting_and_ending_offsets(spark, kafka, topic):
    kafka.create_topic(topic, partitions=2)
    kafka.produce_values(topic, 40, partitions=2)  # offsets 0..19 in each partition

    frame = read_topic(
        spark,
        kafka,
        topic,
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 8, "1": 3}}),
    )

    assert sorted((row.partition, row.offset) for row in frame.collect()) == [
        (0, 5),
        (0, 6),
        (0, 7),
        (1, 0),
        (1, 1),
        (1, 2),
    ]


def test_batch_read_of_assigned_partition_and_pattern(spark, kafka, topic):
    kafka.create_topic(topic, partitions=3)
    kafka.create_topic(topic + "-other")
    kafka.produce_values(topic, 9, partitions=3)
    kafka.produce_values(topic + "-other", 2)

    def reader():  # DataFrameReader.option() changes the reader in place: one per query
        return spark.read.format("oncelog").option(
            "kafka.bootstrap.servers", kafka.bootstrap_servers
        )

    assigned = reader().option("assign", json.dumps({topic: [1]})).load().collect()
    matched = reader().option("subscribePattern", topic.replace("-", ".") + ".*").load().collect()

    assert sorted((row.partition, row.value) for row in assigned) == [
        (1, b"v1"),
        (1, b"v4"),
        (1, b"v7"),
    ]
    assert sorted((row.topic, row.partition) for row in matched) == sorted(
        [(topic, p) for p in range(3) for _ in range(3)] + [(topic + "-other", 0)] * 2
    )


def test_range_whose_end_lies_past_the_last_data_record_terminates(
    spark, kafka, coordinator_writes, topic
):
    """A transaction marker after the data takes an offset no consumer ever receives: the
    range [0, 6) holds five records, and reading it must stop at the consumer's position,
    not wait for a sixth record."""
    kafka.create_topic(topic)
    kafka.produce_values(topic, 5)
    assert coordinator_writes.marker(topic, commit=True, producer_id=4242).base_offset == 5

    started = time.monotonic()
    rows = read_topic(spark, kafka, topic, **{"kafkaConsumer.pollTimeoutMs": "30000"}).collect()

    assert sorted(row.offset for row in rows) == [0, 1, 2, 3, 4]
    assert time.monotonic() - started < 25  # well before the stall timeout would fire


def test_empty_topic_reads_as_empty_frame(spark, kafka, topic):
    kafka.create_topic(topic, partitions=2)

    assert read_topic(spark, kafka, topic).count() == 0
