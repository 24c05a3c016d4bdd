"""Reading one range on an executor (`read_range`), driven directly against a real broker:
the paths where the range cannot be read as planned."""

from __future__ import annotations

import time

import pytest

from oncelog.spark.errors import DataLoss, ReadStalled
from oncelog.spark.source.options import parse_options
from oncelog.spark.source.ranges import KafkaRange, read_range


def options_for(kafka, topic: str, **extra: str):
    raw = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic}
    return parse_options(
        {**raw, **{key.lower(): value for key, value in extra.items()}}, streaming=False
    )


def offsets_read(options, task: KafkaRange) -> list[int]:
    return [
        offset
        for batch in read_range(options, task)
        for offset in batch.column("offset").to_pylist()
    ]


def test_range_is_read_exactly_with_records_on_both_sides(kafka, topic):
    kafka.create_topic(topic)
    kafka.produce_values(topic, 30)

    assert offsets_read(options_for(kafka, topic), KafkaRange(topic, 0, 7, 19)) == list(
        range(7, 19)
    )


def test_range_beyond_the_log_end_stalls_and_fails_after_the_poll_timeout(kafka, topic):
    kafka.create_topic(topic)
    kafka.produce_values(topic, 5)
    options = options_for(kafka, topic, **{"kafkaConsumer.pollTimeoutMs": "1500"})

    started = time.monotonic()
    with pytest.raises(
        ReadStalled, match=f"no progress reading {topic}-0 from offset 5 towards 10"
    ):
        offsets_read(options, KafkaRange(topic, 0, 0, 10))
    assert time.monotonic() - started < 30


def test_range_starting_past_the_log_end_is_data_loss_unless_tolerated(kafka, topic):
    kafka.create_topic(topic)
    kafka.produce_values(topic, 5)
    task = KafkaRange(topic, 0, 20, 30)

    with pytest.raises(DataLoss, match=f"offset 20 of {topic}-0 is beyond the log end 5"):
        offsets_read(options_for(kafka, topic), task)
    assert offsets_read(options_for(kafka, topic, failOnDataLoss="false"), task) == []
