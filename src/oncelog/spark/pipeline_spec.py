"""What a pipeline is: the frozen `PipelineSpec` (the two topics, the transform or the SQL,
the sink mode, the trigger, Spark's and the clients' settings, where it reports) and its
checks; the command
line that builds it (`add_arguments`, `spec_from_args`, shared by `oncelog pipeline run`
and `python -m oncelog.spark.pipeline`); the options it gives the source and the sink; and
`PipelineError`, a failure the user can act on, as one line. Plain Python: nothing here
imports Spark or a Kafka client.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SOURCE_VIEW = "source"  # the temp view --sql reads
DEFAULT_BOOTSTRAP = "localhost:9092"
DEFAULT_MASTER = "local[*]"
DEFAULT_TRIGGER = "processing-time=1s"
MODES = ("partition", "batch")
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_REPORT_TOPIC = "_oncelog_pipelines"  # the broker's console reads it


class PipelineError(Exception):
    """A failure the user can act on, as one line (the CLI prints it and exits 1)."""


@dataclass(frozen=True)
class Trigger:
    """When micro-batches run: `available-now` (everything committed at start, then stop),
    `once` (one batch of everything, then stop), `processing-time=5s` (keep running)."""

    kind: str  # "available-now" | "once" | "processing-time"
    interval_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> Trigger:
        value = text.strip().lower()
        if value in ("available-now", "availablenow"):
            return cls("available-now")
        if value == "once":
            return cls("once")
        match = re.fullmatch(r"processing-?time=(\d+(?:\.\d+)?)\s*(ms|s|m|)", value)
        if match:
            number, unit = float(match.group(1)), match.group(2) or "s"
            return cls("processing-time", round(number * {"ms": 1, "s": 1000, "m": 60_000}[unit]))
        raise PipelineError(
            f"--trigger {text!r}: use available-now, once, or processing-time=<N>[ms|s|m]"
        )


@dataclass(frozen=True)
class PipelineSpec:
    source_topic: str
    sink_topic: str
    checkpoint: str
    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    transforms: tuple[str, ...] = ()  # "module:function" or "path/to/file.py:function", applied in order
    sql: str | None = None
    mode: str = "partition"
    trigger: Trigger = field(default_factory=lambda: Trigger.parse(DEFAULT_TRIGGER))
    master: str | None = None  # None: spark-submit's master, else local[*]
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    transactional_id_prefix: str | None = None
    spark_conf: tuple[tuple[str, str], ...] = ()
    source_options: tuple[tuple[str, str], ...] = ()  # extra options of the source (kafka.*, ...)
    sink_options: tuple[tuple[str, str], ...] = ()  # extra options of the sink (kafka.* producer settings)
    progress: str = "text"  # "text" | "json" | "none"
    app_name: str | None = None
    metrics_port: int | None = None  # /metrics in Prometheus text format; 0: a free port; None: off
    metrics_host: str = DEFAULT_METRICS_HOST
    report: bool = True  # a record per micro-batch to report_topic, for the broker's console
    report_topic: str = DEFAULT_REPORT_TOPIC
    name: str | None = None  # Spark's queryName: how the console, /metrics and Spark's UI call it

    def __post_init__(self) -> None:
        if not self.transforms and self.sql is None:
            raise PipelineError("give the transform: --transform module:function or --sql 'SELECT ... FROM source'")
        if self.transforms and self.sql is not None:
            raise PipelineError("--transform and --sql exclude each other: give one")
        for option, topic in (("--source", self.source_topic), ("--sink", self.sink_topic)):
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
                raise PipelineError(f"{option} {topic!r} is not a legal topic name")
        if self.source_topic == self.sink_topic:
            raise PipelineError(f"--source and --sink are the same topic {self.source_topic!r}")
        if self.mode not in MODES:
            raise PipelineError(f"--mode {self.mode!r}: use partition or batch")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise PipelineError("--max-offsets-per-trigger must be positive")
        if self.starting_offsets not in ("earliest", "latest"):
            raise PipelineError(f"--starting-offsets {self.starting_offsets!r}: use earliest or latest")
        if not self.checkpoint.strip():
            raise PipelineError("--checkpoint is required: a directory Spark keeps the pipeline's progress in")
        if self.progress not in ("text", "json", "none"):
            raise PipelineError(f"--progress {self.progress!r}: use text, json or none")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise PipelineError(f"--metrics-port {self.metrics_port}: use 0 (a free port) to 65535")
        if not self.metrics_host.strip():
            raise PipelineError("--metrics-host must not be empty")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", self.report_topic):
            raise PipelineError(f"--report-topic {self.report_topic!r} is not a legal topic name")

    @property
    def checkpoint_location(self) -> str:
        """Local paths made absolute (the driver may change directory); URIs kept."""
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", self.checkpoint):
            return self.checkpoint
        return str(Path(self.checkpoint).expanduser().resolve())

    @property
    def transactional_id(self) -> str:
        """The sink's transactionalIdPrefix; the sink appends the query id (kept in the
        checkpoint), so restarts reuse the ids and other pipelines never collide."""
        if self.transactional_id_prefix:
            return self.transactional_id_prefix
        return f"oncelog-pipeline-{self.sink_topic[:60]}"  # the sink allows 100 characters

    def describe_transform(self) -> str:
        return f"--sql {self.sql!r}" if self.sql is not None else " then ".join(self.transforms)


def add_arguments(parser: argparse.ArgumentParser, *, connection: bool = True) -> None:
    """The runner's options, for `oncelog pipeline run` and `python -m oncelog.spark.pipeline`.
    Without `connection`, the caller adds the connection options (`oncelog pipeline run`
    takes every oncelog command's: --bootstrap-server, --command-config, -X) and sets
    `args.bootstrap_servers`."""
    parser.add_argument("--source", required=True, metavar="TOPIC", help="topic to read (read_committed)")
    parser.add_argument("--sink", required=True, metavar="TOPIC", help="topic to write, exactly once")
    transform = parser.add_mutually_exclusive_group(required=True)
    transform.add_argument(
        "--transform", action="append", metavar="MODULE:FUNCTION",
        help="a DataFrame -> DataFrame function, as package.module:function or path/to/file.py:function; "
        "repeat to apply several in order. It gets Spark's Kafka columns (key, value, topic, partition, "
        "offset, timestamp, timestampType, headers) and returns value (string or binary) and optionally "
        "key, headers, partition",
    )
    transform.add_argument("--sql", metavar="QUERY", help=f"Spark SQL over the temp view {SOURCE_VIEW!r}")
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="Spark's checkpoint: the pipeline's progress; restart with the same one")
    if connection:
        parser.add_argument("--bootstrap-server", "--bootstrap-servers", dest="bootstrap_servers",
                            default=os.environ.get("ONCELOG_BOOTSTRAP") or DEFAULT_BOOTSTRAP,
                            metavar="HOST:PORT", help="default: $ONCELOG_BOOTSTRAP, else %(default)s")
    parser.add_argument("--mode", choices=MODES, default="partition",
                        help="sink mode: partition (a transaction per task, any Kafka cluster) or batch "
                        "(one atomic micro-batch; needs transaction.two.phase.commit.enable=true on the "
                        "broker); default: %(default)s")
    parser.add_argument("--trigger", default=DEFAULT_TRIGGER, metavar="TRIGGER",
                        help="available-now | once | processing-time=<N>[ms|s|m]; default: %(default)s")
    parser.add_argument("--master", metavar="MASTER",
                        help=f"Spark master (default: spark-submit's, else {DEFAULT_MASTER}); "
                        "local[N,F] retries failed tasks F-1 times")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help="at most N offsets per micro-batch")
    parser.add_argument("--starting-offsets", choices=("earliest", "latest"), default="earliest",
                        help="where a new checkpoint starts reading; default: %(default)s")
    parser.add_argument("--transactional-id-prefix", metavar="PREFIX",
                        help="prefix of the sink's transactional ids "
                             "(default: oncelog-pipeline-<sink>; the sink adds the query id)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting, repeatable")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra source option, e.g. kafka.security.protocol=SSL; repeatable")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra sink option, e.g. kafka.linger.ms=20; repeatable")
    parser.add_argument("--progress", choices=("text", "json", "none"), default="text",
                        help="one line per micro-batch on stdout; default: %(default)s")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve the micro-batches' metrics (Prometheus text format) at "
                        "http://HOST:PORT/metrics; 0 picks a free port (the runner says which); default: off")
    parser.add_argument("--metrics-host", default=DEFAULT_METRICS_HOST, metavar="HOST",
                        help="the address --metrics-port listens on; default: %(default)s")
    parser.add_argument("--report-topic", default=DEFAULT_REPORT_TOPIC, metavar="TOPIC",
                        help="topic the runner reports each micro-batch to, for the broker's console "
                        "(created if missing: compacted, 1 partition); default: %(default)s")
    parser.add_argument("--no-report", dest="report", action="store_false",
                        help="do not report to --report-topic")
    parser.add_argument("--name", metavar="NAME",
                        help="the query's name (Spark's queryName): how the console, the metrics' query label "
                        "and Spark's UI call it; default: none (the query id)")


def spec_from_args(args: argparse.Namespace) -> PipelineSpec:
    return PipelineSpec(
        source_topic=args.source,
        sink_topic=args.sink,
        checkpoint=args.checkpoint,
        bootstrap_servers=args.bootstrap_servers,
        transforms=tuple(args.transform or ()),
        sql=args.sql,
        mode=args.mode,
        trigger=Trigger.parse(args.trigger),
        master=args.master,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        starting_offsets=args.starting_offsets,
        transactional_id_prefix=args.transactional_id_prefix,
        spark_conf=_key_values(args.conf, "--conf"),
        source_options=_key_values(args.source_option, "--source-option"),
        sink_options=_key_values(args.sink_option, "--sink-option"),
        progress=args.progress,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        report=args.report,
        report_topic=args.report_topic,
        name=args.name,
    )


def _key_values(items: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PipelineError(f"{option} expects KEY=VALUE, got {item!r}")
        pairs.append((key.strip(), value))
    return tuple(pairs)


def source_options(spec: PipelineSpec) -> dict[str, str]:
    """The options the pipeline gives the source (--source-option last, so they win)."""
    options = {
        "kafka.bootstrap.servers": spec.bootstrap_servers,
        "subscribe": spec.source_topic,
        "startingOffsets": spec.starting_offsets,
        "includeHeaders": "true",
    }
    if spec.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(spec.max_offsets_per_trigger)
    options.update(dict(spec.source_options))
    return options


def report_client_settings(spec: PipelineSpec) -> dict[str, str]:
    """The reporter's producer: the sink's bootstrap servers and `kafka.*` client settings
    (--sink-option and the connection options) as librdkafka takes them (a Java
    `sasl.jaas.config` becomes `sasl.username` and `sasl.password`)."""
    from oncelog.client.config import librdkafka_settings

    return librdkafka_settings((key[len("kafka."):], value) for key, value in sink_options(spec).items()
                               if key.startswith("kafka."))


def sink_options(spec: PipelineSpec) -> dict[str, str]:
    """The options the pipeline gives the sink (--sink-option last, so they win)."""
    return {
        "kafka.bootstrap.servers": spec.bootstrap_servers,
        "topic": spec.sink_topic,
        "mode": spec.mode,
        "transactionalIdPrefix": spec.transactional_id,
        "checkpointLocation": spec.checkpoint_location,
        **dict(spec.sink_options),
    }
