"""`oncelog chaos`: the soak run. A broker process killed with SIGKILL at random moments,
a fault proxy dropping responses, transactional, idempotent and consume-transform-produce
clients recording everything they did and saw, and the history checker's verdict.

Exit status 0 only if the checker found no anomaly (and the final reads completed);
1 otherwise, with every anomaly and its offending records printed. The run itself is
`oncelog.testing.chaos`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oncelog.cli import CommandError


def register(commands: argparse._SubParsersAction) -> None:
    chaos = commands.add_parser(
        "chaos",
        help="soak run: broker kills and dropped responses under real clients, judged by the history checker",
    )
    length = chaos.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="length of the chaos phase in minutes (default: 1)")
    length.add_argument("--seconds", type=float, help="length of the chaos phase in seconds")
    chaos.add_argument("--seed", type=int, default=1,
                       help="seeds kill moments, faults and workloads (default: %(default)s)")
    chaos.add_argument("--kills-per-minute", type=float, default=10.0,
                       help="broker kills (SIGKILL, then restart) per minute (default: %(default)s)")
    chaos.add_argument("--drop-rate", type=float, default=0.05,
                       help="fraction of Produce/AddPartitionsToTxn/EndTxn/TxnOffsetCommit responses the proxy "
                            "drops, closing the connection; half as many are cut part way, delayed 300 ms, or "
                            "have their request dropped; as many accepted Produce requests are sent again "
                            "(default: %(default)s)")
    chaos.add_argument("--data-dir", type=Path,
                       help="keep the broker's log.dirs and log here (default: a temporary directory, "
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
    settings = ChaosSettings(duration=seconds, seed=args.seed, kills_per_minute=args.kills_per_minute,
                             drop_rate=args.drop_rate, data_dir=args.data_dir, history_path=args.history)
    try:
        result = run_chaos(settings)
    except ChaosError as error:
        raise CommandError(f"chaos: {error}") from None
    print_result(result)
    return 0 if result.ok else 1
