"""Where one steady micro-batch of the Spark pipeline spends its time (scenario 8 --profile).

Two sources, for the same run:
- Spark's own phases, from the runner's progress lines (`--progress json`: durationMs):
  latestOffset (planning the offsets), walCommit (the offset log), queryPlanning,
  addBatch (the tasks, the sink's writer and commit), commitOffsets (the commit log);
- the connectors' steps, from ONCELOG_SPARK_TRACE (oncelog.spark.trace): per task the
  read (waiting for Fetch answers, decoding them, Spark taking each Arrow batch) and the
  write (waiting for rows, InitProducerId, the marker check, encoding and sending,
  flush, offsets, EndTxn; batch mode's hand-over), and on the driver the writer's
  creation (with the gate in batch mode) and batch mode's commit steps.

A step belongs to the micro-batch during which it started. Task steps are averaged over
the tasks of a micro-batch (they run in parallel), driver steps summed; every figure is
then averaged over the steady micro-batches (all after the first).
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from pathlib import Path

SPARK_PHASES = (
    ("latestOffset", "Spark: latestOffset (source plans the end offsets)"),
    ("walCommit", "Spark: offset log written"),
    ("queryPlanning", "Spark: query planning"),
    ("addBatch", "Spark: addBatch (tasks, sink writer and commit)"),
    ("commitOffsets", "Spark: commit log written"),
)
DRIVER_STEPS = (
    ("source.latest_offset", "driver: source latestOffset (ListOffsets)"),
    ("source.partitions", "driver: source partitions"),
    ("sink.writer", "driver: sink writer created (batch: + 2PC check, gate)"),
    ("sink.gate_open", "driver:   of which the gate opened or kept"),
    ("sink.batch_commit", "driver: batch-mode commit(N)"),
    ("sink.batch_commit.decide", "driver:   decide (describe each txn, save decision)"),
    ("sink.batch_commit.end_txns", "driver:   commit the recorded txns (InitProducerId v6 + EndTxn each)"),
    ("sink.batch_commit.leftovers", "driver:   abort leftovers (ListTransactions)"),
    ("sink.batch_commit.markers", "driver:   wait for markers"),
    ("sink.batch_commit.close_gate", "driver:   abort the gate"),
)
TASK_STEPS = (
    ("source.read", "task: read, wall (first Fetch to last batch handed over)"),
    ("source.fetch_wait", "task:   waiting for Fetch answers"),
    ("source.decode", "task:   records to Arrow"),
    ("source.downstream", "task:   Spark taking each Arrow batch"),
    ("sink.write", "task: write, wall (the task's Python writer)"),
    ("sink.upstream_wait", "task:   waiting for rows (read + transform + Spark's conversions)"),
    ("sink.init", "task:   InitProducerId"),
    ("sink.marker_check", "task:   marker OffsetFetch (partition mode)"),
    ("sink.rows", "task:   rows encoded and sent"),
    ("sink.flush", "task:   flush (last acknowledgements)"),
    ("sink.send_offsets", "task:   AddOffsetsToTxn + TxnOffsetCommit (partition mode)"),
    ("sink.commit", "task:   EndTxn (partition mode)"),
    ("sink.handover", "task:   hand-over, InitProducerId v6 (batch mode)"),
)


def _epoch(timestamp: str) -> float:
    return datetime.datetime.fromisoformat(timestamp).timestamp()


def breakdown(trace_path: Path, batches: list[dict]) -> dict:
    """Mean milliseconds per steady micro-batch of every phase and step, plus the Python
    workers started during them. `batches`: the runner's JSON progress events."""
    lines = trace_path.read_text().splitlines() if trace_path.exists() else []
    steps = [json.loads(line) for line in lines if line.strip()]
    moving = [b for b in batches if b["records"] > 0]
    steady = moving[1:]
    if not steady:
        return {}
    windows = [(_epoch(b["timestamp"]), _epoch(b["timestamp"]) + b["duration_ms"] / 1000) for b in steady]
    driver: dict[str, float] = defaultdict(float)
    task: dict[str, float] = defaultdict(float)
    workers_started = 0
    for start, end in windows:
        inside = [s for s in steps if start <= s["start"] < end]
        workers_started += sum(1 for s in inside if s["step"] == "worker.start")
        per_task: dict[str, list[float]] = defaultdict(list)
        for s in inside:
            if s["step"] in dict(TASK_STEPS):
                per_task[s["step"]].append(s["ms"])
            elif s["step"] in dict(DRIVER_STEPS):
                driver[s["step"]] += s["ms"]
        for name, values in per_task.items():
            task[name] += sum(values) / len(values)
    count = len(steady)
    phases = {key: sum(b["phases_ms"].get(key, 0) for b in steady) / count
              for key, _ in (*SPARK_PHASES, ("triggerExecution", ""))}
    return {
        "steady_batches": count,
        "records_per_batch": sum(b["records"] for b in steady) / count,
        "spark_ms": phases,
        "driver_ms": {name: value / count for name, value in driver.items()},
        "task_ms": {name: value / count for name, value in task.items()},
        "python_workers_started": workers_started,
    }


def render(title: str, profile: dict) -> str:
    if not profile:
        return f"{title}: no steady micro-batch to profile"
    heading = (f"{title}: one steady micro-batch, mean of {profile['steady_batches']} "
               f"({profile['records_per_batch']:,.0f} records each), ms")
    lines = [heading,
             f"  {'the whole micro-batch (triggerExecution)':<70} {profile['spark_ms']['triggerExecution']:8.1f}"]
    for key, label in SPARK_PHASES:
        lines.append(f"  {label:<70} {profile['spark_ms'].get(key, 0):8.1f}")
    for key, label in DRIVER_STEPS:
        if key in profile["driver_ms"]:
            lines.append(f"  {label:<70} {profile['driver_ms'][key]:8.1f}")
    for key, label in TASK_STEPS:
        if key in profile["task_ms"]:
            lines.append(f"  {label:<70} {profile['task_ms'][key]:8.1f}")
    lines.append(f"  {'Python workers started during steady micro-batches':<70} "
                 f"{profile['python_workers_started']:8d}")
    return "\n".join(lines)
