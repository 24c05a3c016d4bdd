"""Bad input reaches the user as an error that names the option, topic or servers: checked
through Spark (where the error crosses a Python worker and the JVM), and, for the option
rules themselves, directly on `parse_options`."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from oncelog.spark.errors import SourceOptionError
from oncelog.spark.source.options import (
    EARLIEST,
    LATEST,
    Assign,
    Subscribe,
    SubscribePattern,
    parse_options,
)

# -- through Spark ---------------------------------------------------------------------------


def batch(spark, **options: str):
    reader = spark.read.format("oncelog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_load_without_bootstrap_servers_fails_at_load(spark):
    with pytest.raises(Exception, match=re.escape("option kafka.bootstrap.servers is required")):
        batch(spark, subscribe="anything")


def test_batch_read_of_missing_topic_names_the_topic(spark, kafka):
    with pytest.raises(
        Exception, match="topic 'no-such-topic-here' named by option subscribe does not exist"
    ):
        batch(
            spark,
            **{
                "kafka.bootstrap.servers": kafka.bootstrap_servers,
                "subscribe": "no-such-topic-here",
            },
        ).collect()


def test_unreachable_broker_is_reported_with_its_address(spark):
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{placeholder.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(Exception, match=f"failed on kafka.bootstrap.servers={address}"):
        batch(
            spark,
            **{
                "kafka.bootstrap.servers": address,
                "subscribe": "t",
                "fetchOffset.timeoutMs": "1500",
            },
        ).collect()
    assert time.monotonic() - started < 60


def test_unknown_client_setting_is_rejected_naming_it(spark, kafka, topic):
    kafka.create_topic(topic)
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "kafka.no.such.setting": "1",
    }
    with pytest.raises(Exception, match=re.escape("no.such.setting")):
        batch(spark, **options).collect()


def test_user_schema_is_refused(spark, kafka, topic):
    kafka.create_topic(topic)
    reader = spark.read.format("oncelog").schema("value binary")
    reader = reader.option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
        "subscribe", topic
    )
    with pytest.raises(Exception, match="fixed schema"):
        reader.load().collect()


# -- option rules ----------------------------------------------------------------------------

BOOTSTRAP = {"kafka.bootstrap.servers": "localhost:9092"}


def parse(streaming: bool | None = True, **options: str):
    # Spark lower-cases option names before the source sees them.
    return parse_options(
        {key.lower(): value for key, value in {**BOOTSTRAP, **options}.items()}, streaming=streaming
    )


def test_subscription_kinds_parse():
    assert parse(subscribe="a, b,a").subscription == Subscribe(("a", "b"))
    assert parse(subscribePattern="orders-.*").subscription == SubscribePattern("orders-.*")
    assert parse(assign='{"t": [1, 0], "u": [2]}').subscription == Assign(
        (("t", 0), ("t", 1), ("u", 2))
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "exactly one of the options subscribe, subscribePattern, assign is required"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, r"\(got subscribe, assign\)"),
        ({"subscribe": " , "}, "option subscribe: give a comma-separated list"),
        ({"subscribe": "bad topic"}, "'bad topic' is not a legal Kafka topic name"),
        ({"subscribePattern": "("}, "is not a regular expression"),
        ({"assign": "[0]"}, "option assign=.* must be a non-empty JSON object"),
        ({"assign": '{"t": ["x"]}'}, "topic 't' needs a list of partition numbers"),
        ({"subscribe": "t", "startingOffsets": "newest"}, "option startingOffsets='newest' is not"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "offset -3 of t-0 must be"),
        ({"subscribe": "t", "startingOffsets": '{"u": {"0": 1}}'}, "names u, outside subscribe=t"),
        (
            {"subscribe": "t", "maxOffsetsPerTrigger": "0"},
            "maxOffsetsPerTrigger='0' must be positive",
        ),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "ten"}, "is not an integer"),
        (
            {"subscribe": "t", "includeHeaders": "yes"},
            "option includeHeaders='yes': use true or false",
        ),
        ({"subscribe": "t", "endingOffsets": "latest"}, "endingOffsets is for batch queries"),
        ({"subscribe": "t", "kafka.isolation.level": "dirty"}, "kafka.isolation.level='dirty'"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "set startingOffsets instead"),
        (
            {"subscribe": "t", "kafka.enable.auto.commit": "true"},
            "kafka.enable.auto.commit is not allowed",
        ),
        ({"subscribe": "t", "subscirbe": "t"}, "unknown option 'subscirbe'"),
        (
            {"subscribe": "t", "minPartitions": "4"},
            "minpartitions of Spark's Kafka source is not supported",
        ),
    ],
)
def test_bad_streaming_option_is_named_in_the_error(options, message):
    with pytest.raises(SourceOptionError, match=message):
        parse(**options)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"startingOffsets": "latest"}, "startingOffsets=latest is not allowed in a batch query"),
        (
            {"startingOffsets": '{"t": {"0": -1}}'},
            "-1 \\(latest\\) is not allowed in a batch query",
        ),
        ({"endingOffsets": "earliest"}, "endingOffsets=earliest is not allowed"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, "-2 \\(earliest\\) is not allowed"),
    ],
)
def test_bad_batch_option_is_named_in_the_error(options, message):
    with pytest.raises(SourceOptionError, match=message):
        parse(streaming=False, subscribe="t", **options)


def test_defaults_follow_spark_kafka_source():
    streaming = parse(subscribe="t")
    batch_options = parse(streaming=False, subscribe="t")

    assert streaming.starting_offsets.default == LATEST
    assert streaming.ending_offsets is None
    assert batch_options.starting_offsets.default == EARLIEST
    assert batch_options.ending_offsets.default == LATEST
    assert streaming.isolation_level == "read_committed"
    assert streaming.fail_on_data_loss is True
    assert streaming.include_headers is False
    assert streaming.max_offsets_per_trigger is None


def test_client_settings_pass_through_without_prefix():
    options = parse(
        subscribe="t", **{"kafka.isolation.level": "read_uncommitted", "kafka.client.id": "me"}
    )

    assert options.isolation_level == "read_uncommitted"
    assert dict(options.client_settings) == {
        "isolation.level": "read_uncommitted",
        "client.id": "me",
    }
    assert options.client.client_id == "me"


@pytest.mark.parametrize("setting, named", [
    ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "option kafka.security.protocol=SASL_PLAINTEXT"),
    ({"kafka.max.partition.fetch.bytes": "lots"}, "option kafka.max.partition.fetch.bytes='lots'"),
    ({"kafka.check.crcs": "maybe"}, "option kafka.check.crcs=maybe"),
])
def test_settings_the_executors_client_cannot_honour_are_refused_naming_them(setting, named):
    with pytest.raises(SourceOptionError) as raised:
        parse(subscribe="t", **setting)
    assert named in str(raised.value)


def test_specific_offsets_are_kept_per_partition():
    options = parse(
        streaming=False, subscribe="t", startingOffsets=json.dumps({"t": {"1": 5, "0": -2}})
    )

    assert options.starting_offsets.specific_map == {("t", 0): EARLIEST, ("t", 1): 5}


def test_batch_ending_offsets_beyond_the_log_are_refused(spark, kafka, topic):
    kafka.create_topic(topic)
    kafka.produce_values(topic, 3)
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "endingOffsets": json.dumps({topic: {"0": 10}}),
    }
    with pytest.raises(
        Exception,
        match=f"endingOffsets lie beyond the latest offsets: {topic}-0 at 10 \\(latest 3\\)",
    ):
        batch(spark, **options).collect()
