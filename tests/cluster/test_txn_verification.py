"""KIP-890 on a 3-broker cluster at transaction.version 2, where a partition's leader is
not the coordinator of the transactional id writing to it: the leader asks that
coordinator (AddPartitionsToTxn v5) before appending. With Produce v12 and
TxnOffsetCommit v5 (transaction version 2) the coordinator adds the partition, and the
commit makes it visible; below them it verifies the partition, so a late transactional
write after its transaction ended is refused instead of being left hanging.
"""

from __future__ import annotations

import datetime
import itertools
import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_partitions_to_txn.v3 import request as add_v3
from kio.schema.add_partitions_to_txn.v5 import request as add_v5
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v4.request import EndTxnRequest as EndTxnRequestV4
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v1 import request as list_offsets_v1
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v12 import request as produce_v12
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit_v3
from kio.schema.txn_offset_commit.v5 import request as txn_offset_commit_v5
from kio.schema.types import BrokerId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32Timedelta, i64

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode

TOPIC = "orders"
SETTINGS = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}
# Retried by producers and committers alike; a coordinator may still be loading.
RETRIABLE = {ErrorCode.not_enough_replicas, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
             ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("txn-verification")
    with ClusterProcess(base, 3, SETTINGS) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(timeout=30)
        running.wait_for_topic(TOPIC)
        for partition in range(3):
            running.wait_for_isr(TOPIC, partition, 3)
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def now() -> int:
    return int(time.time() * 1000)


def ask(cluster: ClusterProcess, node_id: int, entity, error_of, timeout: float = 30.0):
    """`entity`'s response from `node_id`, asked again while its error is retriable."""
    deadline = time.monotonic() + timeout
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers, timeout=15) as client:
        while True:
            response = client.request(entity)
            if error_of(response) not in RETRIABLE or time.monotonic() > deadline:
                return response
            time.sleep(0.2)


def partition_led_elsewhere(cluster: ClusterProcess, coordinator: int) -> tuple[int, int]:
    """(partition of TOPIC, its leader) with a leader other than `coordinator`."""
    return next((p, cluster.leader_of(TOPIC, p)) for p in range(3) if cluster.leader_of(TOPIC, p) != coordinator)


def init(cluster: ClusterProcess, transactional_id: str) -> tuple[int, int, int]:
    """(coordinator, producer id, epoch) of a fresh transactional id."""
    coordinator = cluster.coordinator_of(transactional_id)
    response = ask(cluster, coordinator, InitProducerIdRequest(
        transactional_id=TransactionalId(transactional_id),
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        producer_id=ProducerId(-1), producer_epoch=i16(-1)), lambda r: r.error_code)
    assert response.error_code == ErrorCode.none
    return coordinator, response.producer_id, response.producer_epoch


def produce(cluster, leader, transactional_id, producer_id, producer_epoch, partition, value, *, sequence=0,
            module=produce_v12):
    batch = rb.build_batch([rb.Record(None, value)], timestamp_ms=now(), producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=sequence, transactional=True)
    response = ask(cluster, leader, module.ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(module.TopicProduceData(
            name=TOPIC, partition_data=(module.PartitionProduceData(index=partition, records=batch),)),),
    ), lambda r: r.responses[0].partition_responses[0].error_code)
    return response.responses[0].partition_responses[0].error_code


def end_v5(cluster, coordinator, transactional_id, producer_id, producer_epoch, commit=True):
    response = ask(cluster, coordinator, EndTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        committed=commit), lambda r: r.error_code)
    return response.error_code, response.producer_id, response.producer_epoch


def describe(cluster, coordinator, transactional_id):
    with WireClient.connect(cluster.nodes[coordinator].bootstrap_servers, timeout=10) as client:
        state = client.request(DescribeTransactionsRequest(transactional_ids=(transactional_id,))).transaction_states[0]
    return state.transaction_state, {(t.topic, p) for t in state.topics for p in t.partitions}


def wait_for_completion(cluster, coordinator, transactional_id, state="CompleteCommit"):
    """Until the markers are written (the transaction is no longer open on any partition)."""
    cluster.wait_for(lambda: describe(cluster, coordinator, transactional_id)[0] == state, 30,
                     f"{transactional_id} to reach {state}")


def end_offset(cluster, leader, partition) -> int:
    with WireClient.connect(cluster.nodes[leader].bootstrap_servers, timeout=10) as client:
        response = client.request(list_offsets_v1.ListOffsetsRequest(replica_id=BrokerId(-1), topics=(
            list_offsets_v1.ListOffsetsTopic(name=TopicName(TOPIC), partitions=(
                list_offsets_v1.ListOffsetsPartition(partition_index=partition, timestamp=i64(-1)),)),)))
    return response.topics[0].partitions[0].offset


def read_committed(cluster, partition, until, timeout=30.0) -> list[bytes]:
    """The values a read_committed consumer reads from the partition, once `until(values)`
    holds (or the timeout passes)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while not until(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            value = message.value()
            assert value is not None  # the test writes no tombstones
            values.append(value)
    consumer.close()
    return values


def test_the_cluster_finalizes_transaction_version_2_and_offers_produce_v12(cluster):
    with WireClient.connect(cluster.nodes[1].bootstrap_servers) as client:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {key.api_key: key.max_version for key in response.api_keys}
    assert (versions[0], versions[24], versions[26], versions[28]) == (12, 5, 5, 5)
    assert [(f.name, f.max_version_level) for f in response.finalized_features] == [
        ("share.version", 1), ("transaction.version", 2)]


def test_produce_v12_to_a_leader_that_is_not_the_coordinator_adds_the_partition_there_and_the_commit_shows_it(
        cluster):
    coordinator, pid, epoch = init(cluster, "tv2-remote-add")
    partition, leader = partition_led_elsewhere(cluster, coordinator)
    assert produce(cluster, leader, "tv2-remote-add", pid, epoch, partition, b"committed") == ErrorCode.none
    assert describe(cluster, coordinator, "tv2-remote-add") == ("Ongoing", {(TOPIC, partition)})
    assert end_v5(cluster, coordinator, "tv2-remote-add", pid, epoch) == (ErrorCode.none, pid, epoch + 1)
    assert b"committed" in read_committed(cluster, partition, lambda values: b"committed" in values)
    wait_for_completion(cluster, coordinator, "tv2-remote-add")
    # A late batch of the committed transaction: its epoch is fenced at the coordinator.
    before = end_offset(cluster, leader, partition)
    assert produce(cluster, leader, "tv2-remote-add", pid, epoch, partition, b"late", sequence=1) == \
        ErrorCode.invalid_producer_epoch
    assert end_offset(cluster, leader, partition) == before


def test_a_late_produce_after_the_transaction_ended_is_refused_by_a_leader_that_is_not_the_coordinator(cluster):
    """The classic protocol (AddPartitionsToTxn v3, EndTxn v4: one epoch per producer
    session, as librdkafka uses it): a batch arriving after the commit would open a
    transaction no marker ever ends; the leader verifies it at the coordinator."""
    coordinator, pid, epoch = init(cluster, "classic-late")
    partition, leader = partition_led_elsewhere(cluster, coordinator)
    added = ask(cluster, coordinator, add_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="classic-late", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(add_v3.AddPartitionsToTxnTopic(name=TOPIC, partitions=(partition,)),),
    ), lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
    assert produce(cluster, leader, "classic-late", pid, epoch, partition, b"in-time", module=produce_v9) == \
        ErrorCode.none
    for other in (p for p in range(3) if p != partition and cluster.leader_of(TOPIC, p) != coordinator):
        assert produce(cluster, cluster.leader_of(TOPIC, other), "classic-late", pid, epoch, other,
                       b"never-added", module=produce_v9) == ErrorCode.invalid_txn_state
    committed = ask(cluster, coordinator, EndTxnRequestV4(
        transactional_id="classic-late", producer_id=pid, producer_epoch=epoch, committed=True),
        lambda r: r.error_code)
    assert committed.error_code == ErrorCode.none
    wait_for_completion(cluster, coordinator, "classic-late")
    before = end_offset(cluster, leader, partition)
    assert produce(cluster, leader, "classic-late", pid, epoch, partition, b"late", sequence=1,
                   module=produce_v9) == ErrorCode.invalid_txn_state
    assert end_offset(cluster, leader, partition) == before, "nothing appended: no hanging transaction"
    assert b"late" not in read_committed(cluster, partition, lambda values: False, timeout=3)


def test_txn_offset_commit_v5_to_a_group_coordinator_that_is_not_the_transaction_coordinator(cluster):
    coordinator, pid, epoch = init(cluster, "tv2-remote-offsets")
    group = next(g for g in (f"group-{i}" for i in itertools.count())
                 if cluster.coordinator_of(g, key_type=0) != coordinator)
    group_coordinator = cluster.coordinator_of(group, key_type=0)

    def commit(module, producer_epoch, offset):
        response = ask(cluster, group_coordinator, module.TxnOffsetCommitRequest(
            transactional_id="tv2-remote-offsets", group_id=group, producer_id=pid, producer_epoch=producer_epoch,
            topics=(module.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
                module.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                       committed_metadata=""),)),),
        ), lambda r: r.topics[0].partitions[0].error_code)
        return response.topics[0].partitions[0].error_code

    assert commit(txn_offset_commit_v5, epoch, 42) == ErrorCode.none
    state, partitions = describe(cluster, coordinator, "tv2-remote-offsets")
    assert state == "Ongoing" and [topic for topic, _ in partitions] == ["__consumer_offsets"]
    assert end_v5(cluster, coordinator, "tv2-remote-offsets", pid, epoch) == (ErrorCode.none, pid, epoch + 1)
    wait_for_completion(cluster, coordinator, "tv2-remote-offsets")
    fetched = ask(cluster, group_coordinator, OffsetFetchRequest(
        group_id=group, topics=(OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),), require_stable=True,
    ), lambda r: r.error_code)
    assert fetched.topics[0].partitions[0].committed_offset == 42
    # A late commit (the verify path of v3) in the next epoch, without the group added.
    assert commit(txn_offset_commit_v3, epoch + 1, 43) == ErrorCode.invalid_txn_state


def test_add_partitions_to_txn_v5_at_a_broker_that_does_not_coordinate_the_id_is_not_coordinator(cluster):
    coordinator, pid, epoch = init(cluster, "not-here")
    elsewhere = next(n for n in (1, 2, 3) if n != coordinator)
    with WireClient.connect(cluster.nodes[elsewhere].bootstrap_servers) as client:
        response = client.request(add_v5.AddPartitionsToTxnRequest(transactions=(add_v5.AddPartitionsToTxnTransaction(
            transactional_id="not-here", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=(add_v5.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)),)))
    assert response.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code == \
        ErrorCode.not_coordinator


def test_confluent_kafka_transactions_commit_and_abort_over_leaders_that_are_not_the_coordinator(cluster):
    """librdkafka (the classic protocol) on a cluster at transaction.version 2: each of
    its Produce requests is verified at the coordinator on another broker."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "confluent-remote",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    coordinator = cluster.coordinator_of("confluent-remote")
    partition, _ = partition_led_elsewhere(cluster, coordinator)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(TOPIC, f"kept-{i}".encode(), partition=partition)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"dropped", partition=partition)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"kept-last", partition=partition)
    producer.commit_transaction(30)
    values = read_committed(cluster, partition, lambda values: b"kept-last" in values)
    assert [v for v in values if v.startswith(b"kept") or v == b"dropped"] == \
        [f"kept-{i}".encode() for i in range(5)] + [b"kept-last"]


def test_transactions_ended_at_once_each_get_their_own_marker_on_every_leader(cluster):
    """24 producers end their transactions at the same moment, half committing, half
    aborting, each over every partition (so over leaders that are not its coordinator):
    the coordinators' markers to one leader share WriteTxnMarkers requests, and each
    transaction's records are then visible or not as its own decision says."""
    producers = []
    for number in range(24):
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"at-once-{number}",
                             "transaction.timeout.ms": 60000, "linger.ms": 0})
        producer.init_transactions(60)
        producer.begin_transaction()
        for partition in range(3):
            producer.produce(TOPIC, f"at-once-{number}-{partition}".encode(), partition=partition)
        producer.flush(30)
        producers.append(producer)
    start = threading.Barrier(len(producers))

    def end(number: int, producer: Producer) -> None:
        start.wait()
        if number % 2 == 0:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)

    threads = [threading.Thread(target=end, args=pair) for pair in enumerate(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    last = producers[-2]  # a committing producer: its last record ends the reading
    last.begin_transaction()
    for partition in range(3):
        last.produce(TOPIC, f"at-once-done-{partition}".encode(), partition=partition)
    last.commit_transaction(60)
    for partition in range(3):
        values = read_committed(cluster, partition, lambda values, p=partition: f"at-once-done-{p}".encode() in values)
        seen = sorted(v.decode() for v in values if v.startswith(b"at-once-") and b"done" not in v)
        assert seen == sorted(f"at-once-{number}-{partition}" for number in range(0, 24, 2))
