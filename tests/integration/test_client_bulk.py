"""oncelog.client against a real broker, checked with librdkafka: what the Spark
connectors' bulk transactional producer writes and what its fetcher reads."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.chaos.proxy import FaultPolicy, FaultProxy
from oncelog.client.cluster import Cluster
from oncelog.client.config import ClientConfig
from oncelog.client.errors import Fenced, NoAnswer
from oncelog.client.fetcher import FetchSettings, PartitionFetcher
from oncelog.client.groups import NO_OFFSET, committed_offset
from oncelog.client.partitioner import partition_by_murmur2
from oncelog.client.producer import ProducerSettings, TransactionalProducer
from oncelog.client.records import decode_fetched, encode_records
from oncelog.local.process import free_port

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def producer_for(cluster: Cluster, transactional_id: str, timeout_s: float = 20,
                 request_timeout_ms: int = 30_000) -> TransactionalProducer:
    return TransactionalProducer(cluster, transactional_id, ProducerSettings(request_timeout_ms=request_timeout_ms),
                                 timeout_s=timeout_s)


def read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list:
    """(partition, key, value, headers) of everything a read_committed consumer reads."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found = []
    positions = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 30
    while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.2):
            assert message.error() is None, message.error()
            found.append((message.partition(), message.key(), message.value(), tuple(message.headers() or ())))
        positions = {p: max(0, consumer.position([TopicPartition(topic, p)])[0].offset) for p in positions}
    consumer.close()
    return found


def test_a_client_transaction_is_read_by_librdkafka_with_keys_headers_and_javas_partitions(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    create(bootstrap, "client-keyed", 4)
    create(bootstrap, "client-keyed-librdkafka", 4)
    keys = [f"customer-{i % 37}".encode() for i in range(500)]
    cluster = Cluster(ClientConfig.from_settings(bootstrap))
    producer = producer_for(cluster, "client-keyed-writer")
    producer.init()
    producer.begin()
    partitions = partition_by_murmur2(pa.array(keys, pa.binary()), 4)
    for partition in range(4):
        rows = [i for i in range(500) if partitions[i] == partition]
        producer.write("client-keyed", partition, encode_records(
            pa.array([keys[i] for i in rows], pa.binary()), pa.array([b"v%d" % i for i in rows], pa.binary()),
            pa.array([[{"key": "n", "value": b"%d" % i}] for i in rows], HEADERS),
            max_batch_bytes=2000, timestamp_ms=int(time.time() * 1000)))
    producer.commit()
    reference = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        reference.produce("client-keyed-librdkafka", b"", key=key)
    reference.flush(10)
    ours = read_committed(bootstrap, "client-keyed", 4)
    assert sorted(value for _, _, value, _ in ours) == sorted(b"v%d" % i for i in range(500))
    assert all(headers == (("n", value[1:]),) for _, _, value, headers in ours)
    theirs = {key: partition for partition, key, _, _ in read_committed(bootstrap, "client-keyed-librdkafka", 4)}
    assert {key: partition for partition, key, _, _ in ours} == theirs


def test_an_aborted_client_transaction_is_never_read_committed(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    create(bootstrap, "client-aborted")
    cluster = Cluster(ClientConfig.from_settings(bootstrap))
    producer = producer_for(cluster, "client-aborting")
    producer.init()
    for number, commit in enumerate([True, False, True]):
        producer.begin()
        producer.write("client-aborted", 0, encode_records(None, pa.array([b"t%d" % number] * 3, pa.binary()), None,
                                                           max_batch_bytes=10_000, timestamp_ms=0))
        producer.flush()
        producer.commit() if commit else producer.abort()
    assert [value for _, _, value, _ in read_committed(bootstrap, "client-aborted")] == [b"t0"] * 3 + [b"t2"] * 3
    fetcher = PartitionFetcher(cluster, "client-aborted", 0, FetchSettings(read_committed=True))
    fetcher.send(0)
    fetched = fetcher.receive()
    decoded = decode_fetched(fetched.records, start=0, end=fetched.last_stable_offset, read_committed=True,
                             aborted=fetched.aborted)
    assert decoded.values.to_pylist() == [b"t0"] * 3 + [b"t2"] * 3


def test_a_newer_producer_of_the_same_id_fences_the_older_one(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    create(bootstrap, "client-fenced")
    cluster = Cluster(ClientConfig.from_settings(bootstrap))
    older, newer = producer_for(cluster, "client-fencing"), producer_for(cluster, "client-fencing")
    older.init()
    older.begin()
    newer.init()
    with pytest.raises(Fenced):
        older.write("client-fenced", 0, encode_records(None, pa.array([b"zombie"]), None,
                                                        max_batch_bytes=10_000, timestamp_ms=0))
        older.commit()
    assert read_committed(bootstrap, "client-fenced") == []


def test_a_committed_offset_pending_in_an_open_transaction_is_waited_for(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    create(bootstrap, "client-marker")
    cluster = Cluster(ClientConfig.from_settings(bootstrap))
    assert committed_offset(cluster, "client-marker-group", "client-marker", 0,
                            deadline=time.monotonic() + 5) == NO_OFFSET
    producer = producer_for(cluster, "client-marker-writer")
    producer.init()
    producer.begin()
    producer.send_offsets("client-marker-group", {("client-marker", 0): 8})
    with pytest.raises(NoAnswer, match="UNSTABLE_OFFSET_COMMIT"):
        committed_offset(cluster, "client-marker-group", "client-marker", 0, deadline=time.monotonic() + 0.5)
    producer.commit()
    assert committed_offset(cluster, "client-marker-group", "client-marker", 0,
                            deadline=time.monotonic() + 5) == 8


@pytest.fixture
def proxied_broker(tmp_path):
    """A broker reachable only through a fault proxy (it advertises the proxy's address)."""
    proxy_port = free_port()
    with (
        EmbeddedBroker(tmp_path / "b", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}) as broker,
        FaultProxy(("127.0.0.1", broker.port), FaultPolicy(enabled=False, seed=5), port=proxy_port) as proxy,
    ):
        create(proxy.address, "client-faults", 3)
        yield proxy


def test_batches_sent_again_after_lost_answers_are_each_written_once_and_in_order(proxied_broker):
    proxy = proxied_broker
    cluster = Cluster(ClientConfig.from_settings(proxy.address, {"socket.timeout.ms": "500"}))
    producer = producer_for(cluster, "client-through-faults", timeout_s=60, request_timeout_ms=500)
    producer.init()
    proxy.policy.drop_response_and_close = 0.08
    proxy.policy.drop_response = 0.02
    proxy.policy.drop_request_and_close = 0.04
    proxy.policy.enabled = True
    for transaction in range(2):
        producer.begin()
        for partition in range(3):
            values = [b"%d-%d-%05d" % (transaction, partition, i) for i in range(1000)]
            producer.write("client-faults", partition, encode_records(
                None, pa.array(values, pa.binary()), None, max_batch_bytes=500, timestamp_ms=0))
        producer.commit()
    proxy.policy.enabled = False
    assert proxy.stats["drop_and_close"] + proxy.stats["drop"] + proxy.stats["drop_request_and_close"] > 10
    read = read_committed(proxy.address, "client-faults", 3)
    for partition in range(3):
        got = [value for p, _, value, _ in read if p == partition]
        assert got == [b"%d-%d-%05d" % (t, partition, i) for t in range(2) for i in range(1000)]
