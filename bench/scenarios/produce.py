"""Scenarios 1 and 2: produce 1 KB records as fast as one confluent-kafka producer can.

1. acks=1, idempotence off.
2. acks=all, idempotence on (sequence numbers checked by the broker's producer state).
2w. the broker-only view of 2: the same records as pre-built ~1 MB idempotent Produce
   requests from a raw wire client (`loadgen.py wire-produce`, 5 in flight) that needs
   almost no CPU, so the broker gets a core of its own. Not in the issue's list; it
   separates the broker's cost from librdkafka's on this 2-core machine.
2m. what the HTTP listener costs 2: the same load with and without `http.listener`,
   /metrics scraped every second and the console's data every 2 s (MetricsCostScenario).

Each run: a fresh broker, a topic, one warm-up message, then `--messages` records timed
from the first `produce()` to the end of `flush()` (every record acknowledged).
Compared with tansu (same client, same settings) and with the loopback and disk limits.
"""

from __future__ import annotations

import socket
import threading
import urllib.request

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


class MetricsCostScenario(Scenario):
    """2m: what `http.listener` costs scenario 2. Each run produces scenario 2's load twice
    on fresh brokers, once with no HTTP listener and once with one that is scraped as hard
    as an operator would: /metrics every second (Prometheus' default is 15 s) and
    /api/console every 2 s (one console page open). Ten times scenario 2's records per
    load, so that a run lasts several scrapes, after one warm-up load. The order alternates
    between runs, so drift on the shared machine cancels out; the cost is 1 - with / without."""

    id = "2m"
    title = "2 with /metrics scraped every 1 s and the console open"
    supports_baseline = False
    metrics = (
        Metric("msg_per_s", "msg/s scraped"),
        Metric("msg_per_s_unscraped", "msg/s no listener"),
        Metric("cost_pct", "% msg/s lost", higher_is_better=False, target=("<=", 3.0)),
        Metric("broker_cpu_ms_per_mb", "CPU ms/MB scraped", higher_is_better=False),
        Metric("broker_cpu_ms_per_mb_unscraped", "CPU ms/MB no listener", higher_is_better=False),
        Metric("scrapes", "scrapes per run"),
    )

    def __init__(self) -> None:
        self._runs = 0

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        if self._runs == 0:
            self._produce(settings, scraped=False)  # warm-up, not counted: the first load of a run is slower
        self._runs += 1
        order = (False, True) if self._runs % 2 else (True, False)
        figures: dict[str, float] = {}
        for scraped in order:
            measured = self._produce(settings, scraped)
            suffix = "" if scraped else "_unscraped"
            figures[f"msg_per_s{suffix}"] = measured["msg_per_s"]
            if "broker_cpu_ms_per_mb" in measured:
                figures[f"broker_cpu_ms_per_mb{suffix}"] = measured["broker_cpu_ms_per_mb"]
            if scraped:
                figures["scrapes"] = measured["scrapes"]
        figures["cost_pct"] = (1 - figures["msg_per_s"] / figures["msg_per_s_unscraped"]) * 100
        return figures

    def _produce(self, settings: Settings, scraped: bool) -> dict[str, float]:
        port = _free_port()
        config = {"http.listener": f"127.0.0.1:{port}"} if scraped else {}
        with running(ONCELOG, settings, config) as (bootstrap, target):
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", settings.partitions)
            arguments = ["--bootstrap", bootstrap, "--topic", TOPIC, "--messages", settings.messages * LONGER,
                         "--size", settings.value_size, "--acks", "all", "--idempotent"]
            scraper = _Scraper(f"http://127.0.0.1:{port}") if scraped else None
            with load_phase(target, settings, "scenario2m", settings.produced_mb * LONGER) as phase:
                if scraper is not None:
                    scraper.start()
                try:
                    load = loadgen("produce", *arguments)
                finally:
                    if scraper is not None:
                        scraper.stop()
        figures = throughput_metrics(load, phase)
        if scraper is not None:
            figures["scrapes"] = scraper.scrapes
        return figures


LONGER = 10  # 2m's loads, in scenario 2's: several scrapes each, within the page cache (3 GB)


class _Scraper(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.scrapes = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self._stop_event.wait(1.0):
            paths = ["/metrics"] + (["/api/console"] if tick % 2 == 0 else [])
            tick += 1
            for path in paths:
                with urllib.request.urlopen(self.url + path, timeout=10) as response:
                    response.read()
            self.scrapes += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


METRICS_COST = MetricsCostScenario()
