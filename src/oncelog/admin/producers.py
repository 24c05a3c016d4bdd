"""`oncelog producers describe`: an alias of `oncelog transactions describe-producers`
(kafka-transactions.sh describe-producers), kept because earlier versions had it: the same
options, output and errors.
"""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    from oncelog.admin.transactions import add_describe_producers

    producers = commands.add_parser(
        "producers", help="describe the producers of a partition (alias of `transactions describe-producers`)"
    )
    actions = producers.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_describe_producers(actions, "describe", alias_of="transactions describe-producers")
