"""A full disk on one node of three: its log dir goes offline at the first failed write,
the node leaves the cluster at once (its leaderships, ISR places and coordinators move),
the other partitions keep taking acks=all writes, and once space returns the node comes
back by itself and catches up; DescribeLogDirs and the Prometheus endpoint report the dir
offline meanwhile. Node 1's log.dirs is a tmpfs made for the test (root only)."""

from __future__ import annotations

import re
import shutil
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from prometheus_client.parser import text_string_to_metric_families

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode
from tests.support.cluster import create, metadata, read_partition, wait_until
from tests.support.disks import node_disks

FULL = 1  # the node whose disk fills
TOPIC = "spill"
PARTITIONS = 6


@pytest.fixture
def disks(tmp_path):
    """A tmpfs on node 1's log.dirs, as the soak's full-disk fault makes one."""
    # Room for the node's etcd member (its write-ahead log preallocates 64 MB segments).
    with node_disks(tmp_path, [FULL], "400m") as made:
        yield made


@pytest.fixture
def cluster(tmp_path, disks):
    running = ClusterProcess(tmp_path, 3, {"min.insync.replicas": "2", "offsets.topic.num.partitions": "3",
                                           "transaction.state.log.num.partitions": "3",
                                           "http.listener": "127.0.0.1:0"})
    assert running.nodes[FULL].data_dir == disks.dirs[FULL]
    try:
        yield running.start()
    finally:
        running.kill_all()
        for node in running.nodes.values():
            shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def log_dir_errors(cluster: ClusterProcess, node: int) -> list[int]:
    with WireClient.connect(cluster.nodes[node].bootstrap_servers, timeout=5) as client:
        response = client.request(DescribeLogDirsRequest(topics=None))
    return [result.error_code for result in response.results]


def figures(cluster: ClusterProcess, node: int) -> dict:
    """The node's Prometheus families: {name: samples}."""
    found = re.search(r"metrics at (http://\S+/metrics)", cluster.nodes[node].log_path.read_text())
    assert found is not None, "the broker logged no metrics address"
    with urllib.request.urlopen(found.group(1), timeout=10) as response:
        return {f.name: f.samples for f in text_string_to_metric_families(response.read().decode())}


def cluster_figure(cluster: ClusterProcess, nodes, name: str) -> float:
    """One replication family summed over `nodes`."""
    return sum(sample.value for node in nodes for sample in figures(cluster, node)[name])


def offline_log_dirs(cluster: ClusterProcess, node: int) -> tuple[float, dict[str, float]]:
    """The node's Prometheus figures: the offline log dir count, and each dir's flag."""
    families = figures(cluster, node)
    (count,) = families["kafka_log_offline_log_directory_count"]
    return count.value, {s.labels["log_directory"]: s.value for s in families["kafka_log_log_directory_offline"]}


def leaders_and_isrs(cluster: ClusterProcess, via: int) -> dict[int, tuple[int, set[int]]]:
    return metadata(cluster, via, TOPIC)


def test_a_full_disk_takes_the_node_out_of_the_cluster_until_space_returns(cluster, disks):
    create(cluster, TOPIC, PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60_000})
    sent = dict.fromkeys(range(PARTITIONS), 0)
    failures: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    def send_round() -> None:
        for partition in range(PARTITIONS):
            producer.produce(TOPIC, str(sent[partition]).encode(), partition=partition, on_delivery=delivered)
            sent[partition] += 1
        producer.poll(0)

    for _ in range(50):
        send_round()
    assert producer.flush(30) == 0

    disks.fill(FULL)
    filled_at = time.monotonic()
    # The next writes it must take (as leader or follower) fail: the dir goes offline and
    # the node leaves at once, long before replica.lag.time.max.ms would drop it.
    while time.monotonic() - filled_at < 10:
        send_round()
        producer.flush(0.2)
        try:
            if all(leader != FULL and FULL not in isr for leader, isr in leaders_and_isrs(cluster, 2).values()):
                break
        except OSError:
            pass
    moved = time.monotonic() - filled_at
    assert all(leader != FULL and FULL not in isr for leader, isr in leaders_and_isrs(cluster, 2).values())
    assert moved < 5, f"the node left the ISRs only after {moved:.1f}s"
    assert ErrorCode.kafka_storage_error in log_dir_errors(cluster, FULL)
    assert offline_log_dirs(cluster, FULL) == (1, {str(cluster.nodes[FULL].data_dir): 1})
    healthy = [n for n in cluster.nodes if n != FULL]
    assert cluster_figure(cluster, healthy, "kafka_server_replicamanager_under_replicated_partitions") > 0
    assert cluster_figure(cluster, healthy, "kafka_server_replicamanager_under_min_isr_partition_count") == 0
    assert cluster_figure(cluster, [FULL], "oncelog_cluster_session_active") == 0
    assert cluster_figure(cluster, cluster.nodes, "kafka_controller_kafkacontroller_active_controller_count") == 1
    # acks=all keeps working on the two healthy nodes.
    for _ in range(20):
        send_round()
    assert producer.flush(30) == 0
    log = cluster.nodes[FULL].log_path.read_text()
    assert "is offline" in log

    # Space returns: the node registers again, catches up, and is in every ISR again.
    disks.free(FULL)
    back = wait_until(lambda: all(isr == {1, 2, 3} for _, isr in leaders_and_isrs(cluster, 2).values()), 60,
                      "every ISR whole again after space returned")
    assert log_dir_errors(cluster, FULL) == [ErrorCode.none]
    assert offline_log_dirs(cluster, FULL) == (0, {str(cluster.nodes[FULL].data_dir): 0})
    everyone = list(cluster.nodes)
    assert cluster_figure(cluster, everyone, "kafka_server_replicamanager_under_replicated_partitions") == 0
    assert cluster_figure(cluster, everyone, "kafka_server_replicamanager_isr_expands") > 0
    assert cluster_figure(cluster, [FULL], "oncelog_cluster_session_active") == 1
    assert cluster_figure(cluster, everyone, "kafka_server_replicamanager_leader_count") >= PARTITIONS
    print(f"node {FULL} left the ISRs {moved:.1f}s after its disk filled, and was back in all of them "
          f"{back:.1f}s after space returned")
    for _ in range(20):
        send_round()
    assert producer.flush(30) == 0
    assert failures == []
    for partition in range(PARTITIONS):
        assert read_partition(cluster, TOPIC, partition, sent[partition]) == list(range(sent[partition]))
