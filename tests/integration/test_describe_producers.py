"""DescribeProducers (API 61) through kafka-python's admin client and `oncelog producers describe`,
the alias of `oncelog transactions describe-producers` (same output and errors)."""

import os
import socket
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
        check=False, capture_output=True, text=True, timeout=30,
    )
    assert cli.returncode == 0, cli.stderr
    header, row = cli.stdout.strip().splitlines()
    assert header.split() == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                              "LastTimestamp", "CurrentTransactionStartOffset"]
    # kafka-transactions.sh's rendering: no open transaction is "None".
    assert row.split() == [str(active.producer_id), "0", "-1", "6", "1700000000006", "None"]


def test_describe_producers_of_a_missing_partition_is_a_one_line_error(broker):
    cli = subprocess.run(
        [sys.executable, "-m", "oncelog", "producers", "describe", "--bootstrap-server", broker.bootstrap_servers,
         "--topic", "nope", "--partition", "0"],
        check=False, capture_output=True, text=True, timeout=30,
    )
    assert cli.returncode == 1
    assert cli.stderr.strip() == (
        "oncelog: error: topic 'nope': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"
    )


def test_describe_producers_against_a_server_that_never_answers_is_a_one_line_error():
    """A port that accepts connections (the kernel's backlog) but never answers: the
    request times out after request.timeout.ms, reported in one line, not a TimeoutError."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        for command in (["producers", "describe"], ["transactions", "describe-producers"]):
            cli = subprocess.run(
                [sys.executable, "-m", "oncelog", *command, "--bootstrap-server", address,
                 "-X", "request.timeout.ms=1000", "--topic", "t", "--partition", "0"],
                check=False, capture_output=True, text=True, timeout=30,
            )
            assert cli.returncode == 1
            assert cli.stderr == (
                f"oncelog: error: no answer from {address} within 1s to Metadata (request.timeout.ms)\n"
            )


def test_transactions_commands_take_the_connection_options_of_every_command(broker, tmp_path):
    """$ONCELOG_BOOTSTRAP, --command-config and -X reach the wire-protocol commands too."""
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers={broker.bootstrap_servers}\n")
    environment = {**os.environ, "ONCELOG_BOOTSTRAP": broker.bootstrap_servers}
    for options, env in (([], environment), (["--command-config", str(config)], None),
                         (["-X", f"bootstrap.servers={broker.bootstrap_servers}"], None)):
        cli = subprocess.run([sys.executable, "-m", "oncelog", "transactions", "list", *options],
                             check=False, capture_output=True, text=True, timeout=30, env=env)
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    cli = subprocess.run([sys.executable, "-m", "oncelog", "transactions", "list", "--bootstrap-server",
                          broker.bootstrap_servers, "-X", "no.such.property=1"],
                         check=False, capture_output=True, text=True, timeout=30)
    assert cli.returncode == 1
    assert cli.stderr.startswith("oncelog: error: invalid client configuration:") and "no.such.property" in cli.stderr
