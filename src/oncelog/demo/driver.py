"""The demos' pipeline driver, run through faults: the pipeline runner as a child process
(`Driver`), killed with SIGKILL and restarted from its checkpoint while a seeder writes the
input (`run_through_kills`). Shared by `oncelog demo` (oncelog.demo.job) and `oncelog demo
--stateful` (oncelog.demo.stateful).

Two kinds of kill, alternating when there are several (the first is the second kind when
the plan has a `commit_pause`, else every kill is of the first kind):
- in the middle of a micro-batch: once the driver's input but its last transaction is
  written (a few micro-batches in), that one is written, and the driver is killed part
  way into the next micro-batch planned (Spark's offset log has it), when its tasks are
  likely writing (the report says where it landed);
- between the sink's commit and Spark's commit log (`commit_pause`): the driver is paused
  at the sink's pause point (oncelog.spark.pause) right after the sink committed a
  micro-batch (`commit:return:batch` or `commit:return:partition`), and killed there, so
  Spark's next driver runs that micro-batch again and the sink must recognise it as
  already written.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from oncelog.spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV

MASTER = "local[*,4]"  # up to 4 attempts per task
UP_FRONT_SHARE = 0.3  # of the input, written before the first driver starts; the rest while the pipeline runs
TRANSACTION_SIZE = 200  # the seeders' records per transaction (less for a small input: transaction_size)
DRIVER_START_TIMEOUT_S = 180.0
DRIVER_RUN_TIMEOUT_S = 300.0
COMMIT_PAUSE_TIMEOUT_S = 60.0
NEXT_BATCH_TIMEOUT_S = 30.0  # for the micro-batch a mid-batch kill lands in to be planned
# The input after the share up front is written over this long (InputPacer): 8 s for
# 20,000 records, at least 2 s per driver killed.
SPREAD_S_PER_RECORD = 8.0 / 20_000
MIN_SPREAD_S = 2.0


class DemoError(Exception):
    """The demo could not run to the end (as opposed to a wrong count, which is reported)."""


def up_front(total: int) -> int:
    """How much of the input is written before the first driver starts."""
    return max(1, int(total * UP_FRONT_SHARE))


def transaction_size(total: int, kills: int) -> int:
    """TRANSACTION_SIZE, or less for a small input: each killed driver's part of the input
    after the share up front needs three transactions (InputPacer: the first as the driver
    starts, the middle ones, the last once the kill is armed)."""
    return max(1, min(TRANSACTION_SIZE, (total - up_front(total)) // (3 * max(1, kills))))


class Driver:
    """One run of the pipeline runner as a child process in its own process group, so a
    kill takes the JVM along (Spark's Python daemons, in groups of their own, exit when
    the JVM's pipe closes). Reads the runner's JSON progress lines."""

    def __init__(self, command: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.log_path = log_path
        self.env = env  # added to this process's environment
        self.batches: list[dict] = []
        self.metrics_url: str | None = None  # the runner's /metrics (--metrics-port 0)
        self.changed = threading.Condition()
        self.process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> Driver:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True, text=True, env=None if self.env is None else {**os.environ, **self.env},
            )
        self._reader = threading.Thread(target=self._read, name="demo-driver-progress", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self.changed:
                if event.get("event") == "started":
                    self.metrics_url = event.get("metrics")
                elif event.get("event") == "batch":
                    self.batches.append(event)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for_batches(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while sum(1 for batch in self.batches if batch["records"] > 0) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.running:
                    return False
                self.changed.wait(min(remaining, 0.5))
        return True

    def kill(self) -> None:
        """SIGKILL to the driver's process group: the Python driver and its JVM."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        if self._reader is not None:
            self._reader.join(5)

    def wait(self, timeout_s: float) -> int | None:
        assert self.process is not None
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        if self._reader is not None:
            self._reader.join(5)
        return code

    def failure(self, what: str) -> DemoError:
        """A DemoError naming the runner's error; the end of the driver's log goes to stderr."""
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-25:]
        except OSError:
            tail = []
        if tail:
            print(f"--- last lines of {self.log_path.name} ---", *tail, "---", sep="\n", file=sys.stderr)
        return DemoError(f"{what}: {self.error_line()}")

    def error_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        for line in reversed(lines):
            if line.startswith("oncelog pipeline: error:"):
                return line.removeprefix("oncelog pipeline: ")
        return next((line for line in reversed(lines) if line.strip()), "")


# -- the run through kills -----------------------------------------------------------------------


class Seeder(Protocol):
    """Writes the demo's input: `run(pace)` calls `pace(written)` between transactions."""

    total: int
    written: int
    transaction_size: int

    @property
    def error(self) -> str | None: ...

    def run(self, pace: Callable[[int], None]) -> object: ...


@dataclass(frozen=True)
class FaultPlan:
    command: Callable[[str], list[str]]  # the runner's command line for a --trigger
    checkpoint: Path  # the command's --checkpoint
    kills: int
    seed: int
    up_front: int  # records written before the first driver starts
    # The sink's pause point right after its commit (oncelog.spark.sink: commit:return:batch or
    # commit:return:partition): the first kill and every second one after it there, between
    # the sink's commit and Spark's commit log. None: every kill mid-batch.
    commit_pause: str | None = None
    trigger: str = "processing-time=500ms"


@dataclass
class RunRecord:
    drivers: list[Driver] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)  # where each mid-batch kill landed: "in/after micro-batch N"
    commit_kills: list[int] = field(default_factory=list)  # micro-batches killed after the sink's commit
    restarts: int = 0
    wall_s: float = 0.0

    def describe_kills(self) -> str:
        parts = []
        if self.commit_kills:
            parts.append(f"{len(self.commit_kills)} between the sink's commit and Spark's commit log "
                         f"(micro-batch {', '.join(map(str, self.commit_kills))})")
        if self.kills:
            parts.append(f"{len(self.kills)} meant for the middle of a micro-batch ({', '.join(self.kills)})")
        return "; ".join(parts) or "none"


class InputPacer:
    """The seeder's `pace`: what is left after the share up front comes in one part per
    killed driver (at least one), so that every driver has input of its own and a kill
    never waits for input. Each part's transactions, counted from the seeder's
    transaction size:
    - the first as its driver starts, so that its first micro-batch has records to finish;
    - the middle ones spread over `spread_s`, from the end of that first micro-batch;
    - the last once the kill is armed, so a micro-batch starts for the kill to land in.
    `release_all()` lets everything left through at once (before the last driver)."""

    def __init__(self, seeder: Seeder, up_front: int, parts: int, spread_s: float) -> None:
        self.up_front = up_front
        self.parts = parts
        self.spread_s = spread_s
        size = seeder.transaction_size
        first_start = -(-up_front // size) * size  # transactions start at multiples of the size
        self.transactions = max(0, -(-(seeder.total - first_start) // size))
        self.calls = 0
        self.started: list[float] = []  # when each driver started
        self.ready: list[float] = []  # when each driver finished its first micro-batch
        self.armed: list[float] = []  # when each driver's kill was armed
        self.body_written = [threading.Event() for _ in range(parts)]
        self.condition = threading.Condition()
        self.released = False
        for part in range(parts):
            first, last = self.bounds(part)
            if last - first < 1:  # no middle or last transaction to wait for
                self.body_written[part].set()

    def bounds(self, part: int) -> tuple[int, int]:
        """The first and last transaction numbers of `part` (first > last: none)."""
        return -(-part * self.transactions // self.parts), -(-(part + 1) * self.transactions // self.parts) - 1

    def mark(self, times: list[float]) -> None:
        with self.condition:
            times.append(time.monotonic())
            self.condition.notify_all()

    def release_all(self) -> None:
        with self.condition:
            self.released = True
            self.condition.notify_all()
        for event in self.body_written:
            event.set()

    def __call__(self, written: int) -> None:
        if written < self.up_front:
            return
        number, self.calls = self.calls, self.calls + 1
        part = min(self.parts - 1, number * self.parts // max(1, self.transactions))
        first, last = self.bounds(part)
        if number == last and number > first:
            self.body_written[part].set()
        times = self.started if number == first else self.armed if number == last else self.ready
        with self.condition:
            self.condition.wait_for(lambda: len(times) > part or self.released, DRIVER_START_TIMEOUT_S)
            if self.released or times is not self.ready:
                return
            since = times[part] if len(times) > part else time.monotonic()
        delay = since + (number - first) / (last - first) * self.spread_s / self.parts - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def run_through_kills(plan: FaultPlan, seeder: Seeder, work: Path, say: Callable[[str], None],
                      seeding_line: str) -> RunRecord:
    """Seeds in a thread (a share up front, the rest paced by InputPacer), runs a driver
    that is killed `plan.kills` times and restarted from the checkpoint under `work`, then
    a last driver with `--trigger available-now` that stops once everything committed is
    processed. Raises DemoError when a driver cannot run."""
    parts = max(1, plan.kills)
    pacer = InputPacer(seeder, plan.up_front, parts,
                       max(MIN_SPREAD_S * parts, seeder.total * SPREAD_S_PER_RECORD))
    seeding = threading.Thread(target=seeder.run, args=(pacer,), name="demo-seeder", daemon=True)
    began = time.monotonic()
    seeding.start()
    while seeder.written < plan.up_front and seeding.is_alive():
        time.sleep(0.05)
    if seeder.error:
        raise DemoError(seeder.error)
    say(seeding_line)

    record = RunRecord()
    rng = random.Random(plan.seed)
    try:
        for kill_number in range(plan.kills):
            commit_pause = plan.commit_pause if kill_number % 2 == 0 else None
            pause_file = work / f"commit-pause-{kill_number}"
            env = None
            if commit_pause is not None:
                pause_file.write_text("armed only once this file is gone")  # the pause point passes it by
                env = {PAUSE_AT_ENV: commit_pause, PAUSE_FILE_ENV: str(pause_file)}
            driver = _start(record, plan.command(plan.trigger), work, say, env)
            pacer.mark(pacer.started)
            if not driver.wait_for_batches(1, DRIVER_START_TIMEOUT_S):
                raise driver.failure(f"driver {len(record.drivers)} did not finish a micro-batch")
            if driver.metrics_url:
                say(f"  driver {len(record.drivers)}'s pipeline metrics at {driver.metrics_url} (until it stops)")
            pacer.mark(pacer.ready)
            written = pacer.body_written[kill_number].wait(DRIVER_START_TIMEOUT_S)
            if seeder.error:
                raise DemoError(seeder.error)
            if not driver.running:
                raise driver.failure(f"driver {len(record.drivers)} exited")
            if not written:
                raise DemoError(f"the seeder did not write driver {len(record.drivers)}'s input in "
                                f"{DRIVER_START_TIMEOUT_S:.0f} s")
            done = _batches_done(driver)
            if commit_pause is not None:
                pause_file.unlink()  # the sink's next commit pauses there, and creates the file again
                pacer.mark(pacer.armed)
                batch = _wait_for_commit_pause(driver, pause_file, plan.checkpoint, commit_pause)
                driver.kill()
                if (plan.checkpoint / "commits" / str(batch)).exists():
                    raise DemoError(f"driver {len(record.drivers)} was killed after Spark's commit log of "
                                    f"micro-batch {batch}, not before it")
                record.commit_kills.append(batch)
                say(f"  driver {len(record.drivers)} killed with SIGKILL after the sink committed micro-batch "
                    f"{batch}, before Spark's commit log ({done} before it)")
                continue
            # Once the next micro-batch is planned (its offset log entry written), part way
            # into it, when its tasks are likely writing.
            planned = _newest_planned(plan.checkpoint) + 1
            pacer.mark(pacer.armed)
            if not _wait_for_file(plan.checkpoint / "offsets" / str(planned), driver, NEXT_BATCH_TIMEOUT_S):
                if seeder.error:
                    raise DemoError(seeder.error)
                if not driver.running:
                    raise driver.failure(f"driver {len(record.drivers)} exited")
            # The micro-batches with records (not the few with one table update) say how long one takes.
            recent = [b["duration_ms"] for b in driver.batches[1:] if b["records"] > 1][-5:] or [1000]
            time.sleep(rng.uniform(0.2, 0.6) * statistics.median(recent) / 1000)
            driver.kill()
            newest = _newest_planned(plan.checkpoint)
            if (plan.checkpoint / "commits" / str(newest)).exists():  # it ended before the kill
                record.kills.append(f"after micro-batch {newest}")
                say(f"  driver {len(record.drivers)} killed with SIGKILL after micro-batch {newest} ({done})")
            else:
                record.kills.append(f"in micro-batch {newest}")
                say(f"  driver {len(record.drivers)} killed with SIGKILL in the middle of micro-batch {newest} "
                    f"({done} before it)")
        pacer.release_all()
        seeding.join()
        if seeder.error:
            raise DemoError(seeder.error)
        driver = _start(record, plan.command("available-now"), work, say, None,
                        "runs until everything committed is processed")
        code = driver.wait(DRIVER_RUN_TIMEOUT_S)
        if code != 0:
            reason = "timed out" if code is None else f"exited with {code}"
            raise driver.failure(f"driver {len(record.drivers)} {reason}")
        say(f"  driver {len(record.drivers)} finished ({_batches_done(driver)})")
    finally:
        pacer.release_all()
        for driver in record.drivers:
            if driver.running:
                driver.kill()
    record.wall_s = time.monotonic() - began
    return record


def _start(record: RunRecord, command: list[str], work: Path, say: Callable[[str], None],
           env: dict[str, str] | None, until: str = "") -> Driver:
    number = len(record.drivers) + 1
    driver = Driver(command, work / f"driver-{number}.log", env).start()
    assert driver.process is not None
    how = "restarted from the checkpoint" if record.drivers else "started"
    record.restarts += 1 if record.drivers else 0
    record.drivers.append(driver)
    say(f"  driver {number} {how} (pid {driver.process.pid}){', ' + until if until else ''}")
    return driver


def _batches_done(driver: Driver) -> str:
    """The driver's micro-batches so far; records as Spark counts them (rows read from the source,
    once for each time the query reads it)."""
    count = len(driver.batches)
    return f"{sum(b['records'] for b in driver.batches):,} records in {count} micro-batch{'es' if count != 1 else ''}"


def _wait_for_commit_pause(driver: Driver, pause_file: Path, checkpoint: Path, point: str) -> int:
    """The micro-batch the driver is paused in, after the sink's commit: the newest entry of
    Spark's offset log (planned; its commit log entry is not written yet)."""
    if not _wait_for_file(pause_file, driver, COMMIT_PAUSE_TIMEOUT_S):
        raise driver.failure(f"the driver did not reach the sink's pause point {point} "
                             f"in {COMMIT_PAUSE_TIMEOUT_S:.0f} s")
    return _newest_planned(checkpoint)


def _wait_for_file(path: Path, driver: Driver, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline or not driver.running:
            return False
        time.sleep(0.02)
    return True


def _newest_planned(checkpoint: Path) -> int:
    """The newest micro-batch in Spark's offset log (-1: none yet)."""
    offsets = checkpoint / "offsets"
    return max((int(entry.name) for entry in offsets.iterdir() if entry.name.isdigit()), default=-1) \
        if offsets.is_dir() else -1

