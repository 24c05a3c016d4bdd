"""Idempotent producers against a real broker, through faults that force retries."""

import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.chaos.proxy import FaultPolicy, FaultProxy
from oncelog.local.process import free_port

PARTITIONS = 3


@pytest.fixture
def faulty_broker(tmp_path):
    """A broker reachable only through a fault proxy (it advertises the proxy's address)."""
    proxy_port = free_port()
    with EmbeddedBroker(tmp_path / "b", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}) as broker:
        policy = FaultPolicy(enabled=False, seed=7)
        with FaultProxy(("127.0.0.1", broker.port), policy, port=proxy_port) as proxy:
            admin = AdminClient({"bootstrap.servers": proxy.address})
            admin.create_topics([NewTopic("events", PARTITIONS, 1)])["events"].result(10)
            yield broker, proxy


def read_partitions(bootstrap, topic="events"):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(len(v) for v in values.values()) < sum(ends.values()) and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=0.5):
            assert message.error() is None
            values[message.partition()].append(int(message.value()))
    consumer.close()
    return values


def produce_through_faults(proxy, *, idempotent, count=60_000):
    proxy.policy.drop_response_and_close = 0.04
    proxy.policy.drop_response = 0.004
    proxy.policy.enabled = True
    producer = Producer({
        "bootstrap.servers": proxy.address,
        "enable.idempotence": idempotent,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 2,
        "batch.num.messages": 100,  # many small requests: many chances for a fault
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 100,
        "request.timeout.ms": 2000,
        "message.timeout.ms": 120_000,
        "retries": 1_000_000,
        "retry.backoff.ms": 20,
    })
    failures = []

    def delivered(error, message):
        if error is not None:
            failures.append(error)

    for i in range(count):
        partition = i % PARTITIONS
        while True:
            try:
                producer.produce("events", str(i).encode(), partition=partition, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(180) == 0
    proxy.policy.enabled = False
    return failures


def test_confluent_idempotent_producer_writes_each_message_once_in_order_despite_lost_responses(faulty_broker):
    broker, proxy = faulty_broker
    failures = produce_through_faults(proxy, idempotent=True)
    assert failures == []
    assert proxy.stats["drop_and_close"] > 10 and proxy.stats["drop"] > 0, proxy.stats
    values = read_partitions(broker.bootstrap_servers)
    for partition in range(PARTITIONS):
        assert values[partition] == list(range(partition, 60_000, PARTITIONS)), f"partition {partition}"


def test_without_idempotence_the_same_faults_duplicate_messages(faulty_broker):
    broker, proxy = faulty_broker
    produce_through_faults(proxy, idempotent=False, count=30_000)
    assert proxy.stats["drop_and_close"] > 5
    values = read_partitions(broker.bootstrap_servers)
    total = sum(len(v) for v in values.values())
    distinct = len({v for vs in values.values() for v in vs})
    assert distinct == 30_000, "at-least-once still loses nothing"
    assert total > distinct, "retries of written batches must show up as duplicates"


def test_kafka_python_idempotent_producer_through_faults(faulty_broker):
    from kafka import KafkaProducer

    broker, proxy = faulty_broker
    proxy.policy.drop_response_and_close = 0.15  # kafka-python packs partitions into ~100 requests
    proxy.policy.enabled = True
    producer = KafkaProducer(
        bootstrap_servers=proxy.address, enable_idempotence=True, acks="all", linger_ms=1, batch_size=2048,
        request_timeout_ms=3000, reconnect_backoff_ms=10, retries=1_000_000, retry_backoff_ms=20,
        max_in_flight_requests_per_connection=5,
    )
    count = 50_000
    futures = [producer.send("events", str(i).encode(), partition=i % PARTITIONS) for i in range(count)]
    producer.flush(timeout=120)
    for future in futures:
        future.get(timeout=60)
    producer.close()
    proxy.policy.enabled = False
    assert proxy.stats["drop_and_close"] > 5, proxy.stats
    values = read_partitions(broker.bootstrap_servers)
    for partition in range(PARTITIONS):
        assert values[partition] == list(range(partition, count, PARTITIONS))
