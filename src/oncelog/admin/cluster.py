"""`oncelog cluster start`: a local cluster of combined nodes, for trying things out.

Each node is an `oncelog broker start` process (process.roles=broker,controller) with
its own data dir under --data-dir and free loopback ports; the command prints the
bootstrap servers, then stops every node on SIGTERM or SIGINT. With fewer than 3 nodes
the internal topics get as many replicas as there are nodes (and
`transaction.state.log.min.isr` at most that), as Kafka's single-node sample configs
set them, so that groups and transactions work; `--override` still wins.

Each node's settings are kept in `<data-dir>/node-<id>.properties`. Started again on the
same --data-dir (after SIGTERM, or after every process was killed), the command reads
them back: the same node ids and ports, so the etcd members, which remember their peers'
addresses, form their quorum again and every node recovers its own logs.

Listeners: one PLAINTEXT listener per node unless `--listeners` gives Kafka's
`listeners` value, for every node or (`N=...`) for node N, with `{node}` standing for
the node id and each `{port}` for a free port; `--override` sets
`listener.security.protocol.map` and `inter.broker.listener.name` (default: the first
listener). SSL and SASL_SSL listeners get a generated CA and broker certificate under
`<data-dir>/tls/` unless `ssl.keystore.location` is given; SASL listeners get PLAIN with
generated `broker` and `admin` super users unless `sasl.enabled.mechanisms` is given
(oncelog.local.cluster_security). A client's settings for the client listener (the first
that is not the inter-broker one) go to `<data-dir>/client.properties`, for the tools'
`--command-config`. A restart keeps all of it.

A node that dies while the cluster runs is reported on stderr at once (node id, pid,
exit status, its log); the others keep running.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.config.broker import ConfigError, parse_overrides
from oncelog.errors import CommandError

if TYPE_CHECKING:
    from oncelog.security.listeners import ListenerSpec

# How often the command looks for nodes that died.
WATCH_INTERVAL_S = 0.5


def register(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser("cluster", help="run a local oncelog cluster")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser(
        "start",
        help="run N brokers with a controller quorum on this machine until SIGTERM or SIGINT",
        description="Run a local cluster: N combined broker+controller nodes on loopback, each an "
        "`oncelog broker start` process with its own data dir and a member of the metadata quorum. "
        "Run it again with the same --data-dir to restart the cluster from its data.",
    )
    start.add_argument("--brokers", type=int, metavar="N",
                       help="number of nodes (default 3, or as many as --data-dir already holds); "
                       "below 3, the internal topics get N replicas")
    start.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="where the nodes keep their data and settings (node-1, node-1.properties, ...); "
                       "an existing cluster's dir restarts that cluster; default: a new temporary dir")
    start.add_argument(
        "--listeners", action="append", default=[], metavar="[N=]LISTENERS",
        help="Kafka's listeners value for every node, or with N= for node N (repeatable); {node} is the "
        "node id, each {port} a free port; e.g. 'CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{port}' "
        "with --override listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_SSL "
        "--override inter.broker.listener.name=INTERNAL (default: PLAINTEXT://127.0.0.1:{port})",
    )
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set one Kafka broker key on every node, e.g. --override min.insync.replicas=2 (repeatable)",
    )
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    from oncelog.local.cluster import (
        ClusterProcess,
        NodesDidNotStop,
        node_configs,
        read_node_configs,
        write_node_configs,
    )
    from oncelog.local.cluster_security import (
        CLIENT_PROPERTIES,
        client_listener,
        client_properties,
        listeners_of,
        secure_settings,
    )
    from oncelog.local.files import properties_text, write_private
    from oncelog.local.process import BrokerStartError

    if args.brokers is not None and args.brokers < 1:
        raise CommandError(f"--brokers must be at least 1, got {args.brokers}")
    try:
        overrides = parse_overrides(args.override)
    except ConfigError as error:
        raise CommandError(str(error)) from None
    data_dir = (args.data_dir or Path(tempfile.mkdtemp(prefix="oncelog-cluster-"))).absolute()
    try:
        saved = read_node_configs(data_dir) if data_dir.is_dir() else {}
    except (ConfigError, OSError) as error:
        raise CommandError(f"cannot read the cluster's settings in {data_dir}: {error}") from None
    if saved:
        if args.listeners:
            raise CommandError(f"{data_dir} holds a cluster whose listeners are kept in its node-N.properties: "
                               "leave out --listeners to restart it (or edit those files)")
        if args.brokers is not None and args.brokers != len(saved):
            raise CommandError(
                f"{data_dir} holds a cluster of {len(saved)} node(s), not {args.brokers}: leave out --brokers "
                "to restart it, or give another --data-dir"
            )
        # The node ids and ports stay; the layout is fixed by the directory, which may have moved.
        configs = {node_id: {**_moved_with(config, data_dir), **overrides,
                             "log.dirs": str(data_dir / f"node-{node_id}")}
                   for node_id, config in saved.items()}
        brokers = len(configs)
    else:
        if any(data_dir.glob("node-*/__cluster_metadata-etcd")):
            # Its ports were never written down: new ones would leave the quorum unable to re-form.
            raise CommandError(
                f"{data_dir} holds a cluster without node-<id>.properties (started by an older oncelog): "
                "its ports are unknown, so it cannot be restarted; give another --data-dir"
            )
        brokers = args.brokers if args.brokers is not None else 3
        small = {"offsets.topic.replication.factor": str(min(brokers, 3)),
                 "transaction.state.log.replication.factor": str(min(brokers, 3)),
                 "transaction.state.log.min.isr": str(min(brokers, 2))}
        templates = _listener_templates(args.listeners, brokers)
        try:
            configs = node_configs(data_dir, brokers, overrides={**small, **overrides}, listeners=templates)
            for config in configs.values():
                listeners_of(config)
        except ValueError as error:
            raise CommandError(str(error)) from None
        try:
            secured = secure_settings(data_dir, configs.values())
        except OSError as error:
            raise CommandError(f"cannot write the cluster's certificates in {data_dir}: {error}") from None
        configs = {node_id: {**config, **secured, **overrides} for node_id, config in configs.items()}
    try:
        write_node_configs(data_dir, configs)
        client = client_properties(next(iter(configs.values())))
        client_file = data_dir / CLIENT_PROPERTIES
        if client["security.protocol"] != "PLAINTEXT":
            write_private(client_file, properties_text(client).encode())
    except OSError as error:
        raise CommandError(f"cannot write the cluster's settings in {data_dir}: {error}") from None
    cluster = ClusterProcess(data_dir, node_settings=configs)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cluster.start()
    except BrokerStartError as error:
        raise CommandError(f"the cluster did not start: node {error.node_id} {error.reason}") from None
    except (RuntimeError, AssertionError, OSError) as error:
        cluster.kill_all()
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CommandError(f"the cluster did not start: {first_line}") from None
    print(f"oncelog cluster of {brokers} broker(s) in {data_dir}"
          + (" (restarted from its node-N.properties)" if saved else ""), flush=True)
    addresses = {node_id: _address(client_listener(config)) for node_id, config in configs.items()}
    print(f"bootstrap servers: {','.join(addresses.values())}", flush=True)
    if client["security.protocol"] != "PLAINTEXT":
        print(f"client settings ({client['security.protocol']}): --command-config {client_file}", flush=True)
    for node_id, node in cluster.nodes.items():
        print(f"node {node_id}: {configs[node_id]['listeners']} pid {node.pid}, log {node.log_path}", flush=True)
    reported: set[int] = set()
    while not stop.wait(WATCH_INTERVAL_S):
        for node_id, node in cluster.nodes.items():
            code = node.process.poll() if node.process is not None else None
            if code is None or node_id in reported:
                continue
            reported.add(node_id)
            running = len(cluster.nodes) - len(reported)
            print(f"oncelog: warning: node {node_id} (pid {node.pid}) {_exit_status(code)}; "
                  f"its log: {node.log_path}; {running} of {len(cluster.nodes)} node(s) still running",
                  file=sys.stderr, flush=True)
        if len(reported) == len(cluster.nodes):
            raise CommandError("every node of the cluster has exited")
    try:
        cluster.stop_all()
    except NodesDidNotStop as error:
        logs = ", ".join(str(cluster.nodes[node_id].log_path) for node_id in error.node_ids)
        cluster.kill_all()
        raise CommandError(f"{error}; every node was killed (its data recovers at the next start); "
                           f"its log: {logs}") from None
    return 0


def _listener_templates(given: list[str], brokers: int) -> dict[int, str]:
    """The listener template of each node from `--listeners` ([N=]LISTENERS): one
    without N= for every node, those with N= for theirs."""
    every: str | None = None
    own: dict[int, str] = {}
    for item in given:
        node, separator, value = item.partition("=")
        if separator and node.strip().isdigit():
            node_id = int(node)
            if not 1 <= node_id <= brokers:
                raise CommandError(f"--listeners {item!r}: there is no node {node_id} (nodes 1 to {brokers})")
            if node_id in own:
                raise CommandError(f"--listeners: node {node_id} is given twice")
            own[node_id] = value
        elif every is not None:
            raise CommandError("--listeners: give one value for every node, or N=... per node")
        else:
            every = item
    templates = dict.fromkeys(range(1, brokers + 1), every) if every is not None else {}
    return {**templates, **own}


def _moved_with(config: dict[str, str], data_dir: Path) -> dict[str, str]:
    """A saved node config whose generated certificates (under `<data-dir>/tls/` when it
    was written) are found again under the directory's place now."""
    from oncelog.local.cluster_security import TLS_DIR

    moved = dict(config)
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        path = Path(config.get(key, ""))
        if key in config and path.parent.name == TLS_DIR and not path.exists():
            candidate = data_dir / TLS_DIR / path.name
            if candidate.exists():
                moved[key] = str(candidate)
    return moved


def _address(spec: ListenerSpec) -> str:
    address = spec.advertised or spec.bind
    return f"{address.host or '127.0.0.1'}:{address.port}"


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
