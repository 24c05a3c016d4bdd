"""Small pieces of the demos' reports."""

from __future__ import annotations

import math
import os


def console_url(embedded) -> str | None:
    """The broker's console (`http.listener`), when it serves one."""
    listener = getattr(embedded.broker, "http", None)
    address = getattr(listener, "address", None)
    return None if address is None else f"http://{address[0]}:{address[1]}/"


def percentile(sorted_values: list[int], percent: float) -> int:
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def printer(out):
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    return say


def machine_load() -> str:
    """`2 cores, load 1.9 (1 min) / 2.4 (5 min)`: what the timings were measured under."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} cores, load {one:.1f} (1 min) / {five:.1f} (5 min) at the end of the run"


def batch_timings(batches: list[dict]) -> list[tuple[str, str]]:
    """The report's lines on how long micro-batches took, from the runner's JSON progress:
    Spark's addBatch (read, transform, write and commit) and the sink's commit alone, two
    quantities 100x apart that must not share a name."""
    add_batch = sorted(batch["add_batch_ms"] for batch in batches)
    commit = sorted(round(batch["commit_ms"]) for batch in batches if batch.get("commit_ms") is not None)
    timing = (f"p50 {percentile(add_batch, 50):,} ms, p99 {percentile(add_batch, 99):,} ms "
              "(Spark's addBatch: read, transform, write and the exactly-once commit)")
    lines = [("micro-batch", timing)]
    if commit:
        alone = (f"p50 {percentile(commit, 50):,} ms, p99 {percentile(commit, 99):,} ms "
                 "(the commit alone: the console's and /metrics' commit latency)")
        lines.append(("sink commit", alone))
    return lines
