"""A Spark standalone cluster on this machine, for tests that need what `local[*]` cannot
do: executors in their own JVMs on distinct hosts, so that speculative execution runs
(Spark never starts a speculative copy in local mode, nor on a host where the task
already runs).

Each worker binds its own loopback address (127.0.0.2, 127.0.0.3, ...), which Spark
takes for a separate host. The master and workers are the `spark-class` launchers of the
installed pyspark (from oncelog.local.spark_home), run with the Java 17+ that
`java_home()` finds; executors run this Python interpreter, so they import the same
oncelog. Nothing is downloaded.

    with StandaloneSpark(workers=2) as cluster:
        build_session(master=cluster.master_url, conf={"spark.speculation": "true"})
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Self

from oncelog.local.java import java_home
from oncelog.local.process import free_port
from oncelog.local.spark_home import spark_home

MASTER_HOST = "127.0.0.1"


class StandaloneSpark:
    """A master and `workers` workers of `cores_per_worker` cores each, started on enter
    and killed (process groups) on exit."""

    def __init__(self, workers: int = 2, cores_per_worker: int = 1, memory: str = "1g",
                 work_dir: str | os.PathLike[str] | None = None, start_timeout_s: float = 90.0) -> None:
        if not 1 <= workers <= 250:
            raise ValueError(f"workers must be 1..250, not {workers}")
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="oncelog-spark-"))
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.master_url = f"spark://{MASTER_HOST}:{self.master_port}"
        self._processes: list[subprocess.Popen] = []

    def worker_host(self, number: int) -> str:
        return f"127.0.0.{number + 2}"

    def _environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "JAVA_HOME": str(java_home()),
            "SPARK_HOME": spark_home(),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOG_DIR": str(self.work_dir / "logs"),
        }

    def _launch(self, name: str, arguments: list[str], environment: dict[str, str]) -> None:
        with open(self.work_dir / f"{name}.log", "wb") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [str(Path(spark_home()) / "bin" / "spark-class"), *arguments], stdout=log, stderr=log,
                stdin=subprocess.DEVNULL, env=environment, start_new_session=True,
            )
        self._processes.append(process)

    def start(self) -> Self:
        environment = self._environment()
        self._launch("master", [
            "org.apache.spark.deploy.master.Master", "--host", MASTER_HOST,
            "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
        ], environment)
        for number in range(self.workers):
            host = self.worker_host(number)
            self._launch(f"worker-{number}", [
                "org.apache.spark.deploy.worker.Worker", "--host", host,
                "--cores", str(self.cores_per_worker), "--memory", self.memory,
                "--webui-port", str(free_port(host)), "--work-dir", str(self.work_dir / f"work-{number}"),
                self.master_url,
            ], {**environment, "SPARK_LOCAL_IP": host})
        self._wait_for_workers()
        return self

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (its UI's JSON view)."""
        with urllib.request.urlopen(f"http://{MASTER_HOST}:{self.master_ui_port}/json/", timeout=5) as answer:
            state = json.load(answer)
        return sum(1 for worker in state.get("workers", ()) if worker.get("state") == "ALIVE")

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            for process in self._processes:
                if process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"a Spark standalone process exited early; see the logs in {self.work_dir}")
            try:
                if self.alive_workers() == self.workers:
                    return
            except OSError:
                pass  # the master's UI is not up yet
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.workers} Spark workers did not register within {self.start_timeout_s:.0f}s; "
                    f"see the logs in {self.work_dir}"
                )
            time.sleep(0.3)

    def stop(self) -> None:
        for process in reversed(self._processes):
            try:
                os.killpg(process.pid, signal.SIGKILL)  # executors are in the worker's group
            except ProcessLookupError:
                pass
        for process in self._processes:
            process.wait(30)
        self._processes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
