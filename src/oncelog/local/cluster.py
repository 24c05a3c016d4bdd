"""A cluster of broker processes on loopback, for tests and `oncelog cluster start`.

    with ClusterProcess(tmp_path, brokers=3) as cluster:
        ... cluster.bootstrap_servers ...
        leader = cluster.leader_of("orders", 0)
        cluster.kill(leader)             # SIGKILL: the broker and its quorum member
        cluster.start_node(leader)       # same data dir and ports

Every node is a combined node (process.roles=broker,controller): a broker with a member
of the metadata quorum next to it. Ports stay the same across restarts of a node.

`oncelog cluster start` also keeps each node's settings in `<base_dir>/node-<id>.properties`
(`write_node_configs`), so a cluster started again on the same directory reuses its node
ids and ports: the etcd members keep their peers' addresses in their write-ahead logs and
only find each other again on the same ports.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from oncelog.client.errors import ClientError
from oncelog.config.broker import ConfigError, read_properties
from oncelog.local.cluster_security import expand_listeners, listeners_of
from oncelog.local.etcd import GatewayError
from oncelog.local.etcd import post as etcd_post
from oncelog.local.files import properties_text, write_private
from oncelog.local.netns import NetworkLab
from oncelog.local.process import BrokerProcess, child_pids, free_port

_BROKER_KEY = re.compile(r"^/oncelog/[^/]+/brokers/(\d+)$")  # cluster.image.Keys.broker


class NodesDidNotStop(Exception):
    """Nodes still running `timeout` seconds after SIGTERM."""

    def __init__(self, node_ids: list[int], timeout: float) -> None:
        super().__init__(f"node(s) {', '.join(map(str, node_ids))} did not stop within {timeout:.0f}s of SIGTERM")
        self.node_ids = node_ids
        self.timeout = timeout


# Quick failure detection for tests; Kafka's defaults (9 s sessions) stay the broker's.
FAST_FAILOVER = {
    "controller.quorum.election.timeout.ms": "500",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.backoff.ms": "200",
}


def node_configs(base_dir: Path, brokers: int, host: str = "127.0.0.1",
                 overrides: Mapping[str, str] | None = None,
                 hosts: Mapping[int, str] | None = None,
                 listeners: Mapping[int, str] | None = None) -> dict[int, dict[str, str]]:
    """The settings of `brokers` combined nodes with free ports on `host`, ids 1..n; with
    `hosts` (an address of its own per node, e.g. in a `NetworkLab`), Kafka's and etcd's
    usual ports on each node's address. `listeners` gives nodes listener templates of
    their own (`cluster_security.expand_listeners`: `{node}`, `{port}`); the others get
    one PLAINTEXT listener."""
    ids = range(1, brokers + 1)
    if hosts is None:
        hosts = dict.fromkeys(ids, host)
        kafka = {i: free_port(host) for i in ids}
        client = {i: free_port(host) for i in ids}
        peer = {i: free_port(host) for i in ids}
    else:
        kafka, client, peer = dict.fromkeys(ids, 9092), dict.fromkeys(ids, 2379), dict.fromkeys(ids, 2380)
    voters = ",".join(f"{i}@{hosts[i]}:{client[i]}" for i in ids)
    peers = ",".join(f"{i}@{hosts[i]}:{peer[i]}" for i in ids)
    return {
        i: {
            "node.id": str(i),
            "process.roles": "broker,controller",
            "controller.quorum.voters": voters,
            "controller.quorum.peers": peers,
            "listeners": (expand_listeners(listeners[i], i, functools.partial(free_port, hosts[i]))
                          if listeners and i in listeners else f"PLAINTEXT://{hosts[i]}:{kafka[i]}"),
            "log.dirs": str(base_dir / f"node-{i}"),
            **dict(overrides or {}),
        }
        for i in ids
    }


NODE_CONFIG_FILE = "node-{node_id}.properties"
NODE_CONFIG_HEADER = """\
# Node {node_id} of the oncelog cluster in {base_dir}, written by `oncelog cluster start`.
# Starting the cluster again on this directory reuses these settings (`--override` still
# applies on top): the node ids and ports must stay the same for the quorum to re-form.
# By hand, this one node: oncelog broker start --config {path}
"""


def node_config_paths(base_dir: Path) -> dict[int, Path]:
    """The node-<id>.properties files of a cluster directory, by node id."""
    found = {}
    for path in Path(base_dir).glob(NODE_CONFIG_FILE.format(node_id="*")):
        suffix = path.name[len("node-"):-len(".properties")]
        if suffix.isdigit():
            found[int(suffix)] = path
    return dict(sorted(found.items()))


def read_node_configs(base_dir: Path) -> dict[int, dict[str, str]]:
    """The settings `write_node_configs` kept, by node id; empty for a new directory.
    A file that cannot be read, or that names another node id, is a ConfigError."""
    configs = {}
    for node_id, path in node_config_paths(base_dir).items():
        config = read_properties(path)
        if config.get("node.id") != str(node_id):
            raise ConfigError(f"{path}: expected node.id={node_id}, found {config.get('node.id')!r}")
        configs[node_id] = config
    return configs


def write_node_configs(base_dir: Path, configs: Mapping[int, Mapping[str, str]]) -> None:
    """Keep every node's settings in `<base_dir>/node-<id>.properties` (Kafka's format)."""
    base_dir = Path(base_dir)
    base_dir.mkdir(parents=True, exist_ok=True)
    for node_id, config in configs.items():
        path = base_dir / NODE_CONFIG_FILE.format(node_id=node_id)
        text = NODE_CONFIG_HEADER.format(node_id=node_id, base_dir=base_dir, path=path)
        text += properties_text(config)
        write_private(path, text.encode("utf-8"))  # it may hold SASL passwords


class ClusterProcess:
    def __init__(self, base_dir: str | Path, brokers: int = 3, config: Mapping[str, str] | None = None, *,
                 fast_failover: bool = True, node_settings: Mapping[int, Mapping[str, str]] | None = None,
                 network: NetworkLab | None = None, listeners: Mapping[int, str] | None = None) -> None:
        """`brokers` new nodes with free ports and `config` on each, or, with
        `node_settings`, exactly those nodes (e.g. `read_node_configs` of a cluster that ran
        before; `brokers` and `config` are then ignored). With `network` (created, with
        nodes 1..brokers), each node runs in its own namespace on its own address.
        `listeners`: node templates for `node_configs`."""
        self.base_dir = Path(base_dir)
        self.network = network
        # How this harness's own requests (`ask`) reach the first listener of each node.
        self.client_properties: dict[str, str] = {}
        if node_settings is not None:
            self.configs = {node_id: dict(settings) for node_id, settings in node_settings.items()}
        else:
            overrides = {**(FAST_FAILOVER if fast_failover else {}), **dict(config or {})}
            hosts = {i: network.address(i) for i in range(1, brokers + 1)} if network is not None else None
            self.configs = node_configs(self.base_dir, brokers, overrides=overrides, hosts=hosts, listeners=listeners)
        self.nodes = {}
        for node_id, settings in self.configs.items():
            first = listeners_of(settings)[0].bind  # what `bootstrap_servers` and `metadata` use
            wrap = functools.partial(network.command, node_id) if network is not None else None
            self.nodes[node_id] = BrokerProcess(Path(settings["log.dirs"]), settings, port=first.port,
                                                host=first.host or "127.0.0.1", wrap=wrap)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes.values())

    def alive(self) -> list[int]:
        return [node_id for node_id, node in self.nodes.items() if node.process is not None]

    def start(self, timeout: float = 60.0) -> Self:
        """Start every node at once (each waits for the quorum, which needs a majority) and
        wait until all are registered. A node that exits stops the start at once: every
        node is killed and its BrokerStartError raised (its log's last line in `reason`)."""
        try:
            for node in self.nodes.values():
                node.launch()
            deadline = time.monotonic() + timeout
            while not all(node.listening for node in self.nodes.values()):
                self._raise_if_one_exited(timeout)
                if time.monotonic() > deadline:
                    late = next(node for node in self.nodes.values() if not node.listening)
                    raise late.start_failed(timeout)
                time.sleep(0.05)

            def registered() -> bool:
                self._raise_if_one_exited(timeout)
                return self.registered_brokers() == set(self.nodes)

            self.wait_for(registered, timeout, "every broker to be registered")
        except BaseException:
            self.kill_all()
            raise
        return self

    def _raise_if_one_exited(self, timeout: float) -> None:
        for node in self.nodes.values():
            if node.exited_before_listening or (node.process is not None and node.process.poll() is not None):
                raise node.start_failed(timeout)

    def start_node(self, node_id: int, timeout: float = 60.0) -> None:
        self.nodes[node_id].start(timeout)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node; its quorum member dies with it (PR_SET_PDEATHSIG)."""
        self.nodes[node_id].kill()

    def stop(self, node_id: int) -> None:
        self.nodes[node_id].stop()

    def pause(self, node_id: int) -> None:
        """SIGSTOP the broker (a stalled process: no requests answered, no lease
        renewed). Its quorum member is a separate process and keeps running."""
        os.kill(self.nodes[node_id].pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self.nodes[node_id].pid, signal.SIGCONT)

    def quorum_member_pid(self, node_id: int) -> int | None:
        """The pid of the node's etcd member (a child of its broker process), if running."""
        process = self.nodes[node_id].process
        if process is None:
            return None
        for child in child_pids(process.pid):
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "etcd":
                    return child
            except OSError:
                continue
        return None

    def revoke_sessions(self) -> int:
        """Revoke every lease the metadata quorum holds, through the first member that
        answers: every broker's session ends within a few milliseconds (and with it its
        registration, and the controller's), as when etcd once lost its leases on a
        paused member's return. The brokers register again on their next heartbeat.
        Returns how many leases were revoked."""
        voters = next(iter(self.configs.values()))["controller.quorum.voters"]
        failures = []
        for voter in voters.split(","):
            member = f"http://{voter.split('@', 1)[1]}"
            try:
                held = etcd_post(member, "/v3/lease/leases", {}, 5.0).get("leases", [])
            except OSError as error:
                failures.append(f"{voter}: {error}")
                continue
            revoked = 0
            for lease in held:
                try:
                    etcd_post(member, "/v3/lease/revoke", {"ID": lease["ID"]}, 5.0)
                    revoked += 1
                except GatewayError as error:
                    if error.status != 404:  # 404: it lapsed (or was revoked) since the list
                        raise RuntimeError(f"revoking lease {lease['ID']} at {voter}: {error}") from None
            return revoked
        raise RuntimeError(f"no quorum member answered to revoke the sessions ({'; '.join(failures)})")

    def registered_brokers(self) -> set[int]:
        """The node ids registered in the metadata quorum (asked of its members, so
        whatever security the listeners have); empty while no member answers."""
        voters = next(iter(self.configs.values()))["controller.quorum.voters"]
        for voter in voters.split(","):
            member = f"http://{voter.split('@', 1)[1]}"
            prefix = base64.b64encode(b"/oncelog/").decode()
            end = base64.b64encode(b"/oncelog0").decode()
            try:
                found = etcd_post(member, "/v3/kv/range", {"key": prefix, "range_end": end, "keys_only": True}, 5.0)
            except (OSError, GatewayError):
                continue
            keys = (base64.b64decode(kv["key"]).decode() for kv in found.get("kvs", []))
            return {int(match.group(1)) for key in keys if (match := _BROKER_KEY.match(key))}
        return set()

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def stop_all(self, timeout: float = 30.0) -> None:
        """SIGTERM every node at once, then wait for all of them: one after another, the
        last ones would stop with their etcd members already out of quorum. NodesDidNotStop
        names the nodes still running after `timeout` (they are left running)."""
        alive = self.alive()
        for node_id in alive:
            self.nodes[node_id].terminate()
        deadline = time.monotonic() + timeout
        stuck = []
        for node_id in alive:
            try:
                self.nodes[node_id].wait_stopped(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stuck.append(node_id)
        if stuck:
            raise NodesDidNotStop(stuck, timeout)

    # ---- what the cluster says ---------------------------------------------------------

    def metadata(self, topics: list[str] | None = None):
        """A Metadata v12 response from any live broker."""
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        last_error: Exception | None = None
        for node_id in self.alive():
            try:
                return self.ask(node_id, MetadataRequest(
                    topics=(None if topics is None
                            else tuple(MetadataRequestTopic(name=TopicName(t), topic_id=None) for t in topics)),
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                ))
            except OSError as error:
                last_error = error
        raise ConnectionError(f"no live broker answered: {last_error}")

    def wait_for_topic(self, topic: str, timeout: float = 30.0) -> None:
        """Until every live broker's metadata has the topic with a leader per partition
        (metadata reaches brokers asynchronously, as in Kafka)."""
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        def everywhere() -> bool:
            for node_id in self.alive():
                response = self.ask(node_id, MetadataRequest(
                    topics=(MetadataRequestTopic(name=TopicName(topic), topic_id=None),),
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False))
                entry = response.topics[0]
                if entry.error_code != 0 or not entry.partitions or any(p.leader_id < 0 for p in entry.partitions):
                    return False
            return True

        self.wait_for(everywhere, timeout, f"topic {topic} on every broker")

    def partition(self, topic: str, partition: int):
        for entry in self.metadata([topic]).topics:
            for p in entry.partitions:
                if p.partition_index == partition:
                    return p
        raise LookupError(f"{topic}-{partition} not in metadata")

    def leader_of(self, topic: str, partition: int) -> int:
        return self.partition(topic, partition).leader_id

    def coordinator_of(self, key: str, key_type: int = 1, timeout: float = 30.0) -> int:
        """The node FindCoordinator names for a transactional id (key_type 1) or group (0)."""
        from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
        from kio.static.primitive import i8

        found: list[int] = []

        def located() -> bool:
            response = self.ask(self.alive()[0], FindCoordinatorRequest(key=key, key_type=i8(key_type)))
            if response.error_code == 0:
                found.append(response.node_id)
            return bool(found)

        self.wait_for(located, timeout, f"the coordinator of {key!r}")
        return found[-1]

    def ask(self, node_id: int, request):
        """One request to node `node_id`'s first listener, answered (decoded); OSError when
        it cannot be asked. With `client_properties` (security.protocol, TLS and SASL
        settings, as librdkafka names them) over TLS and SASL."""
        from oncelog.client.config import ClientConfig
        from oncelog.client.connection import Connection
        from oncelog.protocol.client import WireClient

        address = self.nodes[node_id].bootstrap_servers
        if not self.client_properties:
            with WireClient.connect(address, timeout=5) as client:
                return client.request(request)
        config = ClientConfig.from_settings(address, {"socket.timeout.ms": 5000, **self.client_properties})
        connection = Connection(address, config, node_id)
        try:
            return connection.request(request)
        except ClientError as error:
            raise ConnectionError(f"node {node_id}: {error}") from None
        finally:
            connection.close()

    def wait_for(self, predicate, timeout: float = 30.0, message: str = "the cluster") -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (OSError, LookupError) as error:
                last = error
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {message}" + (f" ({last})" if last else ""))

    def wait_for_isr(self, topic: str, partition: int, size: int, timeout: float = 30.0) -> None:
        self.wait_for(lambda: len(self.partition(topic, partition).isr_nodes) == size, timeout,
                      f"{topic}-{partition} to have {size} in-sync replicas")

    def wait_for_leader(self, topic: str, partition: int, *, not_on: int | None = None, timeout: float = 30.0) -> int:
        found: list[int] = []

        def elected() -> bool:
            leader = self.leader_of(topic, partition)
            if leader >= 0 and leader != not_on:
                found.append(leader)
                return True
            return False

        other_than = f" other than {not_on}" if not_on else ""
        self.wait_for(elected, timeout, f"a leader of {topic}-{partition}{other_than}")
        return found[-1]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.kill_all()
