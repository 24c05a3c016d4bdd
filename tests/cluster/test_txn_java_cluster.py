"""The Java client (kafka-clients 4.x) with transaction version 2 on a 3-broker cluster,
where a commit's markers go to partitions led by other brokers and take long enough to
be seen: the client commits, then sends a record and aborts its transaction at once,
20 times.
Before KAFKA-18464's order (the pending completion before the epoch) the abort was
answered PRODUCER_FENCED and the producer's next transaction was lost."""

from __future__ import annotations

import shutil

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.local.cluster import ClusterProcess
from tests.support.java import TxnScenario, partition_names

TOPIC = "commit-abort"
ROUNDS = 20  # as tests/java/TxnScenario.java runs them


@pytest.fixture
def cluster(tmp_path):
    settings = {"transaction.version": "2", "transaction.state.log.num.partitions": "3",
                "offsets.topic.num.partitions": "3"}
    with ClusterProcess(tmp_path, 3, settings) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def test_java_client_commits_then_at_once_aborts_the_next_transaction_on_a_cluster_under_tv2(
        cluster, java_tools, tmp_path):
    scenarios = TxnScenario(java_tools, tmp_path / "classes")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(timeout=30)
    cluster.wait_for_topic(TOPIC)
    for partition in range(3):
        cluster.wait_for_isr(TOPIC, partition, 3)
    assert {cluster.leader_of(TOPIC, p) for p in range(3)} == {1, 2, 3}, "markers go to every broker"

    run = scenarios.run(cluster.bootstrap_servers, ["commit_then_empty_abort"])

    results = run.scenario("commit_then_empty_abort")
    assert results["rounds"] == str(ROUNDS)
    for tp in partition_names(TOPIC):  # every committed record once, no aborted one
        assert results[f"read_committed_{tp}"] == ",".join(f"r{i}" for i in range(ROUNDS))
