"""A network partition that cuts one node from the other brokers and from the etcd
majority, while clients still reach it (each node in its own network namespace:
`oncelog.local.netns`; needs root, skipped otherwise).

Node 1 is cut: its etcd member is the first voter, the one every broker's watch starts
on, and it leads a third of the partitions. The majority must fence it and elect new
leaders within the session plus a few seconds, the cut-off node must stop leading and
coordinating once its session may have lapsed (so clients that still reach it move
on), and after the cut everything must be back in sync, nothing lost or duplicated.
"""

from __future__ import annotations

import datetime
import itertools
import shutil
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from oncelog.local.cluster import FAST_FAILOVER, ClusterProcess
from oncelog.local.netns import NetworkLab
from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode
from tests.support.cluster import create, metadata, read_partition, wait_until

SESSION_S = int(FAST_FAILOVER["broker.session.timeout.ms"]) / 1000
TOPIC = "cut"
TX_TOPIC = "cut-tx"
PARTITIONS = 6
CUT = 1  # the node cut off


@pytest.fixture
def lab():
    reason = NetworkLab.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with NetworkLab([1, 2, 3]) as created:
        yield created


@pytest.fixture
def cluster(tmp_path, lab):
    with ClusterProcess(tmp_path, 3, {"min.insync.replicas": "2", "offsets.topic.num.partitions": "3",
                                      "transaction.state.log.num.partitions": "3"}, network=lab) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)








class AckClock(threading.Thread):
    """An idempotent acks=all producer writing every partition, keeping the time of
    each acknowledgement per partition."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120_000, "request.timeout.ms": 5000,
                                  "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000})
        self.acks: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.sent = dict.fromkeys(range(PARTITIONS), 0)
        self.errors: list = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for partition in range(PARTITIONS):
                self.producer.produce(TOPIC, str(self.sent[partition]).encode(), partition=partition,
                                      on_delivery=self._delivered)
                self.sent[partition] += 1
            self.producer.poll(0.02)
        self.producer.flush(120)

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.acks[message.partition()].append(time.monotonic())

    def longest_gap(self, partition: int, start: float, end: float) -> float:
        times = [start, *(t for t in self.acks[partition] if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(times))


class CommitClock(threading.Thread):
    """A transactional producer (its coordinator on a node that is not cut off) writing
    every partition in each transaction, keeping the time of each commit: the markers of
    a transaction must not wait for a leader that is cut off once another leads."""

    def __init__(self, cluster: ClusterProcess) -> None:
        super().__init__(daemon=True)
        transactional_id = next(f"clock-{n}" for n in range(1000) if cluster.coordinator_of(f"clock-{n}") != CUT)
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id,
                                  "transaction.timeout.ms": 60_000, "request.timeout.ms": 5000,
                                  "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000})
        self.producer.init_transactions(30)
        self.commits: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.begin_transaction()
                for partition in range(PARTITIONS):
                    self.producer.produce(TX_TOPIC, b"tx", partition=partition)
                self.producer.commit_transaction(60)
                self.commits.append(time.monotonic())
            except KafkaException as error:
                if error.args[0].txn_requires_abort():
                    self.producer.abort_transaction(60)
                elif not error.args[0].retriable():
                    raise
            self.stop.wait(0.05)


def test_a_partitioned_node_is_fenced_by_the_majority_and_stops_leading_on_its_own(cluster, lab):
    create(cluster, TOPIC, PARTITIONS)
    create(cluster, TX_TOPIC, PARTITIONS)
    led_by_cut = {p for p, (leader, _) in metadata(cluster, 2, TOPIC).items() if leader == CUT}
    assert led_by_cut, "node 1 leads none of the partitions: the test would prove nothing"
    clock = AckClock(cluster.bootstrap_servers)
    clock.start()
    commits = CommitClock(cluster)
    commits.start()
    wait_until(lambda: all(clock.acks.values()) and commits.commits, 30, "acknowledgements and commits before the cut")

    lab.isolate(CUT)
    cut_at = time.monotonic()
    try:
        # The cut-off node stops acting as leader once its session may have lapsed.
        resigned = wait_until(lambda: all(leader != CUT for leader, _ in metadata(cluster, CUT, TOPIC).values()),
                              SESSION_S + 3, "node 1 naming itself leader of nothing", since=cut_at)
        record = record_batch.build_batch([record_batch.Record(None, b"late")], timestamp_ms=int(time.time() * 1000))
        with WireClient.connect(cluster.nodes[CUT].bootstrap_servers, timeout=5) as client:
            produce = client.request(ProduceRequest(
                transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                topic_data=(TopicProduceData(name=TOPIC, partition_data=tuple(
                    PartitionProduceData(index=p, records=record) for p in sorted(led_by_cut))),)))
            codes = {r.error_code for r in produce.responses[0].partition_responses}
            assert codes <= {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available}, codes
            coordinator = client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=("g",)))
            assert coordinator.coordinators[0].node_id != CUT
        # The majority fences it and elects new leaders: within the session plus a few seconds.
        elected = wait_until(lambda: all(leader not in (CUT, -1) and CUT not in isr
                                         for leader, isr in metadata(cluster, 2, TOPIC).values()),
                             SESSION_S + 5, "new leaders without node 1 in the majority's metadata", since=cut_at)
        # Clients reach them: every partition is acknowledged again during the cut.
        resumed = wait_until(lambda: all(acks[-1] > cut_at + elected for acks in clock.acks.values()),
                             elected + 10, "acknowledgements on every partition during the cut", since=cut_at)
        time.sleep(max(0.0, 12 - (time.monotonic() - cut_at)))
    finally:
        lab.heal(CUT)
    healed_at = time.monotonic()
    print(f"after the cut: node 1 resigned at {resigned:.1f}s, new leaders at {elected:.1f}s, "
          f"every partition acknowledged again at {resumed:.1f}s")
    for partition in range(PARTITIONS):
        if partition not in led_by_cut:  # stalled only until the ISR left node 1 out
            assert clock.longest_gap(partition, cut_at, healed_at) < SESSION_S + 5, partition
    # Transactions over every partition commit again once new leaders take the markers.
    commit_times = [cut_at, *(t for t in commits.commits if cut_at < t < healed_at), healed_at]
    assert max(b - a for a, b in itertools.pairwise(commit_times)) < SESSION_S + 6, commit_times
    commits.stop.set()
    commits.join(90)

    # Back in touch: node 1 registers again and every replica catches up.
    wait_until(lambda: all(isr == {1, 2, 3} for _, isr in metadata(cluster, 2, TOPIC).values()), 30,
               "every ISR whole again after the cut")
    wait_until(lambda: metadata(cluster, CUT, TOPIC) == metadata(cluster, 2, TOPIC), 10,
               "node 1 seeing the cluster's metadata")
    clock.stop.set()
    clock.join(150)
    assert clock.errors == []
    for partition in range(PARTITIONS):
        assert read_partition(cluster, TOPIC, partition, clock.sent[partition]) == list(range(clock.sent[partition]))


def test_a_lab_is_made_beside_one_with_its_seed_left_standing_by_a_killed_run():
    """`make soak-faults` failed with "RTNETLINK answers: File exists" after a killed run
    of the same seed had left its bridge: names come from the process, not the seed."""
    reason = NetworkLab.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with NetworkLab([1, 2], seed=11) as left_standing, NetworkLab([1, 2], seed=11) as made:
        assert made.bridge != left_standing.bridge
        assert made.namespace(1) != left_standing.namespace(1)
