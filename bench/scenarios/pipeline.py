"""Scenario 8: the exactly-once Spark pipeline against the same work done directly with
confluent-kafka transactions, on the same broker in the same run.

Each run: a fresh oncelog broker (two-phase commit on), an input topic of 2 partitions
filled with 1 KB records by an untimed idempotent producer, then the same map-only
consume-transform-produce (`value -> b"enriched:" + value`, key kept) twice:

- spark: `python -m oncelog.spark.pipeline --sql ... --trigger available-now` (Spark
  local[2], sink mode partition), micro-batches of COMMIT_EVERY offsets. `msg_per_s` is
  the records of the micro-batches after the first over their summed durations (Spark's
  triggerExecution: planning, read, transform, write, the sink's commit, the checkpoint).
  The driver's start-up and the first micro-batch (which also starts Spark's Python
  workers and warms up the JVM) are `spark_startup_s`; `spark_wall_msg_per_s` is every
  record over the driver process's whole life.
- direct: the seeds' loop in a child process: a read_committed group consumer, a
  transactional producer, `send_offsets_to_transaction` and a commit every COMMIT_EVERY
  records; timed from the first record consumed to the last commit.

Both outputs are counted with a read_committed consumer afterwards: each must hold every
input record exactly once (by count), or the run fails. The direct loop subscribes with a
consumer group; when the broker gives it no partitions in time it falls back to `assign`
(offsets still go through the transaction with the group's metadata) and the run says so
(`direct_assigned` = 1).

    python -m bench.scenarios.pipeline direct --bootstrap H:P --input T --output T --messages N
    python -m bench.scenarios.pipeline count --bootstrap H:P --topic T
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers import ONCELOG
from bench.scenarios.base import (
    Metric,
    Scenario,
    ScenarioFailed,
    Settings,
    load_phase,
    loadgen,
    running,
    transactional_apis_missing,
)

REPO = Path(__file__).resolve().parents[2]
INPUT = "bench-pipeline-in"
SPARK_OUTPUT = "bench-pipeline-spark"
DIRECT_OUTPUT = "bench-pipeline-direct"
PARTITIONS = 2
COMMIT_EVERY = 10_000  # records per micro-batch (Spark) and per transaction (direct)
MAX_MESSAGES = 100_000  # Spark runs ~10 s per 100k: enough for a steady rate
SPARK_SQL = "SELECT key, concat(CAST('enriched:' AS BINARY), value) AS value FROM source"
SPARK_TIMEOUT_S = 600


class PipelineScenario(Scenario):
    id = "8"
    title = "Spark pipeline vs direct txn loop, exactly once"
    metrics = (
        Metric("msg_per_s", "spark msg/s"),
        Metric("direct_msg_per_s", "direct msg/s"),
        Metric("spark_vs_direct", "spark / direct"),
        Metric("spark_wall_msg_per_s", "spark msg/s w/ start"),
        Metric("spark_startup_s", "spark start-up s", higher_is_better=False),
        Metric("spark_batch_p50_ms", "spark batch p50 ms", higher_is_better=False),
        Metric("direct_commit_p50_ms", "direct commit p50 ms", higher_is_better=False),
    )
    peers = (ONCELOG,)

    def unavailable_reason(self, settings: Settings) -> str | None:
        missing = transactional_apis_missing()
        if missing:
            return missing
        if importlib.util.find_spec("pyspark") is None:
            return "needs pyspark (pip install -e .)"
        if importlib.util.find_spec("oncelog.spark.sink") is None:
            return "needs the exactly-once sink (oncelog.spark.sink)"
        try:
            from oncelog.testing.java import java_home

            java_home()
        except Exception as error:
            return f"needs Java 17+ for Spark: {error}"
        return None

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        messages = min(settings.messages, MAX_MESSAGES)
        config = {"transaction.two.phase.commit.enable": "true"}
        with running(peer, settings, config) as (bootstrap, target):
            for topic in (INPUT, SPARK_OUTPUT, DIRECT_OUTPUT):
                loadgen("create-topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", PARTITIONS)
            loadgen("produce", "--bootstrap", bootstrap, "--topic", INPUT, "--messages", messages,
                    "--size", settings.value_size, "--acks", "all", "--idempotent")
            total = messages + 1  # loadgen's warm-up record is on the topic too
            mb = total * settings.value_size / 1e6
            with load_phase(target, settings, f"scenario{self.id}-spark", mb):
                spark = _run_spark(bootstrap, settings.work_dir)
            with load_phase(target, settings, f"scenario{self.id}-direct", mb):
                direct = _child("direct", "--bootstrap", bootstrap, "--input", INPUT, "--output", DIRECT_OUTPUT,
                                "--messages", total, "--commit-every", COMMIT_EVERY)
            for topic, label in ((SPARK_OUTPUT, "spark"), (DIRECT_OUTPUT, "direct")):
                counted = _child("count", "--bootstrap", bootstrap, "--topic", topic)["records"]
                if counted != total:
                    raise ScenarioFailed(f"{label} output holds {counted} records, expected {total}")
        figures = {
            "msg_per_s": spark["msg_per_s"],
            "direct_msg_per_s": direct["msg_per_s"],
            "spark_vs_direct": spark["msg_per_s"] / direct["msg_per_s"],
            "spark_wall_msg_per_s": spark["wall_msg_per_s"],
            "spark_startup_s": spark["startup_s"],
            "spark_batch_p50_ms": spark["batch_p50_ms"],
            "direct_commit_p50_ms": direct["commit_p50_ms"],
            "spark_batches": spark["batches"],
            "spark_batch_phases_ms": spark["phases_ms"],
            "direct_assigned": direct["assigned"],
            "messages": total,
        }
        return figures


def _run_spark(bootstrap: str, work_dir: Path) -> dict[str, float]:
    checkpoint = Path(tempfile.mkdtemp(prefix="pipeline-checkpoint-", dir=work_dir))
    command = [
        sys.executable, "-m", "oncelog.spark.pipeline",
        "--source", INPUT, "--sink", SPARK_OUTPUT, "--sql", SPARK_SQL,
        "--checkpoint", str(checkpoint), "--bootstrap-servers", bootstrap,
        "--mode", "partition", "--trigger", "available-now", "--master", "local[2]",
        "--max-offsets-per-trigger", str(COMMIT_EVERY), "--progress", "json",
    ]
    started_at = time.time()
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SPARK_TIMEOUT_S, cwd=REPO)
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"the Spark pipeline did not finish in {SPARK_TIMEOUT_S} s") from None
    wall = time.perf_counter() - started
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
        raise ScenarioFailed(f"the Spark pipeline failed: {(errors or done.stderr.splitlines() or ['?'])[-1]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    batches = [e for e in events if e.get("event") == "batch" and e["records"] > 0]
    # The first micro-batch also starts Spark's Python workers and warms up the JVM.
    steady = batches[1:]
    if not steady:
        raise ScenarioFailed(f"the Spark pipeline reported {len(batches)} micro-batch(es); need 2 or more")
    records = sum(b["records"] for b in steady)
    busy_s = sum(b["duration_ms"] for b in steady) / 1000
    durations = sorted(b["duration_ms"] for b in steady)
    return {
        "msg_per_s": records / busy_s,
        "wall_msg_per_s": sum(b["records"] for b in batches) / wall,
        # Process start to the end of the first micro-batch (Spark's progress timestamp is
        # the batch's start).
        "startup_s": _epoch(batches[0]["timestamp"]) + batches[0]["duration_ms"] / 1000 - started_at,
        "batch_p50_ms": durations[len(durations) // 2],
        "batches": len(batches),
        "phases_ms": {key: sum(b["phases_ms"].get(key, 0) for b in steady) // len(steady)
                      for key in steady[0]["phases_ms"]},
    }


def _epoch(timestamp: str) -> float:
    """Spark's progress timestamp, e.g. 2024-05-01T12:00:00.123Z, as seconds since the epoch."""
    import datetime

    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _child(mode: str, *args: object, timeout: float = 600) -> dict:
    command = [sys.executable, "-m", "bench.scenarios.pipeline", mode, *(str(a) for a in args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
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


# ---- child processes: the direct loop and the output count ---------------------------------


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
    pending = first
    deadline = time.monotonic() + 600
    while processed < args.messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"processed only {processed} of {args.messages} records in 600 s")
        records = pending if pending is not None else consumer.consume(1000, 0.5)
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
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            records += 1
            last_progress = time.monotonic()
    consumer.close()
    return {"records": records, "complete": len(at_end) == len(partitions)}


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
    args = parser.parse_args(argv)
    try:
        result = direct_loop(args) if args.mode == "direct" else count_records(args)
    except Exception as error:  # reported to the harness as JSON
        result = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


PIPELINE = PipelineScenario()

if __name__ == "__main__":
    sys.exit(main())
