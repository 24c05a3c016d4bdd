"""The runner's telemetry: `--metrics-port` (Prometheus text at /metrics, scraped over HTTP
while the pipeline runs) and the reports it produces to the report topic, in both sink
modes, against what was produced; and the sink's per-batch summary file the runner reads."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from prometheus_client.parser import text_string_to_metric_families

from oncelog.spark.paths import DECISIONS_KEPT
from oncelog.spark.pipeline import PipelineSpec, Trigger, run_pipeline
from oncelog.spark.pipeline.metrics import PHASES, PipelineMetrics
from oncelog.spark.sink_summary import SinkBatchSummary, read_summary, summary_path, write_summary
from tests.support.kafka import create_topics
from tests.support.pipeline import produce_in_transactions, read_committed

RECORDS = 90


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a scrape: (name, labels) -> value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def read_reports(bootstrap: str, topic: str) -> list[tuple[bytes | None, dict]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reports-{uuid.uuid4().hex[:8]}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    reports = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                break
            value = message.value()
            assert value is not None
            reports.append((message.key(), json.loads(value)))
    finally:
        consumer.close()
    return reports


@pytest.mark.parametrize("mode", ["partition", "batch"])
def test_pipeline_serves_its_micro_batches_on_metrics_and_reports_each_to_the_report_topic(
    mode, spark, shared_broker, tmp_path
):
    bootstrap = shared_broker.bootstrap_servers
    source, sink = f"metrics-in-{uuid.uuid4().hex[:6]}", f"metrics-out-{uuid.uuid4().hex[:6]}"
    report_topic = f"_pipelines-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2), (sink, 2))
    committed = [f"order-{i}".encode() for i in range(RECORDS)]
    produce_in_transactions(bootstrap, source, [(committed[:50], True), ([b"never"] * 20, False),
                                                (committed[50:], True)])
    spec = PipelineSpec(
        source_topic=source, sink_topics=(sink,), checkpoint=str(tmp_path / "checkpoint"),
        bootstrap_servers=bootstrap, mode=mode, trigger=Trigger.parse("processing-time=200ms"),
        sql="SELECT key, value FROM source", max_offsets_per_trigger=40, progress="json",
        metrics_port=0, report_topic=report_topic,
    )
    events: list[str] = []
    stop = threading.Event()
    scrapes: list[str] = []

    def scrape_until_everything_is_written() -> None:
        """While the pipeline runs: scrape /metrics until the sink wrote every record, then stop it."""
        deadline = time.monotonic() + 90
        try:
            url = None
            while url is None and time.monotonic() < deadline:
                started = [json.loads(line) for line in list(events) if '"started"' in line]
                url = started[0]["metrics"] if started else None
                time.sleep(0.1)
            while url is not None and time.monotonic() < deadline:
                with urllib.request.urlopen(url, timeout=5) as response:
                    scrapes.append(response.read().decode())
                written = [value for (name, _), value in samples(scrapes[-1]).items()
                           if name == "oncelog_pipeline_sink_records_written_total"]
                if written == [RECORDS]:
                    return
                time.sleep(0.2)
        finally:
            stop.set()

    scraper = threading.Thread(target=scrape_until_everything_is_written)
    scraper.start()
    result = run_pipeline(spec, spark, emit=events.append, stop=stop)
    scraper.join()

    assert result.records == RECORDS and result.batch_count >= 3  # 40 offsets per batch at most
    query_id = json.loads(events[0])["id"]
    metrics = samples(scrapes[-1])

    def value(name: str, **labels: str) -> float | None:
        return metrics.get((name, frozenset({"query": query_id, **labels}.items())))

    assert value("oncelog_pipeline_batches_total") == result.batch_count
    assert value("oncelog_pipeline_input_records_total") == RECORDS
    assert value("oncelog_pipeline_sink_records_written_total") == RECORDS
    assert value("oncelog_pipeline_processed_rows_per_second") is not None
    for phase in PHASES:
        assert value("oncelog_pipeline_batch_duration_seconds_count", phase=phase) is not None, phase
    assert value("oncelog_pipeline_batch_duration_seconds_count", phase="triggerExecution") == result.batch_count
    assert value("oncelog_pipeline_sink_commit_seconds_count") == result.batch_count
    decisions = {outcome: value("oncelog_pipeline_sink_decisions_total", outcome=outcome)
                 for outcome in ("committed", "resumed", "aborted")}
    if mode == "batch":
        assert decisions == {"committed": result.batch_count, "resumed": 0, "aborted": 0}
    else:
        assert decisions == {"committed": None, "resumed": None, "aborted": None}
    assert sorted(read_committed(bootstrap, sink)) == sorted(committed)

    # One report at start, one per micro-batch, one at stop: the query's key, the contract's fields.
    # A query that waits 10 s (a first micro-batch slow on a loaded machine) also sends a
    # heartbeat: a running report with no batch more than the one before.
    reports = read_reports(bootstrap, report_topic)
    assert {key for key, _ in reports} == {query_id.encode()}
    progress = [report for index, (_, report) in enumerate(reports)
                if index == 0 or report["state"] != "running" or report["batches"] > reports[index - 1][1]["batches"]]
    assert [report["state"] for report in progress] == ["running"] * (1 + result.batch_count) + ["stopped"]
    first, last = progress[0], progress[-1]
    assert (first["batch"], first["batches"], first["records"], first["records_written"]) == (None, 0, 0, None)
    assert last["batch"] == result.batches[-1].batch_id
    assert (last["batches"], last["records"]) == (result.batch_count, RECORDS)
    assert sum(report["records_written"] for report in progress[1:-1]) == RECORDS
    assert {key: last[key] for key in ("version", "id", "source_topic", "sink_topics", "sink_mode", "name")} == {
        "version": 1, "id": query_id, "source_topic": source, "sink_topics": [sink], "sink_mode": mode, "name": None,
    }
    assert last["run_id"] and last["started_ms"] <= last["timestamp_ms"]
    # Every report links the console's card to the /metrics scraped above.
    assert {report["metrics_url"] for _, report in reports} == {json.loads(events[0])["metrics"]}
    assert last["batch_ms"] == result.batches[-1].duration_ms and "addBatch" in last["phases_ms"]
    assert isinstance(last["commit_ms"], float) and isinstance(last["processed_rows_per_second"], float)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, report_topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["message.timestamp.type"].value == "LogAppendTime"  # the console ages reports by the broker's clock
    assert len(admin.list_topics(report_topic, timeout=10).topics[report_topic].partitions) == 1


def test_metrics_listening_on_every_address_report_a_url_with_this_hosts_name():
    """0.0.0.0 is where the runner listens, never where a browser can connect: the URL it
    prints and reports (the console's link) names the host."""
    metrics = PipelineMetrics("0.0.0.0", 0)
    url = metrics.start()
    try:
        assert url.startswith(f"http://{socket.gethostname()}:") and url.endswith("/metrics")
        with urllib.request.urlopen(url, timeout=10) as response:
            assert b"process_cpu_seconds_total" in response.read()
    finally:
        metrics.stop()


def test_sink_summary_reads_as_none_when_missing_garbled_or_of_another_batch(tmp_path):
    assert read_summary(None, 3) is None
    assert read_summary(tmp_path, 3) is None  # no file
    path = summary_path(tmp_path, 3)
    path.parent.mkdir(parents=True)
    for garbled in ("", "{not json", "[1, 2]", '{"batch_id": 3, "mode": "batch"}',
                    '{"batch_id": 3, "mode": "batch", "records_written": "many", "commit_ms": 1}',
                    '{"batch_id": 3, "mode": "batch", "records_written": 5, "commit_ms": 1, "outcome": "maybe"}',
                    '{"batch_id": 4, "mode": "batch", "records_written": 5, "commit_ms": 1}'):
        path.write_text(garbled)
        assert read_summary(tmp_path, 3) is None, garbled


def test_sink_summary_is_replaced_per_batch_and_pruned_after_decisions_kept_batches(tmp_path):
    first = SinkBatchSummary(batch_id=0, mode="batch", records_written=7, commit_ms=3.5, outcome="committed")
    write_summary(tmp_path, first)
    assert read_summary(tmp_path, 0) == first
    resumed = SinkBatchSummary(batch_id=0, mode="batch", records_written=7, commit_ms=1.0, outcome="resumed",
                               aborted=1)
    write_summary(tmp_path, resumed)
    assert read_summary(tmp_path, 0) == resumed
    write_summary(tmp_path, SinkBatchSummary(batch_id=DECISIONS_KEPT, mode="partition", records_written=1,
                                             commit_ms=None))
    assert read_summary(tmp_path, 0) is None
    assert read_summary(tmp_path, DECISIONS_KEPT) == SinkBatchSummary(DECISIONS_KEPT, "partition", 1, None)
    assert [p.name for p in summary_path(tmp_path, 0).parent.iterdir()] == [f"metrics-{DECISIONS_KEPT}.json"]


def test_batch_mode_decisions_count_resumed_batches_and_the_aborts_a_restart_recorded():
    from oncelog.spark.pipeline.metrics import QueryTotals
    from oncelog.spark.pipeline.progress import BatchProgress
    from oncelog.spark.pipeline.report import RunIdentity

    totals = QueryTotals(RunIdentity("id", "run", None, 0), "in", "out", "batch")
    progress = {"numInputRows": 4, "durationMs": {"addBatch": 30, "triggerExecution": 50}}
    totals.add(BatchProgress.from_progress({**progress, "batchId": 7}, SinkBatchSummary(
        batch_id=7, mode="batch", records_written=4, commit_ms=2.0, outcome="resumed", aborted=2)))
    totals.add(BatchProgress.from_progress({**progress, "batchId": 8}, SinkBatchSummary(
        batch_id=8, mode="batch", records_written=4, commit_ms=3.0, outcome="committed")))
    totals.add(BatchProgress.from_progress({**progress, "batchId": 9}))  # no summary: no sink figures

    assert totals.decisions == {"committed": 1, "resumed": 1, "aborted": 2}
    assert (totals.batches, totals.input_records, totals.records_written) == (3, 12, 8)
    assert totals.sink_commits.count == 2 and totals.phases["addBatch"].count == 3
    assert totals.phases["walCommit"].count == 0


def test_an_iceberg_sink_is_reported_by_its_table_and_its_snapshots_count_as_committed_or_resumed(tmp_path):
    """No Spark: the report, the metrics and the progress lines of micro-batches whose
    summaries the Iceberg sink wrote (mode iceberg; resumed: the table had the batch)."""
    from prometheus_client import generate_latest

    from oncelog.spark.pipeline.metrics import PipelineMetrics
    from oncelog.spark.pipeline.progress import BatchProgress, RunResult
    from oncelog.spark.pipeline.report import RunIdentity, report_record

    spec = PipelineSpec(source_topic="orders", sink_topics=(), sink_table="shop.orders",
                        checkpoint=str(tmp_path / "checkpoint"), sql="SELECT value FROM source")
    run = RunIdentity("query-1", "run-1", None, 0)
    progress = {"numInputRows": 4, "durationMs": {"addBatch": 30, "triggerExecution": 50},
                "sources": [{"startOffset": {"orders": {"0": 0}}, "endOffset": {"orders": {"0": 4}}}]}
    result = RunResult()
    metrics = PipelineMetrics("127.0.0.1", 0)
    metrics.query_started(run, spec)
    for batch_id, outcome, written in ((5, "resumed", 4), (6, "committed", 3), (7, "committed", 0)):
        batch = BatchProgress.from_progress({**progress, "batchId": batch_id}, SinkBatchSummary(
            batch_id=batch_id, mode="iceberg", records_written=written, commit_ms=2.0, outcome=outcome))
        result.add(batch)
        metrics.observe(run, batch)

    prefix = "4 records read in 50 ms, 80 records/s; orders orders-0 [0, 4); "
    assert [batch.as_text(spec.source_topic, spec.sink_table) for batch in result.batches] == [
        f"batch 5: {prefix}shop.orders had this micro-batch already (committed before a restart): nothing appended",
        f"batch 6: {prefix}3 rows appended to shop.orders in one snapshot",
        f"batch 7: {prefix}no rows for shop.orders",
    ]
    report = report_record(spec, run, result, "running", now_ms=1)
    assert {key: report[key] for key in ("sink_topics", "sink_table", "sink_mode", "records_written")} == {
        "sink_topics": [], "sink_table": "shop.orders", "sink_mode": "iceberg", "records_written": 0}
    scraped = samples(generate_latest(metrics.registry).decode())
    info = [dict(labels) for (name, labels), _ in scraped.items() if name == "oncelog_pipeline_info"]
    assert info == [{"query": "query-1", "id": "query-1", "run_id": "run-1", "source_topic": "orders",
                     "sink_topic": "", "sink_table": "shop.orders", "sink_mode": "iceberg"}]
    decisions = {dict(labels)["outcome"]: value for (name, labels), value in scraped.items()
                 if name == "oncelog_pipeline_sink_decisions_total"}
    assert decisions == {"committed": 2, "resumed": 1}
    assert scraped[("oncelog_pipeline_sink_records_written_total", frozenset({("query", "query-1")}))] == 7


def test_a_progress_line_counts_a_record_read_by_several_outputs_once_and_says_what_the_sink_wrote():
    from oncelog.spark.pipeline.progress import BatchProgress

    # A transform with three outputs reads each record three times: Spark counts 3 x 4.
    progress = {"batchId": 2, "numInputRows": 12, "inputRowsPerSecond": 30.0, "processedRowsPerSecond": 240.0,
                "durationMs": {"addBatch": 30, "triggerExecution": 50},
                "sources": [{"startOffset": {"orders": {"0": 0}}, "endOffset": {"orders": {"0": 4}}}]}
    batch = BatchProgress.from_progress(progress, SinkBatchSummary(
        batch_id=2, mode="partition", records_written=9, commit_ms=1.5), scans=3)

    assert (batch.records, batch.input_rows_per_second, batch.processed_rows_per_second) == (4, 10.0, 80.0)
    assert batch.as_text("orders") == (
        "batch 2: 4 records read, 9 written in 50 ms, 80 records/s; orders orders-0 [0, 4)")
    assert BatchProgress.from_progress(progress).as_text("orders").startswith("batch 2: 12 records read in 50 ms")
