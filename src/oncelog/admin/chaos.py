"""`oncelog chaos`: the soak run. Faults at random moments: on one broker SIGKILLs; on a
cluster (`--brokers 3`) also process pauses, network partitions and a full disk (the last
two need root: network namespaces, a tmpfs per node). A fault proxy per broker drops
responses; transactional, idempotent and consume-transform-produce clients record
everything they did and saw, and the history checker gives the verdict; on a cluster the
replicas are also compared batch by batch after a clean shutdown, and each fault's
longest stall of acknowledged writes and of commits is reported.

Exit status 0 only if the checker found no anomaly, the final reads completed and (on a
cluster) the replicas agree; 1 otherwise, with every anomaly and its offending records
printed. The run itself is `oncelog.chaos.run`, the faults `oncelog.chaos.nemesis`.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

from oncelog.errors import CommandError


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
                            "etcd member), topics with a replica on every node and min.insync.replicas=2; one "
                            "node at a time is hit, and the next fault waits until every replica is back in sync "
                            "(default: %(default)s)")
    chaos.add_argument("--faults", default=None, metavar="KINDS",
                       help="comma-separated fault kinds, taken in turn: kill (SIGKILL, restarted after a while), "
                            "pause (SIGSTOP of a broker, a node or an etcd member), partition (one node cut from "
                            "the others while clients still reach it; root: network namespaces), disk (a node's "
                            "log dir volume full; root: a tmpfs per node), sessions (every broker's session lease "
                            "revoked at once in the metadata quorum). Kinds this machine cannot do are skipped "
                            "with a message (default: kill on one broker, all five on a cluster)")
    chaos.add_argument("--faults-per-minute", "--kills-per-minute", dest="faults_per_minute", type=float,
                       default=10.0,
                       help="faults planned per minute; on a cluster fewer happen when nodes take long to come "
                            "back in sync (default: %(default)s)")
    chaos.add_argument("--fault-seconds", default="1-10", metavar="LOW-HIGH",
                       help="how long a pause, partition or full disk lasts, drawn at random (default: "
                            "%(default)s); a killed node stays down up to 4/3 of the session")
    chaos.add_argument("--session-timeout-ms", type=int, default=3000,
                       help="broker.session.timeout.ms of a cluster's brokers (default: %(default)s, quick "
                            "failure detection; Kafka's default is 9000)")
    chaos.add_argument("--drop-rate", type=float, default=0.05,
                       help="fraction of Produce/AddPartitionsToTxn/EndTxn/TxnOffsetCommit responses the proxy "
                            "drops, closing the connection; half as many are cut part way, delayed 300 ms, or "
                            "have their request dropped; as many accepted Produce requests are sent again "
                            "(default: %(default)s)")
    chaos.add_argument("--inputs", type=int, default=None, metavar="N",
                       help="records seeded into the transform loop's 3 input partitions before the chaos "
                            "phase (default: 60 a second of the run, at least 2000)")
    chaos.add_argument("--secure", action="store_true",
                       help="a cluster with SASL_SSL listeners only (clients and between the brokers; a "
                            "generated CA and PLAIN users) and an authorizer: the workers are a user whose ACLs "
                            "allow the chaos topics, groups and transactional ids and nothing else. TLS hides "
                            "the frames from the proxies, so no response is dropped (--drop-rate is ignored)")
    chaos.add_argument("--data-dir", type=Path,
                       help="keep the brokers' log.dirs and logs here (default: a temporary directory, "
                            "removed after a clean run)")
    chaos.add_argument("--history", type=Path, help="write the recorded history here (JSON lines)")
    chaos.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from oncelog.chaos.run import print_result, run_chaos
    from oncelog.chaos.settings import ChaosError, ChaosSettings

    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 1.0)
    if seconds <= 0:
        raise CommandError("the run must last longer than 0 seconds")
    if args.faults_per_minute < 0:
        raise CommandError("--faults-per-minute must not be negative")
    if not 0 <= args.drop_rate <= 1:
        raise CommandError("--drop-rate must be between 0 and 1")
    if args.brokers < 1 or args.brokers == 2:
        # Two quorum members lose their majority whenever one is killed.
        raise CommandError("--brokers must be 1 (standalone) or at least 3 (a cluster)")
    faults = _fault_kinds(args.faults, args.brokers)
    fault_seconds = _seconds_range(args.fault_seconds)
    if args.session_timeout_ms < 1000:
        raise CommandError("--session-timeout-ms must be at least 1000")
    if args.inputs is not None and args.inputs < 3:
        raise CommandError("--inputs must be at least 3 (a record for each input partition)")
    if args.secure and args.brokers == 1:
        raise CommandError("--secure needs a cluster (--brokers 3 or more)")
    settings = ChaosSettings(duration=seconds, seed=args.seed, faults_per_minute=args.faults_per_minute,
                             drop_rate=args.drop_rate, data_dir=args.data_dir, history_path=args.history,
                             brokers=args.brokers, faults=faults, fault_seconds=fault_seconds,
                             session_timeout_ms=args.session_timeout_ms, secure=args.secure, inputs=args.inputs)
    try:
        with _signals_interrupt(signal.SIGTERM, signal.SIGHUP):
            result = run_chaos(settings)
    except ChaosError as error:
        raise CommandError(f"chaos: {error}") from None
    print_result(result)
    return 0 if result.ok else 1


@contextlib.contextmanager
def _signals_interrupt(*signums: signal.Signals) -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal) end the run as Ctrl-C does: through its
    clean-up, which heals every fault (namespaces, bridge, tmpfs mounts) and stops the
    cluster. Their default action would leave all of that behind."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, interrupt) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _fault_kinds(text: str | None, brokers: int) -> tuple[str, ...]:
    from oncelog.chaos.nemesis import FAULT_KINDS

    if text is None:
        return ("kill",) if brokers == 1 else FAULT_KINDS
    kinds = tuple(dict.fromkeys(kind.strip() for kind in text.split(",") if kind.strip()))
    unknown = [kind for kind in kinds if kind not in FAULT_KINDS]
    if unknown or not kinds:
        raise CommandError(f"--faults: unknown kind {', '.join(unknown) or '(none given)'}; "
                           f"known: {', '.join(FAULT_KINDS)}")
    if brokers == 1 and kinds != ("kill",):
        raise CommandError("--faults: a standalone broker is only killed; pause, partition, disk and sessions need "
                           "--brokers 3")
    return kinds


def _seconds_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        bounds = (float(low), float(high or low))
    except ValueError:
        raise CommandError(f"--fault-seconds: expected LOW-HIGH in seconds, not {text!r}") from None
    if not 0 < bounds[0] <= bounds[1]:
        raise CommandError(f"--fault-seconds: expected 0 < LOW <= HIGH, not {text!r}")
    return bounds
