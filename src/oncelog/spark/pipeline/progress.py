"""A pipeline's progress as the runner sees it: each finished micro-batch (`BatchProgress`,
from Spark's StreamingQueryProgress and the sink's summary) and the run's totals
(`RunResult`). What the runner prints, serves at /metrics and reports to the console is
made from these (run.py, metrics.py, report.py)."""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from oncelog.spark.pipeline.failure import describe_ranges
from oncelog.spark.sink_summary import SinkBatchSummary

KEPT_BATCHES = 10_000


@dataclass(frozen=True)
class BatchProgress:
    """One finished micro-batch, from Spark's StreamingQueryProgress."""

    batch_id: int
    records: int
    duration_ms: int  # the whole trigger: plan, read, transform, write, sink commit, offset commit
    add_batch_ms: int  # reading, transforming, writing and the sink's commit of this batch
    start_offsets: dict | None
    end_offsets: dict | None
    timestamp: str
    phases_ms: dict[str, int] = field(default_factory=dict)  # all of Spark's durationMs
    input_rows_per_second: float | None = None  # Spark's inputRowsPerSecond (None: not given)
    processed_rows_per_second: float | None = None  # Spark's processedRowsPerSecond
    sink: SinkBatchSummary | None = None  # what the sink's commit reported (oncelog.spark.sink_summary)

    @classmethod
    def from_progress(cls, progress: dict, sink: SinkBatchSummary | None = None, *,
                      scans: int = 1) -> BatchProgress:
        """`scans`: how many times the plan reads its source (a transform with several
        outputs reads it once per output, and Spark's numInputRows and rates count every
        read): records are counted once."""
        durations = progress.get("durationMs") or {}
        sources = progress.get("sources") or [{}]
        return cls(
            batch_id=int(progress["batchId"]),
            records=int(progress.get("numInputRows") or 0) // scans,
            duration_ms=int(durations.get("triggerExecution", 0)),
            add_batch_ms=int(durations.get("addBatch", 0)),
            start_offsets=_offsets(sources[0].get("startOffset")),
            end_offsets=_offsets(sources[0].get("endOffset")),
            timestamp=str(progress.get("timestamp", "")),
            phases_ms={str(k): int(v) for k, v in durations.items()},
            input_rows_per_second=_rate(progress.get("inputRowsPerSecond"), scans),
            processed_rows_per_second=_rate(progress.get("processedRowsPerSecond"), scans),
            sink=sink,
        )

    def as_json(self) -> dict:
        return {
            "event": "batch", "batch": self.batch_id, "records": self.records,
            "duration_ms": self.duration_ms, "add_batch_ms": self.add_batch_ms,
            "start_offsets": self.start_offsets, "end_offsets": self.end_offsets,
            "timestamp": self.timestamp, "phases_ms": self.phases_ms,
            "input_rows_per_second": self.input_rows_per_second,
            "processed_rows_per_second": self.processed_rows_per_second,
            "records_written": None if self.sink is None else self.sink.records_written,
            "commit_ms": None if self.sink is None else self.sink.commit_ms,
            "sink_outcome": None if self.sink is None else self.sink.outcome,
        }

    def as_text(self, source_topic: str, sink_table: str | None = None) -> str:
        """`batch 4: 1,000 records read, 1,000 written in 512 ms, 1,953 records/s; orders
        orders-0 [0, 500), ...` (`written` when the sink left its summary), and for an
        Iceberg sink what its commit did with the micro-batch."""
        rate = f", {self.records * 1000 / self.duration_ms:,.0f} records/s" if self.duration_ms else ""
        written = "" if self.sink is None or sink_table is not None else f", {self.sink.records_written:,} written"
        line = (
            f"batch {self.batch_id}: {self.records:,} records read{written} in {self.duration_ms} ms{rate}; "
            f"{source_topic} {describe_ranges(self.start_offsets, self.end_offsets)}"
        )
        if sink_table is None or self.sink is None:
            return line
        if self.sink.outcome == "resumed":
            return f"{line}; {sink_table} had this micro-batch already (committed before a restart): nothing appended"
        if self.sink.records_written == 0:
            return f"{line}; no rows for {sink_table}"
        return f"{line}; {self.sink.records_written:,} rows appended to {sink_table} in one snapshot"


def _rate(raw: Any, scans: int) -> float | None:
    """Spark leaves out a rate it cannot compute (NaN, infinity)."""
    try:
        rate = float(raw) / scans
    except (TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) else None


def _offsets(raw: Any) -> dict | None:
    if raw is None or isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return None


@dataclass
class RunResult:
    batch_count: int = 0
    records: int = 0
    # The latest micro-batches (all of them in short runs; a long-running pipeline keeps
    # only the last KEPT_BATCHES).
    batches: deque[BatchProgress] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))
    stopped_by_signal: bool = False

    def add(self, batch: BatchProgress) -> None:
        self.batch_count += 1
        self.records += batch.records
        self.batches.append(batch)
