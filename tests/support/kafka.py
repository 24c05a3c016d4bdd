"""Set-up and read-back through confluent-kafka (librdkafka) that many integration tests
share: create topics and wait for them, write plain records, read what is readable, ask
for the last stable offset.

Tests about a request itself (hand-built batches at the wire, acks, transactional or
idempotent producers, batch shapes) keep their own helpers: these are for everything else.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30.0


def create_topics(bootstrap: str, *topics: tuple[str, int], replication_factor: int = 1,
                  config: Mapping[str, object] | None = None, timeout: float = TIMEOUT_S) -> None:
    """Each (name, partitions), all with the topic `config` (values sent as strings);
    returns when the broker has created every one (CreateTopics answered)."""
    settings = {name: str(value) for name, value in (config or {}).items()}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=settings)
                                   for name, partitions in topics])
    for future in futures.values():
        future.result(timeout)


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1,
                 config: Mapping[str, object] | None = None, timeout: float = TIMEOUT_S) -> None:
    """One topic, as `create_topics`."""
    create_topics(bootstrap, (name, partitions), replication_factor=replication_factor, config=config,
                  timeout=timeout)


def produce_values(bootstrap: str, topic: str, values: Iterable[bytes | str], partition: int | None = None,
                   key: bytes | str | None = None, timeout: float = TIMEOUT_S) -> list[tuple[int, int]]:
    """`values` in order, all with `key`, to `partition` (None: where the producer's
    partitioner puts them), by a default confluent-kafka Producer. Fails unless every record
    is delivered; returns each one's (partition, offset) in delivery order."""
    return _produce(bootstrap, topic, ((partition, value) for value in values), key, timeout)


def produce_to_partitions(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | str]],
                          timeout: float = TIMEOUT_S) -> list[tuple[int, int]]:
    """Each (partition, value) in order, as `produce_values`."""
    return _produce(bootstrap, topic, records, None, timeout)


def _produce(bootstrap: str, topic: str, records: Iterable[tuple[int | None, bytes | str]],
             key: bytes | str | None, timeout: float) -> list[tuple[int, int]]:
    producer = Producer({"bootstrap.servers": bootstrap})
    delivered: list[tuple[int, int]] = []
    failed: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failed.append(error)
        else:
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            delivered.append((partition, offset))

    for partition, value in records:
        while True:
            try:
                producer.produce(topic, value, key=key, partition=-1 if partition is None else partition,
                                 on_delivery=on_delivery)
                break
            except BufferError:  # the producer's queue is full: let it send some first
                producer.poll(0.05)
    assert producer.flush(timeout) == 0, f"records to {topic} still undelivered after {timeout}s"
    assert not failed, failed
    return delivered


def read_values(bootstrap: str, partitions: Iterable[tuple[str, int]], isolation: str, *,
                settle: float = 1.5) -> list[str]:
    """Every value readable now from the start of each (topic, partition), decoded, with
    `isolation` ("read_committed" or "read_uncommitted"): polls until no new record arrived
    for `settle` seconds."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 50,
    })
    consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in partitions])
    values = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < settle:
        batch = consumer.consume(1000, timeout=0.1)
        for message in batch:
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None, message
            values.append(value.decode())
        if batch:
            quiet_since = time.monotonic()
    consumer.close()
    return values


def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's end as a read_committed consumer sees it, asked of the broker now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    consumer.close()
    return high
