"""Scenarios 1 and 2: produce 1 KB records as fast as one confluent-kafka producer can.

1. acks=1, idempotence off.
2. acks=all, idempotence on (sequence numbers checked by the broker's producer state).
2w. the broker-only view of 2: the same records as pre-built ~1 MB idempotent Produce
   requests from a raw wire client (`loadgen.py wire-produce`, 5 in flight) that needs
   almost no CPU, so the broker gets a core of its own. Not in the issue's list; it
   separates the broker's cost from librdkafka's on this 2-core machine.

Each run: a fresh broker, a topic, one warm-up message, then `--messages` records timed
from the first `produce()` to the end of `flush()` (every record acknowledged).
Compared with tansu (same client, same settings) and with the loopback and disk limits.
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
)

TOPIC = "bench-produce"


class ProduceScenario(Scenario):
    supports_baseline = True
    peers = (ONCELOG, TANSU)
    compare_with_limits = ("loopback", "pagecache", "disk")

    def __init__(self, scenario_id: str, title: str, *, acks: str, idempotent: bool,
                 target_msg_per_s: float | None = None, mode: str = "produce") -> None:
        self.id = scenario_id
        self.title = title
        self.acks = acks
        self.idempotent = idempotent
        self.mode = mode
        target = (">=", target_msg_per_s) if target_msg_per_s else None
        self.metrics = (Metric("msg_per_s", "msg/s", target=target), *THROUGHPUT_EXTRAS)

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        with running(peer, settings) as (bootstrap, target):
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", settings.partitions)
            arguments = ["--bootstrap", bootstrap, "--topic", TOPIC, "--messages", settings.messages,
                         "--size", settings.value_size, "--acks", self.acks]
            if self.idempotent:
                arguments.append("--idempotent")
            with load_phase(target, settings, f"scenario{self.id}", settings.produced_mb) as phase:
                load = loadgen(self.mode, *arguments)
        return throughput_metrics(load, phase)


PLAIN = ProduceScenario("1", "produce acks=1, not idempotent", acks="1", idempotent=False)
IDEMPOTENT = ProduceScenario("2", "produce acks=all, idempotent", acks="all", idempotent=True,
                             target_msg_per_s=250_000)
WIRE_IDEMPOTENT = ProduceScenario("2w", "produce idempotent, raw wire client (broker only)", acks="all",
                                  idempotent=True, mode="wire-produce")
