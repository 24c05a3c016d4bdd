"""Scenario 5: consume 1 KB records from the start of a topic (read_uncommitted).

Each run: a fresh broker, a topic filled with `--messages` records by an untimed
acks=1 producer, then one confluent-kafka consumer (assign, no group) timed from
assignment until it has received every record. Compared with tansu and the loopback
limit.

Hook for read_committed: scenario 5c consumes a topic written by a transactional
producer with isolation.level=read_committed (oncelog only: tansu is not
transaction-correct). It becomes available when the broker implements the
transactional APIs; until then the harness lists it as not available.
"""

from __future__ import annotations

from bench.peers import ONCELOG, TANSU
from bench.scenarios.base import (
    THROUGHPUT_EXTRAS,
    Metric,
    Scenario,
    Settings,
    load_phase,
    loadgen,
    running,
    throughput_metrics,
    transactional_apis_missing,
)

TOPIC = "bench-consume"


class ConsumeScenario(Scenario):
    supports_baseline = True
    metrics = (Metric("msg_per_s", "msg/s"), *THROUGHPUT_EXTRAS)
    compare_with_limits = ("loopback",)

    def __init__(self, scenario_id: str, title: str, *, isolation: str, peers: tuple[str, ...],
                 transaction_size: int | None = None) -> None:
        self.id = scenario_id
        self.title = title
        self.isolation = isolation
        self.peers = peers
        self.transaction_size = transaction_size

    def unavailable_reason(self, settings: Settings) -> str | None:
        if self.transaction_size is not None:
            return transactional_apis_missing()
        return None

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        with running(peer, settings) as (bootstrap, target):
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", settings.partitions)
            fill = ["--bootstrap", bootstrap, "--topic", TOPIC, "--messages", settings.messages,
                    "--size", settings.value_size]
            if self.transaction_size is not None:
                fill += ["--acks", "all", "--transactional-id", "bench-fill",
                         "--transaction-size", self.transaction_size]
            loadgen("produce", *fill)
            # The fill's warm-up message is on the topic too.
            total = settings.messages + 1
            with load_phase(target, settings, f"scenario{self.id}", settings.produced_mb) as phase:
                load = loadgen("consume", "--bootstrap", bootstrap, "--topic", TOPIC, "--messages", total,
                               "--isolation", self.isolation)
        return throughput_metrics(load, phase)


READ_UNCOMMITTED = ConsumeScenario("5", "consume read_uncommitted", isolation="read_uncommitted",
                                   peers=(ONCELOG, TANSU))
READ_COMMITTED = ConsumeScenario("5c", "consume read_committed (transactional data)",
                                 isolation="read_committed", peers=(ONCELOG,), transaction_size=1000)
