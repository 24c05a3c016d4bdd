"""Share groups (KIP-932) with librdkafka's share consumer (confluent-kafka's
ShareConsumer): two consumers over two partitions each getting every record once,
explicit RELEASE and REJECT with delivery counts, and a read_committed share consumer
that never sees aborted records."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from oncelog import EmbeddedBroker

BROKER_CONFIG = {
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "100",
    "share.coordinator.state.topic.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}

def text(message) -> str:
    """A record's value as text (the tests write no tombstones)."""
    value = message.value()
    assert value is not None
    return value.decode()


def count_of(message) -> int:
    """A share consumer's delivery count of a record."""
    count = message.delivery_count()
    assert count is not None
    return count



@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("share-librdkafka"), BROKER_CONFIG) as running:
        yield running


def prepare(bootstrap: str, topic: str, partitions: int, group: str, **group_configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    configs = {"share.auto.offset.reset": "earliest", **{k.replace("_", "."): v for k, v in group_configs.items()}}
    resource = ConfigResource("group", group, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) for key, value in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def share_consumer(bootstrap: str, group: str, **extra: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})


def test_two_librdkafka_share_consumers_get_every_record_once(broker):
    topic = group = "rdk-share-two"
    prepare(broker.bootstrap_servers, topic, 2, group)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    values = [f"v{i}" for i in range(200)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    seen: list[tuple[str, str, int]] = []
    lock = threading.Lock()
    done = threading.Event()

    def consume(name: str) -> None:
        consumer = share_consumer(broker.bootstrap_servers, group, **{"client.id": name})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        try:
            while not done.is_set() and time.monotonic() < deadline:
                for message in consumer.poll(0.2):
                    if message.error() is None:
                        with lock:
                            seen.append((text(message), name, count_of(message)))
                            if len({value for value, _, _ in seen}) >= len(values):
                                done.set()
            consumer.commit_sync(10)
        finally:
            consumer.close()

    threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    counts = Counter(value for value, _, _ in seen)
    assert sorted(counts) == sorted(values)
    assert set(counts.values()) == {1}, [value for value, count in counts.items() if count > 1]
    assert {count for _, _, count in seen} == {1}


def test_librdkafka_explicit_acknowledgements_release_and_reject(broker):
    topic = group = "rdk-share-explicit"
    prepare(broker.bootstrap_servers, topic, 1, group)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    values = ["release-0", "reject-0", "ok-0", "ok-1"]
    for value in values:
        producer.produce(topic, value.encode())
    assert producer.flush(30) == 0
    consumer = share_consumer(broker.bootstrap_servers, group, **{"share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    delivered: list[tuple[str, int]] = []
    try:
        deadline = time.monotonic() + 60
        while len(delivered) < 5 and time.monotonic() < deadline:
            messages = [m for m in consumer.poll(0.2) if m.error() is None]
            for message in messages:
                value, count = text(message), count_of(message)
                delivered.append((value, count))
                kind = (AcknowledgeType.RELEASE if value.startswith("release") and count == 1 else
                        AcknowledgeType.REJECT if value.startswith("reject") else AcknowledgeType.ACCEPT)
                consumer.acknowledge(message, kind)
            if messages:
                assert all(error is None for error in consumer.commit_sync(10).values())
        later = [m for m in consumer.poll(1.5) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(delivered) == sorted([("release-0", 1), ("release-0", 2), ("reject-0", 1), ("ok-0", 1),
                                        ("ok-1", 1)])
    assert later == []


def test_a_read_committed_librdkafka_share_consumer_skips_aborted_transactions(broker):
    topic = group = "rdk-share-committed"
    prepare(broker.bootstrap_servers, topic, 1, group, share_isolation_level="read_committed")
    for commit, prefix in ((False, "aborted"), (True, "committed")):
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"rdk-{prefix}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"{prefix}-{i}".encode())
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    consumer = share_consumer(broker.bootstrap_servers, group)
    consumer.subscribe([topic])
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            seen.extend(text(m) for m in consumer.poll(0.2) if m.error() is None)
        seen.extend(text(m) for m in consumer.poll(1.0) if m.error() is None)
    finally:
        consumer.close()
    assert sorted(seen) == ["committed-0", "committed-1", "committed-2"]
