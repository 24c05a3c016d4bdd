"""The runner's reports to the broker's console: one JSON record per finished micro-batch,
one when the query starts and one when it stops, produced to `--report-topic` (default
`_oncelog_pipelines`, compacted, one partition, created if missing), keyed by the query
id, so the topic holds each pipeline's latest state. The topic is made with
`message.timestamp.type=LogAppendTime`: the console measures a report's age against the
broker's clock, not this runner's (oncelog.web.pipelines). A query waiting for data reports
every 10 s all the same (oncelog.spark.pipeline.metrics.HEARTBEAT_S).

Reporting never fails or slows the pipeline: records are produced asynchronously with
the pipeline's own client settings, a failed delivery is logged once (then the pipeline
goes on quietly), and stopping waits at most REPORT_FLUSH_TIMEOUT_S for the last ones.

The record (version 1), UTF-8 JSON, key = the query id:

    {"version": 1, "id": str, "run_id": str, "name": str|null,
     "state": "running"|"stopped"|"failed", "error": str|null (failed: the runner's one line),
     "source_topic": str (several: comma-separated), "sink_topics": [str] ([] for an Iceberg sink),
     "sink_table": str|null (an Iceberg sink's namespace.table), "sink_mode": "partition"|"batch"|"iceberg",
     "batch": int|null (last batch id), "batches": int (this run), "records": int (this run),
     "batch_records": int|null (input records of the last batch),
     "input_rows_per_second": float|null, "processed_rows_per_second": float|null,
     "batch_ms": int|null, "phases_ms": {phase: int}, "commit_ms": float|null,
     "records_written": int|null (the last batch's, by the sink),
     "metrics_url": str|null (--metrics-port), "started_ms": int, "timestamp_ms": int}

The figures after "records" are the last micro-batch's (null before the first; the sink's
when it left its summary, oncelog.spark.sink_summary).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.spark.pipeline.spec import PipelineSpec, report_client_settings

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

    from oncelog.spark.pipeline.progress import BatchProgress, RunResult

log = logging.getLogger("oncelog.pipeline")

REPORT_VERSION = 1
REPORT_FLUSH_TIMEOUT_S = 2.0
TOPIC_CREATE_TIMEOUT_S = 5.0
STATES = ("running", "stopped", "failed")


@dataclass(frozen=True)
class RunIdentity:
    """The query this run of the runner drives."""

    id: str  # the query id: stable across restarts from one checkpoint
    run_id: str  # new at every start
    name: str | None  # Spark's queryName
    started_ms: int  # epoch ms

    @property
    def label(self) -> str:
        """What the metrics call the query: its name, else its id."""
        return self.name or self.id


def report_record(spec: PipelineSpec, run: RunIdentity, result: RunResult, state: str, *,
                  now_ms: int, metrics_url: str | None = None, error: str | None = None) -> dict[str, Any]:
    """The report of `run` as it stands (see the module docstring)."""
    assert state in STATES, state
    last: BatchProgress | None = result.batches[-1] if result.batches else None
    sink = last.sink if last is not None else None
    return {
        "version": REPORT_VERSION,
        "id": run.id,
        "run_id": run.run_id,
        "name": run.name,
        "state": state,
        "error": error,
        "source_topic": spec.source_topic,
        "sink_topics": list(spec.sink_topics),
        "sink_table": spec.sink_table,
        "sink_mode": spec.sink_mode,
        "batch": None if last is None else last.batch_id,
        "batches": result.batch_count,
        "records": result.records,
        "batch_records": None if last is None else last.records,
        "input_rows_per_second": _finite(None if last is None else last.input_rows_per_second),
        "processed_rows_per_second": _finite(None if last is None else last.processed_rows_per_second),
        "batch_ms": None if last is None else last.duration_ms,
        "phases_ms": {} if last is None else dict(last.phases_ms),
        "commit_ms": None if sink is None else _finite(sink.commit_ms),
        "records_written": None if sink is None else sink.records_written,
        "metrics_url": metrics_url,
        "started_ms": run.started_ms,
        "timestamp_ms": now_ms,
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class PipelineReporter:
    """Produces the run's reports to `--report-topic`; see the module docstring."""

    def __init__(self, spec: PipelineSpec, producer: Producer) -> None:
        self.spec = spec
        self.producer = producer
        self.warned = False

    @classmethod
    def connect(cls, spec: PipelineSpec) -> PipelineReporter | None:
        """The report topic (created if missing) and a producer; None, with a warning, when
        the client cannot be made (the pipeline runs without reporting)."""
        from confluent_kafka import KafkaException, Producer

        settings: dict[str, str | int | float | bool] = dict(report_client_settings(spec))
        # No librdkafka log lines on the runner's terminal: a failure is one warning.
        settings.update({"log_level": 0, "client.id": "oncelog-pipeline-report", "linger.ms": 50})
        ensure_report_topic(settings, spec.report_topic)
        try:
            producer = Producer(settings)
        except (KafkaException, ValueError, TypeError) as error:
            log.warning("not reporting to %s: %s", spec.report_topic, error)
            return None
        return cls(spec, producer)

    def report(self, run: RunIdentity, result: RunResult, state: str, *,
               metrics_url: str | None = None, error: str | None = None) -> None:
        from confluent_kafka import KafkaException

        record = report_record(self.spec, run, result, state, now_ms=int(time.time() * 1000),
                               metrics_url=metrics_url, error=error)
        try:
            self.producer.produce(self.spec.report_topic, key=run.id.encode(),
                                  value=json.dumps(record, sort_keys=True).encode(), on_delivery=self._delivered)
        except (BufferError, KafkaException) as failure:  # the local queue is full, or the client failed
            self._warn(str(failure))
        self.producer.poll(0)

    def close(self) -> None:
        """At stop: wait a moment for the last reports, then drop whatever is left."""
        left = self.producer.flush(REPORT_FLUSH_TIMEOUT_S)
        if left:
            self._warn(f"{left} report(s) still undelivered after {REPORT_FLUSH_TIMEOUT_S:.0f} s")
            self.producer.purge()
            self.producer.flush(0)

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._warn(error.str())

    def _warn(self, reason: str) -> None:
        if not self.warned:
            self.warned = True
            log.warning("pipeline reports to topic %s are not delivered (%s); the pipeline goes on, "
                        "and further failures are not logged", self.spec.report_topic, reason)


def ensure_report_topic(settings: dict[str, str | int | float | bool], topic: str) -> None:
    """Create `topic` (compacted, 1 partition, stamped by the broker) unless it exists; a
    warning on failure."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    try:
        admin = AdminClient(settings)
        future = admin.create_topics(
            [NewTopic(topic, num_partitions=1,
                      config={"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"})],
            request_timeout=TOPIC_CREATE_TIMEOUT_S,
        )[topic]
        future.result(TOPIC_CREATE_TIMEOUT_S)
    except KafkaException as error:
        code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
        if code != KafkaError.TOPIC_ALREADY_EXISTS:
            log.warning("cannot create the report topic %s: %s", topic, error)
    except (FutureTimeout, ValueError, TypeError) as error:
        log.warning("cannot create the report topic %s: %s", topic, error or "no answer")
