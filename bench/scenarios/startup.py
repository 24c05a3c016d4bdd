"""Scenario 7: how fast a broker is ready.

7.  start-up on an empty log dir: `oncelog broker start` from process start until the
    "listening on" line (interpreter start and imports included), and the embedded
    broker's `EmbeddedBroker(dir).start()` in a fresh interpreter (import time reported
    separately). Target from the issue: under 0.5 s.
    Imports are most of the process start. kio registers hypothesis strategies for its
    types whenever hypothesis is importable (0.1-0.3 s, hypothesis is a test
    dependency); since 2026-11-27 every `oncelog` command imports kio with hypothesis
    hidden (oncelog.kio_import). "process start, no test deps" runs the same command
    with hypothesis hidden from the whole process, as a production install has it: the
    two should now match.
7r. recovery after kill -9 with ~1 GB of log (`--full` only, heavy): fill a topic,
    SIGKILL the broker, time the restart until it listens (recovery rescans the
    segments past the recovery point: here all of them, nothing was flushed), then
    time a restart after a clean shutdown for comparison. The killed log dir is copied
    once and restored before each run, so every run recovers the same crash. The files
    are in the page cache (a process crash, not a machine crash).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers import ONCELOG
from bench.scenarios.base import Metric, Scenario, ScenarioFailed, Settings, loadgen
from oncelog.local.process import BrokerProcess

TOPIC = "bench-recovery"


class StartupScenario(Scenario):
    id = "7"
    title = "broker start-up (empty log dir)"
    peers = (ONCELOG,)
    metrics = (
        Metric("process_start_s", "process start s", higher_is_better=False, target=("<=", 0.5)),
        Metric("process_start_no_test_deps_s", "proc start no test deps s", higher_is_better=False,
               target=("<=", 0.5)),
        Metric("embedded_start_s", "embedded start s", higher_is_better=False, target=("<=", 0.5)),
        Metric("embedded_import_s", "embedded import s", higher_is_better=False),
    )

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        root = Path(tempfile.mkdtemp(prefix="startup-", dir=settings.work_dir))
        try:
            broker = BrokerProcess(root / "process")
            started = time.perf_counter()
            broker.start()
            process_start = time.perf_counter() - started
            # SIGKILL, not SIGTERM: `broker start` prints its listening line before it
            # installs its signal handlers, and a SIGTERM in between can be lost.
            broker.kill()
            without_test_deps = _start_without_test_deps(root / "production")
            embedded = loadgen("embedded-start", "--data-dir", root / "embedded")
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return {
            "process_start_s": process_start,
            "process_start_no_test_deps_s": without_test_deps,
            "embedded_start_s": embedded["start_s"],
            "embedded_import_s": embedded["import_s"],
        }


# `oncelog broker start` as a production install runs it: no hypothesis to import.
_WITHOUT_TEST_DEPS = "import sys; sys.modules['hypothesis'] = None; from oncelog.cli import main; sys.exit(main())"


def _start_without_test_deps(data_dir: Path) -> float:
    """Seconds from process start to the "listening on" line, hypothesis hidden."""
    command = [sys.executable, "-c", _WITHOUT_TEST_DEPS, "broker", "start",
               "--override", f"log.dirs={data_dir}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert process.stdout is not None  # a PIPE
    try:
        for line in process.stdout:
            if b"listening on" in line:
                return time.perf_counter() - started
        raise ScenarioFailed(f"broker exited with {process.wait()} before listening")
    finally:
        process.kill()
        process.wait()


def _stop_cleanly(broker: BrokerProcess) -> None:
    """SIGTERM, sent again if the first one came before the broker's signal handlers."""
    process = broker.process
    assert process is not None  # started
    for wait_s in (5, 120):
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(wait_s)
            broker.process = None
            return
        except subprocess.TimeoutExpired:
            continue
    raise ScenarioFailed("the broker did not stop after SIGTERM")


class RecoveryScenario(Scenario):
    id = "7r"
    title = "restart after kill -9 with ~1 GB of log (--full)"
    peers = (ONCELOG,)
    full_only = True
    metrics = (
        Metric("recovery_start_s", "after kill -9 s", higher_is_better=False),
        Metric("clean_start_s", "after clean stop s", higher_is_better=False),
        Metric("log_gb", "log GB"),
    )

    def run_all(self, peer: str, settings: Settings, runs: int) -> list[dict[str, float]]:
        root = Path(tempfile.mkdtemp(prefix="recovery-", dir=settings.work_dir))
        data_dir = root / "data"
        crashed = root / "crashed"  # the log dir as kill -9 left it, restored before each run
        broker = BrokerProcess(data_dir)
        try:
            broker.start()
            loadgen("create-topic", "--bootstrap", broker.bootstrap_servers, "--topic", TOPIC,
                    "--partitions", settings.partitions)
            loadgen("produce", "--bootstrap", broker.bootstrap_servers, "--topic", TOPIC,
                    "--messages", settings.recovery_bytes // settings.value_size, "--size", settings.value_size,
                    timeout=900)
            broker.kill()
            log_gb = sum(p.stat().st_size for p in data_dir.rglob("*.log")) / 1e9
            # A recovered (or cleanly stopped) broker checkpoints its recovery point, after
            # which a second kill -9 has nothing to rescan: every run starts from a copy of
            # the crashed state instead.
            shutil.copytree(data_dir, crashed)
            results = []
            for run in range(runs):
                if run:
                    shutil.rmtree(data_dir)
                    shutil.copytree(crashed, data_dir)
                started = time.perf_counter()
                broker.start(timeout=600)
                recovery = time.perf_counter() - started
                _stop_cleanly(broker)
                started = time.perf_counter()
                broker.start(timeout=600)
                clean = time.perf_counter() - started
                broker.kill()
                results.append({"recovery_start_s": recovery, "clean_start_s": clean, "log_gb": log_gb})
            return results
        finally:
            broker.kill()
            shutil.rmtree(root, ignore_errors=True)


STARTUP = StartupScenario()
RECOVERY = RecoveryScenario()
