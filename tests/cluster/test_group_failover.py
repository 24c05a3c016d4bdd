"""The group coordinator in cluster mode (M4): a group's coordinator is the leader of its
`__consumer_offsets` partition, commits are answered once on the ISR, and after kill -9
of that leader the new one loads the partition and serves the committed offsets.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.offset_fetch.v5 import request as fetch_v5
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from oncelog.kernel.internal_topics import CONSUMER_OFFSETS, partition_for
from oncelog.local.cluster import ClusterProcess
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode
from tests.support.cluster import create

OFFSETS_PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path):
    settings = {
        "min.insync.replicas": "2",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "offsets.topic.replication.factor": "3",
        "group.initial.rebalance.delay.ms": "0",
    }
    with ClusterProcess(tmp_path, 3, settings) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def group_consumer(cluster: ClusterProcess, group_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group_id,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 10000})


def coordinator_of(cluster: ClusterProcess, group_id: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    description = admin.describe_consumer_groups([group_id], request_timeout=30)[group_id].result(timeout=30)
    return description.coordinator.id


def consume(consumer: Consumer, count: int, timeout: float = 60.0) -> dict[int, list[int]]:
    """The offsets of the first `count` records read, by partition."""
    read: dict[int, list[int]] = {}
    deadline = time.monotonic() + timeout
    while sum(map(len, read.values())) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # a record, not an event
            read.setdefault(partition, []).append(offset)
    return read


def fetch_committed(cluster: ClusterProcess, node_id: int, group_id: str) -> tuple[ErrorCode, dict[int, int]]:
    """OffsetFetch v5 of the group's "orders" offsets, sent to one broker."""
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
        response = client.request(fetch_v5.OffsetFetchRequest(group_id=GroupId(group_id), topics=(
            fetch_v5.OffsetFetchRequestTopic(name=TopicName("orders"), partition_indexes=(i32(0), i32(1))),
        )))
    partitions = response.topics[0].partitions if response.topics else ()
    return response.error_code, {p.partition_index: p.committed_offset for p in partitions}


def test_group_offsets_survive_coordinator_failover(cluster):
    create(cluster, "orders", 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(20):
        producer.produce("orders", str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0

    group_id = "resumers"
    first = group_consumer(cluster, group_id)
    first.subscribe(["orders"])
    assert sum(map(len, consume(first, 20).values())) == 20
    committed = [TopicPartition("orders", 0, 4), TopicPartition("orders", 1, 7)]
    first.commit(offsets=committed, asynchronous=False)  # answered once on the ISR
    first.close()

    victim = coordinator_of(cluster, group_id)
    offsets_partition = partition_for(group_id, OFFSETS_PARTITIONS)
    assert cluster.leader_of(CONSUMER_OFFSETS, offsets_partition) == victim
    assert fetch_committed(cluster, victim, group_id) == (ErrorCode.none, {0: 4, 1: 7})
    for other in set(cluster.nodes) - {victim}:  # only the coordinator holds the group
        assert fetch_committed(cluster, other, group_id) == (ErrorCode.not_coordinator, {})
    cluster.kill(victim)
    successor = cluster.wait_for_leader(CONSUMER_OFFSETS, offsets_partition, not_on=victim)
    cluster.wait_for(lambda: fetch_committed(cluster, successor, group_id)[0] == ErrorCode.none, 30,
                     "the new coordinator to load the group")

    second = group_consumer(cluster, group_id)
    second.subscribe(["orders"])
    resumed = consume(second, 9)  # 6 + 3 records follow the committed offsets
    assert {partition: offsets[0] for partition, offsets in resumed.items()} == {0: 4, 1: 7}
    assert sorted(resumed[0]) == list(range(4, 10)) and sorted(resumed[1]) == list(range(7, 10))
    stored = second.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)], timeout=30)
    assert [(tp.partition, tp.offset) for tp in stored] == [(0, 4), (1, 7)]
    second.close()
    assert coordinator_of(cluster, group_id) == successor
