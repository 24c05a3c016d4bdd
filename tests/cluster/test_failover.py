"""Leader failover on a 3-broker cluster (M3): kill -9 of a partition leader, election
from the ISR, idempotent producers carrying on at the new leader, and a returning old
leader truncating what it alone held.
"""

from __future__ import annotations

import datetime
import shutil
import time

import pytest
from confluent_kafka import Producer
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode
from tests.support.cluster import create, read_partition


@pytest.fixture
def cluster(tmp_path):
    with ClusterProcess(tmp_path, 3, {"min.insync.replicas": "2"}) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)








def produce_raw(bootstrap: str, topic: str, batch: bytes):
    with WireClient.connect(bootstrap) as client:
        response = client.request(ProduceRequest(
            transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(TopicProduceData(
                name=TopicName(topic), partition_data=(PartitionProduceData(index=i32(0), records=Records(batch)),)),),
        ))
    return response.responses[0].partition_responses[0]


def test_new_leader_rejects_the_retried_duplicate_and_accepts_the_next_sequence(cluster):
    """The seed scenario at the wire: a batch acknowledged by the old leader (acks=all,
    so on the ISR) is retried at the new leader after kill -9; it is answered as the
    duplicate it is, with the original offset, and the next sequence follows it."""
    create(cluster, "seed", 2)
    leader = cluster.leader_of("seed", 0)
    with WireClient.connect(cluster.nodes[leader].bootstrap_servers) as client:
        ids = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                                   producer_id=-1, producer_epoch=-1))
    assert ids.error_code == ErrorCode.none

    def batch(sequence: int) -> bytes:
        return record_batch.build_batch(
            [record_batch.Record(None, str(sequence).encode())], timestamp_ms=int(time.time() * 1000),
            producer_id=ids.producer_id, producer_epoch=ids.producer_epoch, base_sequence=sequence)

    for sequence in range(3):
        assert produce_raw(cluster.nodes[leader].bootstrap_servers, "seed", batch(sequence)).error_code == 0
    cluster.kill(leader)
    new_leader = cluster.wait_for_leader("seed", 0, not_on=leader)

    retried = produce_raw(cluster.nodes[new_leader].bootstrap_servers, "seed", batch(2))
    assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 2)
    following = produce_raw(cluster.nodes[new_leader].bootstrap_servers, "seed", batch(3))
    assert (following.error_code, following.base_offset) == (ErrorCode.none, 3)
    gap = produce_raw(cluster.nodes[new_leader].bootstrap_servers, "seed", batch(5))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert read_partition(cluster, "seed", 0, 4) == [0, 1, 2, 3]


def test_kill_9_of_the_leader_while_producing_loses_and_duplicates_nothing(cluster):
    """The seed scenario with librdkafka: an idempotent acks=all producer writes both
    partitions while the leader of one is killed; its in-flight batches are retried at
    the new leader. Every record is there once, in order."""
    create(cluster, "orders", 2)
    victim = cluster.leader_of("orders", 0)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000})
    failures: list = []
    count = 6000
    for i in range(count):
        for partition in (0, 1):
            producer.produce("orders", str(i).encode(), partition=partition,
                             on_delivery=lambda error, _m: error is not None and failures.append(error))
        producer.poll(0)
        if i == count // 3:
            cluster.kill(victim)
    assert producer.flush(90) == 0
    assert failures == []
    assert cluster.leader_of("orders", 0) != victim
    for partition in (0, 1):
        assert read_partition(cluster, "orders", partition, count) == list(range(count))

    cluster.start_node(victim)  # it returns as a follower and catches up into the ISR
    cluster.wait_for_isr("orders", 0, 3)


def test_below_min_insync_replicas_acks_all_is_refused_and_acks_1_is_written(cluster):
    create(cluster, "quorum", 1, replication_factor=2)
    partition = cluster.partition("quorum", 0)
    follower = next(n for n in partition.replica_nodes if n != partition.leader_id)
    cluster.kill(follower)  # its session lapses: the controller takes it out of the ISR
    cluster.wait_for_isr("quorum", 0, 1)

    def send(acks: str):
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks,
                             "message.timeout.ms": 3000, "retries": 0})
        outcome: list = []
        producer.produce("quorum", b"x", partition=0, on_delivery=lambda error, _m: outcome.append(error))
        producer.flush(10)
        return outcome[0]

    refused = send("all")
    assert refused is not None and refused.code() == ErrorCode.not_enough_replicas
    assert send("1") is None


def test_a_stalled_broker_stays_out_of_the_isr_the_controller_took_it_out_of(cluster):
    """KIP-841: once a stalled broker is fenced, the leaders must not put it back into
    their ISRs on the strength of the fetch state it left behind; it rejoins only after
    it resumes, registers again and fetches."""
    create(cluster, "stalled", 3)
    stalled = cluster.leader_of("stalled", 0)
    cluster.pause(stalled)
    for partition in range(3):
        cluster.wait_for_isr("stalled", partition, 2, timeout=60)
    sizes = set()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        sizes |= {len(cluster.partition("stalled", p).isr_nodes) for p in range(3)}
        time.sleep(0.1)
    assert sizes == {2}
    cluster.resume(stalled)
    for partition in range(3):
        cluster.wait_for_isr("stalled", partition, 3, timeout=60)


def test_the_last_node_standing_keeps_serving_what_it_leads_when_no_quorum_can_exist(cluster):
    """Two of three nodes die with their etcd members: no leader can exist, so nobody can
    fence the survivor or elect others; it keeps leading (as Kafka's brokers do without
    their controllers) instead of fencing itself, and the cluster heals when they return."""
    create(cluster, "alone", 3)
    survivor = cluster.leader_of("alone", 0)
    led = [p for p in range(3) if cluster.leader_of("alone", p) == survivor]
    others = [node for node in cluster.nodes if node != survivor]
    for node in others:
        cluster.kill(node)
    time.sleep(int(cluster.configs[survivor]["broker.session.timeout.ms"]) / 1000 + 3)
    assert {p for p in range(3) if cluster.leader_of("alone", p) == survivor} >= set(led)
    producer = Producer({"bootstrap.servers": cluster.nodes[survivor].bootstrap_servers, "acks": 1,
                         "message.timeout.ms": 10000})
    delivered: list = []
    for partition in led:
        producer.produce("alone", b"still here", partition=partition, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(15) == 0 and delivered == [None] * len(led)
    assert "the metadata quorum has lost its majority" in cluster.nodes[survivor].log_path.read_text()

    for node in others:
        cluster.start_node(node)
    for partition in range(3):
        cluster.wait_for_isr("alone", partition, 3, timeout=60)


def test_an_idempotent_producer_carries_on_when_every_broker_session_is_revoked_at_once(cluster):
    """The quorum lost every lease at once (etcd did, when a paused member resumed in a
    soak run): until the brokers register again on their next heartbeat, none is
    registered. Metadata then named no broker, so librdkafka dropped every connection
    and the idempotent producer timed out each record until it bootstrapped again, 5
    minutes later. Every answer now names at least the broker answering it, and the
    producer carries on once the brokers have registered again."""
    create(cluster, "sessions", 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 30000})
    failures: list = []
    sent = 0
    brokers_named = []
    assert cluster.revoke_sessions() >= 3
    deadline = time.monotonic() + 3  # the brokers register again within a heartbeat (0.5 s here)
    while time.monotonic() < deadline:
        brokers_named.append(len(cluster.metadata([]).brokers))
        producer.produce("sessions", str(sent).encode(), partition=sent % 3,
                         on_delivery=lambda error, _m: error is not None and failures.append(error))
        sent += 1
        producer.poll(0.01)
    assert min(brokers_named) >= 1
    assert min(brokers_named) < 3  # the moment with no broker registered was seen
    assert producer.flush(45) == 0
    assert failures == []
    values = sorted(value for partition in range(3)
                    for value in read_partition(cluster, "sessions", partition, len(range(partition, sent, 3))))
    assert values == list(range(sent))


def test_acks_all_writes_go_on_once_a_stalled_follower_is_fenced_not_after_the_replica_lag_time(tmp_path):
    """Issue 45: the leader stays healthy and a follower of its partition stalls. Once the
    controller fences that follower (its session times out: 3 s here) and takes it out of
    the ISR, acks=all writes must go on over the ISR that is left. The leader went on
    waiting for it for as long as it had been caught up within replica.lag.time.max.ms
    (Kafka's default, 30 s here), as if it could still join the ISR."""
    with ClusterProcess(tmp_path, 3, {"min.insync.replicas": "2", "replica.lag.time.max.ms": "30000"}) as cluster:
        create(cluster, "held", 1)
        state = cluster.partition("held", 0)
        follower = next(node for node in state.replica_nodes if node != state.leader_id)
        leader = cluster.nodes[state.leader_id].bootstrap_servers
        producer = Producer({"bootstrap.servers": leader, "acks": "all", "linger.ms": 0,
                             "message.timeout.ms": 60_000})
        producer.produce("held", b"before", partition=0)
        assert producer.flush(30) == 0
        cluster.pause(follower)
        try:
            stalled = time.monotonic()
            delivered: list[float] = []
            producer.produce("held", b"during", partition=0,
                             on_delivery=lambda error, _message: delivered.append(time.monotonic())
                             if error is None else None)
            assert producer.flush(60) == 0 and delivered, "the write during the stall was not acknowledged"
            waited = delivered[0] - stalled
            # Fenced after the 3 s session, then the ISR change: well under the 30 s lag time.
            assert waited < 15, f"acks=all waited {waited:.1f} s for a fenced follower"
            assert follower not in cluster.partition("held", 0).isr_nodes
        finally:
            cluster.resume(follower)
