"""The broker's Prometheus endpoint: `http.listener=HOST:PORT` (off when empty) serves
`/metrics` in Prometheus text format, through prometheus_client, on a thread of its own.

Each scrape asks the event loop, which owns every piece of broker state, for a snapshot
(`MetricsSource`), and turns it into metric families; nothing is counted twice or kept
beside the state it describes. Names follow Prometheus conventions and mirror Kafka's
JMX metrics; docs/metrics.md maps each to Kafka's.

What is exported so far: the log directories (Kafka's LogManager OfflineLogDirectoryCount
and LogDirectoryOffline); the other families are added here, one collector each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("oncelog.metrics")

SNAPSHOT_TIMEOUT_S = 5.0  # a scrape gives up when the loop does not answer in this time


@dataclass(frozen=True, slots=True)
class LogDirsSnapshot:
    """The log directories as the loop saw them: each with whether it is offline."""

    offline: dict[str, bool]


MetricsSource = Callable[[], LogDirsSnapshot]  # runs on the event loop


class _BrokerCollector(Collector):
    def __init__(self, loop: asyncio.AbstractEventLoop, source: MetricsSource) -> None:
        self._loop = loop
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = asyncio.run_coroutine_threadsafe(self._snapshot(), self._loop).result(SNAPSHOT_TIMEOUT_S)
        offline = GaugeMetricFamily(
            "kafka_log_offline_log_directory_count",
            "Log directories of this broker that are offline (Kafka's OfflineLogDirectoryCount).",
            value=sum(snapshot.offline.values()),
        )
        yield offline
        per_dir = GaugeMetricFamily(
            "kafka_log_log_directory_offline",
            "1 while the log directory is offline, else 0 (Kafka's LogDirectoryOffline).",
            labels=["log_directory"],
        )
        for directory, is_offline in sorted(snapshot.offline.items()):
            per_dir.add_metric([directory], 1 if is_offline else 0)
        yield per_dir

    async def _snapshot(self) -> LogDirsSnapshot:
        return self._source()


class MetricsServer:
    """`/metrics` on its own thread; `address` once started."""

    def __init__(self, host: str, port: int, loop: asyncio.AbstractEventLoop, source: MetricsSource) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BrokerCollector(loop, source))
        self._host, self._port = host, port
        self._server: WSGIServer | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> tuple[str, int]:
        self._server, _thread = start_http_server(self._port, addr=self._host, registry=self.registry)
        self.address = (self._host, self._server.server_port)
        log.info("metrics at http://%s:%d/metrics", *self.address)
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
