"""The Java client's scenarios (tests/java/TxnScenario.java): compiled once per test
module with the machine's javac, run in one JVM against a broker, their "RESULT" lines
parsed. The `java_tools` fixture (tests/conftest.py) skips, naming what is missing,
without a JDK 17+ or the kafka-clients jar."""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "java" / "TxnScenario.java"
SCENARIOS = ("commit", "abort", "lso", "fence_commit", "fence_send")
TOPICS = {"commit-a": 3, "commit-b": 3, "abort-a": 3, "abort-b": 3, "lso": 1, "fence-commit": 1, "fence-send": 1}
JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]  # short runs on 2 shared cores


class JavaRun:
    """The parsed output of one TxnScenario run: results[scenario][key] -> value."""

    def __init__(self, completed: subprocess.CompletedProcess) -> None:
        self.stdout, self.stderr = completed.stdout, completed.stderr
        self.returncode = completed.returncode
        self.results: dict[str, dict[str, str]] = defaultdict(dict)
        for line in completed.stdout.splitlines():
            if line.startswith("RESULT "):
                _, scenario, key, value = [*line.split(" ", 3), ""][:4]
                self.results[scenario][key] = value

    def scenario(self, name: str) -> dict[str, str]:
        """The scenario's results; fails with the Java side's error if it did not finish."""
        found = self.results.get(name, {})
        if found.get("done") != "ok":
            error = found.get("error", f"no result (JVM exit status {self.returncode})")
            pytest.fail(f"Java scenario {name!r} failed: {error}\n--- stderr (tail) ---\n{self.stderr[-6000:]}")
        return found


class TxnScenario:
    """TxnScenario.java compiled into `classes` with the tools of the `java_tools` fixture."""

    def __init__(self, java_tools, classes: Path) -> None:
        javac, self._java, classpath = java_tools
        jars = os.pathsep.join(str(jar) for jar in classpath)
        compiled = subprocess.run([str(javac), "-d", str(classes), "-cp", jars, str(SOURCE)], capture_output=True,
                                  text=True, timeout=180, check=False)
        assert compiled.returncode == 0, f"javac failed:\n{compiled.stderr}"
        self._classpath = os.pathsep.join([jars, str(classes)])

    def run(self, bootstrap: str, scenarios: Sequence[str], timeout: float = 240) -> JavaRun:
        return JavaRun(subprocess.run(
            [str(self._java), *JVM_OPTIONS, "-cp", self._classpath, "TxnScenario", bootstrap, *scenarios],
            capture_output=True, text=True, timeout=timeout, check=False,
        ))


def partition_names(*topics: str, partitions: int = 3) -> list[str]:
    return [f"{topic}-{p}" for topic in topics for p in range(partitions)]


def assert_zombie_transaction_aborted(results: dict[str, str], tp: str) -> None:
    # zombie-0/1 at 0-1, ABORT at 2 (the fence), successor at 3, COMMIT at 4.
    assert results[f"end_offset_read_committed_{tp}"] == "5"
    assert results[f"read_committed_{tp}"] == "successor"
    assert results[f"read_uncommitted_{tp}"] == "zombie-0,zombie-1,successor"


class JavaProgram:
    """Another source of tests/java (its class named as the file) compiled into `classes`
    with the tools of the `java_tools` fixture; run() gives its "RESULT" lines as a JavaRun."""

    def __init__(self, java_tools, classes: Path, source: Path) -> None:
        javac, self._java, classpath = java_tools
        jars = os.pathsep.join(str(jar) for jar in classpath)
        compiled = subprocess.run([str(javac), "-d", str(classes), "-cp", jars, str(source)], capture_output=True,
                                  text=True, timeout=180, check=False)
        assert compiled.returncode == 0, f"javac failed:\n{compiled.stderr}"
        self._classpath = os.pathsep.join([jars, str(classes)])
        self._main = source.stem

    def command(self, *jvm_options: str) -> list[str]:
        """The command that runs the program (its arguments go after it)."""
        return [str(self._java), *JVM_OPTIONS, *jvm_options, "-cp", self._classpath, self._main]

    def run(self, *args: str, timeout: float = 240) -> JavaRun:
        return JavaRun(subprocess.run([*self.command(), *args], capture_output=True, text=True, timeout=timeout,
                                      check=False))
