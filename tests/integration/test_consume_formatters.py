"""`oncelog consume --formatter`: the internal topics decoded, as Kafka's console consumer
prints them with TransactionLogMessageFormatter and OffsetsMessageFormatter (the seeds'
monitoring script), against a real broker written to by real clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ONCELOG = Path(sys.executable).with_name("oncelog")
TOPIC = "formatted"
SEEDS_FORMATTER = "kafka.coordinator.transaction.TransactionStateManager$TransactionStateMessageFormatter"
COMPLETE_COMMIT, EMPTY = 4, 0


def consume(bootstrap: str, topic: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ONCELOG), "consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
         "--timeout-ms", "3000", *options],
        capture_output=True, text=True, check=False, timeout=60, stdin=subprocess.DEVNULL)


def documents(completed: subprocess.CompletedProcess[str]) -> list[dict]:
    assert completed.returncode == 0, completed.stderr
    return [json.loads(line) for line in completed.stdout.splitlines()]


def test_transaction_state_and_offsets_are_printed_as_kafkas_formatters_print_them(broker):
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fmt-t1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fmt-g", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
    consumer.close()

    states = documents(consume(bootstrap, "__transaction_state", "--formatter", SEEDS_FORMATTER))
    ours = [d for d in states if d["key"] == {"type": 0, "data": {"transactionalId": "fmt-t1"}}]
    values = [d["value"]["data"] for d in ours]
    assert values[0]["transactionStatus"] == EMPTY and values[0]["transactionPartitions"] is None
    committed = values[-1]
    assert committed["transactionStatus"] == COMPLETE_COMMIT
    assert committed["producerId"] >= 0 and committed["producerEpoch"] >= 0
    assert committed["transactionTimeoutMs"] > 0
    assert committed["transactionLastUpdateTimestampMs"] >= committed["transactionStartTimestampMs"] > 0
    assert [v["transactionStatus"] for v in values].count(COMPLETE_COMMIT) == 1
    assert any(v["transactionPartitions"] == [{"topic": TOPIC, "partitionIds": [0]}] for v in values)

    offsets = documents(consume(bootstrap, "__consumer_offsets", "--formatter", "offsets"))
    assert {"key", "value"} == set(offsets[0])
    mine = [d for d in offsets if d["key"]["data"] == {"group": "fmt-g", "topic": TOPIC, "partition": 0}]
    assert len(mine) == 1, offsets
    value = mine[0]["value"]
    assert value["version"] in (1, 3) and value["data"]["offset"] == 3 and value["data"]["metadata"] == ""
    assert value["data"]["commitTimestamp"] > 0
    # Group metadata records are not offsets: skipped, as Kafka's OffsetsMessageFormatter skips them.
    assert all(d["key"]["type"] in (0, 1) for d in offsets)


def test_an_unknown_formatter_is_one_line_naming_the_choices(broker):
    completed = consume(broker.bootstrap_servers, "__transaction_state", "--formatter", "kafka.tools.Nope")
    assert completed.returncode == 1
    assert completed.stderr.strip().count("\n") == 0
    assert "unknown --formatter 'kafka.tools.Nope'" in completed.stderr and "transaction-state" in completed.stderr
