"""One run of a Spark driver in its own process group, for the fault tests of both sinks:
started with a pause point set (`ONCELOG_SINK_PAUSE_AT`), killed with SIGKILL when it
reaches the point or some seconds after a micro-batch of the run started, and told apart
by how it ended ("finished", "killed at <point>", "killed at random", "failed: <why>")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from oncelog.spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV


def kill_process_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)


def newest_offset_file(checkpoints: list[Path]) -> float:
    """When the newest micro-batch of these checkpoints was planned (its offset log entry)."""
    times = [entry.stat().st_mtime for checkpoint in checkpoints if (checkpoint / "offsets").exists()
             for entry in (checkpoint / "offsets").iterdir()]
    return max(times, default=0.0)


def run_driver(script: Path, config: dict, work: Path, run: int, *, checkpoints: list[Path],
               pause_at: str | None, kill_after_progress_s: float | None, timeout_s: float,
               failure_line: Callable[[str], bool],
               while_running: Callable[[float | None], None] | None = None) -> str:
    """`python script json(config)`, logging to work/run-<run>.log. `failure_line` picks the
    lines that say why a failed run failed; `while_running(progress_at)` is called about every
    0.1 s with the monotonic time the run's first micro-batch started (None before)."""
    pause_file = work / f"paused-{run}"
    env = {**os.environ, PAUSE_FILE_ENV: str(pause_file)}
    env.pop(PAUSE_AT_ENV, None)
    if pause_at:
        env[PAUSE_AT_ENV] = pause_at
    log_path = work / f"run-{run}.log"
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        started = time.time()
        process = subprocess.Popen([sys.executable, str(script), json.dumps(config)], stdout=log, stderr=log,
                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    kill_at = progress_at = None
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                if process.returncode == 0:
                    return "finished"
                reasons = [line for line in log_path.read_text(errors="replace").splitlines() if failure_line(line)]
                return "failed: " + " | ".join(reason[:600] for reason in reasons)
            if pause_file.exists():
                time.sleep(0.2)  # let the paused process settle: the point is reached
                kill_process_group(process)
                return f"killed at {pause_file.read_text()}"
            if progress_at is None and newest_offset_file(checkpoints) > started:
                progress_at = time.monotonic()  # a micro-batch of this run has started
                if kill_after_progress_s is not None:
                    kill_at = progress_at + kill_after_progress_s
            if while_running is not None:
                while_running(progress_at)
            if kill_at is not None and time.monotonic() >= kill_at:
                kill_process_group(process)
                return "killed at random"
            time.sleep(0.1)
        raise AssertionError(f"pipeline run {run} did not end within {timeout_s:.0f}s; see {log_path}")
    finally:
        if process.poll() is None:
            kill_process_group(process)
