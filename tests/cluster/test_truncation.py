"""Log truncation after a failover (KIP-101): a leader that alone held records it
acknowledged with acks=1 comes back as a follower and truncates them, so every replica
ends with the same batches."""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode

TOPIC = "diverge"
# Short follower long-polls: a fetch parked at the leader when its follower is stopped
# is answered (empty) soon, before the records only the leader may hold are written.
FETCH_WAIT_MS = 100


@pytest.fixture
def cluster(tmp_path):
    with ClusterProcess(tmp_path, 3, {"min.insync.replicas": "1",
                                      "replica.fetch.wait.max.ms": str(FETCH_WAIT_MS)}) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def produce(cluster: ClusterProcess, node_id: int, values: list[str], *, acks: int) -> None:
    """One batch per value, written to `node_id` (the leader) with `acks`."""
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
        for value in values:
            batch = record_batch.build_batch([record_batch.Record(None, value.encode())],
                                             timestamp_ms=int(time.time() * 1000))
            response = client.request(ProduceRequest(
                transactional_id=None, acks=i16(acks), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                topic_data=(TopicProduceData(name=TopicName(TOPIC), partition_data=(
                    PartitionProduceData(index=i32(0), records=Records(batch)),)),),
            ))
            answer = response.responses[0].partition_responses[0]
            assert answer.error_code == ErrorCode.none, (value, answer)


def log_bytes(cluster: ClusterProcess, node_id: int) -> bytes:
    """The replica's segment files, concatenated in offset order."""
    directory = cluster.nodes[node_id].data_dir / f"{TOPIC}-0"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def end_offset(cluster: ClusterProcess, node_id: int, leader_epoch: int, current_leader_epoch: int = -1):
    """(error, epoch, end offset) from OffsetForLeaderEpoch v4 sent to `node_id`."""
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
        response = client.request(epoch_v4.OffsetForLeaderEpochRequest(replica_id=BrokerId(-1), topics=(
            epoch_v4.OffsetForLeaderTopic(topic=TopicName(TOPIC), partitions=(epoch_v4.OffsetForLeaderPartition(
                partition=i32(0), current_leader_epoch=i32(current_leader_epoch), leader_epoch=i32(leader_epoch)),)),)))
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


def consume_all(cluster: ClusterProcess) -> list[str]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error:
            if error.code() == -191:  # _PARTITION_EOF: read up to the high watermark
                break
            continue
        value = message.value()
        assert value is not None  # the test writes no tombstones
        values.append(value.decode())
    consumer.close()
    return values


def test_divergent_follower_truncates_to_the_new_leaders_epoch(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=30)
    cluster.wait_for_topic(TOPIC)
    cluster.wait_for_isr(TOPIC, 0, 3)
    old_leader, old_epoch = cluster.partition(TOPIC, 0).leader_id, cluster.partition(TOPIC, 0).leader_epoch
    followers = [n for n in cluster.nodes if n != old_leader]

    replicated = [f"replicated-{i}" for i in range(5)]
    produce(cluster, old_leader, replicated, acks=-1)

    # The followers stop (their quorum members run on); records written now with acks=1
    # reach the leader alone. Their sessions (3 s) must not lapse before the leader dies,
    # or the controller would shrink the ISR to the leader and nobody could take over.
    for node_id in followers:
        os.kill(cluster.nodes[node_id].process.pid, signal.SIGSTOP)
    try:
        time.sleep(3 * FETCH_WAIT_MS / 1000)  # their parked fetches are answered (empty) first
        lost = [f"lost-{i}" for i in range(3)]
        produce(cluster, old_leader, lost, acks=1)
        cluster.kill(old_leader)
    finally:
        for node_id in followers:
            os.kill(cluster.nodes[node_id].process.pid, signal.SIGCONT)

    new_leader = cluster.wait_for_leader(TOPIC, 0, not_on=old_leader, timeout=60)
    new_epoch = cluster.partition(TOPIC, 0).leader_epoch
    cluster.wait_for(lambda: end_offset(cluster, new_leader, new_epoch, new_epoch)[0] == ErrorCode.none,
                     30, f"broker {new_leader} to lead at epoch {new_epoch}")
    fresh = [f"fresh-{i}" for i in range(4)]
    produce(cluster, new_leader, fresh, acks=-1)
    # What the returning replica will learn: the old epoch ended where the new one began.
    assert new_epoch > old_epoch
    assert end_offset(cluster, new_leader, old_epoch) == (ErrorCode.none, old_epoch, len(replicated))
    assert end_offset(cluster, new_leader, new_epoch) == (ErrorCode.none, new_epoch, len(replicated + fresh))
    assert end_offset(cluster, new_leader, old_epoch, current_leader_epoch=old_epoch)[0] == \
        ErrorCode.fenced_leader_epoch
    other_follower = next(n for n in followers if n != new_leader)
    assert end_offset(cluster, other_follower, old_epoch)[0] == ErrorCode.not_leader_or_follower

    cluster.start_node(old_leader)
    cluster.wait_for_isr(TOPIC, 0, 3, timeout=60)
    cluster.wait_for(lambda: log_bytes(cluster, old_leader) == log_bytes(cluster, new_leader)
                     == log_bytes(cluster, other_follower),
                     30, "the three replicas to hold the same batches")
    time.sleep(1)  # quiet: nothing rewrites the logs afterwards
    assert log_bytes(cluster, old_leader) == log_bytes(cluster, new_leader)
    assert b"lost-" not in log_bytes(cluster, old_leader)

    assert consume_all(cluster) == replicated + fresh
