"""What a scenario is, and the helpers scenarios share.

A scenario is a small module-level object: an id ("1", "7r"), a title, the metrics it
reports, the peers it runs against, and `run_once(peer, settings) -> {metric: value}`.
`unavailable_reason()` returns why it cannot run yet (a feature the broker lacks), and
the harness then lists it as not available instead of measuring anything.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import profile
from bench.peers import (
    BASELINE,
    ONCELOG,
    ONCELOG_3,
    TANSU,
    OncelogClusterTarget,
    OncelogTarget,
    TansuTarget,
)

LOADGEN = Path(__file__).resolve().parent.parent / "loadgen.py"

Target = OncelogTarget | TansuTarget | OncelogClusterTarget  # a broker under test


class ScenarioFailed(RuntimeError):
    """One run went wrong (the load generator or a broker failed); the harness records it."""


@dataclass(frozen=True)
class Metric:
    key: str                 # the key in run results and in latest.json
    label: str               # the unit as printed
    higher_is_better: bool = True
    # A target from the issue, as (comparison, value), e.g. (">=", 250_000).
    target: tuple[str, float] | None = None

    def meets(self, value: float) -> bool | None:
        if self.target is None:
            return None
        comparison, bound = self.target
        return value >= bound if comparison == ">=" else value <= bound


@dataclass
class Settings:
    work_dir: Path                     # temp dir: broker logs, peer logs
    results_dir: Path                  # bench/results: JSON and profiles
    runs: int
    messages: int                      # messages per produce/consume run
    value_size: int = 1024
    partitions: int = 1
    quick: bool = False
    full: bool = False                 # include heavy scenarios (7r: recovery of ~1 GB)
    recovery_bytes: int = 1 << 30
    with_peers: bool = True            # run tansu where the scenario compares with it
    profile: bool = False              # py-spy the oncelog broker during each load
    baseline_src: Path | None = None   # another tree's src/: also run it as peer "baseline"
    profiles: list[dict] = field(default_factory=list)  # written by `load_phase`

    @property
    def produced_mb(self) -> float:
        return self.messages * self.value_size / 1e6


class Scenario:
    id: str = ""
    title: str = ""
    metrics: tuple[Metric, ...] = ()
    peers: tuple[str, ...] = (ONCELOG,)
    # Compare MB/s with the loopback (and, for writes, the disk) limit.
    compare_with_limits: tuple[str, ...] = ()
    # Runs only with --full (heavy).
    full_only: bool = False
    # Starts its brokers through `running()`, so --baseline-src can add a baseline peer.
    supports_baseline: bool = False

    def unavailable_reason(self, settings: Settings) -> str | None:
        """Why this scenario cannot run now, or None."""
        return None

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        raise NotImplementedError

    def run_all(self, peer: str, settings: Settings, runs: int) -> list[dict[str, float]]:
        """All runs for one peer; heavy scenarios override this to share a setup."""
        return [self.run_once(peer, settings) for _ in range(runs)]


# ---- helpers --------------------------------------------------------------------------


def loadgen(mode: str, *args: object, timeout: float = 300) -> dict:
    """Run bench/loadgen.py in its own process; its JSON result, or ScenarioFailed."""
    command = [sys.executable, str(LOADGEN), mode, *(str(a) for a in args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"loadgen {mode} timed out after {timeout:.0f} s") from None
    last_line = done.stdout.strip().splitlines()[-1:] or ["{}"]
    try:
        result = json.loads(last_line[0])
    except json.JSONDecodeError:
        result = {}
    if done.returncode != 0 or "error" in result or not result:
        detail = result.get("error") or done.stderr.strip()[-1500:] or f"exit code {done.returncode}"
        raise ScenarioFailed(f"loadgen {mode}: {detail}")
    return result


@contextlib.contextmanager
def running(peer: str, settings: Settings, config: dict[str, str] | None = None) -> Iterator[tuple[str, Target]]:
    """A fresh broker of `peer` for one run: (bootstrap address, target)."""
    target: Target
    if peer == ONCELOG:
        target = OncelogTarget(settings.work_dir, config)
    elif peer == BASELINE:
        target = OncelogTarget(settings.work_dir, config, source_dir=settings.baseline_src)
    elif peer == TANSU:
        target = TansuTarget(settings.work_dir)
    elif peer == ONCELOG_3:
        target = OncelogClusterTarget(settings.work_dir, config)
    else:
        raise ValueError(f"unknown peer {peer}")
    with target as bootstrap:
        yield bootstrap, target


@contextlib.contextmanager
def load_phase(target, settings: Settings, label: str, produced_mb: float) -> Iterator[dict[str, float]]:
    """Around the timed load: measures the broker's CPU, and profiles oncelog (and the
    baseline) with --profile; on oncelog's cluster, each of its brokers apart.

    Yields a dict that gets `broker_cpu_s` once the block ends: the sum over the
    target's broker processes (`pids`, three for the cluster), and for the cluster also
    `busiest_broker_cpu_s` (the most any one broker used: with one partition, its leader) and
    `quorum_cpu_s`, its etcd members'.
    """
    measured: dict[str, float] = {}
    pid = target.pid
    broker_pids = getattr(target, "pids", [pid])
    quorum_pids = getattr(target, "quorum_pids", [])
    each_before = [profile.process_cpu_seconds(broker_pid) for broker_pid in broker_pids]
    quorum_before = _cpu_seconds(quorum_pids)
    profilers: dict[str, profile.BrokerProfiler] = {}
    if settings.profile and target.name in (ONCELOG, BASELINE, ONCELOG_3):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        label = f"{label}-{target.name}"
        sampled = {label: pid} if pid is not None else {
            f"{label}-broker{position}": broker_pid for position, broker_pid in enumerate(broker_pids, 1)}
        for name, sampled_pid in sampled.items():
            if sampled_pid is not None:
                output = settings.results_dir / "profiles" / f"{name}-{stamp}.collapsed"
                profilers[name] = profile.BrokerProfiler(sampled_pid, output)
    with contextlib.ExitStack() as sampling:
        for profiler in profilers.values():
            sampling.enter_context(profiler)
        yield measured
    each_after = [profile.process_cpu_seconds(broker_pid) for broker_pid in broker_pids]
    used = [a - b for a, b in zip(each_after, each_before, strict=True) if a is not None and b is not None]
    if used and len(used) == len(broker_pids):
        measured["broker_cpu_s"] = sum(used)
        if len(used) > 1:
            measured["busiest_broker_cpu_s"] = max(used)
    quorum_after = _cpu_seconds(quorum_pids)
    if quorum_before is not None and quorum_after is not None:
        measured["quorum_cpu_s"] = quorum_after - quorum_before
    for name, profiler in profilers.items():
        report = profiler.output.with_suffix(".txt")
        report.write_text(profile.summarize(profiler.output, produced_mb))
        settings.profiles.append({"label": name, "collapsed": str(profiler.output), "summary": str(report)})


def _cpu_seconds(pids: list[int | None]) -> float | None:
    """CPU seconds of all `pids` together; None when there are none or one is unreadable."""
    values = [profile.process_cpu_seconds(pid) for pid in pids]
    known = [value for value in values if value is not None]
    return sum(known) if values and len(known) == len(values) else None


def throughput_metrics(load: dict, phase: dict) -> dict[str, float]:
    """The common figures of a produce or consume run."""
    mb = load["bytes"] / 1e6
    figures = {"msg_per_s": load["msg_per_s"], "mb_per_s": load["mb_per_s"]}
    if "broker_cpu_s" in phase and mb > 0:
        figures["broker_cpu_ms_per_mb"] = phase["broker_cpu_s"] * 1000 / mb
    if "busiest_broker_cpu_s" in phase and mb > 0:
        figures["busiest_broker_cpu_ms_per_mb"] = phase["busiest_broker_cpu_s"] * 1000 / mb
    if "quorum_cpu_s" in phase and mb > 0:
        figures["quorum_cpu_ms_per_mb"] = phase["quorum_cpu_s"] * 1000 / mb
    if "client_cpu_s" in load and mb > 0:
        figures["client_cpu_ms_per_mb"] = load["client_cpu_s"] * 1000 / mb
    return figures


THROUGHPUT_EXTRAS = (
    Metric("mb_per_s", "MB/s"),
    Metric("broker_cpu_ms_per_mb", "broker CPU ms/MB", higher_is_better=False),
    Metric("client_cpu_ms_per_mb", "client CPU ms/MB", higher_is_better=False),
)


def transactional_apis_missing() -> str | None:
    """None when the broker implements the transactional produce APIs, else what is missing.

    Reads the handler registry ApiVersions is built from, so it says exactly what a
    client would be told.
    """
    from oncelog.broker.handlers import handler_table

    needed = {24: "AddPartitionsToTxn", 26: "EndTxn"}  # what a transactional producer sends
    handlers = handler_table()
    missing = [f"{name} ({key})" for key, name in needed.items() if key not in handlers]
    if missing:
        return "needs the transaction coordinator; the broker does not implement " + ", ".join(missing)
    return None
