"""DescribeProducers (API 61) through kafka-python's admin client and `oncelog producers describe`."""

import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition


def test_idempotent_producer_state_is_described(broker):
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("described", 2, 1)])["described"].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(7):
        producer.produce("described", f"v{i}".encode(), partition=0, timestamp=1_700_000_000_000 + i)
        producer.flush(10)

    kafka_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    states = kafka_admin.describe_producers([TopicPartition("described", 0), TopicPartition("described", 1)])
    kafka_admin.close()
    (active,) = states[TopicPartition("described", 0)].active_producers
    assert active.producer_epoch == 0
    assert active.last_sequence == 6
    assert active.last_timestamp == 1_700_000_000_006
    assert active.current_transaction_start_offset == -1
    assert states[TopicPartition("described", 1)].active_producers == []

    cli = subprocess.run(
        [sys.executable, "-m", "oncelog", "producers", "describe", "--bootstrap-server", bootstrap,
         "--topic", "described", "--partition", "0"],
        capture_output=True, text=True, timeout=30,
    )
    assert cli.returncode == 0, cli.stderr
    header, row = cli.stdout.strip().splitlines()
    assert header.split() == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                              "LastTimestamp", "CurrentTransactionStartOffset"]
    assert row.split() == [str(active.producer_id), "0", "-1", "6", "1700000000006", "-1"]


def test_describe_producers_of_a_missing_partition_is_a_one_line_error(broker):
    cli = subprocess.run(
        [sys.executable, "-m", "oncelog", "producers", "describe", "--bootstrap-server", broker.bootstrap_servers,
         "--topic", "nope", "--partition", "0"],
        capture_output=True, text=True, timeout=30,
    )
    assert cli.returncode == 1
    assert cli.stderr.strip() == "oncelog: error: nope-0 does not exist"
