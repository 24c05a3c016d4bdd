"""What the runner tells the world about its micro-batches besides its stdout lines:
`--metrics-port` serves them as Prometheus metrics (`PipelineMetrics`, its own
CollectorRegistry and HTTP thread), and the report topic gets one record per micro-batch
for the broker's console (oncelog.spark.pipeline.report). `PipelineTelemetry` drives both
for `run_pipeline`.

The figures come from Spark's StreamingQueryProgress of each finished micro-batch
(`BatchProgress`) and, for what only the sink knows (records written, its commit's
latency, batch mode's decisions), from the summary the sink's driver-side commit leaves in
the checkpoint (oncelog.spark.sink_summary). Everything here runs on the runner's main
thread, once per finished micro-batch, except the scrape (the HTTP thread), which copies
the totals under a lock.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from oncelog.spark.pipeline.report import PipelineReporter, RunIdentity
from oncelog.spark.pipeline.spec import PipelineError, PipelineSpec
from oncelog.stats import BUCKETS_S, Histogram

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from pyspark.sql.streaming import StreamingQuery

    from oncelog.spark.pipeline.progress import BatchProgress, RunResult

# Spark's durationMs phases exported as `phase` of oncelog_pipeline_batch_duration_seconds.
PHASES = ("triggerExecution", "addBatch", "latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")
OUTCOMES = ("committed", "resumed", "aborted")
# The decisions each sink mode's summaries report, counted by outcome: batch mode's commit
# decides or resumes and its abort aborts; an Iceberg commit is never aborted (a failed one
# fails the batch); partition mode's tasks commit alone, with no decision to count.
MODE_OUTCOMES = {"partition": (), "batch": OUTCOMES, "iceberg": ("committed", "resumed")}
HEARTBEAT_S = 10.0  # an idle query still reports this often (the console flags one silent for a minute)


@dataclass
class QueryTotals:
    """One query's figures since this runner started it."""

    run: RunIdentity
    source_topic: str
    sink_topic: str  # the sink's topics, comma-separated; "" for an Iceberg sink
    sink_mode: str  # partition, batch or iceberg
    sink_table: str = ""  # an Iceberg sink's namespace.table
    batches: int = 0
    input_records: int = 0
    input_rows_per_second: float | None = None  # of the last micro-batch
    processed_rows_per_second: float | None = None
    phases: dict[str, Histogram] = field(default_factory=lambda: {phase: Histogram() for phase in PHASES})
    records_written: int = 0
    sink_commits: Histogram = field(default_factory=Histogram)
    decisions: dict[str, int] = field(default_factory=dict)  # batch mode and Iceberg: by outcome

    def __post_init__(self) -> None:
        self.decisions = dict.fromkeys(MODE_OUTCOMES.get(self.sink_mode, ()), 0)

    def add(self, batch: BatchProgress) -> None:
        self.batches += 1
        self.input_records += batch.records
        self.input_rows_per_second = batch.input_rows_per_second
        self.processed_rows_per_second = batch.processed_rows_per_second
        for phase, histogram in self.phases.items():
            if phase in batch.phases_ms:
                histogram.observe(batch.phases_ms[phase] / 1000)
        sink = batch.sink
        if sink is None:
            return
        self.records_written += sink.records_written
        if sink.commit_ms is not None:
            self.sink_commits.observe(sink.commit_ms / 1000)
        outcomes = MODE_OUTCOMES.get(sink.mode, ())
        if sink.outcome in ("committed", "resumed") and sink.outcome in outcomes:
            self.decisions[sink.outcome] = self.decisions.get(sink.outcome, 0) + 1
        if "aborted" in outcomes:
            self.decisions["aborted"] = self.decisions.get("aborted", 0) + sink.aborted


class PipelineMetrics:
    """`/metrics` at `--metrics-host`:`--metrics-port`, on a thread of its own."""

    def __init__(self, host: str, port: int) -> None:
        self.lock = threading.Lock()
        self.queries: dict[str, QueryTotals] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_PipelineCollector(self))
        # The driver process itself (process_*, python_info), as every prometheus_client program has them.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._host, self._port = host, port
        self._server: WSGIServer | None = None
        self.url: str | None = None

    def start(self) -> str:
        """Listen (PipelineError when the address is taken); returns the URL of /metrics."""
        try:
            self._server, _thread = start_http_server(self._port, addr=self._host, registry=self.registry)
        except OSError as error:
            raise PipelineError(
                f"--metrics-port {self._port}: cannot listen on {self._host}:{self._port}: {error.strerror or error}"
            ) from None
        self.url = f"http://{_url_host(self._host)}:{self._server.server_port}/metrics"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def query_started(self, run: RunIdentity, spec: PipelineSpec) -> None:
        with self.lock:
            self.queries[run.label] = QueryTotals(run, spec.source_topic, ",".join(spec.sink_topics), spec.sink_mode,
                                                  sink_table=spec.sink_table or "")

    def observe(self, run: RunIdentity, batch: BatchProgress) -> None:
        with self.lock:
            self.queries[run.label].add(batch)


def _url_host(listening_on: str) -> str:
    """Where another machine (the console's page) reaches the endpoint: this host's name
    when it listens on every address (0.0.0.0 or ::, which no browser can connect to)."""
    if listening_on in ("0.0.0.0", "::"):
        return socket.gethostname()
    return f"[{listening_on}]" if ":" in listening_on else listening_on


class _PipelineCollector(Collector):
    def __init__(self, metrics: PipelineMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        info = GaugeMetricFamily(
            "oncelog_pipeline_info", "The pipeline's query (1): its ids, topics or Iceberg table, and sink mode.",
            labels=["query", "id", "run_id", "source_topic", "sink_topic", "sink_table", "sink_mode"])
        batches = CounterMetricFamily(
            "oncelog_pipeline_batches", "Micro-batches completed.", labels=["query"])
        records = CounterMetricFamily(
            "oncelog_pipeline_input_records", "Records the micro-batches read (Spark's numInputRows).",
            labels=["query"])
        input_rate = GaugeMetricFamily(
            "oncelog_pipeline_input_rows_per_second",
            "The last micro-batch's input rate (Spark's inputRowsPerSecond).", labels=["query"])
        processed_rate = GaugeMetricFamily(
            "oncelog_pipeline_processed_rows_per_second",
            "The last micro-batch's processing rate (Spark's processedRowsPerSecond).", labels=["query"])
        durations = HistogramMetricFamily(
            "oncelog_pipeline_batch_duration_seconds",
            "Micro-batches' time by phase (Spark's durationMs: triggerExecution is the whole of it, addBatch "
            "the read, transform, write and sink commit).", labels=["query", "phase"])
        written = CounterMetricFamily(
            "oncelog_pipeline_sink_records_written", "Records the sink committed.", labels=["query"])
        commits = HistogramMetricFamily(
            "oncelog_pipeline_sink_commit_seconds",
            "The sink's commit of a micro-batch (mode batch: the driver's decision and EndTxn calls; "
            "mode partition: the slowest task's own commit; iceberg: the driver's snapshot commit).",
            labels=["query"])
        decisions = CounterMetricFamily(
            "oncelog_pipeline_sink_decisions",
            "Mode batch: micro-batches' exactly-once decisions, by outcome (committed; resumed: a decision "
            "recorded before a restart, finished after it; aborted). Iceberg: committed (a snapshot added); "
            "resumed (the table had the micro-batch from before a restart).", labels=["query", "outcome"])
        with self.metrics.lock:
            for label, totals in self.metrics.queries.items():
                run = totals.run
                info.add_metric([label, run.id, run.run_id, totals.source_topic, totals.sink_topic,
                                 totals.sink_table, totals.sink_mode], 1)
                batches.add_metric([label], totals.batches)
                records.add_metric([label], totals.input_records)
                if totals.input_rows_per_second is not None:
                    input_rate.add_metric([label], totals.input_rows_per_second)
                if totals.processed_rows_per_second is not None:
                    processed_rate.add_metric([label], totals.processed_rows_per_second)
                for phase, histogram in totals.phases.items():
                    durations.add_metric([label, phase], _buckets(histogram), sum_value=histogram.total_s)
                written.add_metric([label], totals.records_written)
                commits.add_metric([label], _buckets(totals.sink_commits), sum_value=totals.sink_commits.total_s)
                for outcome, count in totals.decisions.items():
                    decisions.add_metric([label, outcome], count)
        yield from (info, batches, records, input_rate, processed_rate, durations, written, commits, decisions)


def _buckets(histogram: Histogram) -> list[tuple[str, int]]:
    return [(str(bound), count) for bound, count in zip(BUCKETS_S, histogram.cumulative(), strict=True)] + [
        ("+Inf", histogram.count)
    ]


class PipelineTelemetry:
    """`run_pipeline`'s metrics endpoint and reports. Started before Spark, so a taken
    port fails the run in a second rather than after Spark's start-up."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self.metrics: PipelineMetrics | None = None
        self.reporter: PipelineReporter | None = None
        self.run: RunIdentity | None = None
        self._last_report = time.monotonic()

    def start(self) -> PipelineTelemetry:
        if self.spec.metrics_port is not None:
            self.metrics = PipelineMetrics(self.spec.metrics_host, self.spec.metrics_port)
            self.metrics.start()
        if self.spec.report:
            self.reporter = PipelineReporter.connect(self.spec)
        return self

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics is None else self.metrics.url

    def query_started(self, query: StreamingQuery, result: RunResult) -> RunIdentity:
        self.run = RunIdentity(id=str(query.id), run_id=str(query.runId), name=query.name,
                               started_ms=int(time.time() * 1000))
        if self.metrics is not None:
            self.metrics.query_started(self.run, self.spec)
        self._report(result, "running")
        return self.run

    def batch_finished(self, batch: BatchProgress, result: RunResult) -> None:
        if self.run is None:
            return
        if self.metrics is not None:
            self.metrics.observe(self.run, batch)
        self._report(result, "running")

    def tick(self, result: RunResult) -> None:
        """While the query waits for data: a report every HEARTBEAT_S, so the console
        tells an idle pipeline from one that stopped reporting."""
        if time.monotonic() - self._last_report >= HEARTBEAT_S:
            self._report(result, "running")

    def query_ended(self, result: RunResult, error: str | None = None) -> None:
        self._report(result, "failed" if error is not None else "stopped", error)

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()
        if self.metrics is not None:
            self.metrics.stop()

    def _report(self, result: RunResult, state: str, error: str | None = None) -> None:
        self._last_report = time.monotonic()
        if self.reporter is not None and self.run is not None:
            self.reporter.report(self.run, result, state, metrics_url=self.metrics_url, error=error)
