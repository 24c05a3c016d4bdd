"""Scenarios 8, 8i, 8t, 8s and 8w: the exactly-once Spark pipeline, into a topic and into
an Iceberg table, stateful, and its source and sink alone, each against the same work done
another way in the same run.

Scenario 8, for 1 KB and for 100-byte records, each on a fresh oncelog broker (two-phase
commit on) with an input topic of 2 partitions holding PIPELINE_RECORDS records written
by an untimed idempotent producer:

- spark, both sink modes: `python -m oncelog.spark.pipeline --sql ... --trigger
  available-now --max-offsets-per-trigger 20000 --master local[2]`, what `oncelog
  pipeline run` runs. Its msg/s counts the steady micro-batches (all after the first, which
  also starts Python workers and warms the JVM) over their summed durations (Spark's
  triggerExecution: planning, offset log, read, transform, write, the sink's commit,
  commit log). `spark_startup_s` is process start to the end of the first micro-batch.
- direct: the seeds' loop in a child process: a read_committed group consumer, a
  transactional producer, `send_offsets_to_transaction` and a commit every 20,000
  records; timed from the first record consumed to the last commit.

Every output is counted afterwards with a read_committed consumer: each must hold every
input record exactly once (by count), or the run fails. With --profile the connectors
trace their steps (ONCELOG_SPARK_TRACE) and bench/profile_pipeline.py splits a steady
micro-batch into Spark's phases and the connectors' steps (bench/results/profiles/).

Scenario 8i: the same pipeline (`--sql`, available-now, 20,000 offsets per micro-batch,
`local[2]`, 1 KB records) once into an Iceberg table (`--sink iceberg:bench.pipeline`,
the embedded SQLite catalog and a local warehouse) and once into a topic (partition
mode), on one broker and one input; msg/s of the steady micro-batches of each, and their
ratio. The table is counted with pyiceberg afterwards (every input record once, by count),
the topic with a read_committed consumer.

Scenario 8t (stateful, issue 17): micro-batch time at the demo's rate. The input holds
STATEFUL_RECORDS keyed records (STATEFUL_KEYS keys, 200 B) and a compacted table topic one
value per key; the runner reads STATEFUL_RATE offsets per micro-batch (one second of the
demo's 20,000 orders over 8 s), available-now, `local[2]`, partition mode, three ways in
one run: stateless (`--sql` projection), a count per key and 5-minute window in update
output mode, and `oncelog.spark.join_table` (`bench/stateful_join.py`); and a fourth, the
seeds' whole Kafka Streams application as one query (`oncelog.demo.streams`, what `oncelog
demo --stateful` runs: windowed counts, HIGH/NORMAL branches and the join, four output
topics, update output mode, batch mode) over the same input with priorities in the values;
and the first three ways again as three queries of one driver, run at once (`several`:
the slowest one's p50, over the slowest alone).
The figures are the p50 of the steady micro-batches' durations: under 1 s, the pipeline
keeps up with the demo's rate at a second's latency. Every output is counted afterwards.

Scenario 8s (source alone): in one child process, the source's reader (`read_range`, what
a Spark task runs, without Spark) reads a whole partition into Arrow batches, alternating
with a plain confluent-kafka read_committed consumer loop over the same partition
(`consume()`, each value touched). 8w (sink alone): the sink's partition-mode task write
(`PartitionMode.write`: InitProducerId, the marker check, the rows, offsets, commit) of
pre-built Arrow batches, alternating with a plain confluent-kafka transactional producer
(initialised once, untimed) sending the same records with the same offset commit.

With --baseline-src, the same child code runs against the older tree (the functions keep
their signatures), as peer "baseline".

    python -m bench.scenarios.pipeline direct --bootstrap H:P --input T --output T --messages N
    python -m bench.scenarios.pipeline count --bootstrap H:P --topic T
    python -m bench.scenarios.pipeline count-table --warehouse DIR --table NS.T
    python -m bench.scenarios.pipeline keyed --bootstrap H:P --topic T --messages N --keys K [--priorities]
    python -m bench.scenarios.pipeline several --bootstrap H:P --records N --work DIR
    python -m bench.scenarios.pipeline source|sink --bootstrap H:P --topic T --runs N
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.peers import BASELINE, ONCELOG
from bench.scenarios.base import (
    Metric,
    Scenario,
    ScenarioFailed,
    Settings,
    loadgen,
    running,
    transactional_apis_missing,
)

REPO = Path(__file__).resolve().parents[2]
INPUT = "bench-pipeline-in"
PARTITIONS = 2
COMMIT_EVERY = 20_000  # records per micro-batch (Spark) and per transaction (direct)
PIPELINE_RECORDS = 200_000
SIZES = ((1024, ""), (100, "_100b"))
MODES = ("partition", "batch")
SPARK_SQL = "SELECT key, concat(CAST('enriched:' AS BINARY), value) AS value FROM source"
SPARK_TIMEOUT_S = 600
ALONE_RECORDS = 200_000
ALONE_RUNS = 3  # per child process: the medians of this many alternating runs


def _records(settings: Settings, default: int) -> int:
    return 50_000 if settings.quick else default


def _spark_unavailable() -> str | None:
    missing = transactional_apis_missing()
    if missing:
        return missing
    if importlib.util.find_spec("pyspark") is None:
        return "needs pyspark (pip install -e .)"
    try:
        from oncelog.local.java import java_home

        java_home()
    except Exception as error:  # noqa: BLE001 (reported as the reason the scenario cannot run)
        return f"needs Java 17+ for Spark: {error}"
    return None


def _child_env(peer: str, settings: Settings, **extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    if peer == BASELINE and settings.baseline_src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(settings.baseline_src), str(REPO)]))
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


class PipelineScenario(Scenario):
    id = "8"
    title = "Spark pipeline vs direct txn loop, exactly once"
    metrics = (
        Metric("partition_msg_per_s", "spark partition msg/s"),
        Metric("batch_msg_per_s", "spark batch msg/s"),
        Metric("direct_msg_per_s", "direct msg/s"),
        Metric("partition_vs_direct", "partition / direct", target=(">=", 0.5)),
        Metric("batch_vs_direct", "batch / direct", target=(">=", 0.5)),
        Metric("partition_msg_per_s_100b", "100 B partition msg/s"),
        Metric("batch_msg_per_s_100b", "100 B batch msg/s"),
        Metric("direct_msg_per_s_100b", "100 B direct msg/s"),
        Metric("partition_vs_direct_100b", "100 B partition/direct"),
        Metric("batch_vs_direct_100b", "100 B batch / direct"),
        Metric("partition_batch_p50_ms", "partition batch p50 ms", higher_is_better=False),
        Metric("batch_batch_p50_ms", "batch-mode batch p50 ms", higher_is_better=False),
        Metric("spark_startup_s", "spark start-up s", higher_is_better=False),
    )
    peers = (ONCELOG,)
    supports_baseline = True

    def unavailable_reason(self, settings: Settings) -> str | None:
        return _spark_unavailable()

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        figures: dict = {}
        records = _records(settings, PIPELINE_RECORDS)
        for size, suffix in SIZES:
            config = {"transaction.two.phase.commit.enable": "true"}
            with running(peer, settings, config) as (bootstrap, _target):
                outputs = {name: f"bench-pipeline-{name}" for name in (*MODES, "direct")}
                for topic in (INPUT, *outputs.values()):
                    loadgen("create-topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", PARTITIONS)
                loadgen("produce", "--bootstrap", bootstrap, "--topic", INPUT, "--messages", records,
                        "--size", size, "--acks", "all", "--idempotent")
                total = records + 1  # loadgen's warm-up record is on the topic too
                for mode in MODES:
                    spark = _run_spark(peer, settings, bootstrap, mode, outputs[mode], f"{mode}{suffix or '_1k'}")
                    figures[f"{mode}_msg_per_s{suffix}"] = spark["msg_per_s"]
                    if not suffix:
                        figures[f"{mode}_batch_p50_ms"] = spark["batch_p50_ms"]
                        figures.setdefault("spark_startup_s", spark["startup_s"])
                    if "profile" in spark:
                        figures[f"{mode}_profile{suffix}"] = spark["profile"]
                direct = _child(peer, settings, "direct", "--bootstrap", bootstrap, "--input", INPUT,
                                "--output", outputs["direct"], "--messages", total, "--commit-every", COMMIT_EVERY)
                figures[f"direct_msg_per_s{suffix}"] = direct["msg_per_s"]
                for name, topic in outputs.items():
                    counted = _child(ONCELOG, settings, "count", "--bootstrap", bootstrap, "--topic", topic)["records"]
                    if counted != total:
                        raise ScenarioFailed(f"{name} output ({size} B) holds {counted} records, expected {total}")
            for mode in MODES:
                figures[f"{mode}_vs_direct{suffix}"] = figures[f"{mode}_msg_per_s{suffix}"] / direct["msg_per_s"]
        return figures


def _run_spark(peer: str, settings: Settings, bootstrap: str, mode: str, output: str, label: str, *,
               sink: tuple[str, ...] | None = None, sql: str = SPARK_SQL, source: str = INPUT,
               transform: tuple[str, ...] | None = None, per_trigger: int = COMMIT_EVERY,
               checkpoint: Path | None = None, warm_up: bool = False) -> dict:
    """One run of the runner; `sink`: its sink arguments (default: the topic `output` in
    `mode`); `transform`: its transform arguments (default: `--sql sql`); `checkpoint`:
    one to continue (default: a new one); `warm_up`: a run whose figures are not wanted."""
    checkpoint = checkpoint or Path(tempfile.mkdtemp(prefix="pipeline-checkpoint-", dir=settings.work_dir))
    trace = checkpoint.with_suffix(".trace.jsonl")
    extra = {"ONCELOG_SPARK_TRACE": str(trace)} if settings.profile else {}
    command = [
        sys.executable, "-m", "oncelog.spark.pipeline",
        "--source", source, *(sink or ("--sink", output, "--mode", mode)), *(transform or ("--sql", sql)),
        "--checkpoint", str(checkpoint), "--bootstrap-servers", bootstrap,
        "--trigger", "available-now", "--master", "local[2]",
        "--max-offsets-per-trigger", str(per_trigger), "--progress", "json",
    ]
    started_at = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SPARK_TIMEOUT_S, cwd=REPO, check=False,
                              env=_child_env(peer, settings, **extra))
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"the Spark pipeline did not finish in {SPARK_TIMEOUT_S} s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
        raise ScenarioFailed(f"the Spark pipeline failed: {(errors or done.stderr.splitlines() or ['?'])[-1]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    batches = [e for e in events if e.get("event") == "batch" and e["records"] > 0]
    if warm_up:
        return {}
    # The first micro-batch also starts Spark's Python workers and warms up the JVM.
    steady = batches[1:]
    if not steady:
        raise ScenarioFailed(f"the Spark pipeline reported {len(batches)} micro-batch(es); need 2 or more")
    durations = sorted(b["duration_ms"] for b in steady)
    result = {
        "msg_per_s": sum(b["records"] for b in steady) / (sum(durations) / 1000),
        # Process start to the end of the first micro-batch (the progress timestamp is
        # the batch's start).
        "startup_s": _epoch(batches[0]["timestamp"]) + batches[0]["duration_ms"] / 1000 - started_at,
        "batch_p50_ms": durations[len(durations) // 2],
    }
    if settings.profile:
        from bench.profile_pipeline import breakdown, render

        result["profile"] = breakdown(trace, batches)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        report = settings.results_dir / "profiles" / f"scenario8-{label}-{peer}-{stamp}.txt"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(render(f"scenario 8, {peer}, {label}", result["profile"]) + "\n")
        settings.profiles.append({"label": f"scenario8-{label}-{peer}", "summary": str(report)})
        print(report.read_text(), file=sys.stderr, flush=True)
    return result


def _epoch(timestamp: str) -> float:
    """Spark's progress timestamp, e.g. 2024-05-01T12:00:00.123Z, as seconds since the epoch."""
    import datetime

    return datetime.datetime.fromisoformat(timestamp).timestamp()


def _child(peer: str, settings: Settings, mode: str, *args: object, timeout: float = 600) -> dict:
    command = [sys.executable, "-m", "bench.scenarios.pipeline", mode, *(str(a) for a in args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False,
                              env=_child_env(peer, settings))
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"pipeline {mode} timed out after {timeout:.0f} s") from None
    last = (done.stdout.strip().splitlines() or ["{}"])[-1]
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        result = {}
    if done.returncode != 0 or not result or "error" in result:
        raise ScenarioFailed(f"pipeline {mode}: {result.get('error') or done.stderr.strip()[-1500:]}")
    return result


ICEBERG_TABLE = "bench.pipeline"
# The table gets the key and the enriched value as strings (Iceberg readers expect text).
ICEBERG_SQL = "SELECT CAST(key AS STRING) AS key, concat('enriched:', CAST(value AS STRING)) AS value FROM source"
KAFKA_SQL_AS_TEXT = "SELECT key, CAST(concat('enriched:', CAST(value AS STRING)) AS BINARY) AS value FROM source"


class IcebergScenario(Scenario):
    """8i: the runner into an Iceberg table against the runner into a topic, same input."""

    id = "8i"
    title = "Spark pipeline into an Iceberg table vs into a topic"
    metrics = (
        Metric("iceberg_msg_per_s", "iceberg msg/s"),
        Metric("kafka_msg_per_s", "kafka (partition) msg/s"),
        Metric("iceberg_vs_kafka", "iceberg / kafka"),
        Metric("iceberg_batch_p50_ms", "iceberg batch p50 ms", higher_is_better=False),
        Metric("kafka_batch_p50_ms", "kafka batch p50 ms", higher_is_better=False),
    )
    peers = (ONCELOG,)
    supports_baseline = False  # the baseline tree may have no Iceberg sink

    def unavailable_reason(self, settings: Settings) -> str | None:
        if importlib.util.find_spec("pyiceberg") is None:
            return "needs pyiceberg (pip install -e .)"
        return _spark_unavailable()

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        records = _records(settings, PIPELINE_RECORDS)
        warehouse = Path(tempfile.mkdtemp(prefix="iceberg-warehouse-", dir=settings.work_dir))
        catalog = ("type=sql", f"uri=sqlite:///{warehouse}/catalog.db", f"warehouse=file://{warehouse}")
        output = "bench-pipeline-kafka"
        with running(peer, settings) as (bootstrap, _target):
            for topic in (INPUT, output):
                loadgen("create-topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", PARTITIONS)
            loadgen("produce", "--bootstrap", bootstrap, "--topic", INPUT, "--messages", records,
                    "--size", 1024, "--acks", "all", "--idempotent", "--text")
            total = records + 1  # loadgen's warm-up record is on the topic too
            iceberg_sink = ("--sink", f"iceberg:{ICEBERG_TABLE}",
                            *(part for pair in catalog for part in ("--iceberg-catalog", pair)))
            iceberg = _run_spark(peer, settings, bootstrap, "", "", "iceberg", sink=iceberg_sink, sql=ICEBERG_SQL)
            kafka = _run_spark(peer, settings, bootstrap, "partition", output, "kafka-as-text", sql=KAFKA_SQL_AS_TEXT)
            counted = _child(ONCELOG, settings, "count", "--bootstrap", bootstrap, "--topic", output)["records"]
        rows = _child(ONCELOG, settings, "count-table", "--warehouse", warehouse, "--table", ICEBERG_TABLE)
        if rows["rows"] != total or rows["distinct_values"] != total:
            raise ScenarioFailed(f"the table holds {rows['rows']} rows ({rows['distinct_values']} distinct), "
                                 f"expected {total}")
        if counted != total:
            raise ScenarioFailed(f"the topic holds {counted} records, expected {total}")
        return {
            "iceberg_msg_per_s": iceberg["msg_per_s"], "kafka_msg_per_s": kafka["msg_per_s"],
            "iceberg_vs_kafka": iceberg["msg_per_s"] / kafka["msg_per_s"],
            "iceberg_batch_p50_ms": iceberg["batch_p50_ms"], "kafka_batch_p50_ms": kafka["batch_p50_ms"],
        }


STATEFUL_RATE = 2_500  # records per micro-batch: one second of the demo's 20,000 orders over 8 s
STATEFUL_RECORDS = 50_000
STATEFUL_KEYS = 1_000
STATEFUL_INPUT = "bench-events"
JOIN_INPUT = "bench-events-join"  # written once the join's query has read the whole table
STATEFUL_TABLE = "bench-reference-data"
APP_TRANSFORM = "oncelog.demo.streams:event_streams"  # its topics are oncelog.demo.streams'
STATEFUL_WAYS = {
    # name: (--source, transform arguments, extra sink arguments)
    "stateless": (STATEFUL_INPUT, ("--sql", "SELECT key, concat(CAST('seen:' AS BINARY), value) AS value FROM source"),
                  ()),
    "count": (STATEFUL_INPUT, ("--sql", ("SELECT key, CAST(count(*) AS STRING) AS value FROM source "
                                         "GROUP BY window(timestamp, '5 minutes'), key")), ("--output-mode", "update")),
    "join": (f"{JOIN_INPUT},{STATEFUL_TABLE}", ("--transform", f"{REPO / 'bench' / 'stateful_join.py'}:enrich"),
             ()),
}


class StatefulScenario(Scenario):
    """8t: stateless, windowed count (update mode) and table join at the demo's rate."""

    id = "8t"
    title = "stateful Spark pipelines at the demo's rate: micro-batch p50"
    metrics = (
        Metric("stateless_batch_p50_ms", "stateless batch p50 ms", higher_is_better=False),
        Metric("count_batch_p50_ms", "windowed count batch p50 ms", higher_is_better=False, target=("<=", 1000)),
        Metric("join_batch_p50_ms", "table join batch p50 ms", higher_is_better=False, target=("<=", 1000)),
        Metric("count_vs_stateless", "count / stateless p50", higher_is_better=False),
        Metric("join_vs_stateless", "join / stateless p50", higher_is_better=False),
        Metric("app_batch_p50_ms", "whole application (one query, 4 topics) batch p50 ms", higher_is_better=False,
               target=("<=", 1000)),
        Metric("app_vs_stateless", "whole application / stateless p50", higher_is_better=False),
        Metric("several_batch_p50_ms", "three queries in one driver: the slowest query's batch p50 ms",
               higher_is_better=False, target=("<=", 1000)),
        Metric("several_vs_alone", "three queries in one driver / the slowest alone, p50", higher_is_better=False),
    )
    peers = (ONCELOG,)
    supports_baseline = False  # the baseline tree may have no join_table or --output-mode

    def unavailable_reason(self, settings: Settings) -> str | None:
        return _spark_unavailable()

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        records = 20_000 if settings.quick else STATEFUL_RECORDS
        figures: dict[str, float] = {}
        # Two-phase commit on, for the whole application's batch mode (as `oncelog demo --stateful`).
        with running(peer, settings, {"transaction.two.phase.commit.enable": "true"}) as (bootstrap, _target):
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", STATEFUL_INPUT, "--partitions", PARTITIONS)
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", STATEFUL_TABLE, "--partitions", PARTITIONS,
                    "--config", "cleanup.policy=compact")
            _child(ONCELOG, settings, "keyed", "--bootstrap", bootstrap, "--topic", STATEFUL_TABLE,
                   "--messages", STATEFUL_KEYS, "--keys", STATEFUL_KEYS)
            _child(ONCELOG, settings, "keyed", "--bootstrap", bootstrap, "--topic", STATEFUL_INPUT,
                   "--messages", records, "--keys", STATEFUL_KEYS)
            for name, (source, transform, sink_extra) in STATEFUL_WAYS.items():
                output = f"bench-stateful-{name}"
                loadgen("create-topic", "--bootstrap", bootstrap, "--topic", output, "--partitions", PARTITIONS)
                sink = ("--sink", output, "--mode", "partition", *sink_extra)
                checkpoint = Path(tempfile.mkdtemp(prefix="stateful-", dir=settings.work_dir))
                if name == "join":
                    # The query takes the whole table in first, as a Kafka Streams application
                    # would (by timestamp) before these later events: under maxOffsetsPerTrigger
                    # Spark shares each micro-batch among the partitions by their lag instead.
                    loadgen("create-topic", "--bootstrap", bootstrap, "--topic", JOIN_INPUT,
                            "--partitions", PARTITIONS)
                    _run_spark(peer, settings, bootstrap, "partition", output, "stateful-join-table", source=source,
                               transform=transform, sink=sink, per_trigger=STATEFUL_KEYS * 2, checkpoint=checkpoint,
                               warm_up=True)
                    _child(ONCELOG, settings, "keyed", "--bootstrap", bootstrap, "--topic", JOIN_INPUT,
                           "--messages", records, "--keys", STATEFUL_KEYS)
                run = _run_spark(peer, settings, bootstrap, "partition", output, f"stateful-{name}", source=source,
                                 transform=transform, sink=sink, per_trigger=STATEFUL_RATE, checkpoint=checkpoint)
                figures[f"{name}_batch_p50_ms"] = run["batch_p50_ms"]
                counted = _child(ONCELOG, settings, "count", "--bootstrap", bootstrap, "--topic", output)["records"]
                # The count writes each key's new count per micro-batch: between one record
                # per key and one per input record.
                low, high = (STATEFUL_KEYS, records) if name == "count" else (records, records)
                if not low <= counted <= high:
                    raise ScenarioFailed(f"{name} output holds {counted} records, expected {low}-{high}")
            figures["app_batch_p50_ms"] = self._whole_application(peer, settings, bootstrap, records)
            for name in STATEFUL_WAYS:
                loadgen("create-topic", "--bootstrap", bootstrap, "--topic", f"bench-several-{name}",
                        "--partitions", PARTITIONS)
            several = _child(ONCELOG, settings, "several", "--bootstrap", bootstrap, "--records", records,
                             "--work", Path(tempfile.mkdtemp(prefix="stateful-several-", dir=settings.work_dir)),
                             timeout=SPARK_TIMEOUT_S)
            figures["several_batch_p50_ms"] = max(several["p50_ms"].values())
            figures["several_vs_alone"] = figures["several_batch_p50_ms"] / max(
                figures[f"{name}_batch_p50_ms"] for name in STATEFUL_WAYS)
        for name in ("count", "join", "app"):
            figures[f"{name}_vs_stateless"] = figures[f"{name}_batch_p50_ms"] / figures["stateless_batch_p50_ms"]
        return figures

    def _whole_application(self, peer: str, settings: Settings, bootstrap: str, records: int) -> float:
        """The seeds' application as one query (oncelog.demo.streams), its table read first."""
        from oncelog.demo.topics import COUNTS_TOPIC, ENRICHED_TOPIC, EVENTS_TOPIC, REFERENCE_TOPIC, SINK_TOPICS

        for topic in (EVENTS_TOPIC, *SINK_TOPICS):
            compact = ("--config", "cleanup.policy=compact") if topic == COUNTS_TOPIC else ()
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", PARTITIONS, *compact)
        loadgen("create-topic", "--bootstrap", bootstrap, "--topic", REFERENCE_TOPIC, "--partitions", PARTITIONS,
                "--config", "cleanup.policy=compact")
        _child(ONCELOG, settings, "keyed", "--bootstrap", bootstrap, "--topic", REFERENCE_TOPIC,
               "--messages", STATEFUL_KEYS, "--keys", STATEFUL_KEYS)
        source = f"{EVENTS_TOPIC},{REFERENCE_TOPIC}"
        transform = ("--transform", APP_TRANSFORM)
        sink = ("--sink", ",".join(SINK_TOPICS), "--mode", "batch", "--output-mode", "update")
        checkpoint = Path(tempfile.mkdtemp(prefix="stateful-app-", dir=settings.work_dir))
        _run_spark(peer, settings, bootstrap, "batch", ENRICHED_TOPIC, "stateful-app-table", source=source,
                   transform=transform, sink=sink, per_trigger=STATEFUL_KEYS * 2, checkpoint=checkpoint, warm_up=True)
        _child(ONCELOG, settings, "keyed", "--bootstrap", bootstrap, "--topic", EVENTS_TOPIC,
               "--messages", records, "--keys", STATEFUL_KEYS, "--priorities")
        run = _run_spark(peer, settings, bootstrap, "batch", ENRICHED_TOPIC, "stateful-app", source=source,
                         transform=transform, sink=sink, per_trigger=STATEFUL_RATE, checkpoint=checkpoint)
        enriched = _child(ONCELOG, settings, "count", "--bootstrap", bootstrap, "--topic", ENRICHED_TOPIC)["records"]
        if enriched != records:  # every key is in the table
            raise ScenarioFailed(f"the application's {ENRICHED_TOPIC} holds {enriched} records, expected {records}")
        return run["batch_p50_ms"]


def several_queries(args: argparse.Namespace) -> dict:
    """8t's three ways (stateless, windowed count in update mode, table join) as three
    queries of one driver (one SparkSession, `local[2]`), run at once over STATEFUL_INPUT,
    and JOIN_INPUT with the table, each at STATEFUL_RATE offsets per micro-batch with
    available-now, each into a topic of its own in partition mode. Returns each query's
    steady micro-batch p50 (Spark's triggerExecution, the first micro-batch left out)."""
    from pyspark.sql import functions as F

    from oncelog.spark import build_session, join_table
    from oncelog.spark.pipeline.query import MicroBatchWrite

    spark = build_session("bench-several", "local[2]")
    work = Path(args.work)

    def source(topics: str):
        return (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", args.bootstrap)
                .option("subscribe", topics).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", STATEFUL_RATE).load())

    def sink_options(name: str) -> dict[str, str]:
        return {"kafka.bootstrap.servers": args.bootstrap, "topic": f"bench-several-{name}", "mode": "partition",
                "checkpointLocation": str(work / name)}

    events = source(STATEFUL_INPUT)
    outputs = {
        "stateless": (events.select("key", F.concat(F.lit(b"seen:"), "value").alias("value")), "append"),
        "count": (events.groupBy(F.window("timestamp", "5 minutes"), "key").count()
                  .select("key", F.col("count").cast("string").alias("value")), "update"),
        "join": (join_table(source(f"{JOIN_INPUT},{STATEFUL_TABLE}"), STATEFUL_TABLE)
                 .select("key", F.concat("value", F.lit(b":"), "table_value").alias("value")), "append"),
    }
    queries = {}
    for name, (frame, output_mode) in outputs.items():
        options = sink_options(name)
        if output_mode == "update":
            writer = frame.writeStream.foreachBatch(MicroBatchWrite(options)).option(
                "checkpointLocation", options["checkpointLocation"])
        else:
            writer = frame.writeStream.format("oncelog").options(**options)
        queries[name] = writer.outputMode(output_mode).trigger(availableNow=True).queryName(name).start()
    for query in queries.values():
        query.awaitTermination(SPARK_TIMEOUT_S)
    p50 = {}
    for name, query in queries.items():
        if query.exception() is not None:
            return {"error": f"query {name}: {str(query.exception()).splitlines()[0]}"}
        durations = sorted(progress["durationMs"]["triggerExecution"] for progress in query.recentProgress[1:]
                           if progress["numInputRows"] > 0)
        if not durations:
            return {"error": f"query {name} ran fewer than two micro-batches with records"}
        p50[name] = durations[len(durations) // 2]
    spark.stop()
    return {"p50_ms": p50}


def keyed_records(args: argparse.Namespace) -> dict:
    """`messages` records of 200 B whose keys cycle over `keys` keys (k0000...), idempotent;
    with `priorities` their values name one of HIGH, NORMAL, NORMAL, LOW in turn (what the
    seeds' application branches on)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.num.messages": 10_000})
    value = b"v" * 200
    priorities = (b"HIGH", b"NORMAL", b"NORMAL", b"LOW")
    for number in range(args.messages):
        if args.priorities:
            value = (b"e-%07d %s " % (number, priorities[number % 4])).ljust(200, b"v")
        while True:
            try:
                producer.produce(args.topic, value, key=b"k%04d" % (number % args.keys))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise RuntimeError("records still unacknowledged after 60 s")
    return {"records": args.messages}


def count_table(args: argparse.Namespace) -> dict:
    """Rows and distinct values of the Iceberg table, read with pyiceberg."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", type="sql", uri=f"sqlite:///{args.warehouse}/catalog.db",
                           warehouse=f"file://{args.warehouse}")
    values = catalog.load_table(args.table).scan(selected_fields=("value",)).to_arrow().column("value")
    return {"rows": len(values), "distinct_values": len(values.unique())}


class AloneScenario(Scenario):
    """8s / 8w: one side of the connectors against confluent-kafka, in one child process."""

    peers = (ONCELOG,)
    supports_baseline = True
    child_mode = ""
    ours = ""
    theirs = ""

    def unavailable_reason(self, settings: Settings) -> str | None:
        return _spark_unavailable()

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        figures: dict = {}
        records = _records(settings, ALONE_RECORDS)
        with running(peer, settings) as (bootstrap, _target):
            for size, suffix in SIZES:
                topic = f"bench-{self.child_mode}{suffix or '-1k'}"
                loadgen("create-topic", "--bootstrap", bootstrap, "--topic", topic,
                        "--partitions", 1 if self.child_mode == "source" else PARTITIONS)
                if self.child_mode == "source":
                    loadgen("produce", "--bootstrap", bootstrap, "--topic", topic, "--messages", records,
                            "--size", size, "--acks", "all", "--transactional-id", f"bench-{topic}",
                            "--transaction-size", 10_000)
                result = _child(peer, settings, self.child_mode, "--bootstrap", bootstrap, "--topic", topic,
                                "--records", records, "--size", size, "--runs", ALONE_RUNS)
                figures[f"{self.ours}_msg_per_s{suffix}"] = result["ours"]
                figures[f"{self.theirs}_msg_per_s{suffix}"] = result["theirs"]
                figures[f"{self.ours}_vs_{self.theirs}{suffix}"] = result["ours"] / result["theirs"]
        return figures


def _alone_metrics(ours: str, theirs: str) -> tuple[Metric, ...]:
    """The figures AloneScenario.run records, for 1 KB and 100 B values: each side's rate
    and their ratio, whose target is the issue's 0.8x."""
    return (
        Metric(f"{ours}_msg_per_s", f"{ours} msg/s"),
        Metric(f"{theirs}_msg_per_s", f"{theirs} msg/s"),
        Metric(f"{ours}_vs_{theirs}", f"{ours} / {theirs}", target=(">=", 0.8)),
        Metric(f"{ours}_msg_per_s_100b", f"100 B {ours} msg/s"),
        Metric(f"{theirs}_msg_per_s_100b", f"100 B {theirs} msg/s"),
        Metric(f"{ours}_vs_{theirs}_100b", f"100 B {ours}/{theirs}", target=(">=", 0.8)),
    )


class SourceAlone(AloneScenario):
    id = "8s"
    title = "Spark source alone vs a consumer loop"
    child_mode, ours, theirs = "source", "source", "consumer"
    metrics = _alone_metrics(ours, theirs)


class SinkAlone(AloneScenario):
    id = "8w"
    title = "Spark sink alone vs a txn producer loop"
    child_mode, ours, theirs = "sink", "sink", "producer"
    metrics = _alone_metrics(ours, theirs)


# ---- child processes -----------------------------------------------------------------------


def direct_loop(args: argparse.Namespace) -> dict:
    """The seeds' consume-transform-produce loop, timed."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "bench-pipeline-direct",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 1_048_576,
        "queued.max.messages.kbytes": 262_144,
    })
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": "bench-pipeline-direct",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    })
    producer.init_transactions(30)
    assigned = False
    consumer.subscribe([args.input])
    first = _first_records(consumer, 20.0)
    if not first:
        # No partitions from the group coordinator in time: read the same partitions by
        # assignment; the offsets still go into the transaction with the group's metadata.
        consumer.unsubscribe()
        partitions = sorted(consumer.list_topics(args.input, timeout=30).topics[args.input].partitions)
        consumer.assign([TopicPartition(args.input, p, 0) for p in partitions])
        assigned = True
        first = _first_records(consumer, 30.0)
    if not first:
        raise RuntimeError("the direct loop received no record")
    output = args.output
    processed = 0
    in_transaction = 0
    commit_latencies: list[float] = []
    started = time.perf_counter()
    producer.begin_transaction()
    pending: list | None = first  # records read before the clock started, handled first
    deadline = time.monotonic() + 600
    while processed < args.messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"processed only {processed} of {args.messages} records in 600 s")
        records: list[Any] = pending if pending is not None else consumer.consume(1000, 0.5)
        pending = None
        for message in records:
            if message.error() is not None:
                continue
            while True:
                try:
                    producer.produce(output, b"enriched:" + message.value(), key=message.key())
                    break
                except BufferError:
                    producer.poll(0.001)
            processed += 1
            in_transaction += 1
        if in_transaction and (in_transaction >= args.commit_every or processed >= args.messages):
            commit_started = time.perf_counter()
            try:
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(60)
            except KafkaException as error:
                raise RuntimeError(f"commit failed: {error}") from None
            commit_latencies.append(time.perf_counter() - commit_started)
            in_transaction = 0
            if processed < args.messages:
                producer.begin_transaction()
    elapsed = time.perf_counter() - started
    consumer.close()
    commit_latencies.sort()
    return {
        "messages": processed,
        "seconds": elapsed,
        "msg_per_s": processed / elapsed,
        "commit_p50_ms": commit_latencies[len(commit_latencies) // 2] * 1000,
        "transactions": len(commit_latencies),
        "assigned": int(assigned),
    }


def _first_records(consumer, timeout_s: float) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = [m for m in consumer.consume(1000, 0.5) if m.error() is None]
        if records:
            return records
    return []


def count_records(args: argparse.Namespace) -> dict:
    """Records a read_committed consumer reads from the start to the end of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": "bench-pipeline-count",
        "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True,
        "fetch.max.bytes": 52_428_800, "queued.max.messages.kbytes": 262_144,
    })
    partitions = sorted(consumer.list_topics(args.topic, timeout=30).topics[args.topic].partitions)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    at_end: set[int] = set()
    records = 0
    last_progress = time.monotonic()
    while len(at_end) < len(partitions) and time.monotonic() - last_progress < 30:
        for message in consumer.consume(10_000, 0.5):
            partition = message.partition()
            assert partition is not None  # records and partition EOFs name their partition
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            at_end.discard(partition)
            records += 1
            last_progress = time.monotonic()
    consumer.close()
    return {"records": records, "complete": len(at_end) == len(partitions)}


def source_alone(args: argparse.Namespace) -> dict:
    """The source's range reader and a consumer loop over one partition, alternating."""
    from confluent_kafka import Consumer, TopicPartition

    from oncelog.spark.source.options import parse_options
    from oncelog.spark.source.ranges import KafkaRange, read_range

    probe = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-probe",
                      "isolation.level": "read_committed"})
    _, end = probe.get_watermark_offsets(TopicPartition(args.topic, 0), timeout=10)
    probe.close()
    options = parse_options({"kafka.bootstrap.servers": args.bootstrap, "subscribe": args.topic}, streaming=True)

    def ours() -> int:
        return sum(batch.num_rows for batch in read_range(options, KafkaRange(args.topic, 0, 0, end)))

    expected = ours()  # the committed records in [0, end): where a plain loop may stop

    def theirs() -> int:
        # A new consumer per run (its set-up is a few ms): one assigned again to offset 0
        # waited ~0.5 s for its previous long-poll Fetch before the first record (measured).
        consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-source-plain",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "fetch.max.bytes": 52_428_800, "queued.max.messages.kbytes": 262_144})
        consumer.assign([TopicPartition(args.topic, 0, 0)])
        read = 0
        while read < expected:
            # consume() waits its whole timeout for a short last chunk: keep it short.
            for message in consumer.consume(1000, 0.01):
                if message.error() is None:
                    message.value()
                    read += 1
        consumer.close()
        return read

    return _alternate(args.runs, ours, theirs)


def sink_alone(args: argparse.Namespace) -> dict:
    """The sink's partition-mode task write and a transactional producer loop, alternating."""
    import uuid

    import pyarrow as pa
    from confluent_kafka import Consumer, Producer, TopicPartition

    from oncelog.spark.sink.options import parse_sink_options
    from oncelog.spark.sink.partition_mode import PartitionMode
    from oncelog.spark.sink.task import TaskIdentity

    values = [os.urandom(args.size) for _ in range(min(args.records, 10_000))]
    rows = [values[i % len(values)] for i in range(args.records)]
    batches = [pa.RecordBatch.from_arrays([pa.array(rows[i:i + 10_000], pa.binary())], names=["value"])
               for i in range(0, len(rows), 10_000)]
    options = parse_sink_options({"kafka.bootstrap.servers": args.bootstrap, "topic": args.topic}, streaming=True)
    partition_mode = PartitionMode(options)
    query = str(uuid.uuid4())
    batch_ids = iter(range(1_000_000))

    def ours() -> int:
        return partition_mode.write(TaskIdentity(query, next(batch_ids), 0, 0), batches).records

    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": f"bench-sink-plain-{query}",
                         "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    producer.init_transactions(30)
    group = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"bench-sink-plain-{query}"})
    offsets = iter(range(1, 1_000_000))

    def theirs() -> int:
        producer.begin_transaction()
        for value in rows:
            while True:
                try:
                    producer.produce(args.topic, value)
                    break
                except BufferError:
                    producer.poll(0.001)
        producer.send_offsets_to_transaction([TopicPartition(args.topic, 0, next(offsets))],
                                             group.consumer_group_metadata(), 30)
        producer.commit_transaction(60)
        return len(rows)

    return _alternate(args.runs, ours, theirs)


def _alternate(runs: int, ours, theirs) -> dict:
    """Median records/s of each over `runs` alternating runs, after one untimed warm-up each.

    What the imports left (pyspark, pyarrow, numpy: ~70,000 objects) is frozen out of the
    garbage collector first: otherwise the collections that a loop allocating a Python
    object per record sets off walk them all, and a plain consumer loop ran 18 times
    slower in this process than alone (measured)."""
    import gc

    ours()
    theirs()
    gc.collect()
    gc.freeze()
    rates: dict[str, list[float]] = {"ours": [], "theirs": []}
    for _ in range(runs):
        for name, call in (("ours", ours), ("theirs", theirs)):
            started = time.perf_counter()
            records = call()
            rates[name].append(records / (time.perf_counter() - started))
    return {name: statistics.median(values) for name, values in rates.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scenarios.pipeline")
    modes = parser.add_subparsers(dest="mode", required=True)
    direct = modes.add_parser("direct")
    direct.add_argument("--bootstrap", required=True)
    direct.add_argument("--input", required=True)
    direct.add_argument("--output", required=True)
    direct.add_argument("--messages", type=int, required=True)
    direct.add_argument("--commit-every", type=int, default=COMMIT_EVERY)
    count = modes.add_parser("count")
    count.add_argument("--bootstrap", required=True)
    count.add_argument("--topic", required=True)
    table = modes.add_parser("count-table")
    table.add_argument("--warehouse", required=True)
    table.add_argument("--table", required=True)
    keyed = modes.add_parser("keyed")
    keyed.add_argument("--bootstrap", required=True)
    keyed.add_argument("--topic", required=True)
    keyed.add_argument("--messages", type=int, required=True)
    keyed.add_argument("--keys", type=int, required=True)
    keyed.add_argument("--priorities", action="store_true")
    several = modes.add_parser("several")
    several.add_argument("--bootstrap", required=True)
    several.add_argument("--records", type=int, required=True)
    several.add_argument("--work", required=True)
    for name in ("source", "sink"):
        alone = modes.add_parser(name)
        alone.add_argument("--bootstrap", required=True)
        alone.add_argument("--topic", required=True)
        alone.add_argument("--records", type=int, default=ALONE_RECORDS)
        alone.add_argument("--size", type=int, default=1024)
        alone.add_argument("--runs", type=int, default=ALONE_RUNS)
    args = parser.parse_args(argv)
    run = {"direct": direct_loop, "count": count_records, "count-table": count_table, "source": source_alone,
           "sink": sink_alone, "keyed": keyed_records, "several": several_queries}[args.mode]
    try:
        result = run(args)
    except Exception as error:  # noqa: BLE001 (reported to the harness as JSON)
        result = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


PIPELINE = PipelineScenario()
ICEBERG = IcebergScenario()
STATEFUL = StatefulScenario()
SOURCE_ALONE = SourceAlone()
SINK_ALONE = SinkAlone()

if __name__ == "__main__":
    sys.exit(main())
