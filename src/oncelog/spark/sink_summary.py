"""The sink's figures of one micro-batch, for the pipeline runner's metrics and reports:
`<checkpointLocation>/oncelog-sink/metrics-<batchId>.json`.

Only the sink's driver-side `commit()`/`abort()` know how many records a micro-batch
wrote, how long its commit took and (mode=batch) how the exactly-once decision went, and
they run in a Python worker of Spark's, not in the runner's process. So they leave this
summary next to the sink's decisions and the runner reads it when Spark reports the
batch finished (oncelog.spark.pipeline.metrics). It is metrics, not state: written
atomically (temporary file, rename) but not fsynced, never failing the commit, and a
missing or garbled file only means no sink figures for that batch.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from oncelog.spark.paths import DECISIONS_KEPT, SINK_STATE_DIR

SUMMARY_VERSION = 1
OUTCOMES = ("committed", "resumed", "aborted")


@dataclass(frozen=True)
class SinkBatchSummary:
    """What the sink's driver-side commit (or abort) saw of one micro-batch."""

    batch_id: int
    mode: str  # "partition" | "batch" | "iceberg" (the Iceberg sink's, oncelog.spark.iceberg.writers)
    records_written: int  # partition mode: the tasks that committed; batch mode: the decision's transactions
    # Partition mode: the slowest task's own commit (marker offset and EndTxn); batch mode:
    # the driver's decision and EndTxn calls. None when nothing was committed.
    commit_ms: float | None
    # Batch mode: "committed" (decided now), "resumed" (a decision recorded by an earlier
    # run, finished now) or "aborted" (abort() ended the batch's transactions); None in
    # partition mode.
    outcome: str | None = None
    # Batch mode: times abort() ended this batch's transactions before this outcome (an
    # aborted batch fails the query; the restart re-runs it and keeps the count).
    aborted: int = 0
    version: int = SUMMARY_VERSION

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, content: object, batch_id: int) -> SinkBatchSummary | None:
        """None for anything but a summary of `batch_id` this version understands."""
        if not isinstance(content, dict) or content.get("batch_id") != batch_id:
            return None
        try:
            commit_ms = content.get("commit_ms")
            outcome = content.get("outcome")
            summary = cls(
                batch_id=batch_id,
                mode=str(content["mode"]),
                records_written=int(content["records_written"]),
                commit_ms=None if commit_ms is None else float(commit_ms),
                outcome=None if outcome is None else str(outcome),
                aborted=int(content.get("aborted", 0)),
                version=int(content.get("version", SUMMARY_VERSION)),
            )
        except (KeyError, TypeError, ValueError):
            return None
        if summary.outcome is not None and summary.outcome not in OUTCOMES:
            return None
        return summary


def summary_path(checkpoint: Path, batch_id: int) -> Path:
    return checkpoint / SINK_STATE_DIR / f"metrics-{batch_id}.json"


def read_summary(checkpoint: Path | None, batch_id: int) -> SinkBatchSummary | None:
    """The summary of `batch_id`, or None when there is none (no checkpoint, the sink did
    not write one, an older batch pruned) or it cannot be read."""
    if checkpoint is None:
        return None
    try:
        with open(summary_path(checkpoint, batch_id)) as file:
            content = json.load(file)
    except (OSError, ValueError):
        return None
    return SinkBatchSummary.from_json(content, batch_id)


def write_summary(checkpoint: Path | None, summary: SinkBatchSummary) -> None:
    """Driver (the sink's commit or abort): replace the batch's summary and drop the one
    DECISIONS_KEPT batches older. Never raises: losing a batch's figures must not fail it."""
    if checkpoint is None:
        return
    path = summary_path(checkpoint, summary.batch_id)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "w") as file:
            json.dump(summary.as_json(), file, sort_keys=True)
        os.replace(temporary, path)
        summary_path(checkpoint, summary.batch_id - DECISIONS_KEPT).unlink(missing_ok=True)
    except OSError:
        temporary.unlink(missing_ok=True)
