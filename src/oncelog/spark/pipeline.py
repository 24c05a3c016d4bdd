"""The pipeline runner: one topic -> a transform -> another topic, exactly once, on Spark.

    oncelog pipeline run --source orders --sink enriched-orders \\
        --transform examples/enrich_orders.py:enrich_orders --checkpoint /var/lib/ckpt/orders
    python -m oncelog.spark.pipeline ...        the same without the oncelog CLI
    spark-submit --master spark://host:7077 $(python -c \\
        'import oncelog.spark.pipeline as p; print(p.__file__)') ...    on a cluster

What this module owns:
- the command line, shared by `oncelog pipeline run` and `main()` (`add_arguments`,
  `spec_from_args`), parsed into a frozen `PipelineSpec`;
- the checks that take a second and run before Spark starts (ten seconds): options, the
  transform's import, the broker, both topics;
- the query: `format("oncelog")` source (read_committed) -> transform -> `format("oncelog")`
  exactly-once sink, with Spark's checkpoint holding the progress;
- watching it: one progress line per micro-batch (text or JSON lines), SIGTERM stops it;
- a failure as one line (`PipelineError`) naming the micro-batch and the source offsets it
  was reading, and the failed task's partition where the plan makes that unambiguous.

Where code runs: everything here runs in the driver process. The transform function is
called once, on the driver, to build the plan; only what the plan contains (column
expressions, or Python UDFs pickled with cloudpickle) runs on executors. A transform given
as a file (`path.py:function`) is shipped to executors with `SparkContext.addPyFile`; a
module (`package.module:function`) must be importable on executors (installed, or sent
with spark-submit's `--py-files`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

FORMAT_NAME = "oncelog"
SOURCE_VIEW = "source"  # the temp view --sql reads
DEFAULT_BOOTSTRAP = "localhost:9092"
DEFAULT_MASTER = "local[*]"
DEFAULT_TRIGGER = "processing-time=1s"
MODES = ("partition", "batch")
# The columns the sink reads from the transform's result; any other column is dropped.
SINK_COLUMNS = ("key", "value", "headers", "partition")
# How long the broker may take to answer the start-up check before it counts as unreachable.
BROKER_CHECK_TIMEOUT_S = 10.0
BROKER_REFUSED_GRACE_S = 3.0
PROGRESS_POLL_S = 0.2
KEPT_BATCHES = 10_000

class PipelineError(Exception):
    """A failure the user can act on, as one line (the CLI prints it and exits 1)."""


# -- the specification ------------------------------------------------------------------


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
    )


def _key_values(items: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PipelineError(f"{option} expects KEY=VALUE, got {item!r}")
        pairs.append((key.strip(), value))
    return tuple(pairs)


# -- checks before Spark starts -----------------------------------------------------------


Transform = Callable[["DataFrame"], "DataFrame"]


@dataclass(frozen=True)
class TransformReference:
    """`--transform module:function` or `path/to/file.py:function`, found but not yet
    imported: a module may build UDFs at import time, which needs a running SparkContext."""

    name: str  # as given
    module: str
    attribute: str
    file: str | None  # the file to ship to executors, for path.py:function

    @classmethod
    def locate(cls, reference: str) -> TransformReference:
        """Before Spark starts: the syntax is right and the file or module exists."""
        target, sep, attribute = reference.rpartition(":")
        if not sep or not target or not attribute:
            raise PipelineError(f"--transform {reference!r}: use module:function or path/to/file.py:function")
        if target.endswith(".py") or os.sep in target:
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise PipelineError(f"--transform {reference!r}: no file {str(path)!r}")
            return cls(reference, path.stem, attribute, str(path))
        try:
            found = importlib.util.find_spec(target)
        except (ImportError, ValueError) as error:
            found = None
            reason = _one_line(error)
        else:
            reason = f"No module named {target!r}"
        if found is None:
            raise PipelineError(f"--transform {reference!r}: cannot import {target!r}: {reason}")
        return cls(reference, target, attribute, None)

    def load(self) -> Transform:
        """On the driver, once the session runs: import the module and find the function."""
        try:
            if self.file is not None:
                spec = importlib.util.spec_from_file_location(self.module, self.file)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                # Under its file name: executors import it by that name from addPyFile.
                sys.modules[self.module] = module
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(self.module)
        except Exception as error:  # noqa: BLE001 (the user's module: anything can go wrong while importing it)
            target = self.file or self.module
            raise PipelineError(f"--transform {self.name!r}: cannot import {target!r}: {_one_line(error)}") from None
        function = getattr(module, self.attribute, None)
        if function is None:
            raise PipelineError(f"--transform {self.name!r}: {self.module!r} has no attribute {self.attribute!r}")
        if not callable(function):
            raise PipelineError(f"--transform {self.name!r}: {self.attribute!r} is not a function")
        return function


def check_options(spec: PipelineSpec) -> None:
    """The source's and the sink's options as they will get them, checked as they will
    check them (kafka.* names by librdkafka too), before Spark starts."""
    from oncelog.spark.errors import SourceError
    from oncelog.spark.options import parse_options
    from oncelog.spark.sink_options import check_client_settings, parse_sink_options

    try:
        parse_options(source_options(spec), streaming=True)
    except SourceError as error:
        raise PipelineError(f"--source-option: {error}") from None
    try:
        check_client_settings(parse_sink_options(sink_options(spec), streaming=True))
    except SourceError as error:  # the sink's errors derive from the source's
        raise PipelineError(f"--sink-option: {error}") from None


def check_two_phase_commit(spec: PipelineSpec) -> None:
    """--mode batch: the cluster keeps prepared transactions (KIP-939), asked with the
    hand-over call the sink's tasks make, on an id of the pipeline's own; before Spark
    starts, and before anything is written."""
    from oncelog.spark.errors import TwoPhaseError
    from oncelog.spark.sink_options import parse_sink_options
    from oncelog.spark.twophase import TwoPhaseClient

    options = parse_sink_options(sink_options(spec), streaming=True)
    try:
        with TwoPhaseClient(options.client, min(options.cluster_timeout_s, BROKER_CHECK_TIMEOUT_S)) as client:
            client.check_two_phase_commit()
            client.keep_prepared(f"{spec.transactional_id}-check")
    except TwoPhaseError as error:
        raise PipelineError(f"--mode batch: {error}") from None


def check_cluster(spec: PipelineSpec) -> None:
    """The broker answers and both topics exist, or a one-line PipelineError, in seconds
    (Spark would take ten seconds to start before saying the same in a long trace)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    refused_codes = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE)
    settings: dict[str, str | int | float | bool] = {
        key[len("kafka."):]: value for key, value in spec.source_options if key.startswith("kafka.")
    }
    # No librdkafka log lines (refused connections...): the outcome is reported as one line.
    settings.update({"bootstrap.servers": spec.bootstrap_servers, "log_level": 0})
    try:
        admin = AdminClient(settings)
    except (KafkaException, ValueError, TypeError) as error:
        raise PipelineError(f"--source-option: invalid client setting: {_one_line(error)}") from None
    started = time.monotonic()
    while True:
        try:
            metadata = admin.list_topics(timeout=1.0)
            break
        except KafkaException as error:
            waited = time.monotonic() - started
            # A refused connection gets a short grace (a broker still starting), a slow one longer.
            refused = _error_code(error) in refused_codes
            if waited >= BROKER_CHECK_TIMEOUT_S or (refused and waited >= BROKER_REFUSED_GRACE_S):
                raise PipelineError(
                    f"cannot reach the broker at --bootstrap-server {spec.bootstrap_servers}: {_one_line(error)}"
                ) from None
    for option, topic in (("--source", spec.source_topic), ("--sink", spec.sink_topic)):
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise PipelineError(
                f"{option} topic {topic!r} does not exist on {spec.bootstrap_servers} "
                f"(create it: oncelog topics create --bootstrap-server {spec.bootstrap_servers} --topic {topic})"
            )


def _error_code(error: Exception) -> int | None:
    from confluent_kafka import KafkaError

    return error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None


# -- building and running the query -------------------------------------------------------


def spark_log_path(spec: PipelineSpec) -> Path:
    """Where the Spark the runner starts writes its log (warnings, failed tasks' stack
    traces): `<checkpoint>/logs/` when the checkpoint is a local directory, else the
    temporary directory. The runner itself prints one line per event."""
    name = f"spark-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    checkpoint = spec.checkpoint_location
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", checkpoint):
        return Path(tempfile.gettempdir()) / f"oncelog-pipeline-{name}"
    return Path(checkpoint) / "logs" / name


def start_session(spec: PipelineSpec, log_file: Path | None = None) -> SparkSession:
    """A session for the pipeline. Under spark-submit (PYSPARK_GATEWAY_PORT is set) the
    cluster's master and settings are used as they are; otherwise a local session
    (`--master`, default local[*]) with oncelog's local defaults, logging to `log_file`."""
    from oncelog.spark.session import register

    conf = dict(spec.spark_conf)
    app_name = spec.app_name or f"oncelog-pipeline {spec.source_topic} -> {spec.sink_topic}"
    if "PYSPARK_GATEWAY_PORT" in os.environ and spec.master is None:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        register(spark)
        return spark
    from oncelog.spark.session import JavaNotFound, build_session

    try:
        return build_session(app_name, master=spec.master or DEFAULT_MASTER, conf=conf, log_file=log_file)
    except JavaNotFound as error:
        raise PipelineError(f"Spark needs Java 17+: {error}") from None


def build_output(spark: SparkSession, spec: PipelineSpec, transforms: Sequence[TransformReference]) -> DataFrame:
    """The transformed stream, reduced to the sink's columns; checked before it starts."""
    from pyspark.errors import PySparkException
    from pyspark.sql import DataFrame

    source = build_source(spark, spec)
    if spec.sql is not None:
        source.createOrReplaceTempView(SOURCE_VIEW)
        try:
            result = spark.sql(spec.sql)
        except PySparkException as error:
            raise PipelineError(f"--sql: {spark_error_line(str(error))}") from None
    else:
        result = source
        for transform in transforms:
            if transform.file is not None:
                spark.sparkContext.addPyFile(transform.file)
            function = transform.load()
            try:
                result = function(result)
            except Exception as error:  # noqa: BLE001 (the user's code, on the driver, building the plan)
                raise PipelineError(
                    f"--transform {transform.name} raised while building the query: {_one_line(error)}"
                ) from None
            if not isinstance(result, DataFrame):
                raise PipelineError(
                    f"--transform {transform.name} returned {type(result).__name__}, not a DataFrame"
                )
    return sink_columns(result, spec)


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


def build_source(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    reader = spark.readStream.format(FORMAT_NAME)
    for key, value in source_options(spec).items():
        reader = reader.option(key, value)
    return reader.load()


def sink_columns(result: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Keep what the sink writes: value (required, string or binary), key, headers,
    partition. Everything else (offset, timestamp, a `topic` column...) is dropped: the
    runner writes to --sink only."""
    from pyspark.sql.types import BinaryType, StringType

    if not result.isStreaming:
        raise PipelineError(
            f"the transform ({spec.describe_transform()}) returned a batch DataFrame: build it from "
            f"the source DataFrame (or the view {SOURCE_VIEW!r})"
        )
    types = {f.name: f.dataType for f in result.schema.fields}
    if "value" not in types:
        raise PipelineError(
            f"the transform's result has no value column (columns: {', '.join(types) or 'none'}); "
            "the sink writes value, and key, headers, partition when present"
        )
    if not isinstance(types["value"], (BinaryType, StringType)):
        raise PipelineError(
            f"the transform's value column is {types['value'].simpleString()}; make it string or binary "
            "(e.g. to_json(struct(...)) AS value)"
        )
    return result.select(*[name for name in SINK_COLUMNS if name in types])


def start_query(output: DataFrame, spec: PipelineSpec) -> StreamingQuery:
    writer = output.writeStream.format(FORMAT_NAME)
    for key, value in sink_options(spec).items():
        writer = writer.option(key, value)
    if spec.trigger.kind == "available-now":
        writer = writer.trigger(availableNow=True)
    elif spec.trigger.kind == "once":
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.trigger.interval_ms} milliseconds")
    return writer.start()


# -- progress ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchProgress:
    """One finished micro-batch, from Spark's StreamingQueryProgress."""

    batch_id: int
    records: int
    duration_ms: int  # the whole trigger: plan, read, transform, write, sink commit, offset commit
    add_batch_ms: int  # reading, transforming, writing and the sink's commit of this batch
    start_offsets: dict | None
    end_offsets: dict | None
    timestamp: str
    phases_ms: dict[str, int] = field(default_factory=dict)  # all of Spark's durationMs

    @classmethod
    def from_progress(cls, progress: dict) -> BatchProgress:
        durations = progress.get("durationMs") or {}
        sources = progress.get("sources") or [{}]
        return cls(
            batch_id=int(progress["batchId"]),
            records=int(progress.get("numInputRows") or 0),
            duration_ms=int(durations.get("triggerExecution", 0)),
            add_batch_ms=int(durations.get("addBatch", 0)),
            start_offsets=_offsets(sources[0].get("startOffset")),
            end_offsets=_offsets(sources[0].get("endOffset")),
            timestamp=str(progress.get("timestamp", "")),
            phases_ms={str(k): int(v) for k, v in durations.items()},
        )

    def as_json(self) -> dict:
        return {
            "event": "batch", "batch": self.batch_id, "records": self.records,
            "duration_ms": self.duration_ms, "add_batch_ms": self.add_batch_ms,
            "start_offsets": self.start_offsets, "end_offsets": self.end_offsets,
            "timestamp": self.timestamp, "phases_ms": self.phases_ms,
        }

    def as_text(self, source_topic: str) -> str:
        rate = f", {self.records * 1000 / self.duration_ms:,.0f} records/s" if self.duration_ms else ""
        return (
            f"batch {self.batch_id}: {self.records:,} records in {self.duration_ms} ms{rate}; "
            f"{source_topic} {describe_ranges(self.start_offsets, self.end_offsets)}"
        )


def _offsets(raw: Any) -> dict | None:
    if raw is None or isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return None


@dataclass
class RunResult:
    batch_count: int = 0
    records: int = 0
    # The latest micro-batches (all of them in short runs; a long-running pipeline keeps
    # only the last KEPT_BATCHES).
    batches: deque[BatchProgress] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))
    stopped_by_signal: bool = False

    def add(self, batch: BatchProgress) -> None:
        self.batch_count += 1
        self.records += batch.records
        self.batches.append(batch)


class ProgressWatch:
    """Reports each finished micro-batch once. Polls the query's last progress (one py4j
    call) and reads the recent ones only when it changed: converting all of Spark's recent
    progress objects through py4j on every poll would cost the driver real CPU. No listener
    callbacks into Python: nothing to go wrong in a py4j callback thread."""

    def __init__(self, spec: PipelineSpec, emit: Callable[[str], None], result: RunResult) -> None:
        self.spec = spec
        self.emit = emit
        self.result = result
        self.seen: set[tuple[int, str]] = set()
        self.last_seen: str | None = None

    def poll(self, query: StreamingQuery) -> None:
        try:
            last = query._jsq.lastProgress()
            if last is None:
                return
            last_json = last.json()
            if last_json == self.last_seen:
                return
            self.last_seen = last_json
            recent = [json.loads(progress.json()) for progress in query._jsq.recentProgress()]
        except Exception:  # noqa: BLE001 (the JVM may be gone while stopping; progress is best effort)
            return
        keys = []
        for progress in recent:
            key = (int(progress.get("batchId", -1)), str(progress.get("timestamp")))
            keys.append(key)
            # Idle reports (no micro-batch ran) carry no addBatch.
            if key in self.seen or "addBatch" not in (progress.get("durationMs") or {}):
                continue
            batch = BatchProgress.from_progress(progress)
            self.result.add(batch)
            if self.spec.progress == "json":
                self.emit(json.dumps(batch.as_json(), sort_keys=True))
            elif self.spec.progress == "text":
                self.emit(batch.as_text(self.spec.source_topic))
        self.seen = set(keys)  # Spark keeps the last 100: older keys can never come back


def run_pipeline(
    spec: PipelineSpec,
    spark: SparkSession | None = None,
    *,
    emit: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Check, build, start and watch the pipeline until its trigger ends it, `stop` is
    set, or it fails (PipelineError, one line). `spark`: a session to use (tests); by
    default one is started per `start_session`."""
    emit = emit or _print_line
    transforms = [TransformReference.locate(reference) for reference in spec.transforms]
    check_options(spec)
    check_cluster(spec)
    if spec.mode == "batch":
        check_two_phase_commit(spec)
    log_file = None
    if spark is None:
        log_file = spark_log_path(spec)
        spark = start_session(spec, log_file)
    if stop is not None and threading.current_thread() is threading.main_thread():
        # PySpark's SparkContext answers SIGINT with its own handler (cancel every job,
        # raise KeyboardInterrupt in whatever py4j call is running): Ctrl-C stops the
        # pipeline as SIGTERM does instead.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
    see_log = f" (Spark's log: {log_file})" if log_file is not None else ""
    try:
        output = build_output(spark, spec, transforms)
    except PipelineError as error:
        raise PipelineError(f"{error}{see_log}") from None
    from pyspark.errors import PySparkException, StreamingQueryException

    try:
        query = start_query(output, spec)
    except PySparkException as error:
        raise PipelineError(f"the pipeline did not start: {spark_error_line(str(error))}{see_log}") from None
    result = RunResult()
    watch = ProgressWatch(spec, emit, result)
    if spec.progress == "json":
        emit(json.dumps({"event": "started", "id": str(query.id), "run_id": str(query.runId),
                         "checkpoint": spec.checkpoint_location, "transactional_id_prefix": spec.transactional_id,
                         "spark_log": None if log_file is None else str(log_file)}))
    try:
        while query.isActive:
            if stop is not None and stop.is_set():
                query.stop()
                result.stopped_by_signal = True
                break
            try:
                # PySpark takes float seconds (it waits int(timeout * 1000) ms); its annotation says int.
                query.awaitTermination(PROGRESS_POLL_S)  # type: ignore[arg-type]
            except StreamingQueryException:
                break  # reported from query.exception() below
            watch.poll(query)
        watch.poll(query)
        failure = query.exception()
    finally:
        if query.isActive:
            query.stop()
    if failure is not None:
        raise PipelineError(describe_failure(spec, query, str(failure), spark) + see_log)
    if spec.progress == "json":
        emit(json.dumps({"event": "finished", "batches": result.batch_count, "records": result.records,
                         "stopped": result.stopped_by_signal}))
    return result


def _print_line(line: str) -> None:
    print(line, flush=True)


# -- failures as one line -------------------------------------------------------------------


def describe_failure(spec: PipelineSpec, query: StreamingQuery | None, message: str, spark=None) -> str:
    """`micro-batch N (reading orders-0 [a, b), ...) failed[ in its task for orders-1
    [a, b) (k attempts)]: Cause`."""
    cause = spark_error_line(message)
    batch = failed_batch(spec.checkpoint_location)
    if batch is None:
        return f"the pipeline failed: {cause}"
    batch_id, start, end = batch
    ranges = planned_ranges(start, end)
    where = f"micro-batch {batch_id} (reading {describe_ranges(start, end)}) failed"
    task = failed_task(spark, query) if ranges else None
    if task is not None and task[0] < len(ranges) and _plan_has_no_shuffle(query):
        index, attempts = task
        topic, partition, first, last = ranges[index]
        where += (f" in its task for {topic}-{partition} offsets [{first}, {last})"
                  f" ({attempts} attempt{'s' if attempts != 1 else ''})")
    return f"{where}: {cause}"


def failed_task(spark, query: StreamingQuery | None) -> tuple[int, int] | None:
    """(task index, attempts) of the task that failed the query's last failed job, from
    Spark's status store (micro-batch jobs run in the job group named by the run id).
    None when Spark does not say (the store's Scala API is not public: best effort)."""
    if spark is None or query is None:
        return None
    try:
        context = spark.sparkContext
        tracker = context._jsc.statusTracker()
        store = context._jsc.sc().statusStore()
        failed_jobs = [job for job in tracker.getJobIdsForGroup(str(query.runId))
                       if tracker.getJobInfo(job).status().toString() == "FAILED"]
        if not failed_jobs:
            return None
        for stage_id in tracker.getJobInfo(max(failed_jobs)).stageIds():
            stage = tracker.getStageInfo(stage_id)
            if stage is None or stage.numFailedTasks() == 0:
                continue
            tasks = store.taskList(stage_id, stage.currentAttemptId(), 10_000)
            attempts: dict[int, int] = {}
            for number in range(tasks.size()):
                task = tasks.apply(number)
                if task.status() == "FAILED":
                    attempts[task.index()] = max(attempts.get(task.index(), 0), task.attempt() + 1)
            if len(attempts) == 1:  # one culprit; several failing tasks would be a guess
                return next(iter(attempts.items()))
        return None
    except Exception:  # noqa: BLE001 (the status store's API is not public: best effort)
        return None


def spark_error_line(message: str) -> str:
    """The cause inside Spark's wrapping: the Python exception line of a Python traceback
    (`ValueError: bad order`), otherwise Spark's own first meaningful line."""
    tracebacks = message.split("Traceback (most recent call last):")
    if len(tracebacks) > 1:
        last = tracebacks[-1]
        lines = last.splitlines()
        exception_line = None
        for line in lines[1:]:
            if not line.strip() or line.startswith(("\tat ", "JVM stacktrace")):
                if exception_line is not None:
                    break
                continue
            if not line.startswith(" "):
                exception_line = line.strip() if exception_line is None else exception_line
        if exception_line:
            # `oncelog.spark.errors.TopicNotFound: ...` -> `TopicNotFound: ...`
            return re.sub(r"^(?:[A-Za-z_][\w]*\.)+(?=[A-Za-z_]\w*(?::|$))", "", exception_line)
    text = message.strip()
    text = re.sub(r"^\[[A-Z_.]+\]\s*", "", text)
    text = re.sub(r"^Query \S+ \[id = [^\]]+\] terminated with exception:\s*", "", text)
    text = re.sub(r"^.*?terminated with exception:\s*", "", text, count=1, flags=re.DOTALL)
    for line in text.splitlines():
        if line.strip() and not line.startswith("\tat "):
            return line.strip()
    return text or "unknown error"


def failed_batch(checkpoint: str) -> tuple[int, dict | None, dict | None] | None:
    """From a local checkpoint: the latest micro-batch planned (offsets/N) but not
    committed (no commits/N), with its start (the previous batch's end) and end offsets."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", checkpoint) and not checkpoint.startswith("file:"):
        return None
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    offsets = root / "offsets"
    planned = _log_ids(offsets)
    if not planned:
        return None
    batch_id = max(planned)
    if batch_id in _log_ids(root / "commits"):
        return None
    return batch_id, _source_offsets(offsets / str(batch_id - 1)), _source_offsets(offsets / str(batch_id))


def _log_ids(directory: Path) -> set[int]:
    try:
        return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}
    except OSError:
        return set()


def _source_offsets(path: Path) -> dict | None:
    """Spark's offset log file: a version line, the batch metadata, then one line per source."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 3:
        return None
    try:
        return json.loads(lines[2], object_pairs_hook=dict)
    except json.JSONDecodeError:
        return None


def planned_ranges(start: dict | None, end: dict | None) -> list[tuple[str, int, int, int]]:
    """The ranges the source plans for (start, end), in its task order: partitions in the
    end offsets' order, those that moved (a partition missing from start reads from 0)."""
    if not end or any(key.startswith("$") for key in end):
        return []
    start = {} if not start or any(key.startswith("$") for key in start) else start
    ranges = []
    for topic, by_partition in end.items():
        for partition, last in by_partition.items():
            first = int(start.get(topic, {}).get(partition, 0))
            if int(last) > first:
                ranges.append((topic, int(partition), first, int(last)))
    return ranges


def describe_ranges(start: dict | None, end: dict | None) -> str:
    if end is None:
        return "nothing"
    if start is None:
        start = {}
    ranges = planned_ranges(start, end)
    if not ranges:
        return "nothing new"
    return ", ".join(f"{topic}-{partition} [{first}, {last})" for topic, partition, first, last in ranges)


def _plan_has_no_shuffle(query: StreamingQuery | None) -> bool:
    """True when the last micro-batch's plan has no shuffle, so task i read the i-th range
    (a broadcast exchange leaves the stream's partitions as they are)."""
    if query is None:
        return False
    try:
        plan = query._jsq.explainInternal(False)
    except Exception:  # noqa: BLE001 (best effort, as failed_task: without a plan, no task is named)
        return False
    return bool(plan) and re.search(r"(?<![A-Za-z])Exchange\b", plan) is None


def _one_line(error: BaseException) -> str:
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0].str()
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# -- entry points -----------------------------------------------------------------------------


def run_from_args(args: argparse.Namespace) -> int:
    """`oncelog pipeline run` and `main()`: run until the trigger ends it or SIGTERM/SIGINT
    stops it (the current micro-batch is abandoned; its output never becomes visible and
    the next run redoes it). Raises PipelineError."""
    spec = spec_from_args(args)
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = run_pipeline(spec, stop=stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if spec.progress == "text":
        how = "stopped" if result.stopped_by_signal else "finished"
        print(f"pipeline {how}: {result.batch_count} micro-batches, {result.records:,} records "
              f"from {spec.source_topic} to {spec.sink_topic}", flush=True)
    return 0


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line and exit status 1, as every other pipeline error."""

    def error(self, message: str):
        self.exit(1, f"oncelog pipeline: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m oncelog.spark.pipeline",
        description="Run an exactly-once pipeline: source topic -> transform -> sink topic, on Spark.",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """For `python -m oncelog.spark.pipeline` and spark-submit."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except PipelineError as error:
        print(f"oncelog pipeline: error: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
