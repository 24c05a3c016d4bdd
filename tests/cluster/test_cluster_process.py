"""`ClusterProcess.start`, the harness every cluster test stands on: a node that cannot
bind its port stops the start at once and leaves no process behind; and the ports it
picks lie below the kernel's ephemeral range, where no outgoing connection can take one
between the pick and the bind (a node of a test cluster once exited with EADDRINUSE)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.local.cluster import ClusterProcess, node_configs
from oncelog.local.process import BrokerStartError, free_port


@pytest.fixture
def taken_port() -> Iterator[socket.socket]:
    """A loopback port that some other process holds (listening), as when a free-port pick
    races another test."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder


def listener_on(port: int) -> str:
    return f"PLAINTEXT://127.0.0.1:{port}"


def test_a_cluster_whose_node_cannot_bind_its_fixed_port_fails_at_once_and_leaves_no_node_running(
        tmp_path, taken_port):
    settings = node_configs(tmp_path, 3)
    settings[1]["listeners"] = listener_on(taken_port.getsockname()[1])
    cluster = ClusterProcess(tmp_path, node_settings=settings)
    began = time.monotonic()
    with pytest.raises(BrokerStartError) as failed:
        cluster.start(timeout=60)
    # Before, a start whose node had exited could be taken for a started one (its output
    # ended before the exit could be seen): the start then waited the whole 60 s for three
    # registrations and left nodes 2 and 3 running.
    assert time.monotonic() - began < 30
    assert failed.value.node_id == "1"
    assert "address already in use" in str(failed.value).lower()
    pids = [node.process.pid for node in cluster.nodes.values() if node.process is not None]
    assert cluster.alive() == [], f"nodes left running: {pids}"


def test_free_ports_are_picked_below_the_ephemeral_range_outgoing_connections_take_ports_from():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picked = {free_port() for _ in range(200)}
    assert all(port < low for port in picked), sorted(port for port in picked if port >= low)
    assert len(picked) > 150  # random picks, not the kernel's next port each time
    for port in list(picked)[:20]:  # and each was free: it binds
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))
