"""Preferred leaders come home (issue 45, item 3): after a killed broker returns and
catches up, the active controller moves each partition's leadership back to its
preferred replica within `leader.imbalance.check.interval.seconds`
(`auto.leader.rebalance.enable`), and an idempotent acks=all producer writing every
partition meanwhile sees no gap over 2 s; with the rebalance off, `oncelog
leader-election` (ElectLeaders, PREFERRED) does it on demand.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer

from oncelog.local.cluster import ClusterProcess
from tests.support.cluster import create, read_partition, wait_until

CHECK_INTERVAL_S = 3
TOPIC_PARTITIONS = 3


def preferred_and_leaders(cluster: ClusterProcess, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """({partition: preferred replica}, {partition: leader})."""
    (entry,) = cluster.metadata([topic]).topics
    return ({p.partition_index: p.replica_nodes[0] for p in entry.partitions},
            {p.partition_index: p.leader_id for p in entry.partitions})


def led_by_preferred(cluster: ClusterProcess, topic: str) -> bool:
    preferred, leaders = preferred_and_leaders(cluster, topic)
    return preferred == leaders


def knock_a_leader_off_and_back(cluster: ClusterProcess, topic: str) -> int:
    """Kill the preferred leader of partition 0, wait for its failover, start it again and
    wait until every ISR is whole: partition 0 is then led by a replica that is not its
    preferred one."""
    victim = cluster.leader_of(topic, 0)
    cluster.kill(victim)
    cluster.wait_for_leader(topic, 0, not_on=victim)
    cluster.start_node(victim)
    for partition in range(TOPIC_PARTITIONS):
        cluster.wait_for_isr(topic, partition, 3, timeout=60)
    assert cluster.leader_of(topic, 0) != victim
    return victim


class Writer:
    """An idempotent acks=all producer writing 0, 1, 2, ... round-robin over the
    partitions, noting when each partition's writes were acknowledged."""

    def __init__(self, cluster: ClusterProcess, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 2, "message.timeout.ms": 60000})
        self.topic = topic
        self.acked: dict[int, list[float]] = {partition: [] for partition in range(TOPIC_PARTITIONS)}
        self.failures: list = []
        self.sent = [0] * TOPIC_PARTITIONS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.failures.append(error)
        else:
            self.acked[message.partition()].append(time.monotonic())

    def _write(self) -> None:
        number = 0
        while not self._stop.is_set():
            partition = number % TOPIC_PARTITIONS
            self.producer.produce(self.topic, str(self.sent[partition]).encode(), partition=partition,
                                  on_delivery=self._delivered)
            self.sent[partition] += 1
            number += 1
            self.producer.poll(0.003)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(60) == 0

    def longest_gap(self, partition: int, start: float, end: float) -> float:
        times = [t for t in self.acked[partition] if start <= t <= end]
        assert len(times) > 10, f"partition {partition}: only {len(times)} acknowledged writes"
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))


@pytest.fixture
def cluster(tmp_path, request):
    config = {"min.insync.replicas": "2", "leader.imbalance.check.interval.seconds": str(CHECK_INTERVAL_S),
              **getattr(request, "param", {})}
    with ClusterProcess(tmp_path, 3, config) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def test_leaderships_come_home_within_the_check_interval_with_no_write_gap_over_2_s(cluster):
    create(cluster, "home", TOPIC_PARTITIONS)
    assert led_by_preferred(cluster, "home")
    victim = knock_a_leader_off_and_back(cluster, "home")
    caught_up = time.monotonic()
    writer = Writer(cluster, "home")
    try:
        took = wait_until(lambda: led_by_preferred(cluster, "home"), CHECK_INTERVAL_S + 3,
                          "every partition led by its preferred replica", since=caught_up)
        time.sleep(2.0)  # writes after the move
    finally:
        writer.stop()
    assert cluster.leader_of("home", 0) == victim
    assert writer.failures == []
    gaps = {partition: writer.longest_gap(partition, caught_up + 0.5, time.monotonic() - 0.5)
            for partition in range(TOPIC_PARTITIONS)}
    print(f"leaderships home {took:.1f} s after the ISRs were whole; longest write gaps {gaps}")
    assert max(gaps.values()) < 2.0, gaps
    for partition in range(TOPIC_PARTITIONS):
        assert read_partition(cluster, "home", partition, writer.sent[partition]) == list(
            range(writer.sent[partition]))


def oncelog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("cluster", [{"auto.leader.rebalance.enable": "false"}], indirect=True)
def test_leader_election_of_preferred_replicas_from_the_command_line(cluster, tmp_path):
    create(cluster, "away", TOPIC_PARTITIONS)
    victim = knock_a_leader_off_and_back(cluster, "away")
    time.sleep(CHECK_INTERVAL_S + 1.5)
    assert not led_by_preferred(cluster, "away")  # no automatic rebalance

    bootstrap = ["--bootstrap-server", cluster.bootstrap_servers]
    # The victim is preferred for partition 0 only: the other partitions need nothing.
    one = oncelog("leader-election", *bootstrap, "--election-type", "preferred", "--topic", "away",
                  "--partition", "1")
    assert (one.returncode, one.stdout) == (0, "Valid replica already elected for partitions away-1\n"), one
    listed = tmp_path / "partitions.json"
    listed.write_text(json.dumps({"partitions": [{"topic": "away", "partition": 0}]}))
    done = oncelog("leader-election", *bootstrap, "--election-type", "PREFERRED", "--path-to-json-file",
                   str(listed))
    assert (done.returncode, done.stdout) == (
        0, "Successfully completed leader election (PREFERRED) for partitions away-0\n"), done
    assert led_by_preferred(cluster, "away") and cluster.leader_of("away", 0) == victim
    again = oncelog("leader-election", *bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert (again.returncode, again.stdout) == (0, ""), again  # every leader already preferred: none listed

    # A preferred replica that is down cannot lead: one line per partition, exit 1.
    cluster.kill(victim)
    cluster.wait_for_leader("away", 0, not_on=victim)
    refused = oncelog("leader-election", *bootstrap, "--election-type", "PREFERRED", "--topic", "away")
    assert refused.returncode == 1, refused
    assert refused.stdout.startswith(
        "Valid replica already elected for partitions away-1, away-2\n"
        "Error completing leader election (PREFERRED) for partition: away-0: "), refused
    assert refused.stderr == "oncelog: error: 1 replica(s) could not be elected\n", refused
