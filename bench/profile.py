"""Where a broker's CPU goes: process CPU counters, and py-spy profiles of oncelog.

- `process_cpu_seconds(pid)`: user + system CPU of a whole process (all threads), from
  /proc. Read before and after a load, it gives CPU-ms per MB for any broker, tansu too.
  `child_pids(pid)` finds a broker's children (a cluster node's etcd member).
- `BrokerProfiler`: `py-spy record` attached to the oncelog broker while a scenario's
  load runs (`bench/run.py --profile`). py-spy is a dev tool (`pip install py-spy`), not
  a dependency. It writes collapsed stacks; `summarize` turns them into the share of
  samples per function, self and inclusive, and sampled ms per produced MB.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Self

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_RATE = 250  # samples per second


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds used so far by process `pid` (None if unknown)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # Fields after the command name start at field 3 (state); utime and stime are 14, 15.
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a scan of /proc: this kernel has no
    /proc/<pid>/task/<tid>/children)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        if int(fields[1]) == pid:  # field 4, the parent's pid
            children.append(int(entry.name))
    return children


def py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


class BrokerProfiler:
    """`with BrokerProfiler(pid, out_path):` samples the process while the block runs."""

    def __init__(self, pid: int, output: Path) -> None:
        self.pid = pid
        self.output = output
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        binary = py_spy()
        if binary is None:
            raise RuntimeError("--profile needs py-spy (pip install py-spy into the venv)")
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, "record", "--pid", str(self.pid), "--rate", str(SAMPLE_RATE), "--format", "raw",
             "--nonblocking", "--output", str(self.output)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        return self

    def __exit__(self, *exc_info) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, stderr = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        if not self.output.exists():
            raise RuntimeError(f"py-spy wrote no profile: {stderr.decode(errors='replace')[-2000:]}")


def summarize(collapsed: Path, produced_mb: float, top: int = 25) -> str:
    """A text report: samples per function (self and inclusive) and sampled ms per MB."""
    self_samples: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")]
        total += count
        self_samples[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if total == 0:
        return "no samples (was the broker busy?)\n"
    cpu_ms = total / SAMPLE_RATE * 1000
    lines = [
        (f"{total} samples at {SAMPLE_RATE}/s = {cpu_ms:.0f} ms on the broker's threads (syscalls "
         f"included, idle excluded) for {produced_mb:.0f} MB: {cpu_ms / produced_mb:.2f} ms per MB"),
        "",
        f"{'self %':>7} {'ms/MB':>7}  function (self time: the sampled frame itself)",
    ]
    for frame, count in self_samples.most_common(top):
        lines.append(f"{100 * count / total:7.1f} {count / SAMPLE_RATE * 1000 / produced_mb:7.3f}  {frame}")
    lines += ["", f"{'incl %':>7} {'ms/MB':>7}  function (inclusive: the frame or anything it calls)"]
    for frame, count in inclusive.most_common(top * 2):
        lines.append(f"{100 * count / total:7.1f} {count / SAMPLE_RATE * 1000 / produced_mb:7.3f}  {frame}")
    return "\n".join(lines) + "\n"


def _short(frame: str) -> str:
    """`handle (/long/path/oncelog/broker/handlers/produce.py:42)` -> `handle (broker/handlers/produce.py)`."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/oncelog/", "/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"
