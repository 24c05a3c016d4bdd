"""`oncelog cluster start`: a local cluster of combined nodes, for trying things out.

Each node is an `oncelog broker start` process (process.roles=broker,controller) with
its own data dir under --data-dir and free loopback ports; the command prints the
bootstrap servers, then stops every node on SIGTERM or SIGINT. With fewer than 3 nodes
the internal topics get as many replicas as there are nodes (and
`transaction.state.log.min.isr` at most that), as Kafka's single-node sample configs
set them, so that groups and transactions work; `--override` still wins.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from pathlib import Path

from oncelog.broker.config import ConfigError, parse_overrides


def register(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser("cluster", help="run a local oncelog cluster")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser(
        "start",
        help="run N brokers with a controller quorum on this machine until SIGTERM or SIGINT",
        description="Run a local cluster: N combined broker+controller nodes on loopback, each an "
        "`oncelog broker start` process with its own data dir and a member of the metadata quorum.",
    )
    start.add_argument("--brokers", type=int, default=3, metavar="N",
                       help="number of nodes (default 3); below 3, the internal topics get N replicas")
    start.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="where the nodes keep their data (node-1, node-2, ...); default: a new temporary dir")
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set one Kafka broker key on every node, e.g. --override min.insync.replicas=2 (repeatable)",
    )
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    from oncelog.cli import CommandError
    from oncelog.testing.cluster import ClusterProcess

    if args.brokers < 1:
        raise CommandError(f"--brokers must be at least 1, got {args.brokers}")
    try:
        overrides = parse_overrides(args.override)
    except ConfigError as error:
        raise CommandError(str(error)) from None
    small = {"offsets.topic.replication.factor": str(min(args.brokers, 3)),
             "transaction.state.log.replication.factor": str(min(args.brokers, 3)),
             "transaction.state.log.min.isr": str(min(args.brokers, 2))}
    overrides = {**small, **overrides}
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="oncelog-cluster-"))
    cluster = ClusterProcess(data_dir, args.brokers, overrides, fast_failover=False)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cluster.start()
    except RuntimeError as error:
        raise CommandError(f"the cluster did not start: {error}") from None
    print(f"oncelog cluster of {args.brokers} broker(s) in {data_dir}", flush=True)
    print(f"bootstrap servers: {cluster.bootstrap_servers}", flush=True)
    stop.wait()
    cluster.stop_all()
    return 0
