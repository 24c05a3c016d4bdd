"""What a pipeline is: the frozen `PipelineSpec` (the source topic, the sink: topics or an
Iceberg table, the transform or the SQL, the sink mode, the output mode, the trigger, Spark's and the
clients' settings, where it reports) and its checks; the command line that builds it
(`add_arguments`, `spec_from_args`, shared by `oncelog pipeline run` and `python -m
oncelog.spark.pipeline`); the options it gives the source and the sink; and
`PipelineError`, a failure the user can act on, as one line. Plain Python: nothing here
imports Spark, pyiceberg or a Kafka client.
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
OUTPUT_MODES = ("append", "update", "complete")  # Spark's outputMode
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_REPORT_TOPIC = "_oncelog_pipelines"  # the broker's console reads it
ICEBERG_SINK_PREFIX = "iceberg:"  # --sink iceberg:NAMESPACE.TABLE (a topic name cannot hold ':')
DEFAULT_WAREHOUSE_NAME = "warehouse"  # the embedded catalog's directory, next to the checkpoint
EMBEDDED_CATALOG_FILE = "catalog.db"  # the embedded SQLite catalog, in the warehouse directory
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


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
    source_topic: str  # --source: a topic, or several comma-separated (read together, e.g. for join_table)
    # The Kafka sink's topics (--sink A,B): rows go to the first unless their `topic`
    # column names another of them. Empty with an Iceberg sink (sink_table).
    sink_topics: tuple[str, ...]
    checkpoint: str
    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    transforms: tuple[str, ...] = ()  # "module:function" or "path/to/file.py:function", applied in order
    sql: str | None = None
    mode: str = "partition"
    output_mode: str = "append"
    trigger: Trigger = field(default_factory=lambda: Trigger.parse(DEFAULT_TRIGGER))
    master: str | None = None  # None: spark-submit's master, else local[*]
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    transactional_id_prefix: str | None = None
    spark_conf: tuple[tuple[str, str], ...] = ()
    source_options: tuple[tuple[str, str], ...] = ()  # extra options of the source (kafka.*, ...)
    sink_options: tuple[tuple[str, str], ...] = ()  # extra options of the sink (kafka.* producer settings)
    progress: str = "text"  # "text" | "json" | "none"
    verbose: bool = False  # Spark's log, the JVM's output and PySpark's logs on the terminal too
    app_name: str | None = None
    metrics_port: int | None = None  # /metrics in Prometheus text format; 0: a free port; None: off
    metrics_host: str = DEFAULT_METRICS_HOST
    report: bool = True  # a record per micro-batch to report_topic, for the broker's console
    report_topic: str = DEFAULT_REPORT_TOPIC
    name: str | None = None  # Spark's queryName: how the console, /metrics and Spark's UI call it
    # An Iceberg sink (--sink iceberg:NAMESPACE.TABLE): the table, `namespace.table`, and
    # the catalog: pyiceberg's catalog properties (--iceberg-catalog), or none for the
    # embedded SQLite catalog in `warehouse` (--warehouse; None: `warehouse` next to the checkpoint).
    sink_table: str | None = None
    iceberg_catalog: tuple[tuple[str, str], ...] = ()
    warehouse: str | None = None

    def __post_init__(self) -> None:
        if not self.transforms and self.sql is None:
            raise PipelineError("give the transform: --transform module:function or --sql 'SELECT ... FROM source'")
        if self.transforms and self.sql is not None:
            raise PipelineError("--transform and --sql exclude each other: give one")
        _check_topics("--source", self.source_topics)
        if bool(self.sink_topics) == (self.sink_table is not None):
            raise PipelineError("give one sink: --sink TOPIC[,TOPIC...] or --sink iceberg:NAMESPACE.TABLE")
        if self.sink_table is not None:
            self._check_iceberg_sink(self.sink_table)
        elif self.iceberg_catalog or self.warehouse is not None:
            option = "--iceberg-catalog" if self.iceberg_catalog else "--warehouse"
            raise PipelineError(f"{option} is for an Iceberg sink (--sink iceberg:NAMESPACE.TABLE), "
                                f"not the topic {self.sink_topic!r}")
        _check_topics("--sink", self.sink_topics, " (an Iceberg table: --sink iceberg:NAMESPACE.TABLE)")
        for topic in set(self.source_topics) & set(self.sink_topics):
            raise PipelineError(f"--source and --sink are the same topic {topic!r}")
        if self.output_mode not in OUTPUT_MODES:
            raise PipelineError(f"--output-mode {self.output_mode!r}: use append, update or complete")
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
        if not _TOPIC_NAME.fullmatch(self.report_topic):
            raise PipelineError(f"--report-topic {self.report_topic!r} is not a legal topic name")

    def _check_iceberg_sink(self, table: str) -> None:
        from oncelog.spark.iceberg.options import TABLE_NAME_RULE, table_parts

        if not table:
            raise PipelineError(f"--sink {ICEBERG_SINK_PREFIX}: give the table, as "
                                f"{ICEBERG_SINK_PREFIX}NAMESPACE.TABLE (e.g. {ICEBERG_SINK_PREFIX}db.orders)")
        if table_parts(table) is None:
            raise PipelineError(f"--sink {ICEBERG_SINK_PREFIX}{table}: the table must be {TABLE_NAME_RULE}")
        if self.mode != "partition":
            raise _mode_with_iceberg(self.mode)
        if self.output_mode != "append":
            raise PipelineError(f"--output-mode {self.output_mode}: an Iceberg sink appends a snapshot per "
                                "micro-batch; use --output-mode append (the default)")
        if self.transactional_id_prefix is not None:
            raise PipelineError("--transactional-id-prefix is the Kafka sink's: an Iceberg sink uses no "
                                "Kafka transactions; leave it out")
        if self.iceberg_catalog and self.warehouse is not None:
            raise PipelineError("--warehouse is the embedded catalog's directory: with --iceberg-catalog, give "
                                "the catalog's own warehouse (--iceberg-catalog warehouse=...)")
        if (not self.iceberg_catalog and self.warehouse is None and _URI.match(self.checkpoint)
                and not self.checkpoint.startswith("file://")):
            raise PipelineError(f"--checkpoint {self.checkpoint} is not a local directory, so the embedded "
                                "Iceberg catalog has no default place: give --warehouse DIR or --iceberg-catalog")

    @property
    def checkpoint_location(self) -> str:
        """Local paths made absolute (the driver may change directory); URIs kept."""
        if _URI.match(self.checkpoint):
            return self.checkpoint
        return str(Path(self.checkpoint).expanduser().resolve())

    @property
    def source_topics(self) -> tuple[str, ...]:
        return topic_list(self.source_topic)

    @property
    def sink_topic(self) -> str | None:
        """The Kafka sink's first topic: where rows go that name no other one."""
        return self.sink_topics[0] if self.sink_topics else None

    @property
    def sink_name(self) -> str:
        """The sink as --sink names it: the topics, or iceberg:NAMESPACE.TABLE."""
        if self.sink_table is not None:
            return f"{ICEBERG_SINK_PREFIX}{self.sink_table}"
        return ",".join(self.sink_topics)

    @property
    def sink_mode(self) -> str:
        """What reports and metrics call the sink: partition or batch (Kafka), iceberg."""
        from oncelog.spark.iceberg.options import ICEBERG_MODE

        return ICEBERG_MODE if self.sink_table is not None else self.mode

    @property
    def embedded_warehouse(self) -> Path | None:
        """An Iceberg sink without --iceberg-catalog: the directory of the embedded SQLite
        catalog (`catalog.db`) and of the tables' files; --warehouse, else `warehouse` next
        to the checkpoint (`--checkpoint /data/ck/orders` -> `/data/ck/warehouse`), so
        pipelines whose checkpoints sit side by side share one catalog. None otherwise."""
        if self.sink_table is None or self.iceberg_catalog:
            return None
        if self.warehouse is not None:
            return Path(self.warehouse.removeprefix("file://")).expanduser().resolve()
        return Path(self.checkpoint_location.removeprefix("file://")).parent / DEFAULT_WAREHOUSE_NAME

    def describe_iceberg_sink(self) -> str:
        """Where an Iceberg sink writes, for the runner's first line."""
        warehouse = self.embedded_warehouse
        if warehouse is not None:
            return (f"Iceberg table {self.sink_table} in the embedded SQLite catalog "
                    f"{warehouse / EMBEDDED_CATALOG_FILE} (its files under {warehouse})")
        catalog = dict(self.iceberg_catalog)
        # Not a password in a SQLAlchemy URL (postgresql://user:password@host/db).
        uri = re.sub(r"(://[^/:@]+):[^/]*@", r"\1:***@", catalog.get("uri", ""))
        where = uri or catalog.get("type") or "from pyiceberg's configuration"
        return f"Iceberg table {self.sink_table} in the catalog {where}"

    @property
    def transactional_id(self) -> str:
        """The Kafka sink's transactionalIdPrefix; the sink appends the query id (kept in the
        checkpoint), so restarts reuse the ids and other pipelines never collide."""
        if self.transactional_id_prefix:
            return self.transactional_id_prefix
        return f"oncelog-pipeline-{(self.sink_topic or '')[:60]}"  # the sink allows 100 characters

    def describe_transform(self) -> str:
        return f"--sql {self.sql!r}" if self.sql is not None else " then ".join(self.transforms)


def add_arguments(parser: argparse.ArgumentParser, *, connection: bool = True) -> None:
    """The runner's options, for `oncelog pipeline run` and `python -m oncelog.spark.pipeline`.
    Without `connection`, the caller adds the connection options (`oncelog pipeline run`
    takes every oncelog command's: --bootstrap-server, --command-config, -X) and sets
    `args.bootstrap_servers`."""
    parser.add_argument("--source", required=True, metavar="TOPIC[,TOPIC...]",
                        help="topics to read (read_committed), e.g. a stream's and the table's it joins "
                        "(join_table, from oncelog.spark)")
    parser.add_argument("--sink", required=True, metavar="TOPIC[,TOPIC...]|iceberg:NAMESPACE.TABLE",
                        help="where to write, exactly once: topics, or an Apache Iceberg table as "
                        "iceberg:NAMESPACE.TABLE (one snapshot per micro-batch; see --iceberg-catalog). "
                        "Rows go to the first topic unless their topic column names another one listed "
                        "(a row naming a topic not listed fails the micro-batch)")
    transform = parser.add_mutually_exclusive_group(required=True)
    transform.add_argument(
        "--transform", action="append", metavar="MODULE:FUNCTION",
        help="a DataFrame -> DataFrame function, as package.module:function or path/to/file.py:function; "
        "repeat to apply several in order. It gets Spark's Kafka columns (key, value, topic, partition, "
        "offset, timestamp, timestampType, headers) and returns value (string or binary) and optionally "
        "key, headers, partition, topic (one of --sink's); or, the last one, a dict {topic: DataFrame} of "
        "several outputs. For an Iceberg sink, the table's columns (all of the result's columns go to the "
        "table)",
    )
    transform.add_argument("--sql", metavar="QUERY", help=f"Spark SQL over the temp view {SOURCE_VIEW!r}")
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="Spark's checkpoint: the pipeline's progress; restart with the same one")
    if connection:
        parser.add_argument("--bootstrap-server", "--bootstrap-servers", dest="bootstrap_servers",
                            default=os.environ.get("ONCELOG_BOOTSTRAP") or DEFAULT_BOOTSTRAP,
                            metavar="HOST:PORT", help="default: $ONCELOG_BOOTSTRAP, else %(default)s")
    parser.add_argument("--mode", choices=MODES,
                        help="the Kafka sink's mode: partition (a transaction per task, any Kafka cluster) or "
                        "batch (one atomic micro-batch; needs transaction.two.phase.commit.enable=true on the "
                        "broker); default: partition. Not for an Iceberg sink (a snapshot per micro-batch)")
    parser.add_argument("--output-mode", choices=OUTPUT_MODES, default="append",
                        help="Spark's output mode: append (rows once, final), update (the rows an aggregation "
                        "changed, each micro-batch), complete (the whole result, each micro-batch); "
                        "default: %(default)s")
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
                        help="prefix of the Kafka sink's transactional ids "
                             "(default: oncelog-pipeline-<sink>; the sink adds the query id)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting, repeatable")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra source option, e.g. kafka.security.protocol=SSL; repeatable")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra sink option, e.g. kafka.linger.ms=20, or for an Iceberg sink "
                        "partitionBy=day(timestamp), createTableIfMissing=false (docs/iceberg.md); repeatable")
    parser.add_argument("--iceberg-catalog", action="append", default=[], metavar="KEY=VALUE",
                        help="an Iceberg sink's catalog: a pyiceberg catalog property (type=rest, "
                        "uri=https://..., warehouse=..., credential=...; type=sql, uri=postgresql://...), "
                        "repeatable. Without it: an embedded SQLite catalog, DIR/catalog.db, with the "
                        "tables' files under DIR (see --warehouse)")
    parser.add_argument("--warehouse", metavar="DIR",
                        help="the embedded Iceberg catalog's directory, when no --iceberg-catalog is given; "
                        f"default: {DEFAULT_WAREHOUSE_NAME} next to the checkpoint (--checkpoint /data/ck/orders: "
                        f"/data/ck/{DEFAULT_WAREHOUSE_NAME})")
    parser.add_argument("--progress", choices=("text", "json", "none"), default="text",
                        help="one line per micro-batch on stdout; default: %(default)s")
    parser.add_argument("--verbose", action="store_true",
                        help="show live on stderr what otherwise goes only to <checkpoint>/logs/: the JVM's "
                        "output (its warnings, Python workers' prints), PySpark's own logs and Spark's log "
                        "(which the log file keeps too)")
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
    sink_topics, sink_table = parse_sink(args.sink)
    if sink_table is not None and args.mode is not None:  # even --mode partition, the default of a topic sink
        raise _mode_with_iceberg(args.mode)
    return PipelineSpec(
        source_topic=args.source,
        sink_topics=sink_topics,
        sink_table=sink_table,
        iceberg_catalog=_iceberg_catalog(args.iceberg_catalog),
        warehouse=args.warehouse,
        checkpoint=args.checkpoint,
        bootstrap_servers=args.bootstrap_servers,
        transforms=tuple(args.transform or ()),
        sql=args.sql,
        mode=args.mode or "partition",
        output_mode=args.output_mode,
        trigger=Trigger.parse(args.trigger),
        master=args.master,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        starting_offsets=args.starting_offsets,
        transactional_id_prefix=args.transactional_id_prefix,
        spark_conf=_key_values(args.conf, "--conf"),
        source_options=_key_values(args.source_option, "--source-option"),
        sink_options=_key_values(args.sink_option, "--sink-option"),
        progress=args.progress,
        verbose=args.verbose,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        report=args.report,
        report_topic=args.report_topic,
        name=args.name,
    )


def _mode_with_iceberg(mode: str) -> PipelineError:
    return PipelineError(f"--mode {mode} is the Kafka sink's: an Iceberg sink commits each micro-batch as one "
                         "snapshot; leave --mode out")


def is_iceberg_sink(sink: str) -> bool:
    """--sink names an Iceberg table (iceberg:NAMESPACE.TABLE), not a topic."""
    return sink.startswith(ICEBERG_SINK_PREFIX)


def parse_sink(sink: str) -> tuple[tuple[str, ...], str | None]:
    """--sink as (topics, None) or ((), Iceberg table); PipelineSpec checks the names."""
    if is_iceberg_sink(sink):
        return (), sink[len(ICEBERG_SINK_PREFIX):].strip()
    return topic_list(sink), None


def topic_list(text: str) -> tuple[str, ...]:
    """`--source` and `--sink`'s comma-separated topics (checked by `_check_topics`)."""
    return tuple(topic.strip() for topic in text.split(","))


def _check_topics(option: str, topics: tuple[str, ...], hint: str = "") -> None:
    for topic in topics:
        if not _TOPIC_NAME.fullmatch(topic):
            raise PipelineError(f"{option} {topic!r} is not a legal topic name{hint}")
    if len(set(topics)) != len(topics):
        raise PipelineError(f"{option} {','.join(topics)} names a topic twice")


def _iceberg_catalog(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    pairs = _key_values(items, "--iceberg-catalog")
    for key, _ in pairs:
        if key.lower().startswith("catalog."):
            raise PipelineError(f"--iceberg-catalog takes the catalog's own property names: "
                                f"{key[len('catalog.'):]}=..., not {key}=...")
    return pairs


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
        "subscribe": ",".join(spec.source_topics),
        "startingOffsets": spec.starting_offsets,
        "includeHeaders": "true",
    }
    if spec.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(spec.max_offsets_per_trigger)
    options.update(dict(spec.source_options))
    return options


def report_client_settings(spec: PipelineSpec) -> dict[str, str]:
    """The reporter's producer: the Kafka sink's bootstrap servers and `kafka.*` client
    settings (--sink-option and the connection options; with an Iceberg sink, the source's)
    as librdkafka takes them (a Java `sasl.jaas.config` becomes `sasl.username` and
    `sasl.password`)."""
    from oncelog.client.config import librdkafka_settings

    options = source_options(spec) if spec.sink_table is not None else sink_options(spec)
    return librdkafka_settings((key[len("kafka."):], value) for key, value in options.items()
                               if key.startswith("kafka."))


def sink_options(spec: PipelineSpec) -> dict[str, str]:
    """The options the pipeline gives the sink (--sink-option last, so they win): the Kafka
    sink's, or for an Iceberg sink the table, the catalog (--iceberg-catalog as `catalog.*`,
    else the embedded SQLite catalog) and the checkpoint."""
    if spec.sink_table is not None:
        return {
            "table": spec.sink_table,
            **iceberg_catalog_options(spec),
            "checkpointLocation": spec.checkpoint_location,
            **dict(spec.sink_options),
        }
    return {
        "kafka.bootstrap.servers": spec.bootstrap_servers,
        "topic": spec.sink_topic or "",
        "topics": ",".join(spec.sink_topics),
        "mode": spec.mode,
        "transactionalIdPrefix": spec.transactional_id,
        "checkpointLocation": spec.checkpoint_location,
        **dict(spec.sink_options),
    }


def iceberg_catalog_options(spec: PipelineSpec) -> dict[str, str]:
    """An Iceberg sink's `catalog.*` options: --iceberg-catalog, else the embedded SQLite
    catalog in the warehouse directory (`catalog.db`, the tables' files beside it)."""
    warehouse = spec.embedded_warehouse
    if warehouse is None:
        return {f"catalog.{key}": value for key, value in spec.iceberg_catalog}
    return {"catalog.type": "sql", "catalog.uri": f"sqlite:///{warehouse / EMBEDDED_CATALOG_FILE}",
            "catalog.warehouse": f"file://{warehouse}"}
