"""One etcd member as a child process: the controller quorum's consensus store.

    member = EtcdMember("n1", data_dir, "http://127.0.0.1:2379", "http://127.0.0.1:2380",
                        "n1=http://127.0.0.1:2380,n2=...,n3=...")
    member.start()     # returns at once; ask the client (etcd.py) when it answers
    member.kill()      # SIGKILL: what a crash does
    member.start()     # same data dir: rejoins as an existing member and catches up

The binary is Debian's `etcd-server` 3.4, extracted (not installed) into `.venv/etcd/` by
scripts/ensure-etcd.sh; `find_etcd()` says where it is looked for.

Disk: etcd 3.4 preallocates its WAL in 64 MB segments and keeps the next one ready, so a
fresh member's data dir takes about 123 MB (`du`). 3.4 has no flag for the segment size
(and no `--unsafe-no-fsync`, which came with 3.5); `--max-wals` only bounds how many old
segments are kept. The bbolt file stays small: compaction by revision keeps it near the
live data, and `--quota-backend-bytes` caps it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from oncelog.cluster.etcd import WATCH_PROGRESS_INTERVAL_S

ETCD_ENV = "ONCELOG_ETCD"
INSTALL_HINT = "run `make setup` (or scripts/ensure-etcd.sh), or set ONCELOG_ETCD to an etcd 3.4+ binary"
_PR_SET_PDEATHSIG = 1


def find_etcd() -> str:
    """The etcd binary: $ONCELOG_ETCD, then the one ensure-etcd.sh extracts into the venv
    (`<sys.prefix>/etcd/usr/bin/etcd`), then `etcd` on PATH."""
    configured = os.environ.get(ETCD_ENV)
    if configured:
        if os.access(configured, os.X_OK) and Path(configured).is_file():
            return configured
        raise FileNotFoundError(f"{ETCD_ENV}={configured} is not an executable file; {INSTALL_HINT}")
    extracted = Path(sys.prefix) / "etcd/usr/bin/etcd"  # sys.prefix is the venv
    if os.access(extracted, os.X_OK):
        return str(extracted)
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    raise FileNotFoundError(f"no etcd binary found; {INSTALL_HINT}")


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends SIGKILL to the child when the thread
    that started it exits, so a kill -9 of the test run or broker leaves no etcd behind.
    (The signal follows the starting *thread*: start members from a long-lived thread.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class EtcdMember:
    def __init__(self, name: str, data_dir: str | Path, client_url: str, peer_url: str,
                 initial_cluster: str, *, election_timeout_ms: int = 1000,
                 heartbeat_interval_ms: int = 100, log_path: str | Path | None = None,
                 cluster_token: str = "oncelog", quota_backend_bytes: int = 256 * 1024 * 1024) -> None:
        self.name = name
        self.data_dir = Path(data_dir)
        self.client_url = client_url
        self.peer_url = peer_url
        self.initial_cluster = initial_cluster
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.log_path = Path(log_path) if log_path is not None else None
        self.cluster_token = cluster_token
        self.quota_backend_bytes = quota_backend_bytes
        self.process: subprocess.Popen | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        # A data dir that already holds member/ belongs to a member that was part of the
        # cluster: it restarts from its WAL and ignores the bootstrap flags.
        state = "existing" if (self.data_dir / "member").is_dir() else "new"
        return [
            find_etcd(),
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", state,
            "--initial-cluster-token", self.cluster_token,
            "--election-timeout", str(self.election_timeout_ms),
            "--heartbeat-interval", str(self.heartbeat_interval_ms),
            # A restarted member must not disturb a healthy leader with a higher term.
            "--pre-vote",
            # Metadata writes are txns over many keys (a topic's partitions).
            "--max-txn-ops", "10000",
            # Quiet watch streams still hear from the member, so a silent one is a cut one.
            "--experimental-watch-progress-notify-interval", f"{WATCH_PROGRESS_INTERVAL_S:g}s",
            "--auto-compaction-mode", "revision",
            "--auto-compaction-retention", "1000",
            "--quota-backend-bytes", str(self.quota_backend_bytes),
            "--max-wals", "2",
            "--max-snapshots", "2",
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--log-level", "warn",
        ]

    def start(self) -> EtcdMember:
        """Starts the process and returns; it serves once it has joined a quorum."""
        if self.alive:
            raise RuntimeError(f"etcd member {self.name} is already running (pid {self.pid})")
        command = self.command()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)  # etcd warns about (and 3.5 refuses) wider permissions
        output: IO[bytes] | int = subprocess.DEVNULL
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            output = open(self.log_path, "ab")  # noqa: SIM115 (closed below, once the child has it)
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                preexec_fn=_die_with_parent, close_fds=True,  # noqa: PLW1509 (only a prctl call)
            )
        finally:
            if not isinstance(output, int):  # the log file, not DEVNULL
                output.close()
        return self

    def stop(self, grace_s: float = 3.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace_s`: a member that lost its quorum can take
        longer than 5 s to honour SIGTERM."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode
        self.process = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash; the member keeps only what its WAL fsynced."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None

    def log_tail(self, chars: int = 4000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]
