"""The runner's command line entry points: `run_from_args` (for `oncelog pipeline run` and
`main()`) and `main()` (for `python -m oncelog.spark.pipeline` and spark-submit), which run
until the trigger ends the pipeline or SIGTERM/SIGINT stops it, and the run's last line
(`summary_line`). See the package's docstring for the runner's parts."""

from __future__ import annotations

import argparse
import sys

from oncelog.spark.pipeline.progress import RunResult
from oncelog.spark.pipeline.run import run_pipeline
from oncelog.spark.pipeline.spec import PipelineError, PipelineSpec, add_arguments, spec_from_args
from oncelog.stop_signals import stop_on_signals

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
