"""The `oncelog` command: one argparse tree, each command group registered by its module.

Command groups mirror Kafka's tools: `broker start` (kafka-server-start.sh),
`topics` (kafka-topics.sh), `configs` (kafka-configs.sh), `produce` / `consume` (the
console producer and consumer), `transactions` (kafka-transactions.sh), `groups`
(kafka-consumer-groups.sh).
Errors a user can fix end the command with a one-line message and exit status 1, usage
mistakes (an unknown option, a missing argument) included.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from oncelog import __version__
from oncelog.errors import CommandError


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the CLI's error convention: a usage mistake is one line,
    `oncelog: error: <command>: <what is wrong> (see <command> --help)`, and exit status 1,
    as Kafka's tools exit 1 on a usage error (argparse's own is usage text and status 2).
    Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("oncelog").strip()
        where = f"{command}: " if command else ""
        self.exit(1, f"oncelog: error: {where}{message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from oncelog.admin import (
        acls,
        chaos,
        configs,
        console,
        demo,
        groups,
        pipeline,
        producers,
        topics,
        transactions,
    )
    from oncelog.broker import cli as broker_cli
    from oncelog.cluster import cli as cluster_cli

    parser = ArgumentParser(
        prog="oncelog",
        description="oncelog: a Kafka-protocol log with exactly-once semantics.",
    )
    parser.add_argument("--version", action="version", version=f"oncelog {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    broker_cli.register(commands)
    cluster_cli.register(commands)
    topics.register(commands)
    configs.register(commands)
    acls.register(commands)
    console.register(commands)
    groups.register(commands)
    producers.register(commands)
    transactions.register(commands)
    pipeline.register(commands)
    demo.register(commands)
    chaos.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except CommandError as error:
        print(f"oncelog: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
