"""`ClusterProcess.start`, the harness every cluster test stands on: a node that cannot
bind its port stops the start at once and leaves no process behind, and a port that
another process took after the cluster picked it is picked again."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from oncelog.local.cluster import ClusterProcess, node_configs
from oncelog.local.process import BrokerStartError


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


def test_a_cluster_whose_picked_port_another_process_took_starts_on_new_ports(tmp_path):
    cluster = ClusterProcess(tmp_path, 3)
    taken = cluster.nodes[2].port
    with socket.socket() as holder:  # another process wins the race for the port picked
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        cluster.start(timeout=60)
    try:
        assert taken not in [node.port for node in cluster.nodes.values()]
        assert len(cluster.metadata([]).brokers) == 3
        assert sorted(cluster.alive()) == [1, 2, 3]
    finally:
        cluster.kill_all()
