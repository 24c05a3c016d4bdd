"""Running a pipeline (`run_pipeline`): check, start the session, build and start the
query, then watch it until its trigger ends it, `stop` is set (SIGTERM, SIGINT) or it fails
(a PipelineError, one line). And its progress: one line per finished micro-batch (text or
JSON lines, `ProgressWatch`), handed on to /metrics and the report topic
(oncelog.spark.pipeline.metrics), and the run's totals (`RunResult`, progress.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from oncelog.spark.pipeline.checks import (
    TransformReference,
    check_cluster,
    check_iceberg_catalog,
    check_options,
    check_two_phase_commit,
)
from oncelog.spark.pipeline.failure import describe_failure, spark_error_line
from oncelog.spark.pipeline.metrics import PipelineTelemetry
from oncelog.spark.pipeline.progress import BatchProgress, RunResult
from oncelog.spark.pipeline.query import build_output, nondeterministic_warning, source_scans, start_query
from oncelog.spark.pipeline.session import spark_log_path, start_session
from oncelog.spark.pipeline.spec import PipelineError, PipelineSpec, sink_options
from oncelog.spark.sink_summary import read_summary
from oncelog.stop_signals import handle_again

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

PROGRESS_POLL_S = 0.2

T = TypeVar("T")


class ProgressWatch:
    """Reports each finished micro-batch once. Polls the query's last progress (one py4j
    call) and reads the recent ones only when it changed: converting all of Spark's recent
    progress objects through py4j on every poll would cost the driver real CPU. No listener
    callbacks into Python: nothing to go wrong in a py4j callback thread."""

    def __init__(self, spec: PipelineSpec, emit: Callable[[str], None], result: RunResult,
                 on_batch: Callable[[BatchProgress], None] | None = None, *, scans: int = 1) -> None:
        self.spec = spec
        self.scans = scans  # reads of the source per micro-batch (query.source_scans)
        self.emit = emit
        self.result = result
        self.on_batch = on_batch
        self.seen: set[tuple[int, str]] = set()
        self.last_seen: str | None = None
        self.checkpoint = sink_checkpoint(spec)

    def poll(self, query: StreamingQuery) -> None:
        try:
            last = query._jsq.lastProgress()
            if last is None:
                return
            last_json = last.json()
            if last_json == self.last_seen:
                return
            self.last_seen = last_json
            recent = [json.loads(progress.json()) for progress in query._jsq.recentProgress()]
        except Exception:  # noqa: BLE001 (the JVM may be gone while stopping; progress is best effort)
            return
        keys = []
        for progress in recent:
            key = (int(progress.get("batchId", -1)), str(progress.get("timestamp")))
            keys.append(key)
            # Idle reports (no micro-batch ran) carry no addBatch.
            if key in self.seen or "addBatch" not in (progress.get("durationMs") or {}):
                continue
            batch_id = int(progress["batchId"])
            batch = BatchProgress.from_progress(progress, read_summary(self.checkpoint, batch_id), scans=self.scans)
            self.result.add(batch)
            if self.on_batch is not None:
                self.on_batch(batch)
            if self.spec.progress == "json":
                self.emit(json.dumps(batch.as_json(), sort_keys=True))
            elif self.spec.progress == "text":
                self.emit(batch.as_text(self.spec.source_topic, self.spec.sink_table))
        self.seen = set(keys)  # Spark keeps the last 100: older keys can never come back


def sink_checkpoint(spec: PipelineSpec) -> Path | None:
    """The checkpoint directory as the sink reads it (where it leaves its batch summaries)."""
    from oncelog.spark.errors import SourceError
    from oncelog.spark.iceberg.options import parse_iceberg_options
    from oncelog.spark.sink.options import parse_sink_options

    try:
        if spec.sink_table is not None:
            return parse_iceberg_options(sink_options(spec)).checkpoint_location
        return parse_sink_options(sink_options(spec), streaming=True).checkpoint_location
    except SourceError:  # reported by check_options before anything runs
        return None


def run_pipeline(
    spec: PipelineSpec,
    spark: SparkSession | None = None,
    *,
    emit: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Check, build, start and watch the pipeline until its trigger ends it, `stop` is
    set, or it fails (PipelineError, one line). `spark`: a session to use (tests); by
    default one is started per `start_session`. With `stop` set by a signal (the runner
    enters oncelog.stop_signals), PySpark's SIGINT handler is replaced by the entered one."""
    emit = emit or _print_line
    try:
        transforms = _checked(spec)
    except PipelineError:
        if stop is None or not stop.is_set():
            raise
        return _stopped_before_the_query(spec, emit)  # a check a stop cut short (waiting out its timeout)
    telemetry = PipelineTelemetry(spec)
    try:
        telemetry.start()  # before Spark starts: a taken --metrics-port fails in a second
        if telemetry.metrics_url is not None and spec.progress != "json":
            emit(f"metrics at {telemetry.metrics_url}")
        if spec.sink_table is not None and spec.progress == "text":
            emit(f"writing {spec.describe_iceberg_sink()}")
        if len(spec.sink_topics) > 1 and spec.mode == "partition" and spec.progress == "text":
            emit(f"note: --mode partition writes each task's rows to {spec.sink_name} in one transaction, but a "
                 "micro-batch's tasks commit one by one: a reader may see one topic's records of a micro-batch "
                 "before another's (--mode batch makes each micro-batch visible in every topic at once)")
        return _run(spec, spark, emit, stop, transforms, telemetry)
    finally:
        telemetry.close()


def _checked(spec: PipelineSpec) -> list[TransformReference]:
    """The checks that take a second and run before Spark starts (checks.py)."""
    transforms = [TransformReference.locate(reference) for reference in spec.transforms]
    check_options(spec)
    check_cluster(spec)
    if spec.sink_mode == "batch":
        check_two_phase_commit(spec)
    if spec.sink_table is not None:
        check_iceberg_catalog(spec)
    return transforms


class _Stopped(Exception):
    """A stop was requested (SIGTERM, SIGINT) before the query ran its first micro-batch."""


def _unless_stopped(stop: threading.Event, step: Callable[[], T]) -> T:
    """One start-up step. Once a stop is requested, whatever the step raised is the stop's
    doing (a JVM that a signal to the whole process group reached before it could ignore
    it, a py4j call cut short) and the run ends as stopped: the step's error would only
    tell the user about their own signal."""
    try:
        value = step()
    except KeyboardInterrupt:  # PySpark's SIGINT handler, installed while the context starts
        stop.set()
        raise _Stopped() from None
    except Exception:
        if stop.is_set():
            raise _Stopped() from None
        raise
    if stop.is_set():
        raise _Stopped()
    return value


def _run(spec: PipelineSpec, spark: SparkSession | None, emit: Callable[[str], None],
         stop: threading.Event | None, transforms: list[TransformReference], telemetry: PipelineTelemetry) -> RunResult:
    stop = stop if stop is not None else threading.Event()
    log_file = None if spark is not None else spark_log_path(spec)
    see_log = f" (Spark's log: {log_file})" if log_file is not None else ""
    try:
        if stop.is_set():  # stopped during the checks: Spark never starts
            raise _Stopped()
        if spark is None:
            spark = _unless_stopped(stop, lambda: _start_session(spec, log_file, see_log))
        try:
            output = _unless_stopped(stop, lambda: build_output(spark, spec, transforms))
        except PipelineError as error:
            raise PipelineError(f"{error}{see_log}") from None
        warning = nondeterministic_warning(output, spec)
        if warning is not None:
            print(f"oncelog pipeline: warning: {warning}", file=sys.stderr, flush=True)
        from pyspark.errors import PySparkException

        try:
            query = _unless_stopped(stop, lambda: start_query(output, spec))
        except PySparkException as error:
            raise PipelineError(f"the pipeline did not start: {spark_error_line(str(error))}{see_log}") from None
    except _Stopped:
        return _stopped_before_the_query(spec, emit)
    result = RunResult()
    telemetry.query_started(query, result)
    watch = ProgressWatch(spec, emit, result, on_batch=lambda batch: telemetry.batch_finished(batch, result),
                          scans=source_scans(output))
    if spec.progress == "json":
        warehouse = spec.embedded_warehouse
        emit(json.dumps({"event": "started", "id": str(query.id), "run_id": str(query.runId),
                         "checkpoint": spec.checkpoint_location, "sink": spec.sink_name,
                         "transactional_id_prefix": spec.transactional_id if spec.sink_table is None else None,
                         "warehouse": None if warehouse is None else str(warehouse),
                         "spark_log": None if log_file is None else str(log_file),
                         "metrics": telemetry.metrics_url}))
    failure = _watch(query, stop, watch, telemetry, result)
    if failure is not None:
        failure_line = describe_failure(spec, query, failure, spark)
        telemetry.query_ended(result, error=failure_line)
        raise PipelineError(failure_line + see_log)
    telemetry.query_ended(result)
    _emit_finished(spec, emit, result)
    return result


def _start_session(spec: PipelineSpec, log_file: Path | None, see_log: str) -> SparkSession:
    """The session, with the signals taken back from PySpark's SparkContext, which answers
    SIGINT with its own handler (cancel every job, raise KeyboardInterrupt in whatever py4j
    call is running): Ctrl-C stops the pipeline as SIGTERM does instead. A JVM that does
    not start (a bad --conf) is one line with the cause from Spark's log."""
    from pyspark.errors import PySparkException

    try:
        spark = start_session(spec, log_file)
    except PySparkException as error:
        raise PipelineError(f"Spark did not start: {_jvm_failure(log_file) or spark_error_line(str(error))}"
                            f"{see_log}") from None
    finally:
        handle_again()
    return spark


def _jvm_failure(log_file: Path | None) -> str | None:
    """The JVM's last words in Spark's log, when it wrote any (`Error: Too small maximum
    heap`): what a JVM that exited before py4j could reach it said."""
    if log_file is None:
        return None
    try:
        lines = [line.strip() for line in log_file.read_text(errors="replace").splitlines()]
    except OSError:
        return None
    said = [line for line in lines if line and not line.startswith("WARNING: Using incubator modules")]
    return said[-1] if said else None


def _watch(query: StreamingQuery, stop: threading.Event, watch: ProgressWatch, telemetry: PipelineTelemetry,
           result: RunResult) -> str | None:
    """Watch the query until its trigger ends it, it fails (returns Spark's error) or `stop`
    is set (stops it: the running micro-batch is abandoned, and the next run redoes it)."""
    from pyspark.errors import StreamingQueryException

    try:
        while query.isActive:
            if stop.is_set():
                result.stopped_by_signal = True
                query.stop()
                break
            try:
                # PySpark takes float seconds (it waits int(timeout * 1000) ms); its annotation says int.
                query.awaitTermination(PROGRESS_POLL_S)  # type: ignore[arg-type]
            except StreamingQueryException:
                break  # reported from query.exception() below
            watch.poll(query)
            telemetry.tick(result)
        watch.poll(query)
        failure = query.exception()
        return None if failure is None else str(failure)
    except Exception:
        if not stop.is_set():
            raise
        # The JVM went away under the stop (a signal to the whole control group reached it):
        # the query is gone with it, its micro-batch abandoned as query.stop() would.
        result.stopped_by_signal = True
        return None
    finally:
        _stop_quietly(query)


def _stop_quietly(query: StreamingQuery) -> None:
    with contextlib.suppress(Exception):  # ending anyway: what ended the watch is what matters
        if query.isActive:
            query.stop()


def _stopped_before_the_query(spec: PipelineSpec, emit: Callable[[str], None]) -> RunResult:
    """A run that a stop ended before its query started: nothing done, nothing reported."""
    result = RunResult(stopped_by_signal=True)
    _emit_finished(spec, emit, result)
    return result


def _emit_finished(spec: PipelineSpec, emit: Callable[[str], None], result: RunResult) -> None:
    if spec.progress == "json":
        emit(json.dumps({"event": "finished", "batches": result.batch_count, "records": result.records,
                         "stopped": result.stopped_by_signal}))


def _print_line(line: str) -> None:
    print(line, flush=True)
