"""Fault injection for the demo, as a pipeline transform (its check runs on executors).

    --transform oncelog.demo.faults:fail_first_attempt
    --conf spark.oncelog.demo.failBatch=1 [--conf spark.oncelog.demo.failAtRow=300]
    [--conf spark.oncelog.demo.faultDir=/tmp/faults]

The first attempt of task 0 of micro-batch `failBatch` raises `InjectedFault` on its
`failAtRow`-th row (default 1), in the middle of the task (the check wraps the `value`
column, or the first column when there is none: rows for an Iceberg table). Spark retries the task (the
master must allow retries: `local[N,maxFailures]`), and the exactly-once sink must leave
no visible trace of the failed attempt. Each injected failure leaves a file in
`faultDir`, so the demo can count them. Without `failBatch` the transform changes nothing.

A plain (pickled-rows) Python UDF does the check: `mapInArrow` would need pandas.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FAIL_BATCH = "spark.oncelog.demo.failBatch"
FAIL_AT_ROW = "spark.oncelog.demo.failAtRow"
FAULT_DIR = "spark.oncelog.demo.faultDir"


class InjectedFault(RuntimeError):
    """The demo's deliberate task failure."""


def fail_first_attempt(frame):
    from pyspark.sql import functions as F

    conf = frame.sparkSession.conf
    fail_batch = conf.get(FAIL_BATCH, None)
    if fail_batch is None:
        return frame
    fail_at_row = int(conf.get(FAIL_AT_ROW, "1"))
    fault_dir = conf.get(FAULT_DIR, None)
    rows_seen = [0]  # per task: the UDF is unpickled afresh for every task

    def pass_or_fail(value):
        # Executor, once per row.
        from pyspark import TaskContext

        context = TaskContext.get()
        if (
            context is None
            or context.attemptNumber() != 0
            or context.partitionId() != 0
            or context.getLocalProperty("streaming.sql.batchId") != fail_batch
        ):
            return value
        rows_seen[0] += 1
        if rows_seen[0] < fail_at_row:
            return value
        if fault_dir:
            Path(fault_dir).mkdir(parents=True, exist_ok=True)
            marker = Path(fault_dir) / f"batch{fail_batch}-task0-attempt0-{os.getpid()}-{time.time_ns()}"
            marker.write_text(f"failed at row {rows_seen[0]}\n")
        raise InjectedFault(
            f"injected failure of the first attempt of task 0 in micro-batch {fail_batch}, at row {rows_seen[0]}"
        )

    column = "value" if "value" in frame.columns else frame.columns[0]
    check = F.udf(pass_or_fail, frame.schema[column].dataType, useArrow=False)
    return frame.withColumn(column, check(column))
