"""The `oncelog` command: one argparse tree, each command group registered by its module.

Command groups mirror Kafka's tools: `broker start` (kafka-server-start.sh),
`topics` (kafka-topics.sh), `configs` (kafka-configs.sh), `produce` / `consume` (the
console producer and consumer), `transactions` (kafka-transactions.sh), `groups`
(kafka-consumer-groups.sh).
Errors a user can fix end the command with a one-line message and exit status 1, usage
mistakes (an unknown option, a missing argument) included. A command whose output pipe
closes (`oncelog topics describe | head -1`) ends quietly with exit status 141, as a
Unix tool SIGPIPE ends (admin/output.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from contextlib import nullcontext
from typing import NoReturn

from oncelog import __version__
from oncelog.admin.output import end_on_closed_output
from oncelog.errors import CommandError
from oncelog.kio_import import import_kio_without_hypothesis
from oncelog.stop_signals import stop_on_signals


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the CLI's error convention: a usage mistake is one line,
    `oncelog: error: <command>: <what is wrong> (see <command> --help)`, and exit status 1,
    as Kafka's tools exit 1 on a usage error (argparse's own is usage text and status 2).
    Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("oncelog").strip()
        where = f"{command}: " if command else ""
        self.exit(1, f"oncelog: error: {where}{message} (see {self.prog} --help)\n")


# The module registering each command, in the order `oncelog --help` lists them. A
# command's module is imported only when it runs (or for the full list): the admin
# commands' clients and Spark's pipeline cost about a second to import all together.
COMMAND_MODULES = {
    "broker": "oncelog.broker.cli",
    "cluster": "oncelog.admin.cluster",
    "topics": "oncelog.admin.topics",
    "configs": "oncelog.admin.configs",
    "acls": "oncelog.admin.acls",
    "produce": "oncelog.admin.console",
    "consume": "oncelog.admin.console",
    "groups": "oncelog.admin.groups",
    "share-groups": "oncelog.admin.share_groups",
    "producers": "oncelog.admin.producers",
    "transactions": "oncelog.admin.transactions",
    "leader-election": "oncelog.admin.leader_election",
    "pipeline": "oncelog.admin.pipeline",
    "demo": "oncelog.admin.demo",
    "chaos": "oncelog.admin.chaos",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `oncelog` parser. Given the arguments, only the module of the command they
    name is loaded (none for `--version`; every module when they name no command, or
    one that does not exist, so that help and errors list every command)."""
    parser = ArgumentParser(
        prog="oncelog",
        description="oncelog: a Kafka-protocol log with exactly-once semantics.",
    )
    parser.add_argument("--version", action="version", version=f"oncelog {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    named = argv[0] if argv else None
    if named == "--version":
        wanted = []
    elif named in COMMAND_MODULES:
        wanted = [COMMAND_MODULES[named]]
    else:
        wanted = list(COMMAND_MODULES.values())
    for module_name in dict.fromkeys(wanted):  # in order, each module once
        importlib.import_module(module_name).register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code = _run(sys.argv[1:] if argv is None else argv)
        except SystemExit:  # --help and --version
            sys.stdout.flush()
            raise
        # What is still buffered is written here, where a closed pipe can be answered,
        # not by the interpreter's last flush (a message on stderr and exit status 120).
        sys.stdout.flush()
    except BrokenPipeError as error:
        return end_on_closed_output(error)
    return code


def _run(argv: list[str]) -> int:
    # The pipeline runner ends cleanly on SIGTERM and SIGINT from its first moment, its
    # imports included (oncelog.stop_signals).
    with stop_on_signals() if argv[:2] == ["pipeline", "run"] else nullcontext():
        import_kio_without_hypothesis()
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    try:
        return args.run(args) or 0
    except CommandError as error:
        print(f"oncelog: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
