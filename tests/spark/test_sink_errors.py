"""Bad sink input fails with one clear message that names the option (or column)."""

from __future__ import annotations

import json
import re

import pytest
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from oncelog.spark.sink.options import SinkOptionError, parse_sink_options
from oncelog.spark.sink.rows import check_input_schema
from oncelog.spark.sink.twophase import TwoPhaseCommitUnavailable
from oncelog.spark.sink.writers import stream_writer
from tests.support.kafka import create_topics
from tests.support.spark.topics import write_source

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
VALUE_ONLY = StructType([StructField("value", BinaryType())])


@pytest.mark.parametrize("options, named", [
    ({}, "option kafka.bootstrap.servers is required"),
    ({**BOOTSTRAP, "mode": "exactly"}, "option mode='exactly'"),
    ({**BOOTSTRAP, "topic": "no spaces"}, "option topic"),
    ({**BOOTSTRAP, "mode": "batch"}, "mode=batch needs option checkpointLocation"),
    ({**BOOTSTRAP, "checkpointLocation": "s3a://bucket/x", "mode": "batch"}, "option checkpointLocation="),
    ({**BOOTSTRAP, "kafka.transactional.id": "mine"}, "option kafka.transactional.id is not allowed"),
    ({**BOOTSTRAP, "clusterTimeoutMs": "0"}, "option clusterTimeoutMs='0' must be positive"),
    ({**BOOTSTRAP, "topicz": "typo"}, "unknown option 'topicz'"),
    ({**BOOTSTRAP, "topics": "orders,bad name"}, "option topics: 'bad name' is not a legal Kafka topic name"),
    ({**BOOTSTRAP, "topic": "orders", "topics": "eu,us"}, "option topic=orders is not one of option topics=eu,us"),
    ({**BOOTSTRAP, "topic": "orders", "microBatchId": "3"}, "option microBatchId is for a batch write"),
])
def test_bad_options_name_the_option(options, named):
    with pytest.raises(SinkOptionError, match=None) as raised:
        parse_sink_options(options, streaming=True)
    assert named in str(raised.value)


@pytest.mark.parametrize("schema, named", [
    (StructType([StructField("key", BinaryType())]), "needs a 'value' column"),
    (StructType([StructField("value", IntegerType())]), "column 'value' must be binary or string"),
    (StructType([StructField("value", StringType()), StructField("partition", StringType())]),
     "column 'partition' must be int"),
    (StructType([StructField("value", StringType()), StructField("headers", StringType())]),
     "column 'headers' must be array<struct<key:string,value:binary>>"),
])
def test_bad_columns_name_the_column(schema, named):
    with pytest.raises(SinkOptionError) as raised:
        check_input_schema(schema, parse_sink_options({**BOOTSTRAP, "topic": "t"}, streaming=True))
    assert named in str(raised.value)


def run_failing_query(spark, shared_broker, source, tmp_path, **sink_options) -> str:
    bootstrap = shared_broker.bootstrap_servers
    create_topics(bootstrap, (source, 1))
    write_source(bootstrap, source, 1, transactions=1, per_transaction=3)
    stream = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").load())
    writer = stream.select("value").writeStream.format("oncelog").trigger(availableNow=True)
    for key, value in {"kafka.bootstrap.servers": bootstrap, "checkpointLocation": str(tmp_path / "cp"),
                       **sink_options}.items():
        writer = writer.option(key, value)
    query = writer.start()
    with pytest.raises(Exception) as raised:
        query.awaitTermination(120)
    return str(raised.value)


def test_a_query_without_a_topic_option_or_column_fails_naming_option_topic(spark, shared_broker, topic, tmp_path):
    message = run_failing_query(spark, shared_broker, topic, tmp_path)
    assert "option topic is required when the rows have no 'topic' column" in message


def test_a_query_with_a_bad_mode_fails_naming_option_mode(spark, shared_broker, topic, tmp_path):
    message = run_failing_query(spark, shared_broker, topic, tmp_path, topic="out", mode="atomic")
    assert "option mode='atomic'" in message


@pytest.mark.parametrize("mode", ["partition", "batch"])
def test_an_unreachable_cluster_fails_naming_kafka_bootstrap_servers(spark, shared_broker, topic, tmp_path, mode):
    message = run_failing_query(spark, shared_broker, topic, tmp_path, topic="out", mode=mode,
                                clusterTimeoutMs="1500", **{"kafka.bootstrap.servers": "127.0.0.1:9"})
    assert "kafka.bootstrap.servers=127.0.0.1:9" in message


def test_batch_mode_on_a_broker_without_two_phase_commit_says_what_to_do(broker, tmp_path):
    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "q"}) + "\n")
    options = {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": "out", "mode": "batch",
               "checkpointLocation": str(checkpoint)}
    with pytest.raises(TwoPhaseCommitUnavailable) as raised:
        # What the driver runs before each micro-batch (Spark wraps it in its own exception).
        stream_writer(options, VALUE_ONLY)
    assert str(raised.value) == (
        "mode=batch needs an oncelog broker with transaction.two.phase.commit.enable=true "
        "(KIP-939 InitProducerId v6); use mode=partition against other Kafka clusters"
    )


def test_a_misspelt_kafka_setting_is_refused_by_librdkafka_before_any_task_runs():
    with pytest.raises(SinkOptionError, match=re.escape('No such configuration property: "compresion.type"')):
        stream_writer({**BOOTSTRAP, "topic": "t", "kafka.compresion.type": "lz4"}, VALUE_ONLY)


@pytest.mark.parametrize("setting, named", [
    ({"kafka.security.protocol": "SASL_SSL"}, "option kafka.security.protocol=SASL_SSL"),
    ({"kafka.compression.type": "brotli"}, "option kafka.compression.type=brotli"),
    ({"kafka.acks": "1"}, "option kafka.acks=1"),
    ({"kafka.partitioner": "fnv1a"}, "option kafka.partitioner=fnv1a"),
])
def test_settings_the_sinks_client_cannot_honour_are_refused_naming_them(setting, named):
    with pytest.raises(SinkOptionError) as raised:
        parse_sink_options({**BOOTSTRAP, "topic": "t", **setting}, streaming=True)
    assert named in str(raised.value)


def test_batch_mode_refused_for_want_of_two_phase_commit_leaves_no_gate_open(broker, tmp_path):
    """Regression: the gate's records were written before the hand-over found 2PC off, and the
    open gate held read_committed readers of the topic back until its 15-minute timeout."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from oncelog.spark.sink.twophase import TwoPhaseClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("out", 2, 1)])["out"].result(30)
    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "q"}) + "\n")
    options = {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": "out", "mode": "batch",
               "checkpointLocation": str(checkpoint)}
    with pytest.raises(TwoPhaseCommitUnavailable):
        stream_writer(options, VALUE_ONLY)
    assert TwoPhaseClient(broker.bootstrap_servers).list_ongoing(".*") == []
