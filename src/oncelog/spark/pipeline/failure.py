"""A failed pipeline as one line: `micro-batch N (reading orders-0 [a, b), ...) failed[ in
its task for orders-1 [a, b) (k attempts)]: Cause`. The cause is the Python exception
inside Spark's wrapping (`spark_error_line`); the micro-batch and its offsets come from the
checkpoint's offset and commit logs; the task from Spark's status store, named only when the
plan makes it unambiguous. Also the wording of offset ranges (`describe_ranges`, used by the
progress lines) and of any exception as one line (`one_line`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.spark.pipeline.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery


def describe_failure(spec: PipelineSpec, query: StreamingQuery | None, message: str, spark=None) -> str:
    """`micro-batch N (reading orders-0 [a, b), ...) failed[ in its task for orders-1
    [a, b) (k attempts)]: Cause`."""
    cause = spark_error_line(message)
    batch = failed_batch(spec.checkpoint_location)
    if batch is None:
        return f"the pipeline failed: {cause}"
    batch_id, start, end = batch
    ranges = planned_ranges(start, end)
    where = f"micro-batch {batch_id} (reading {describe_ranges(start, end)}) failed"
    task = failed_task(spark, query) if ranges else None
    if task is not None and task[0] < len(ranges) and _plan_has_no_shuffle(query):
        index, attempts = task
        topic, partition, first, last = ranges[index]
        where += (f" in its task for {topic}-{partition} offsets [{first}, {last})"
                  f" ({attempts} attempt{'s' if attempts != 1 else ''})")
    return f"{where}: {cause}"


def failed_task(spark, query: StreamingQuery | None) -> tuple[int, int] | None:
    """(task index, attempts) of the task that failed the query's last failed job, from
    Spark's status store (micro-batch jobs run in the job group named by the run id).
    None when Spark does not say (the store's Scala API is not public: best effort)."""
    if spark is None or query is None:
        return None
    try:
        context = spark.sparkContext
        tracker = context._jsc.statusTracker()
        store = context._jsc.sc().statusStore()
        failed_jobs = [job for job in tracker.getJobIdsForGroup(str(query.runId))
                       if tracker.getJobInfo(job).status().toString() == "FAILED"]
        if not failed_jobs:
            return None
        for stage_id in tracker.getJobInfo(max(failed_jobs)).stageIds():
            stage = tracker.getStageInfo(stage_id)
            if stage is None or stage.numFailedTasks() == 0:
                continue
            tasks = store.taskList(stage_id, stage.currentAttemptId(), 10_000)
            attempts: dict[int, int] = {}
            for number in range(tasks.size()):
                task = tasks.apply(number)
                if task.status() == "FAILED":
                    attempts[task.index()] = max(attempts.get(task.index(), 0), task.attempt() + 1)
            if len(attempts) == 1:  # one culprit; several failing tasks would be a guess
                return next(iter(attempts.items()))
        return None
    except Exception:  # noqa: BLE001 (the status store's API is not public: best effort)
        return None


def spark_error_line(message: str) -> str:
    """The cause inside Spark's wrapping: the Python exception line of a Python traceback
    (`ValueError: bad order`), otherwise Spark's own first meaningful line."""
    tracebacks = message.split("Traceback (most recent call last):")
    if len(tracebacks) > 1:
        last = tracebacks[-1]
        lines = last.splitlines()
        exception_line = None
        for line in lines[1:]:
            if not line.strip() or line.startswith(("\tat ", "JVM stacktrace")):
                if exception_line is not None:
                    break
                continue
            if not line.startswith(" "):
                exception_line = line.strip() if exception_line is None else exception_line
        if exception_line:
            # `oncelog.spark.errors.TopicNotFound: ...` -> `TopicNotFound: ...`
            return re.sub(r"^(?:[A-Za-z_][\w]*\.)+(?=[A-Za-z_]\w*(?::|$))", "", exception_line)
    text = message.strip()
    text = re.sub(r"^\[[A-Z_.]+\]\s*", "", text)
    text = re.sub(r"^Query \S+ \[id = [^\]]+\] terminated with exception:\s*", "", text)
    text = re.sub(r"^.*?terminated with exception:\s*", "", text, count=1, flags=re.DOTALL)
    for line in text.splitlines():
        if line.strip() and not line.startswith("\tat "):
            return line.strip()
    return text or "unknown error"


def failed_batch(checkpoint: str) -> tuple[int, dict | None, dict | None] | None:
    """From a local checkpoint: the latest micro-batch planned (offsets/N) but not
    committed (no commits/N), with its start (the previous batch's end) and end offsets."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", checkpoint) and not checkpoint.startswith("file:"):
        return None
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    offsets = root / "offsets"
    planned = _log_ids(offsets)
    if not planned:
        return None
    batch_id = max(planned)
    if batch_id in _log_ids(root / "commits"):
        return None
    return batch_id, _source_offsets(offsets / str(batch_id - 1)), _source_offsets(offsets / str(batch_id))


def _log_ids(directory: Path) -> set[int]:
    try:
        return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}
    except OSError:
        return set()


def _source_offsets(path: Path) -> dict | None:
    """Spark's offset log file: a version line, the batch metadata, then one line per source."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 3:
        return None
    try:
        return json.loads(lines[2], object_pairs_hook=dict)
    except json.JSONDecodeError:
        return None


def planned_ranges(start: dict | None, end: dict | None) -> list[tuple[str, int, int, int]]:
    """The ranges the source plans for (start, end), in its task order: partitions in the
    end offsets' order, those that moved (a partition missing from start reads from 0)."""
    if not end or any(key.startswith("$") for key in end):
        return []
    start = {} if not start or any(key.startswith("$") for key in start) else start
    ranges = []
    for topic, by_partition in end.items():
        for partition, last in by_partition.items():
            first = int(start.get(topic, {}).get(partition, 0))
            if int(last) > first:
                ranges.append((topic, int(partition), first, int(last)))
    return ranges


def describe_ranges(start: dict | None, end: dict | None) -> str:
    if end is None:
        return "nothing"
    if start is None:
        start = {}
    ranges = planned_ranges(start, end)
    if not ranges:
        return "nothing new"
    return ", ".join(f"{topic}-{partition} [{first}, {last})" for topic, partition, first, last in ranges)


def _plan_has_no_shuffle(query: StreamingQuery | None) -> bool:
    """True when the last micro-batch's plan has no shuffle, so task i read the i-th range
    (a broadcast exchange leaves the stream's partitions as they are)."""
    if query is None:
        return False
    try:
        plan = query._jsq.explainInternal(False)
    except Exception:  # noqa: BLE001 (best effort, as failed_task: without a plan, no task is named)
        return False
    return bool(plan) and re.search(r"(?<![A-Za-z])Exchange\b", plan) is None


def one_line(error: BaseException) -> str:
    """Any exception as one line. One of Spark's (an AnalysisException: a column that does
    not exist) keeps its message's first line: the plan Spark prints after it is for the log."""
    from confluent_kafka import KafkaError, KafkaException
    from pyspark.errors import PySparkException

    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0].str()
    if isinstance(error, PySparkException):
        return f"{type(error).__name__}: {spark_error_line(str(error)).rstrip(';')}"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def raised_at(error: BaseException) -> str | None:
    """`file.py:LINE`, the last frame of the error's traceback in the user's code (neither
    PySpark's, py4j's nor oncelog's), or None."""
    import traceback

    import py4j  # type: ignore[import-untyped]
    import pyspark

    modules = (pyspark, py4j)
    libraries = (*(f"{Path(module.__file__).parent}{os.sep}" for module in modules if module.__file__ is not None),
                 f"{Path(__file__).parent.parent}{os.sep}")
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(libraries)]
    if not frames:
        return None
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"
