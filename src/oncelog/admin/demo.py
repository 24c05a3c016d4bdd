"""`oncelog demo`: the main job run by `make demo`.

An order-enrichment pipeline on Spark, exactly once, through injected faults: an embedded
broker, orders written in transactions (some aborted), the pipeline runner as a driver
subprocess with a task that fails on its first attempt, the driver killed with SIGKILL
and restarted from its checkpoint, then a read_committed check of every order (with
`--sink iceberg`: into an Apache Iceberg table, checked with pyiceberg). Prints a report;
exits 1 if any order is missing, duplicated, leaked from an aborted transaction or
wrongly enriched. The job itself is `oncelog.demo.job`.

`oncelog demo --stateful` runs the seeds' Kafka Streams application instead (windowed
counts, branches, a stream-table join; `oncelog.demo.stateful`), through aborted input
and driver kills, each output checked against an independent computation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oncelog.errors import CommandError


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="the main job: an exactly-once Spark pipeline (order enrichment) through faults, checked",
    )
    demo.add_argument("--stateful", action="store_true",
                      help="run the seeds' Kafka Streams application instead: windowed counts, branches and a "
                      "stream-table join, from input-events and reference-data into four topics, one query")
    demo.add_argument("--messages", type=int, default=20_000,
                      help="orders (with --stateful: events) to write, committed and aborted (default: %(default)s)")
    demo.add_argument("--sink", choices=("kafka", "iceberg"), default="kafka",
                      help="kafka: the topic enriched-orders; iceberg: the Apache Iceberg table "
                      "demo.enriched_orders in an embedded SQLite catalog, checked with pyiceberg "
                      "(default: %(default)s)")
    demo.add_argument("--mode", choices=("batch", "partition"),
                      help="the Kafka sink's mode (default: batch)")
    demo.add_argument("--kills", type=int,
                      help="times the driver is killed with SIGKILL and restarted (default: 1; with --stateful 2: "
                      "the first and every second one right after the sink's commit, before Spark's commit log)")
    demo.add_argument(
        "--data-dir", type=Path,
        help="keep the broker's log here (default: a temporary directory, removed after)",
    )
    demo.add_argument(
        "--warehouse", type=Path, metavar="DIR",
        help="--sink iceberg: keep the Iceberg catalog and table here (default: a temporary directory, "
        "removed after)",
    )
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from oncelog.demo.driver import DemoError

    if args.messages < 10:
        raise CommandError("--messages must be at least 10")
    if args.kills is not None and args.kills < 0:
        raise CommandError("--kills must not be negative")
    if args.stateful:
        return _run_stateful(args)
    from oncelog.demo.job import DemoSettings, run_demo

    if args.sink == "iceberg" and args.mode is not None:
        raise CommandError("--mode is the Kafka sink's: with --sink iceberg each micro-batch is one snapshot")
    if args.sink != "iceberg" and args.warehouse is not None:
        raise CommandError("--warehouse is for --sink iceberg")
    try:
        return run_demo(DemoSettings(messages=args.messages, mode=args.mode or "batch",
                                     kills=1 if args.kills is None else args.kills,
                                     data_dir=args.data_dir, sink=args.sink, warehouse=args.warehouse))
    except DemoError as error:
        raise CommandError(f"demo: {error}") from None


def _run_stateful(args: argparse.Namespace) -> int:
    from oncelog.demo.driver import DemoError
    from oncelog.demo.stateful import StatefulSettings, run_stateful_demo

    if args.sink != "kafka" or args.warehouse is not None:
        raise CommandError("--stateful writes topics: --sink iceberg and --warehouse do not apply")
    try:
        return run_stateful_demo(StatefulSettings(messages=args.messages, mode=args.mode or "batch",
                                                  kills=2 if args.kills is None else args.kills,
                                                  data_dir=args.data_dir))
    except DemoError as error:
        raise CommandError(f"demo: {error}") from None

