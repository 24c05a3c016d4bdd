"""Helpers of the sink tests: source topics written with committed and aborted
confluent-kafka transactions, and read_committed reads of the sink's output."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

BATCH_HEADER = "batch"


def write_source(bootstrap: str, topic: str, partitions: int, transactions: int, per_transaction: int,
                 *, prefix: str = "r", abort_every: int = 3) -> list[str]:
    """`transactions` transactions of `per_transaction` records spread over the partitions;
    every `abort_every`-th is aborted. Returns the committed values."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"source-{topic}-{prefix}",
                         "linger.ms": 2})
    producer.init_transactions(30)
    committed = []
    for number in range(transactions):
        producer.begin_transaction()
        values = [f"{prefix}{number}-{i}" for i in range(per_transaction)]
        for i, value in enumerate(values):
            producer.produce(topic, value.encode(), key=value.encode(), partition=i % partitions)
        if number % abort_every == abort_every - 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.extend(values)
    return committed


@dataclass(frozen=True)
class Output:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 30.0) -> list[Output]:
    """Everything a consumer with `isolation` sees up to the end of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-test-reader",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    pending, found = set(partitions), []
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error:
            if error.code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
                continue
            raise AssertionError(error)
        topic_name, partition, offset, value = message.topic(), message.partition(), message.offset(), message.value()
        assert topic_name is not None and partition is not None and offset is not None and value is not None
        found.append(Output(topic_name, partition, offset, message.key(), value, tuple(message.headers() or ())))
    consumer.close()
    assert not pending, f"did not reach the end of {topic} partitions {pending}"
    return found


def values(outputs: list[Output]) -> Counter:
    return Counter(output.value.decode() for output in outputs)


def transformed(committed: list[str]) -> Counter:
    """The pipelines' transform: upper(value)."""
    return Counter(value.upper() for value in committed)


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, ...]]:
    """Per partition: (last stable offset, high watermark)."""
    result: dict[int, list[int]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-test-marks",
                             "isolation.level": isolation})
        metadata = consumer.list_topics(topic, timeout=10)
        for partition in metadata.topics[topic].partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            result.setdefault(partition, []).append(high)
        consumer.close()
    return {partition: tuple(marks) for partition, marks in result.items()}
