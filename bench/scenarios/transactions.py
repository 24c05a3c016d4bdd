"""Scenarios 3, 4 and 6: transactional produce (oncelog only; tansu is not
transaction-correct).

3. a transaction every 10 records: commit-bound, measures the coordinator round trips.
3c. the same from 16 transactional producers at once (the seeds' figure for it, 180K
   msg/s, is only reachable with many producers: one producer waits for each commit).
3p. 3c with each transaction's 10 records spread over 4 of 8 partitions (a marker and
   an AddPartitionsToTxn entry per partition: the cost of multi-partition transactions).
4. a transaction every 1000 records: close to idempotent produce plus one commit per batch.
6. commit latency: p50 / p99 of `commit_transaction()` over transactions of 100 records.

Not available until the broker implements the transactional produce APIs
(AddPartitionsToTxn and EndTxn): `unavailable_reason` asks the handler registry, so
these scenarios switch on by themselves when the coordinator lands. The load
(confluent-kafka's transactional producer, `loadgen.py produce --transactional-id`)
is already written; check its figures by hand the first time it runs.
"""

from __future__ import annotations

from bench.peers import ONCELOG
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

TOPIC = "bench-transactions"


class TransactionalProduceScenario(Scenario):
    supports_baseline = True
    peers = (ONCELOG,)

    def __init__(self, scenario_id: str, title: str, *, transaction_size: int, metrics: tuple[Metric, ...],
                 compare_with_limits: tuple[str, ...] = (), producers: int = 1, partitions: int | None = None,
                 spread: int = 0) -> None:
        self.id = scenario_id
        self.title = title
        self.transaction_size = transaction_size
        self.producers = producers
        self.partitions = partitions  # None: --partitions
        self.spread = spread
        self.metrics = metrics
        self.compare_with_limits = compare_with_limits

    def unavailable_reason(self, settings: Settings) -> str | None:
        return transactional_apis_missing()

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        # Commit-bound runs would take minutes at full size: cap the transaction count.
        messages = min(settings.messages, self.transaction_size * 2000 * self.producers)
        with running(peer, settings) as (bootstrap, target):
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC,
                    "--partitions", self.partitions or settings.partitions)
            with load_phase(target, settings, f"scenario{self.id}", messages * settings.value_size / 1e6) as phase:
                load = loadgen("produce", "--bootstrap", bootstrap, "--topic", TOPIC, "--messages", messages,
                               "--size", settings.value_size, "--acks", "all",
                               "--transactional-id", f"bench-{self.id}",
                               "--transaction-size", self.transaction_size, "--producers", self.producers,
                               "--spread", self.spread)
        figures = throughput_metrics(load, phase)
        for key in ("commit_p50_ms", "commit_p99_ms"):
            figures[key] = load[key]
        if "broker_cpu_s" in phase and load.get("transactions"):
            figures["commits_per_s"] = load["transactions"] / load["seconds"]
            figures["broker_cpu_us_per_txn"] = phase["broker_cpu_s"] * 1e6 / load["transactions"]
        return figures


_COMMIT_LATENCY = (
    Metric("commit_p50_ms", "commit p50 ms", higher_is_better=False),
    Metric("commit_p99_ms", "commit p99 ms", higher_is_better=False),
)
_PER_TRANSACTION = (
    Metric("commits_per_s", "commits/s"),
    Metric("broker_cpu_us_per_txn", "broker CPU us/txn", higher_is_better=False),
)

EVERY_10 = TransactionalProduceScenario(
    "3", "transactional produce, commit every 10 records", transaction_size=10,
    metrics=(Metric("msg_per_s", "msg/s"), *THROUGHPUT_EXTRAS, *_PER_TRANSACTION),
)
EVERY_10_CONCURRENT = TransactionalProduceScenario(
    "3c", "transactional produce, commit every 10 records, 16 producers", transaction_size=10, producers=16,
    metrics=(Metric("msg_per_s", "msg/s"), *THROUGHPUT_EXTRAS, *_PER_TRANSACTION, *_COMMIT_LATENCY),
)
EVERY_10_SPREAD = TransactionalProduceScenario(
    "3p", "transactional produce, commit every 10 records over 4 of 8 partitions, 16 producers",
    transaction_size=10, producers=16, partitions=8, spread=4,
    metrics=(Metric("msg_per_s", "msg/s"), *THROUGHPUT_EXTRAS, *_PER_TRANSACTION, *_COMMIT_LATENCY),
)
EVERY_1000 = TransactionalProduceScenario(
    "4", "transactional produce, commit every 1000 records", transaction_size=1000,
    metrics=(Metric("msg_per_s", "msg/s"), *THROUGHPUT_EXTRAS), compare_with_limits=("loopback", "pagecache", "disk"),
)
COMMIT_LATENCY = TransactionalProduceScenario(
    "6", "commit latency, transactions of 100 records", transaction_size=100,
    metrics=(*_COMMIT_LATENCY, Metric("msg_per_s", "msg/s")),
)
