"""The pipeline runner: topics -> a transform -> other topics or an Apache Iceberg table,
exactly once, on Spark.

    oncelog pipeline run --source orders --sink enriched-orders \\
        --transform examples/enrich_orders.py:enrich_orders --checkpoint /var/lib/ckpt/orders
    oncelog pipeline run --source orders --sink iceberg:shop.orders ...   into a table
    python -m oncelog.spark.pipeline ...        the same without the oncelog CLI
    spark-submit --master spark://host:7077 $(python -c \\
        'import oncelog.spark.pipeline as p; print(p.__file__)') ...    on a cluster

The entry points are in `command`: `run_from_args` (for `oncelog pipeline run` and `main()`)
and `main()` (for `python -m oncelog.spark.pipeline`, through __main__.py, and spark-submit,
which runs this file), which run until the trigger ends the pipeline or SIGTERM/SIGINT stops
it. The runner's parts:
- spec: the command line (`add_arguments`, `spec_from_args`), parsed into a frozen
  `PipelineSpec`, and `PipelineError`;
- checks: the checks that take a second and run before Spark starts (ten seconds):
  options, the transform's import, the broker, the topics, an Iceberg catalog;
- session: the Spark session (spark-submit's, or a local one logging to a file);
- query: `format("oncelog")` source (read_committed) -> transform -> `format("oncelog")`
  exactly-once sink (or `format("oncelog-iceberg")`, docs/iceberg.md; update output mode
  through foreachBatch), with Spark's checkpoint holding the progress;
- run: `run_pipeline`, watching it: one progress line per micro-batch (text or JSON
  lines), SIGTERM stops it; progress: what it sees of each micro-batch and the run;
- metrics and report: each micro-batch as Prometheus metrics (--metrics-port) and as a
  record on the report topic the broker's console reads, with the sink's own figures
  (records written, commit latency, batch mode's decisions) from the summary its commit
  leaves in the checkpoint (oncelog.spark.sink_summary);
- failure: a failure as one line (`PipelineError`) naming the micro-batch and the source
  offsets it was reading, and the failed task's partition where the plan makes that
  unambiguous.
Their main names are importable from here, each loaded when first asked for: importing a
part (spec, report) does not load the runner, Spark and all.

Where code runs: the whole runner runs in the driver process. The transform function is
called once, on the driver, to build the plan; only what the plan contains (column
expressions, or Python UDFs pickled with cloudpickle) runs on executors. A transform given
as a file (`path.py:function`) is shipped to executors with `SparkContext.addPyFile`; a
module (`package.module:function`) must be importable on executors (installed, or sent
with spark-submit's `--py-files`).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.spark.pipeline.command import build_parser, main, run_from_args, summary_line
    from oncelog.spark.pipeline.progress import BatchProgress, RunResult
    from oncelog.spark.pipeline.run import run_pipeline
    from oncelog.spark.pipeline.spec import (
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

# Each public name and the part it lives in.
_EXPORTS = {
    **dict.fromkeys(("build_parser", "main", "run_from_args", "summary_line"), "command"),
    **dict.fromkeys(("BatchProgress", "RunResult"), "progress"),
    "run_pipeline": "run",
    **dict.fromkeys(("DEFAULT_BOOTSTRAP", "DEFAULT_MASTER", "DEFAULT_TRIGGER", "MODES", "PipelineError",
                     "PipelineSpec", "Trigger", "add_arguments", "spec_from_args"), "spec"),
}

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


def __getattr__(name: str) -> Any:
    part = _EXPORTS.get(name)
    if part is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"oncelog.spark.pipeline.{part}"), name)


if __name__ == "__main__":  # spark-submit runs this file
    from oncelog.spark.pipeline.command import main as _main

    sys.exit(_main())
