"""`oncelog pipeline run`: an exactly-once Spark pipeline from topics to other topics, or
into an Apache Iceberg table.

The options and the runner live in `oncelog.spark.pipeline` (also runnable as
`python -m oncelog.spark.pipeline` and under spark-submit); this module only hangs them
on the `oncelog` command tree and turns the runner's errors into the CLI's one line.
"""

from __future__ import annotations

import argparse
import os

from oncelog.admin.clients import DEFAULT_BOOTSTRAP, add_connection_arguments, make_client, user_properties
from oncelog.errors import CommandError


def register(commands: argparse._SubParsersAction) -> None:
    from oncelog.spark.pipeline.spec import add_arguments

    pipeline = commands.add_parser(
        "pipeline", help="run exactly-once Spark pipelines (topic -> transform -> topic or Iceberg table)"
    )
    actions = pipeline.add_subparsers(dest="pipeline_action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        help="read topics (read_committed), transform each micro-batch, write other topics or an "
        "Iceberg table exactly once",
        description="Read --source with read_committed, apply --transform or --sql, and write --sink "
        "through the exactly-once oncelog sink: topics (a row goes to the first unless its topic column "
        "names another), or an Apache Iceberg table with --sink "
        "iceberg:NAMESPACE.TABLE (one snapshot per micro-batch; the catalog from --iceberg-catalog, "
        "else an embedded SQLite catalog in --warehouse). Progress lives in --checkpoint: run again "
        "with the same checkpoint to continue where it stopped. Each micro-batch is reported to "
        "--report-topic for the broker's console, and with --metrics-port served as Prometheus metrics.",
    )
    add_arguments(run, connection=False)
    add_connection_arguments(run, aliases=("--bootstrap-servers",))
    run.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """The connection options as every oncelog command takes them: the bootstrap servers
    from --bootstrap-server (or --bootstrap-servers), else bootstrap.servers of -X or
    --command-config, else $ONCELOG_BOOTSTRAP; every other client property becomes a
    `kafka.*` option of both the source and the Kafka sink (--source-option and
    --sink-option win over them); an Iceberg sink takes no Kafka settings."""
    from oncelog.spark.pipeline.command import run_from_args
    from oncelog.spark.pipeline.spec import PipelineError, is_iceberg_sink

    properties = user_properties(args)
    args.bootstrap_servers = (args.bootstrap_server or properties.pop("bootstrap.servers", None)
                              or os.environ.get("ONCELOG_BOOTSTRAP") or DEFAULT_BOOTSTRAP)
    properties.pop("bootstrap.servers", None)
    _check_client_properties(properties)
    shared = [f"kafka.{key}={value}" for key, value in properties.items()]
    args.source_option = shared + args.source_option
    if not is_iceberg_sink(args.sink):
        args.sink_option = shared + args.sink_option
    try:
        return run_from_args(args)
    except PipelineError as error:
        raise CommandError(str(error)) from None


def _check_client_properties(properties: dict[str, str]) -> None:
    """-X and --command-config are checked by librdkafka as every command checks them, so
    that a typo there is reported as theirs, not as a --source-option or --sink-option."""
    if not properties:
        return
    from confluent_kafka import Producer

    # No broker to connect to, no log: only the names and values are checked.
    make_client(Producer, {**properties, "bootstrap.servers": "", "log_level": 0})
