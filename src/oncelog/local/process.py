"""A broker in its own process, for tests that stop, restart or kill -9 it.

    with BrokerProcess(data_dir, {"log.flush.interval.messages": "1"}) as broker:
        ... broker.bootstrap_servers ...
        broker.kill()          # SIGKILL, no flush, no checkpoint
        broker.start()         # same log.dirs, same port

The broker keeps its port across restarts so clients reconnect to the same address.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

from oncelog.local.files import properties_text, write_private


class BrokerStartError(RuntimeError):
    """A broker process that exited, or did not print its address in time. The message
    ends with the tail of its log; `reason` is one line for a command-line error."""

    def __init__(self, log_path: Path, exit_code: int | None, timeout: float, node_id: str | None = None) -> None:
        tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
        super().__init__(f"broker did not start; its log:\n{tail}")
        self.log_path = log_path
        self.node_id = node_id
        lines = [line for line in tail.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "(empty)"
        if exit_code is None:
            self.reason = f"not listening after {timeout:.0f}s; last line of {log_path}: {last}"
        else:
            self.reason = f"exited with status {exit_code}; last line of {log_path}: {last}"


def child_pids(pid: int) -> list[int]:
    """The children of process `pid` (of all its threads), from /proc."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SECRET_KEY = re.compile(r"password|jaas|secret", re.IGNORECASE)  # keys kept off the command line
_LOWEST_PICKED = 10_000
_pick = random.SystemRandom()  # never the seeded global generator: two processes must not pick alike
_handed_out: set[int] = set()  # every port picked by this process: never picked twice


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, for a broker or quorum member about to bind it. Picked
    below the kernel's ephemeral range: the kernel gives ports of that range to outgoing
    connections, and one took a test cluster's port between the pick and the broker's
    bind (the node exited with EADDRINUSE). A port is never picked twice by one process:
    a cluster picks its 9 ports before any node binds one, so two of them could fall on
    the same one (a CI run's node 1 found its port taken by the time it bound it). Where
    that range leaves too little room below it, any free port (port 0)."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    candidates = [_pick.randrange(_LOWEST_PICKED, low) for _ in range(50)] if low > _LOWEST_PICKED + 1000 else []
    for port in candidates:
        if port in _handed_out:
            continue  # free now, but given to a node that has not bound it yet (a cluster picks 9 at once)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue  # in use
            _handed_out.add(port)
            return port
    with socket.socket() as probe:  # the kernel's choice (an OSError here is the host's)
        probe.bind((host, 0))
        return probe.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: str | Path, config: Mapping[str, str] | None = None, *, port: int | None = None,
                 host: str = "127.0.0.1", wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        """`wrap` turns the broker's command into the one to run (e.g. inside a network
        namespace, `NetworkLab.command`); `host` is the address it listens on."""
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        self.wrap = wrap
        self.config = {
            "listeners": f"PLAINTEXT://{host}:{self.port}",
            "log.dirs": str(self.data_dir),
            **dict(config or {}),
        }
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.broker.log"
        self._listening = threading.Event()
        self._handshake_done = threading.Event()

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Self:
        """Start the broker and return once it prints its address line; BrokerStartError
        (the process killed) if it exits first or `timeout` passes."""
        self.launch()
        if not self.wait_listening(timeout):
            raise self.start_failed(timeout)
        return self

    def launch(self) -> None:
        """Start the process and return at once; `listening` turns true when the broker
        prints its address line, `exited_before_listening` when the process ends first."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"the broker logging to {self.log_path} is already running (pid {self.process.pid})")
        command = [sys.executable, "-m", "oncelog", "broker", "start"]
        # Passwords and JAAS configs go in a file only its owner may read, not on the
        # command line, which every local user can read in /proc/<pid>/cmdline.
        secret = {key: value for key, value in self.config.items() if _SECRET_KEY.search(key)}
        if secret:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            secrets_path = self.data_dir.parent / f"{self.data_dir.name}.secrets.properties"
            write_private(secrets_path, properties_text(secret).encode())
            command += ["--config", str(secrets_path)]
        for key, value in self.config.items():
            if key not in secret:
                command += ["--override", f"{key}={value}"]
        if self.wrap is not None:
            command = self.wrap(command)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:  # the child keeps its own descriptor
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        listening = self._listening = threading.Event()
        done = self._handshake_done = threading.Event()
        self.process = process

        def read_handshake() -> None:
            assert process.stdout is not None
            for raw in process.stdout:
                if "listening on" in raw.decode(errors="replace"):
                    listening.set()
                    done.set()
            done.set()  # end of output: the process exited (or closed its stdout) first

        threading.Thread(target=read_handshake, daemon=True).start()

    @property
    def listening(self) -> bool:
        """True once the process printed its address line (and has not been killed since)."""
        return self.process is not None and self._listening.is_set()

    @property
    def exited_before_listening(self) -> bool:
        """True when the launched process ended (or closed its output) without listening."""
        return self.process is not None and self._handshake_done.is_set() and not self._listening.is_set()

    def wait_listening(self, timeout: float) -> bool:
        """Wait until the broker listens (True) or exits or `timeout` passes (False)."""
        self._handshake_done.wait(timeout)
        return self.listening

    def start_failed(self, timeout: float) -> BrokerStartError:
        """Kill the process (if it still runs) and say why it did not start: its exit
        status and log tail, or that it was not listening after `timeout`."""
        exit_code = None
        if self.process is not None:
            if self._handshake_done.is_set():  # its output ended: it is exiting, reap it
                try:
                    exit_code = self.process.wait(5.0)
                except subprocess.TimeoutExpired:
                    pass
            else:
                exit_code = self.process.poll()
        self.kill()
        return BrokerStartError(self.log_path, exit_code, timeout, self.config.get("node.id"))

    @property
    def pid(self) -> int:
        """The process id of the running broker."""
        if self.process is None:
            raise RuntimeError(f"the broker logging to {self.log_path} is not running")
        return self.process.pid

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: a clean shutdown (flush, checkpoints)."""
        self.terminate()
        return self.wait_stopped(timeout)

    def terminate(self) -> None:
        """Send SIGTERM and return at once; `wait_stopped` waits for the clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> int:
        """The exit code once the process has exited; subprocess.TimeoutExpired after `timeout`."""
        if self.process is None:
            return 0
        code = self.process.wait(timeout)
        self.process = None
        return code

    def kill(self) -> None:
        """SIGKILL: nothing flushed beyond what the flush policy already wrote."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        if self.process is not None:
            self.kill()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")
