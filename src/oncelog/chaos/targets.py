"""What the clients of a chaos run talk to, and the nemesis thread that hits it.

`StandaloneBroker`: one broker process behind one `FaultProxy`, which it advertises; it
is only ever killed. `ChaosCluster`: a `ClusterProcess` of combined nodes, each broker
behind a proxy of its own and advertising it, with the faults of `ClusterNemesis` (kill,
pause, partition, disk, sessions) and the waits until every replica is back in sync.
Both offer the run one face: start, create_topics, inject, hold_time, settle,
ensure_running, wait_in_sync, set_faults, proxy_stats, stop, compare_replicas, close.
`Nemesis` is the thread that injects one fault per time slot through that face and heals
it.
`oncelog.chaos.run` picks the target and starts the nemesis.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from confluent_kafka import KafkaException

from oncelog.chaos.nemesis import ClusterNemesis, Fault, NodeDisks
from oncelog.chaos.proxy import FaultPolicy, FaultProxy
from oncelog.chaos.replicas import ReplicaComparison, compare_replicas
from oncelog.chaos.sessions import RunState
from oncelog.chaos.settings import (
    BROKER_CONFIG,
    CLIENT_BASE,
    CLUSTER_CONFIG,
    CLUSTER_TOPIC_CONFIG,
    CTP_GROUP,
    CTP_TRANSACTIONAL_ID,
    DUPLICATED_APIS,
    FAULTED_APIS,
    IN_SYNC_TIMEOUT_S,
    PARTITIONS,
    SECURE_CLUSTER_CONFIG,
    SECURE_WORKER,
    TOPICS,
    WRITER_TRANSACTIONAL_IDS,
    ChaosError,
    ChaosSettings,
)
from oncelog.local.cluster import ClusterProcess
from oncelog.local.cluster_security import client_properties, secure_settings
from oncelog.local.netns import NetworkLab, NetworkLabError
from oncelog.local.process import BrokerProcess


def _fault_policy(settings: ChaosSettings, seed: int) -> FaultPolicy:
    # A dropped response always takes its connection with it: on a live connection later
    # responses would still arrive, which TCP never does (an idempotent producer then
    # takes a later acknowledgement for the earlier batch, and its retry of that batch
    # is out of sequence, as with Apache Kafka). Requests are likewise only dropped with
    # their connection. The other kinds at half the rate, duplicates at the full rate.
    rate = settings.drop_rate
    return FaultPolicy(api_keys=FAULTED_APIS, drop_response_and_close=rate, truncate_response=rate / 2,
                       delay_response=rate / 2, delay_ms=300, drop_request_and_close=rate / 2,
                       duplicate_request=rate, duplicate_api_keys=DUPLICATED_APIS, replay_delay_ms=100,
                       seed=seed, enabled=False)


class StandaloneBroker:
    """One broker process behind one proxy; the broker advertises the proxy's address."""

    MIN_UPTIME_S = 0.3  # between a restart and the next kill
    REPORTS_FAULTS = False  # about one kill every two seconds: counted, not logged one by one

    def __init__(self, root: Path, settings: ChaosSettings) -> None:
        self.broker = BrokerProcess(root / "broker", BROKER_CONFIG)
        if set(settings.faults) - {"kill"}:
            raise ChaosError(f"a standalone broker is only killed; {', '.join(settings.faults)} faults need a cluster")
        self.kinds = list(settings.faults)
        self._count = 0
        self.policies = [_fault_policy(settings, settings.seed)]
        self.proxies = [FaultProxy(("127.0.0.1", self.broker.port), self.policies[0])]
        self.security: dict[str, str] = {}  # PLAINTEXT
        self.worker_security: dict[str, str] = {}

    @property
    def bootstrap(self) -> str:
        return self.proxies[0].address

    def start(self, log: Callable[[str], None]) -> None:
        proxy = self.proxies[0].start()
        self.broker.config["advertised.listeners"] = f"PLAINTEXT://{proxy.address}"
        self.broker.start()
        log(f"chaos: broker pid {self.broker.pid} on 127.0.0.1:{self.broker.port}, clients through the "
            f"proxy at {proxy.address}; log.dirs {self.broker.data_dir}, broker log {self.broker.log_path}")

    def create_topics(self) -> None:
        _create_topics(self.bootstrap, replication_factor=1)

    def inject(self, kind: str, rng: random.Random) -> Fault:
        if kind != "kill":
            raise ChaosError(f"a standalone broker is only killed, not given a {kind} fault")
        self._count += 1
        self.broker.kill()
        return Fault(self._count, "kill", 0, "broker", "kill -9 of the broker", frozenset(), time.time(),
                     cure=lambda: self.broker.start(timeout=60))

    def hold_time(self, kind: str, rng: random.Random) -> float:
        return rng.uniform(0, 0.3)

    def settle(self, stop: threading.Event) -> str:
        return "up"

    def name(self, victim: int) -> str:
        return "the broker"

    def log_path(self, victim: int) -> Path:
        return self.broker.log_path

    def ensure_running(self) -> None:
        if self.broker.process is None:
            try:
                self.broker.start(timeout=60)
            except RuntimeError as error:
                raise ChaosError(f"the broker did not restart: {error}") from None

    def wait_in_sync(self, timeout: float) -> str | None:
        return None  # one replica per partition

    def set_faults(self, enabled: bool) -> None:
        for policy in self.policies:
            policy.enabled = enabled

    def proxy_stats(self) -> Counter:
        return sum((Counter(proxy.stats) for proxy in self.proxies), Counter())

    def stop(self) -> None:
        """Clean shutdown; no error if already stopped."""
        try:
            self.broker.stop(timeout=30)
        except subprocess.TimeoutExpired:
            self.broker.kill()

    def compare_replicas(self) -> ReplicaComparison | None:
        return None

    def close(self) -> None:
        self.stop()
        for proxy in self.proxies:
            proxy.stop()


class ChaosCluster:
    """`brokers` combined nodes (`ClusterProcess`: a broker and its etcd member each, with
    quick failure detection), each broker behind its own proxy and advertising the
    proxy's address in its registration. Replication and markers between brokers use the
    bound listeners, so the proxies see client traffic only."""

    MIN_UPTIME_S = 1.0
    REPORTS_FAULTS = True
    KILL_DOWN_S = (0.0, 4.0 / 3)  # times the session: sometimes past it, fenced by the controller
    SETTLE_TIMEOUT_S = 30.0

    def __init__(self, root: Path, settings: ChaosSettings, log: Callable[[str], None]) -> None:
        self.settings = settings
        self.kinds = []
        nodes = range(1, settings.brokers + 1)
        self.network: NetworkLab | None = None
        self.disks: NodeDisks | None = None
        for kind in settings.faults:
            reason = {"partition": NetworkLab.unavailable, "disk": NodeDisks.unavailable}.get(kind, lambda: None)()
            if reason is not None:
                log(f"chaos: no {kind} faults: {reason}")
                continue
            self.kinds.append(kind)
        try:
            if "partition" in self.kinds:
                self.network = NetworkLab(nodes, seed=settings.seed).create()
            if "disk" in self.kinds:
                self.disks = NodeDisks(root / "cluster", nodes).mount()
        except (OSError, NetworkLabError) as error:
            self._release()
            raise ChaosError(f"cannot set up the faults: {error}") from None
        config = {**CLUSTER_CONFIG, "broker.session.timeout.ms": str(settings.session_timeout_ms)}
        listeners = None
        if settings.secure:
            config.update(SECURE_CLUSTER_CONFIG)
            listeners = {node_id: (f"CLIENT://{self.network.address(node_id)}:9092,"
                                   f"INTERNAL://{self.network.address(node_id)}:9093" if self.network else
                                   "CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{port}") for node_id in nodes}
        self.cluster = ClusterProcess(root / "cluster", settings.brokers, config, network=self.network,
                                      listeners=listeners)
        self.security: dict[str, str] = {}  # the harness's login: the admin's on a secured cluster
        self.worker_security: dict[str, str] = {}  # the workers' login
        if settings.secure:
            self._secure(root / "cluster")
        self.policies = {node_id: _fault_policy(settings, settings.seed * 1000 + node_id)
                         for node_id in self.cluster.nodes}
        self.proxies = {node_id: FaultProxy((node.host, node.port), self.policies[node_id], opaque=settings.secure)
                        for node_id, node in self.cluster.nodes.items()}
        self.nemesis = ClusterNemesis(
            self.cluster, [(topic, p) for topic in TOPICS for p in range(PARTITIONS)],
            coordinator_keys=[(tid, 1) for tid in (*WRITER_TRANSACTIONAL_IDS, CTP_TRANSACTIONAL_ID)] + [(CTP_GROUP, 0)],
            network=self.network, disks=self.disks)

    def _secure(self, directory: Path) -> None:
        """Certificates (for every node address, and 127.0.0.1, the proxies') and PLAIN
        users on every node; the harness logs in as the admin, the workers as SECURE_WORKER."""
        try:
            added = secure_settings(directory, self.cluster.configs.values(), users=(SECURE_WORKER,))
        except OSError as error:
            raise ChaosError(f"cannot make the cluster's certificates: {error}") from None
        for node_id, node in self.cluster.nodes.items():
            node.config.update(added)
            self.cluster.configs[node_id].update(added)
        self.security = client_properties(self.cluster.configs[1])
        self.worker_security = client_properties(self.cluster.configs[1], user=SECURE_WORKER)
        self.cluster.client_properties = dict(self.security)

    @property
    def bootstrap(self) -> str:
        return ",".join(proxy.address for proxy in self.proxies.values())

    def start(self, log: Callable[[str], None]) -> None:
        listener = "CLIENT" if self.settings.secure else "PLAINTEXT"
        for node_id, proxy in self.proxies.items():
            proxy.start()
            self.cluster.nodes[node_id].config["advertised.listeners"] = f"{listener}://{proxy.address}"
        try:
            self.cluster.start(timeout=120)
        except (RuntimeError, AssertionError) as error:
            raise ChaosError(f"the cluster did not start: {error}") from None
        for node_id, node in self.cluster.nodes.items():
            log(f"chaos: node {node_id} pid {node.pid} on {node.host}:{node.port}"
                + (f" (network namespace {self.network.namespace(node_id)})" if self.network else "")
                + f", clients through the proxy at {self.proxies[node_id].address}; log.dirs {node.data_dir}"
                + (" (a tmpfs of its own)" if self.disks else "") + f", broker log {node.log_path}")
        log(f"chaos: faults {', '.join(self.kinds) or 'none'}; broker sessions {self.settings.session_timeout_ms} ms")
        if self.settings.secure:
            log(f"chaos: SASL_SSL listeners only, {SECURE_CLUSTER_CONFIG['authorizer.class.name']}; the workers are "
                f"User:{SECURE_WORKER} under ACLs; the proxies pass TLS through (no dropped responses)")

    def create_topics(self) -> None:
        _create_topics(self.bootstrap, replication_factor=len(self.cluster.nodes), config=CLUSTER_TOPIC_CONFIG,
                       security=self.security)
        if self.settings.secure:
            _allow_worker(self.bootstrap, self.security)
        try:
            for topic in TOPICS:
                self.cluster.wait_for_topic(topic, timeout=60)
        except AssertionError as error:
            raise ChaosError(str(error)) from None
        problem = self.wait_in_sync(IN_SYNC_TIMEOUT_S)
        if problem:
            raise ChaosError(f"after creating the topics: {problem}")

    def inject(self, kind: str, rng: random.Random) -> Fault:
        """A fault of `kind` on a victim `ClusterNemesis` chooses."""
        return self.nemesis.inject(kind, rng)

    def hold_time(self, kind: str, rng: random.Random) -> float:
        if kind == "sessions":
            return 1.0  # nothing to hold: past a heartbeat every broker has seen its lease gone
        if kind == "kill":
            session_s = self.settings.session_timeout_ms / 1000
            return rng.uniform(self.KILL_DOWN_S[0] * session_s, self.KILL_DOWN_S[1] * session_s)
        return rng.uniform(*self.settings.fault_seconds)

    def settle(self, stop: threading.Event) -> str:
        """Wait (bounded; not past `stop`) until every node is registered and every
        partition, internal ones included, has a leader and all its replicas in sync."""
        began = time.monotonic()
        lagging = _wait_in_sync(self.cluster, self.SETTLE_TIMEOUT_S, stop)
        if lagging:
            return f"not all in sync after {time.monotonic() - began:.1f}s: {lagging[:5]}"
        return f"all replicas in sync {time.monotonic() - began:.1f}s later"

    def name(self, victim: int) -> str:
        return f"node {victim}"

    def log_path(self, victim: int) -> Path:
        return self.cluster.nodes[victim].log_path

    def ensure_running(self) -> None:
        self.nemesis.undo_all()  # nothing is left paused, cut off or full
        for node_id, node in self.cluster.nodes.items():
            if node.process is None:
                try:
                    self.cluster.start_node(node_id, timeout=60)
                except RuntimeError as error:
                    raise ChaosError(f"node {node_id} did not restart: {error}") from None

    def wait_in_sync(self, timeout: float) -> str | None:
        lagging = _wait_in_sync(self.cluster, timeout, threading.Event())
        return f"replicas not in sync within {timeout:.0f}s: {lagging}" if lagging else None

    def set_faults(self, enabled: bool) -> None:
        for policy in self.policies.values():
            policy.enabled = enabled

    def proxy_stats(self) -> Counter:
        return sum((Counter(proxy.stats) for proxy in self.proxies.values()), Counter())

    def stop(self) -> None:
        """Clean shutdown of every node, one at a time; a node that does not stop within
        30 s is killed."""
        for node_id in self.cluster.alive():
            try:
                self.cluster.stop(node_id)
            except subprocess.TimeoutExpired:
                self.cluster.kill(node_id)

    def compare_replicas(self) -> ReplicaComparison:
        """After `stop`: the chaos topics' replicas, batch by batch (oncelog.chaos.replicas)."""
        return compare_replicas(self.cluster, TOPICS)

    def close(self) -> None:
        self.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        self._release()

    def _release(self) -> None:
        if self.disks is not None:
            self.disks.unmount(keep=self.settings.data_dir is not None)
        if self.network is not None:
            self.network.destroy()


def _wait_in_sync(cluster: ClusterProcess, timeout: float, stop: threading.Event) -> list[str]:
    """Until `_out_of_sync` finds nothing twice in a row, 0.5 s apart (metadata reaches
    the brokers asynchronously: one clean answer may predate the change that follows a
    restart); what it found last when `timeout` passes or `stop` is set."""
    deadline = time.monotonic() + timeout
    lagging = ["not asked yet"]
    clean_answers = 0
    while not stop.is_set() and time.monotonic() < deadline:
        lagging = _out_of_sync(cluster)
        clean_answers = 0 if lagging else clean_answers + 1
        if clean_answers == 2:
            return []
        stop.wait(0.5 if not lagging else 0.2)
    return lagging or ["stopped before a second look"]


def _out_of_sync(cluster: ClusterProcess) -> list[str]:
    """What each live node's metadata shows that is not fully in sync: a node missing from
    the registered brokers, a partition without leader or with a replica out of the ISR.
    Asked of every node, as metadata reaches them asynchronously."""
    from kio.schema.metadata.v12.request import MetadataRequest

    alive = cluster.alive()
    if len(alive) < len(cluster.nodes):
        return [f"nodes up: {alive}"]
    lagging: list[str] = []
    for node_id in alive:
        try:
            response = cluster.ask(node_id, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                            include_topic_authorized_operations=False))
        except OSError as error:
            return [f"node {node_id}: {error}"]
        registered = sorted(broker.node_id for broker in response.brokers)
        if registered != sorted(cluster.nodes):
            lagging.append(f"node {node_id} sees brokers {registered}")
        for topic in response.topics:
            for p in topic.partitions:
                if topic.error_code or p.error_code or p.leader_id < 0 or set(p.isr_nodes) != set(p.replica_nodes):
                    lagging.append(f"node {node_id} sees {topic.name}-{p.partition_index} leader {p.leader_id} "
                                   f"isr {sorted(p.isr_nodes)} of {sorted(p.replica_nodes)}")
    return lagging


def _create_topics(bootstrap: str, replication_factor: int, config: Mapping[str, str] | None = None,
                   security: Mapping[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**CLIENT_BASE, "bootstrap.servers": bootstrap, **dict(security or {})})
    new_topics = [NewTopic(t, PARTITIONS, replication_factor, config=dict(config or {})) for t in TOPICS]
    for topic, future in admin.create_topics(new_topics).items():
        try:
            future.result(30)
        except KafkaException as error:
            raise ChaosError(f"cannot create topic {topic}: {error}") from None


# ---------------------------------------------------------------------------------------
# The nemesis: one fault per time slot, through the target's inject, hold_time and settle.


class Nemesis(threading.Thread):
    """One fault at a random moment in each of `planned` equal slots of the chaos phase:
    the enabled kinds taken in turn, in a seeded order, victims chosen by the brokers
    (`StandaloneBroker.inject`, `ChaosCluster.inject`). Each fault is held for a random
    while and then healed (a killed broker restarted, a paused one continued, a cut node
    reconnected, a full disk freed), even when the run is stopping; in a cluster the next
    fault waits until every replica is back in sync (`settle`), so that at most one node
    is ever in trouble. A fault that cannot be healed (a broker that does not come back)
    fails the run."""

    RESTART_ATTEMPTS = 3

    def __init__(self, run: RunState, brokers: StandaloneBroker | ChaosCluster, kinds: Sequence[str], planned: int,
                 duration: float, log: Callable[[str], None]) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.run_state = run
        self.brokers = brokers
        self.kinds = list(kinds)
        self.planned = planned
        self.duration = duration
        self.rng = run.rng()
        self.faults: list[Fault] = []
        self.finished = threading.Event()  # set when no fault will happen any more
        self.log = log

    @property
    def kills(self) -> int:
        return sum(1 for fault in self.faults if fault.kind == "kill")

    def run(self) -> None:
        try:
            self._on_schedule()
        except BaseException as error:  # noqa: BLE001 (any failure of the nemesis fails the run)
            self.run_state.fail("nemesis", error)
        finally:
            self.finished.set()

    def _on_schedule(self) -> None:
        start = time.monotonic()
        slot = self.duration / max(self.planned, 1)
        last_ready = start
        order = list(self.kinds)
        self.rng.shuffle(order)
        for index in range(self.planned):
            moment = max(start + slot * (index + self.rng.uniform(0.1, 0.9)),
                         last_ready + self.brokers.MIN_UPTIME_S)
            if moment >= start + self.duration or self.run_state.stop.wait(max(0.0, moment - time.monotonic())):
                break
            kind = order[index % len(order)]
            fault = self.brokers.inject(kind, self.rng)
            self.faults.append(fault)
            if self.brokers.REPORTS_FAULTS:
                self.run_state.count(f"faults.{kind}.{fault.target}")
            held = self.brokers.hold_time(kind, self.rng)
            self.run_state.stop.wait(held)  # healed even on stop
            began = time.monotonic()
            self._heal(fault)
            healed_in = time.monotonic() - began
            settled = self.brokers.settle(self.run_state.stop)
            if self.brokers.REPORTS_FAULTS:
                self.log(f"chaos: fault {fault.number} at {_clock(fault.began)}: {fault.description}, held "
                         f"{held:.1f}s, healed in {healed_in:.1f}s, {settled}")
            last_ready = time.monotonic()

    def _heal(self, fault: Fault) -> None:
        for attempt in range(1, self.RESTART_ATTEMPTS + 1):
            try:
                fault.heal()
                return
            except RuntimeError as error:
                self.log(f"chaos: healing fault {fault.number} ({fault.description}), attempt {attempt}, "
                         f"failed: {error}")
        raise ChaosError(f"fault {fault.number} ({fault.description}) could not be healed; the log of "
                         f"{self.brokers.name(fault.node)}: {self.brokers.log_path(fault.node)}")


def _clock(wall: float) -> str:
    """A wall-clock time as the broker logs print it (local time, milliseconds)."""
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f",{int(wall % 1 * 1000):03d}"


def _allow_worker(bootstrap: str, security: Mapping[str, str]) -> None:
    """SECURE_WORKER's ACLs, made as the admin: everything on the topics, groups and
    transactional ids whose names start with "chaos", and idempotent writes. Nothing else:
    a request the workers make outside them is refused, and the run fails."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    principal = f"User:{SECURE_WORKER}"
    bindings = [AclBinding(kind, "chaos", ResourcePatternType.PREFIXED, principal, "*", AclOperation.ALL,
                           AclPermissionType.ALLOW)
                for kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)]
    bindings.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*",
                               AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW))
    admin = AdminClient({**CLIENT_BASE, "bootstrap.servers": bootstrap, **security})
    for binding, future in admin.create_acls(bindings).items():
        try:
            future.result(30)
        except KafkaException as error:
            raise ChaosError(f"cannot create the ACL {binding}: {error}") from None
