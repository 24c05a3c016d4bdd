"""`oncelog chaos`: the soak run. A broker process (or, with `--brokers 3`, a node of a
cluster) killed with SIGKILL at random moments, a fault proxy per broker dropping
responses, transactional, idempotent and consume-transform-produce clients recording
everything they did and saw, and the history checker's verdict; on a cluster, also the
replicas compared batch by batch after a clean shutdown.

Exit status 0 only if the checker found no anomaly, the final reads completed and (on a
cluster) the replicas agree; 1 otherwise, with every anomaly and its offending records
printed. The run itself is `oncelog.testing.chaos`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oncelog.cli import CommandError


def register(commands: argparse._SubParsersAction) -> None:
    chaos = commands.add_parser(
        "chaos",
        help="soak run: broker kills and dropped responses under real clients, judged by the history checker",
        description="A soak run: real clients (transactional, idempotent, consume-transform-produce, tailing "
                    "consumers) against a broker, or a cluster with --brokers 3, behind fault proxies, with "
                    "SIGKILLs at random moments; the recorded history must show no anomaly and, on a cluster, "
                    "every replica must hold the same batches up to the high watermark.",
    )
    length = chaos.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="length of the chaos phase in minutes (default: 1)")
    length.add_argument("--seconds", type=float, help="length of the chaos phase in seconds")
    chaos.add_argument("--seed", type=int, default=1,
                       help="seeds kill moments, faults and workloads (default: %(default)s)")
    chaos.add_argument("--brokers", type=int, default=1,
                       help="1: one standalone broker; more: a cluster of that many combined nodes (broker and "
                            "etcd member) on loopback, topics with a replica on every node and "
                            "min.insync.replicas=2; each kill takes one node (a random one, a partition leader "
                            "or a coordinator) down for up to 4 s, and the next waits until every replica is "
                            "back in sync (default: %(default)s)")
    chaos.add_argument("--kills-per-minute", type=float, default=10.0,
                       help="broker kills (SIGKILL, then restart) per minute; on a cluster fewer happen when "
                            "nodes take long to come back in sync (default: %(default)s)")
    chaos.add_argument("--drop-rate", type=float, default=0.05,
                       help="fraction of Produce/AddPartitionsToTxn/EndTxn/TxnOffsetCommit responses the proxy "
                            "drops, closing the connection; half as many are cut part way, delayed 300 ms, or "
                            "have their request dropped; as many accepted Produce requests are sent again "
                            "(default: %(default)s)")
    chaos.add_argument("--data-dir", type=Path,
                       help="keep the brokers' log.dirs and logs here (default: a temporary directory, "
                            "removed after a clean run)")
    chaos.add_argument("--history", type=Path, help="write the recorded history here (JSON lines)")
    chaos.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from oncelog.testing.chaos import ChaosError, ChaosSettings, print_result, run_chaos

    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 1.0)
    if seconds <= 0:
        raise CommandError("the run must last longer than 0 seconds")
    if args.kills_per_minute < 0:
        raise CommandError("--kills-per-minute must not be negative")
    if not 0 <= args.drop_rate <= 1:
        raise CommandError("--drop-rate must be between 0 and 1")
    if args.brokers < 1 or args.brokers == 2:
        # Two quorum members lose their majority whenever one is killed.
        raise CommandError("--brokers must be 1 (standalone) or at least 3 (a cluster)")
    settings = ChaosSettings(duration=seconds, seed=args.seed, kills_per_minute=args.kills_per_minute,
                             drop_rate=args.drop_rate, data_dir=args.data_dir, history_path=args.history,
                             brokers=args.brokers)
    try:
        result = run_chaos(settings)
    except ChaosError as error:
        raise CommandError(f"chaos: {error}") from None
    print_result(result)
    return 0 if result.ok else 1
