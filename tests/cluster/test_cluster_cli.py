"""`oncelog cluster start` as a user runs it: restarted on its own --data-dir after SIGTERM
and after kill -9 of every process (all acknowledged records there afterwards), a node
that dies reported at once, and a group consumer told why it gets no coordinator when
the cluster has too few brokers for `__consumer_offsets`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.config.broker import read_properties
from oncelog.local.process import child_pids

ONCELOG = Path(sys.executable).with_name("oncelog")
START_TIMEOUT_S = 90


@dataclass
class RunningCluster:
    process: subprocess.Popen
    bootstrap: str
    node_pids: dict[int, int]
    stdout: list[str]


def start_cluster(data_dir: Path, *args: str) -> RunningCluster:
    """`oncelog cluster start --data-dir DATA_DIR ARGS`, once it has printed every node."""
    process = subprocess.Popen(
        [str(ONCELOG), "cluster", "start", "--data-dir", str(data_dir), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None and process.stderr is not None  # PIPEs
    lines: list[str] = []
    node_pids: dict[int, int] = {}
    bootstrap = ""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("bootstrap servers: "):
            bootstrap = line.split(": ", 1)[1].strip()
        if match := re.match(r"node (\d+): \S+ pid (\d+),", line):
            node_pids[int(match.group(1))] = int(match.group(2))
            if len(node_pids) == len(bootstrap.split(",")):
                return RunningCluster(process, bootstrap, node_pids, lines)
    process.kill()
    raise AssertionError(f"the cluster did not start: {''.join(lines)}{process.stderr.read()}")


def kill_everything(cluster: RunningCluster) -> None:
    """SIGKILL the command and its nodes (each node's etcd member dies with it)."""
    cluster.process.kill()
    cluster.process.wait()
    for pid in cluster.node_pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def free_etcd_wals(data_dir: Path) -> None:
    for node in data_dir.glob("node-*"):
        shutil.rmtree(node / "__cluster_metadata-etcd", ignore_errors=True)


@pytest.fixture
def data_dir(tmp_path):
    yield tmp_path / "cluster"
    free_etcd_wals(tmp_path / "cluster")


def produce_acknowledged(bootstrap: str, topic: str, count: int, **security: str) -> set[bytes]:
    """Records written with acks=all by an idempotent producer; the ones acknowledged."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **security})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, **security})
    acknowledged: set[bytes] = set()

    def delivered(error, message) -> None:
        if error is None:
            acknowledged.add(message.value())

    for i in range(count):
        producer.produce(topic, f"record-{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acknowledged) == count
    return acknowledged


def read_everything(bootstrap: str, topic: str, expected: int, timeout_s: float = 60, **security: str) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "isolation.level": "read_committed", **security})
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(3)])
    values: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while len(values) < expected and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.5):
            if message.error() is None:
                value = message.value()
                assert value is not None  # the test writes no tombstones
                values.add(value)
    consumer.close()
    return values


def stop(cluster: RunningCluster) -> None:
    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.process.stderr is not None  # a PIPE (start_cluster)
    if cluster.process.wait(60) != 0:
        error = cluster.process.stderr.read()
        logs = error.rsplit("its log: ", 1)[-1].strip().split(", ") if "its log: " in error else []
        tails = "".join(f"\n--- {path} (last lines) ---\n{Path(path).read_text()[-6000:]}"
                        for path in logs if Path(path).exists())
        raise AssertionError(error + tails)


def test_cluster_restarted_after_sigterm_on_its_data_dir_has_every_acknowledged_record(data_dir):
    first = start_cluster(data_dir, "--brokers", "3")
    try:
        acknowledged = produce_acknowledged(first.bootstrap, "orders", 2000)
        stop(first)
    finally:
        kill_everything(first)
    second = start_cluster(data_dir)
    try:
        assert "restarted" in second.stdout[0]
        assert second.bootstrap == first.bootstrap  # the same ports: the quorum re-forms
        assert read_everything(second.bootstrap, "orders", len(acknowledged)) == acknowledged
        stop(second)
    finally:
        kill_everything(second)


def test_cluster_restarted_after_kill_9_of_every_process_has_every_acknowledged_record(data_dir):
    # A session far longer than the read below waits: the restarted brokers must not wait
    # for the sessions of the killed processes (and the controller key they held) to lapse.
    first = start_cluster(data_dir, "--brokers", "3", "--override", "broker.session.timeout.ms=90000")
    try:
        acknowledged = produce_acknowledged(first.bootstrap, "orders", 2000)
        # Everything at once, the `cluster start` command first so that it sees nothing.
        first.process.kill()
        first.process.wait()
        members = [child for pid in first.node_pids.values() for child in child_pids(pid)]
        assert len(members) == 3, "each broker runs an etcd member"
        for pid in [*first.node_pids.values(), *members]:
            os.kill(pid, signal.SIGKILL)
    finally:
        kill_everything(first)
    second = start_cluster(data_dir)
    try:
        assert read_everything(second.bootstrap, "orders", len(acknowledged), timeout_s=30) == acknowledged
        stop(second)
    finally:
        kill_everything(second)


SECURED = ("--listeners", "CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{port}",
           "--override", "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_SSL",
           "--override", "inter.broker.listener.name=INTERNAL",
           "--override", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "--override", "allow.everyone.if.no.acl.found=false")


def test_a_secured_cluster_is_one_command_and_its_restart_keeps_its_listeners(data_dir):
    """SASL_SSL for clients and between the brokers, with an authorizer: the generated CA,
    certificate and PLAIN users are enough for replication (min ISR 3), transaction
    markers and the tools' --command-config; a wrong password is refused; a restart from
    the data dir has the same listeners and credentials."""
    first = start_cluster(data_dir, "--brokers", "3", "--override", "min.insync.replicas=3", *SECURED)
    try:
        client_file = data_dir / "client.properties"
        assert f"--command-config {client_file}" in "".join(first.stdout)
        assert client_file.stat().st_mode & 0o077 == 0  # it holds the admin's password
        security = read_properties(client_file)
        assert (security["security.protocol"], security["sasl.username"]) == ("SASL_SSL", "admin")
        acknowledged = produce_acknowledged(first.bootstrap, "orders", 500, **security)
        producer = Producer({"bootstrap.servers": first.bootstrap, "transactional.id": "secured", **security})
        producer.init_transactions(30)
        producer.begin_transaction()
        for partition in range(3):
            producer.produce("orders", f"committed-{partition}".encode(), partition=partition)
        producer.commit_transaction(30)
        acknowledged |= {f"committed-{partition}".encode() for partition in range(3)}
        listed = subprocess.run([str(ONCELOG), "topics", "list", "--bootstrap-server", first.bootstrap,
                                 "--command-config", str(client_file)], capture_output=True, text=True,
                                timeout=60, check=False)
        assert listed.returncode == 0 and "orders\n" in listed.stdout, listed
        wrong = subprocess.run([str(ONCELOG), "topics", "list", "--bootstrap-server", first.bootstrap,
                                "--command-config", str(client_file), "-X", "sasl.password=guess"],
                               capture_output=True, text=True, timeout=60, check=False)
        assert wrong.returncode == 1 and "Authentication failed" in wrong.stderr, wrong
        stop(first)
    finally:
        kill_everything(first)
    refused = subprocess.run([str(ONCELOG), "cluster", "start", "--data-dir", str(data_dir), "--listeners",
                              "PLAINTEXT://127.0.0.1:{port}"], capture_output=True, text=True, timeout=30,
                             check=False)
    assert refused.returncode == 1 and "leave out --listeners" in refused.stderr, refused
    second = start_cluster(data_dir)
    try:
        assert second.bootstrap == first.bootstrap
        assert read_everything(second.bootstrap, "orders", len(acknowledged), **security) == acknowledged
        stop(second)
    finally:
        kill_everything(second)


def test_restart_with_another_broker_count_is_a_one_line_error(data_dir):
    first = start_cluster(data_dir, "--brokers", "1")
    try:
        stop(first)
    finally:
        kill_everything(first)
    completed = subprocess.run(
        [str(ONCELOG), "cluster", "start", "--data-dir", str(data_dir), "--brokers", "3"],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 1
    assert completed.stderr == (
        f"oncelog: error: {data_dir} holds a cluster of 1 node(s), not 3: leave out --brokers to restart it, "
        "or give another --data-dir\n"
    )


@pytest.fixture(scope="module")
def cluster_with_a_dead_node(tmp_path_factory):
    """A fresh 3-node cluster whose node 3 was killed (SIGKILL) right after it started
    (3 s broker sessions: the survivors see it gone sooner than Kafka's 9 s default)."""
    data_dir = tmp_path_factory.mktemp("one-node-down")
    cluster = start_cluster(data_dir, "--brokers", "3", "--override", "broker.session.timeout.ms=3000",
                            "--override", "broker.heartbeat.interval.ms=500")
    try:
        os.kill(cluster.node_pids[3], signal.SIGKILL)
        yield cluster
    finally:
        kill_everything(cluster)
        free_etcd_wals(data_dir)


def test_cluster_start_reports_a_node_that_dies_with_its_exit_status(cluster_with_a_dead_node):
    cluster = cluster_with_a_dead_node
    line = cluster.process.stderr.readline()
    assert re.fullmatch(
        rf"oncelog: warning: node 3 \(pid {cluster.node_pids[3]}\) was killed by SIGKILL; "
        r"its log: \S+node-3\.broker\.log; 2 of 3 node\(s\) still running\n",
        line,
    ), line
    assert cluster.process.poll() is None  # the other nodes keep running


def test_group_consumer_without_a_coordinator_is_told_why(cluster_with_a_dead_node):
    """__consumer_offsets needs 3 brokers (offsets.topic.replication.factor) and only 2
    are up: instead of "0 messages" and exit 0, the consumer says so."""
    bootstrap = cluster_with_a_dead_node.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30  # until node 3's session has lapsed
    while len(admin.list_topics(timeout=10).brokers) != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    admin.create_topics([NewTopic("clicks", 1, 2)])["clicks"].result(30)
    completed = subprocess.run(
        [str(ONCELOG), "consume", "--topic", "clicks", "--group", "g", "--from-beginning",
         "--timeout-ms", "3000", "--bootstrap-server", bootstrap],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.count("\n") == 1, completed.stderr
    assert completed.stderr.startswith("oncelog: error: no group coordinator for group 'g': "), completed.stderr
    assert "__consumer_offsets" in completed.stderr and "offsets.topic.replication.factor" in completed.stderr


def test_a_data_dir_without_node_settings_but_with_quorum_data_is_refused_in_one_line(tmp_path):
    """A cluster started before the node settings were kept: its ports are unknown, and
    new ones would leave the etcd members dialling the old ones."""
    (tmp_path / "node-1" / "__cluster_metadata-etcd").mkdir(parents=True)
    completed = subprocess.run([str(ONCELOG), "cluster", "start", "--data-dir", str(tmp_path)],
                               stdin=subprocess.DEVNULL, check=False, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 1
    assert completed.stderr.startswith(f"oncelog: error: {tmp_path} holds a cluster without node-<id>.properties")
    assert completed.stderr.count("\n") == 1
