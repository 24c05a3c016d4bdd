"""Share groups (KIP-932) on a 3-broker cluster: the share partitions live on their
partitions' leaders, their state with the share coordinator (the leader of each key's
`__share_group_state` partition, often another broker), written with
WriteShareGroupState. Two librdkafka share consumers read a topic whose partition
leader is killed with SIGKILL half way: every record is delivered, none is accepted
twice, and the new leader hands out only what the old one had not finished.
"""

from __future__ import annotations

import datetime
import shutil
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.share_fetch.v2 import request as share_fetch
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol.client import WireClient
from tests.support.cluster import create

TOPIC = GROUP = "share-failover"

def text(message) -> str:
    """A record's value as text (the tests write no tombstones)."""
    value = message.value()
    assert value is not None
    return value.decode()



@pytest.fixture
def cluster(tmp_path):
    settings = {
        "min.insync.replicas": "2",
        "offsets.topic.num.partitions": "3",
        "offsets.topic.replication.factor": "3",
        # One state partition: of the two partitions' leaders one at least is another
        # broker than its share coordinator, and writes its state with WriteShareGroupState.
        "share.coordinator.state.topic.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "3",
        "group.share.heartbeat.interval.ms": "500",
        "group.share.min.heartbeat.interval.ms": "100",
        "group.share.session.timeout.ms": "6000",
        "group.share.min.session.timeout.ms": "1000",
        "group.share.record.lock.duration.ms": "3000",
        "group.share.min.record.lock.duration.ms": "1000",
    }
    with ClusterProcess(tmp_path, 3, settings) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def test_share_consumers_get_every_record_once_through_a_partition_leaders_kill(cluster):
    create(cluster, TOPIC, 2)
    assert cluster.leader_of(TOPIC, 0) != cluster.leader_of(TOPIC, 1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource("group", GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    values = [f"v{i}" for i in range(600)]
    for i, value in enumerate(values[:400]):
        producer.produce(TOPIC, value.encode(), partition=i % 2)
    assert producer.flush(30) == 0

    lock = threading.Lock()
    delivered: list[str] = []
    accepted: Counter[str] = Counter()
    done = threading.Event()

    def consume(name: str) -> None:
        consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP,
                                  "client.id": name, "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 120
        try:
            while not done.is_set() and time.monotonic() < deadline:
                messages = [m for m in consumer.poll(0.3) if m.error() is None]
                for message in messages:
                    consumer.acknowledge(message)
                if not messages:
                    continue
                with lock:
                    delivered.extend(text(m) for m in messages)
                try:
                    results = consumer.commit_sync(30)
                except KafkaException:
                    continue  # a failed commit: those records come again
                failed = {(tp.topic, tp.partition) for tp, error in results.items() if error is not None}
                with lock:
                    for message in messages:
                        if (message.topic(), message.partition()) not in failed:
                            accepted[text(message)] += 1
                    if len(set(delivered)) >= len(values) and not failed:
                        done.set()
                time.sleep(0.1)  # slow enough that the kill comes before the first 400 are done
        finally:
            consumer.close()

    threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while len(set(delivered)) < len(values) // 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = cluster.leader_of(TOPIC, 0)
    cluster.kill(victim)
    cluster.wait_for(lambda: cluster.leader_of(TOPIC, 0) not in (victim, -1), 60, "a new leader of partition 0")
    # Records the new leader alone has ever held: consuming them needs its share partition.
    for i, value in enumerate(values[400:]):
        producer.produce(TOPIC, value.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    for thread in threads:
        thread.join(150)
    assert sorted(set(delivered)) == sorted(values), f"{len(values) - len(set(delivered))} never delivered"
    assert [value for value, count in accepted.items() if count > 1] == []
    # The group's coordinator describes and deletes the share partitions wherever their
    # states are kept (one of them, at least, on another broker).
    coordinator = cluster.coordinator_of(GROUP, key_type=0)

    def described() -> dict[int, int]:
        request = describe_offsets.DescribeShareGroupOffsetsRequest(groups=(
            describe_offsets.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(GROUP), topics=None),))
        [group] = cluster.ask(coordinator, request).groups
        assert group.error_code == ErrorCode.none
        return {p.partition_index: p.start_offset for t in group.topics for p in t.partitions}

    cluster.wait_for(lambda: described() == {0: 300, 1: 300}, 30, "the start offsets at the end")
    [result] = cluster.ask(coordinator, DeleteGroupsRequest(groups_names=(GroupId(GROUP),))).results
    assert result.error_code == ErrorCode.none
    assert described() == {}


def test_a_share_fetch_while_the_share_state_topic_is_made_gets_no_error_clients_take_as_fatal(cluster):
    """The first share fetch of a cluster makes `__share_group_state`, which takes a while:
    meanwhile the fetch must answer with no records, not COORDINATOR_NOT_AVAILABLE, which
    the Java and librdkafka share consumers raise to the application."""
    create(cluster, "share-first", 1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource("group", "share-first", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    producer.produce("share-first", b"x")
    assert producer.flush(30) == 0
    leader = cluster.leader_of("share-first", 0)
    metadata = cluster.ask(leader, MetadataRequest(
        topics=(MetadataRequestTopic(name=TopicName("share-first"), topic_id=None),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    topic_id = metadata.topics[0].topic_id
    seen = []
    with WireClient.connect(cluster.nodes[leader].bootstrap_servers) as client:
        for epoch in range(200):
            response = client.request(share_fetch.ShareFetchRequest(
                group_id=GroupId("share-first"), member_id="m1", share_session_epoch=i32(epoch),
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)), min_bytes=i32(1),
                max_records=i32(10), batch_size=i32(10), topics=(share_fetch.FetchTopic(
                    topic_id=topic_id, partitions=(share_fetch.FetchPartition(partition_index=i32(0),
                                                                              acknowledgement_batches=()),)),),
                forgotten_topics_data=()))
            assert response.error_code == ErrorCode.none
            for topic in response.responses:
                for partition in topic.partitions:
                    assert partition.error_code == ErrorCode.none, partition
                    seen.extend(partition.acquired_records)
            if seen:
                break
    assert [(r.first_offset, r.last_offset) for r in seen] == [(0, 0)]
