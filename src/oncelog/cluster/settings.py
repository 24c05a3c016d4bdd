"""A broker's cluster-mode settings, read from its BrokerConfig.

Kafka names the controller quorum with `controller.quorum.voters` (`id@host:port,...`)
or, for nodes that are not voters, `controller.quorum.bootstrap.servers`. In oncelog
the quorum is etcd: a voter's host:port is its etcd member's client endpoint, and
`controller.quorum.peers` (oncelog only) names the members' peer endpoints, defaulting
to each client port + 100.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.config.broker import BrokerConfig, ConfigError

PEER_PORT_OFFSET = 100
ROLES = frozenset({"broker", "controller"})


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    node_id: int
    roles: frozenset[str]
    voters: tuple[Voter, ...]  # empty for a broker that knows only bootstrap servers
    peers: tuple[Voter, ...]
    endpoints: tuple[str, ...]  # the metadata quorum's client URLs
    session_timeout_ms: int
    heartbeat_interval_ms: int
    election_timeout_ms: int
    request_timeout_ms: int
    # The active controller's automatic leader rebalance (Kafka's keys of the same names).
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_percentage: int = 10

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    def own_peer(self) -> Voter:
        return next(peer for peer in self.peers if peer.node_id == self.node_id)

    def own_voter(self) -> Voter:
        return next(voter for voter in self.voters if voter.node_id == self.node_id)

    def initial_cluster(self, name_of) -> str:
        """etcd's --initial-cluster: name=peer URL for every voter."""
        return ",".join(f"{name_of(peer.node_id)}={peer.url}" for peer in self.peers)


def cluster_settings(config: BrokerConfig) -> ClusterSettings | None:
    """The cluster settings, or None when the broker runs standalone."""
    voters_raw, bootstrap_raw = config["controller.quorum.voters"], config["controller.quorum.bootstrap.servers"]
    if not voters_raw and not bootstrap_raw:
        if config["process.roles"]:
            raise ConfigError("process.roles needs controller.quorum.voters (cluster mode)")
        return None
    node_id = config.node_id
    voters = _parse_voters(voters_raw, "controller.quorum.voters") if voters_raw else ()
    if voters:
        endpoints = tuple(voter.url for voter in voters)
    else:
        endpoints = tuple(f"http://{host}:{port}" for host, port in
                          (_host_port(item, "controller.quorum.bootstrap.servers") for item in _items(bootstrap_raw)))
    roles_raw = config["process.roles"]
    if roles_raw:
        roles = frozenset(role.strip() for role in roles_raw.split(",") if role.strip())
        unknown = roles - ROLES
        if unknown or not roles:
            raise ConfigError(f"process.roles: expected broker, controller or both, got {roles_raw!r}")
    else:
        roles = frozenset({"broker", "controller"} if any(v.node_id == node_id for v in voters) else {"broker"})
    if "controller" in roles and not any(v.node_id == node_id for v in voters):
        raise ConfigError(f"process.roles has controller but node.id {node_id} is not in controller.quorum.voters")
    peers_raw = config["controller.quorum.peers"]
    if peers_raw:
        peers = _parse_voters(peers_raw, "controller.quorum.peers")
        if {p.node_id for p in peers} != {v.node_id for v in voters}:
            raise ConfigError("controller.quorum.peers must name the same node ids as controller.quorum.voters")
    else:
        peers = tuple(Voter(v.node_id, v.host, v.port + PEER_PORT_OFFSET) for v in voters)
    session, heartbeat = config["broker.session.timeout.ms"], config["broker.heartbeat.interval.ms"]
    if session < 1000:
        raise ConfigError(f"broker.session.timeout.ms: must be at least 1000, got {session}")
    if not 0 < heartbeat < session:
        raise ConfigError("broker.heartbeat.interval.ms: must be positive and below broker.session.timeout.ms")
    check_interval_s = config["leader.imbalance.check.interval.seconds"]
    if check_interval_s < 1:
        raise ConfigError(f"leader.imbalance.check.interval.seconds: must be at least 1, got {check_interval_s}")
    imbalance = config["leader.imbalance.per.broker.percentage"]
    if not 0 <= imbalance <= 100:
        raise ConfigError(f"leader.imbalance.per.broker.percentage: must be 0 to 100, got {imbalance}")
    return ClusterSettings(
        node_id=node_id,
        roles=roles,
        voters=voters,
        peers=peers,
        endpoints=endpoints,
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        election_timeout_ms=config["controller.quorum.election.timeout.ms"],
        request_timeout_ms=config["controller.quorum.request.timeout.ms"],
        auto_leader_rebalance=config["auto.leader.rebalance.enable"],
        leader_imbalance_check_interval_ms=check_interval_s * 1000,
        leader_imbalance_percentage=imbalance,
    )


def _items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _host_port(item: str, key: str) -> tuple[str, int]:
    host, sep, port = item.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"{key}: expected host:port, got {item!r}")
    return host.strip("[]"), int(port)


def _parse_voters(raw: str, key: str) -> tuple[Voter, ...]:
    voters = []
    for item in _items(raw):
        node, sep, address = item.partition("@")
        if not sep or not node.strip().lstrip("-").isdigit():
            raise ConfigError(f"{key}: expected id@host:port, got {item!r}")
        host, port = _host_port(address, key)
        voters.append(Voter(int(node), host, port))
    if len({v.node_id for v in voters}) != len(voters):
        raise ConfigError(f"{key}: a node id appears twice in {raw!r}")
    return tuple(voters)
