"""Scenario 2r: scenario 2 (idempotent acks=all produce) on a 3-broker oncelog cluster
against one standalone oncelog broker, measured in the same run; the harness prints the
cluster's figures over the single broker's (the "Replicated cluster" issue: "acks=all
produce throughput on 3 brokers vs 1, reported as a ratio").

- oncelog: one standalone broker, the topic with one replica (scenario 2's setup).
- oncelog-3: three combined broker+controller nodes (`OncelogClusterTarget`), the topic
  with replication factor 3 and min.insync.replicas=2. acks=all is answered once the
  high watermark passes the batch, i.e. when both followers have fetched it (the ISR is
  all three), so every record crosses loopback three times and is written three times.

Each run: a fresh broker or cluster, the topic, a wait until every partition has its
full ISR (and, on the cluster, every broker knows the topic), one warm-up message, then
`--messages` records from one confluent-kafka producer, timed to the end of `flush()`.
Broker CPU is the sum over the cluster's three broker processes; the busiest of them
(with one partition, its leader) is also reported alone, and their etcd members apart as
quorum CPU.
"""

from __future__ import annotations

from bench.peers import ONCELOG, ONCELOG_3, OncelogClusterTarget
from bench.scenarios.base import (
    THROUGHPUT_EXTRAS,
    Metric,
    Scenario,
    Settings,
    load_phase,
    loadgen,
    running,
    throughput_metrics,
)

TOPIC = "bench-replicated"
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


class ReplicatedProduceScenario(Scenario):
    id = "2r"
    title = "idempotent acks=all, 3 brokers RF 3 vs 1"
    peers = (ONCELOG, ONCELOG_3)
    metrics = (
        Metric("msg_per_s", "msg/s"),
        *THROUGHPUT_EXTRAS,
        Metric("busiest_broker_cpu_ms_per_mb", "busiest broker CPU ms/MB", higher_is_better=False),
        Metric("quorum_cpu_ms_per_mb", "etcd CPU ms/MB", higher_is_better=False),
    )

    def unavailable_reason(self, settings: Settings) -> str | None:
        from oncelog.cluster.etcd_member import find_etcd

        try:
            find_etcd()
        except FileNotFoundError as error:
            return f"the cluster needs etcd: {error}"
        return None

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        with running(peer, settings) as (bootstrap, target):
            topic_arguments = ["--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", settings.partitions]
            if peer == ONCELOG_3:
                topic_arguments += ["--replication-factor", REPLICATION_FACTOR,
                                    "--config", f"min.insync.replicas={MIN_INSYNC_REPLICAS}"]
            loadgen("create-topic", *topic_arguments)
            if peer == ONCELOG_3:
                assert isinstance(target, OncelogClusterTarget)
                target.wait_for_replicas(TOPIC, settings.partitions, REPLICATION_FACTOR)
            arguments = ["--bootstrap", bootstrap, "--topic", TOPIC, "--messages", settings.messages,
                         "--size", settings.value_size, "--acks", "all", "--idempotent"]
            with load_phase(target, settings, f"scenario{self.id}", settings.produced_mb) as phase:
                load = loadgen("produce", *arguments)
        return throughput_metrics(load, phase)


REPLICATED = ReplicatedProduceScenario()
