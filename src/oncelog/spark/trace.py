"""Where a micro-batch's time goes, as seen from the connectors' Python code.

With `ONCELOG_SPARK_TRACE=<file>` in the environment of the driver (Spark passes it on to
every Python worker it starts on this machine), each step the source and sink take is
appended to the file as one JSON line: `{"step": "sink.init", "pid": ..., "start": ...,
"ms": ..., "batch": ...}`. `bench/run.py --scenarios 8 --profile` reads it back and
splits each steady micro-batch into its steps (bench/profile_pipeline.py). Unset, a
step costs one dictionary lookup.

A process records `worker.start` when it first loads this module: the Python workers
Spark starts (and their import time) show up as such events.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

TRACE_ENV = "ONCELOG_SPARK_TRACE"

_path = os.environ.get(TRACE_ENV)


def enabled() -> bool:
    return _path is not None


def record(step: str, started: float, seconds: float, **fields) -> None:
    """One finished step: `started` is time.time() at its start."""
    if _path is None:
        return
    line = json.dumps({"step": step, "pid": os.getpid(), "start": round(started, 6), "ms": round(seconds * 1000, 3),
                       **fields})
    with open(_path, "a") as trace:  # one write per line: lines of concurrent processes stay whole
        trace.write(line + "\n")


@contextmanager
def step(name: str, **fields):
    """Time the block as step `name` (nothing happens unless tracing is on)."""
    if _path is None:
        yield
        return
    started, clock = time.time(), time.perf_counter()
    try:
        yield
    finally:
        record(name, started, time.perf_counter() - clock, **fields)


class Stopwatch:
    """Accumulates the time of a step that happens in many small pieces (waiting for the
    next Arrow batch, decoding each Fetch answer) and records it once, as one step."""

    __slots__ = ("_since", "fields", "name", "seconds", "started")

    def __init__(self, name: str, **fields) -> None:
        self.name = name
        self.fields = fields
        self.seconds = 0.0
        self.started = time.time()
        self._since: float | None = None

    def start(self) -> None:
        if _path is not None:
            self._since = time.perf_counter()

    def stop(self) -> None:
        if self._since is not None:
            self.seconds += time.perf_counter() - self._since
            self._since = None

    def record(self, **more) -> None:
        if _path is not None:
            record(self.name, self.started, self.seconds, **self.fields, **more)


if _path is not None:
    record("worker.start", time.time(), 0.0)
