"""The transaction coordinator on a 3-broker cluster (M4): it is the leader of the
transactional id's `__transaction_state` partition, writes its markers to partitions
led by other brokers, and moves with that partition's leadership, finishing a commit
its killed predecessor had decided.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.types import TransactionalId

from oncelog.kernel.internal_topics import TRANSACTION_STATE, partition_for
from oncelog.local.cluster import ClusterProcess
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode

TXN_PARTITIONS = 3
SETTINGS = {
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture
def cluster(tmp_path):
    with ClusterProcess(tmp_path, 3, SETTINGS) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def create(cluster: ClusterProcess, name: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 3, config=configs)])[name].result(timeout=30)
    cluster.wait_for_topic(name)
    for partition in range(partitions):
        cluster.wait_for_isr(name, partition, 3)


def transactional_producer(cluster: ClusterProcess, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    return producer


def read_committed(cluster: ClusterProcess, topic: str, partitions: int, expected: int,
                   timeout: float = 60) -> list[str]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(_text(message))
    time.sleep(0.5)  # anything beyond `expected` would be a duplicate
    while (message := consumer.poll(0.2)) is not None:
        if not message.error():
            values.append(_text(message))
    consumer.close()
    return values


def _text(message: Message) -> str:
    value = message.value()
    assert value is not None  # the test writes no tombstones
    return value.decode()


def describe(cluster: ClusterProcess, node_id: int, transactional_id: str):
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers, timeout=10) as client:
        response = client.request(DescribeTransactionsRequest(transactional_ids=(TransactionalId(transactional_id),)))
    return response.transaction_states[0]


def listed(cluster: ClusterProcess, node_id: int) -> set[str]:
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers, timeout=10) as client:
        response = client.request(ListTransactionsRequest(state_filters=(), producer_id_filters=()))
    return {state.transactional_id for state in response.transaction_states}


def test_transaction_over_partitions_led_by_three_brokers_commits_at_the_leader_of_its_state_partition(cluster):
    create(cluster, "orders", 3)
    leaders = {cluster.leader_of("orders", p) for p in range(3)}
    assert leaders == {1, 2, 3}
    producer = transactional_producer(cluster, "spread")
    coordinator = cluster.coordinator_of("spread")
    assert coordinator == cluster.leader_of(TRANSACTION_STATE, partition_for("spread", TXN_PARTITIONS))
    producer.begin_transaction()
    for i in range(9):
        producer.produce("orders", f"c{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("orders", f"a{i}".encode(), partition=i)
    producer.flush(30)  # on the partitions, so that the abort needs markers too
    producer.abort_transaction(30)

    assert sorted(read_committed(cluster, "orders", 3, 9)) == sorted(f"c{i}" for i in range(9))
    state = describe(cluster, coordinator, "spread")
    assert (state.error_code, state.transaction_state) == (ErrorCode.none, "CompleteAbort")
    # Each broker lists the ids it coordinates (the admin client asks them all).
    expected = {n: {"spread"} if n == coordinator else set() for n in (1, 2, 3)}
    assert {n: listed(cluster, n) for n in (1, 2, 3)} == expected


def test_transaction_over_partitions_led_by_three_brokers_commits_atomically_when_the_coordinator_is_killed_mid_commit(
    cluster,
):
    """The commit is decided (PrepareCommit on the ISR, the client answered) but no
    partition can take its marker: `orders` needs all 3 replicas in sync, and one broker
    is stalled. Then the coordinator's broker is killed. The leadership of its
    `__transaction_state` partition moves, the new coordinator loads PrepareCommit and
    writes the markers once the partitions can take them: read_committed sees the
    whole transaction, and never a part of it before."""
    create(cluster, "orders", 3, **{"min.insync.replicas": "3"})
    producer = transactional_producer(cluster, "atomic")
    coordinator = cluster.coordinator_of("atomic")
    stalled = next(n for n in (1, 2, 3) if n != coordinator)
    producer.begin_transaction()
    for i in range(6):
        producer.produce("orders", f"t{i}".encode(), partition=i % 3)
    producer.flush(30)

    cluster.pause(stalled)
    for partition in range(3):
        cluster.wait_for_isr("orders", partition, 2, timeout=60)
    producer.commit_transaction(60)  # answered once PrepareCommit is replicated
    time.sleep(1)  # markers are being refused (NOT_ENOUGH_REPLICAS) and retried
    state = describe(cluster, coordinator, "atomic")
    assert state.transaction_state == "PrepareCommit"
    assert read_committed(cluster, "orders", 3, 0, timeout=1) == []

    cluster.kill(coordinator)
    cluster.resume(stalled)
    state_partition = partition_for("atomic", TXN_PARTITIONS)
    successor = cluster.wait_for_leader(TRANSACTION_STATE, state_partition, not_on=coordinator, timeout=60)
    assert successor != coordinator
    assert read_committed(cluster, "orders", 3, 0, timeout=1) == []  # 2 replicas of 3: still no marker
    cluster.start_node(coordinator)  # back as a follower: `orders` gets its third replica
    values = read_committed(cluster, "orders", 3, 6)
    assert sorted(values) == sorted(f"t{i}" for i in range(6))
    cluster.wait_for(lambda: describe(cluster, successor, "atomic").transaction_state == "CompleteCommit", 30,
                     "the new coordinator to complete the commit")
