"""The pipeline runner: topics -> a transform -> other topics or an Apache Iceberg table,
exactly once, on Spark.

    oncelog pipeline run --source orders --sink enriched-orders \\
        --transform examples/enrich_orders.py:enrich_orders --checkpoint /var/lib/ckpt/orders
    oncelog pipeline run --source orders --sink iceberg:shop.orders ...   into a table
    python -m oncelog.spark.pipeline ...        the same without the oncelog CLI
    spark-submit --master spark://host:7077 $(python -c \\
        'import oncelog.spark.pipeline as p; print(p.__file__)') ...    on a cluster

This module is the entry point: `run_from_args` (for `oncelog pipeline run` and `main()`)
and `main()` (for `python -m oncelog.spark.pipeline` and spark-submit), which run until the
trigger ends the pipeline or SIGTERM/SIGINT stops it. The runner's parts live in:
- pipeline_spec: the command line (`add_arguments`, `spec_from_args`), parsed into a
  frozen `PipelineSpec`, and `PipelineError`;
- pipeline_checks: the checks that take a second and run before Spark starts (ten
  seconds): options, the transform's import, the broker, the topics, an Iceberg catalog;
- pipeline_session: the Spark session (spark-submit's, or a local one logging to a file);
- pipeline_query: `format("oncelog")` source (read_committed) -> transform ->
  `format("oncelog")` exactly-once sink (or `format("oncelog-iceberg")`, docs/iceberg.md;
  update output mode through foreachBatch), with Spark's checkpoint holding the progress;
- pipeline_run: `run_pipeline`, watching it: one progress line per micro-batch (text or
  JSON lines), SIGTERM stops it;
- pipeline_metrics and pipeline_report: each micro-batch as Prometheus metrics
  (--metrics-port) and as a record on the report topic the broker's console reads, with
  the sink's own figures (records written, commit latency, batch mode's decisions) from
  the summary its commit leaves in the checkpoint (sink_metrics);
- pipeline_failure: a failure as one line (`PipelineError`) naming the micro-batch and the
  source offsets it was reading, and the failed task's partition where the plan makes that
  unambiguous.
Their main names are re-exported here.

Where code runs: the whole runner runs in the driver process. The transform function is
called once, on the driver, to build the plan; only what the plan contains (column
expressions, or Python UDFs pickled with cloudpickle) runs on executors. A transform given
as a file (`path.py:function`) is shipped to executors with `SparkContext.addPyFile`; a
module (`package.module:function`) must be importable on executors (installed, or sent
with spark-submit's `--py-files`).
"""

from __future__ import annotations

import argparse
import sys

from oncelog.spark.pipeline_progress import BatchProgress, RunResult
from oncelog.spark.pipeline_run import run_pipeline
from oncelog.spark.pipeline_spec import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_MASTER,
    DEFAULT_TRIGGER,
    MODES,
    PipelineError,
    PipelineSpec,
    Trigger,
    add_arguments,
    spec_from_args,
)
from oncelog.stop_signals import stop_on_signals

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_MASTER",
    "DEFAULT_TRIGGER",
    "MODES",
    "BatchProgress",
    "PipelineError",
    "PipelineSpec",
    "RunResult",
    "Trigger",
    "add_arguments",
    "build_parser",
    "main",
    "run_from_args",
    "run_pipeline",
    "spec_from_args",
    "summary_line",
]


# -- entry points -----------------------------------------------------------------------------


def run_from_args(args: argparse.Namespace) -> int:
    """`oncelog pipeline run` and `main()`: run until the trigger ends it or SIGTERM/SIGINT
    stops it, at any moment from the checks on (the current micro-batch is abandoned; its
    output never becomes visible and the next run redoes it). A stop is exit status 0 with
    its summary line. Raises PipelineError."""
    with stop_on_signals() as stop:
        spec = spec_from_args(args)
        result = run_pipeline(spec, stop=stop)
    if spec.progress == "text":
        print(summary_line(spec, result), flush=True)
    return 0


def summary_line(spec: PipelineSpec, result: RunResult) -> str:
    """The run's last line: how it ended (its trigger, or a stop) and what it did."""
    if result.stopped_by_signal and result.batch_count == 0:
        return f"pipeline stopped before the first micro-batch ({spec.source_topic} to {spec.sink_name})"
    how = "stopped after" if result.stopped_by_signal else "finished:"
    batches = f"{result.batch_count} micro-batch{'' if result.batch_count == 1 else 'es'}"
    return f"pipeline {how} {batches}, {result.records:,} records from {spec.source_topic} to {spec.sink_name}"


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line and exit status 1, as every other pipeline error."""

    def error(self, message: str):
        self.exit(1, f"oncelog pipeline: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m oncelog.spark.pipeline",
        description="Run an exactly-once pipeline on Spark: source topics -> transform -> sink topics, "
        "or an Apache Iceberg table (--sink iceberg:NAMESPACE.TABLE).",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """For `python -m oncelog.spark.pipeline` and spark-submit."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except PipelineError as error:
        print(f"oncelog pipeline: error: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
