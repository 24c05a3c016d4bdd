"""The main job: an order-enrichment pipeline, exactly once, through faults.

1. An embedded broker (KIP-939 two-phase commit on) in a temporary directory; topics
   `orders` and `enriched-orders` (with `--sink iceberg`, the Apache Iceberg table
   `demo.enriched_orders` in an embedded SQLite catalog instead of the second topic).
2. A transactional producer writes JSON orders; every fifth transaction is aborted. A
   third is written up front, the rest while the pipeline runs.
3. The pipeline runner (`python -m oncelog.spark.pipeline`, a driver subprocess with its
   own Spark) reads `orders` read_committed, applies oncelog.demo.enrich and writes
   `enriched-orders` through the exactly-once sink (or `oncelog.demo.enrich:
   enrich_orders_as_rows` into the table, a snapshot per micro-batch). Faults:
   - the first attempt of a task in micro-batch 1 fails after passing on half its rows
     (`oncelog.demo.faults`; master `local[*,4]` lets Spark retry it);
   - the driver's process group (the Python driver and its JVM) is killed with SIGKILL
     in the middle of a micro-batch, and a new driver continues from the checkpoint
     (`--trigger available-now`: it stops once everything committed is processed).
4. A read_committed consumer reads `enriched-orders` (pyiceberg reads the table's current
   snapshot) and the report compares it with what was committed: duplicates, missing,
   aborted orders leaked, wrong enrichment. Exit 1 if any of them is not 0.

While it runs, the broker's console (its `http.listener`, on a free port) shows the
pipeline from the runner's reports, and each driver serves its micro-batches' metrics
(`--metrics-port 0`); the demo prints both addresses.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from oncelog.demo.driver import MASTER, DemoError, FaultPlan, RunRecord, run_through_kills, transaction_size, up_front
from oncelog.demo.faults import FAIL_AT_ROW, FAIL_BATCH, FAULT_DIR
from oncelog.demo.orders import OrderSeeder, Seeded, expected_enrichment
from oncelog.demo.report import batch_timings, console_url, machine_load, printer
from oncelog.demo.topics import BROKER_CONFIG, PARTITIONS, create_topics, read_topic

INPUT_TOPIC = "orders"
OUTPUT_TOPIC = "enriched-orders"
OUTPUT_TABLE = "demo.enriched_orders"  # --sink iceberg
SINKS = ("kafka", "iceberg")
FAIL_BATCH_ID = 1


@dataclass(frozen=True)
class DemoSettings:
    messages: int = 20_000
    mode: str = "batch"  # the Kafka sink's
    kills: int = 1
    data_dir: Path | None = None
    # module:function or path/to/file.py:function; None: oncelog.demo.enrich's for the sink
    transform: str | None = None
    seed: int = 7
    sink: str = "kafka"  # or "iceberg": OUTPUT_TABLE in an embedded SQLite catalog
    warehouse: Path | None = None  # the Iceberg catalog's directory; None: in the demo's temporary directory

    @property
    def iceberg(self) -> bool:
        return self.sink == "iceberg"

    @property
    def transform_reference(self) -> str:
        if self.transform is not None:
            return self.transform
        return f"oncelog.demo.enrich:{'enrich_orders_as_rows' if self.iceberg else 'enrich_orders'}"


def max_offsets_per_trigger(settings: DemoSettings) -> int:
    return max(100, settings.messages // 6)


def pipeline_command(settings: DemoSettings, bootstrap: str, checkpoint: Path, fault_dir: Path,
                     trigger: str, warehouse: Path | None = None) -> list[str]:
    """The runner's command line; `warehouse`: the embedded Iceberg catalog's directory (--sink iceberg)."""
    max_offsets = max_offsets_per_trigger(settings)
    # Halfway through a task's rows, so the failing attempt has transformed some first.
    fail_at_row = max(1, max_offsets // PARTITIONS // 3)
    if settings.iceberg:
        assert warehouse is not None
        sink = ["--sink", f"iceberg:{OUTPUT_TABLE}", "--warehouse", str(warehouse)]
    else:
        sink = ["--sink", OUTPUT_TOPIC, "--mode", settings.mode]
    return [
        sys.executable, "-m", "oncelog.spark.pipeline",
        "--source", INPUT_TOPIC, *sink,
        "--transform", settings.transform_reference,
        "--transform", "oncelog.demo.faults:fail_first_attempt",
        "--checkpoint", str(checkpoint),
        "--bootstrap-servers", bootstrap,
        "--trigger", trigger,
        "--master", MASTER,
        "--max-offsets-per-trigger", str(max_offsets),
        "--progress", "json",
        "--metrics-port", "0",
        "--conf", f"{FAIL_BATCH}={FAIL_BATCH_ID}",
        "--conf", f"{FAIL_AT_ROW}={fail_at_row}",
        "--conf", f"{FAULT_DIR}={fault_dir}",
        # Short runs: the JVM's quick compiler and serial GC start faster.
        "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    ]


# -- verification ----------------------------------------------------------------------------


@dataclass
class Verdict:
    output_records: int
    duplicates: int
    missing: int
    leaked: int
    unexpected: int
    wrong_enrichment: int
    stuck_partitions: list[int] = field(default_factory=list)
    uncommitted_output: int = 0  # records in the output log no read_committed consumer sees
    gate_records: int = 0  # of which batch mode's gate records
    snapshots: int = 0  # --sink iceberg: the sink's snapshots in the table's history
    stray_files: int = 0  # --sink iceberg: data files under the table that no snapshot lists

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.leaked or self.unexpected
                    or self.wrong_enrichment or self.stuck_partitions or self.stray_files)


def verify(bootstrap: str, seeded: Seeded) -> Verdict:
    committed_read = read_topic(bootstrap, OUTPUT_TOPIC, "read_committed")
    everything_read = read_topic(bootstrap, OUTPUT_TOPIC, "read_uncommitted")
    enriched_orders: list[dict | None] = []
    for value in committed_read.values:
        try:
            enriched = json.loads(value)
        except ValueError:
            enriched = None
        enriched_orders.append(enriched if isinstance(enriched, dict) else None)

    def placed(index: int, order: dict) -> bool:  # keyed by the customer, with its source header
        headers = committed_read.headers[index]
        return (committed_read.keys[index] == order["customer_id"].encode()
                and any(name == "source" for name, _ in headers or ()))

    verdict = compare(enriched_orders, seeded, placed)
    return replace(
        verdict, unexpected=verdict.unexpected + committed_read.tombstones,
        stuck_partitions=committed_read.stuck_partitions,
        uncommitted_output=max(0, len(everything_read.values) - len(committed_read.values)),
        gate_records=everything_read.gate_records,
    )


def compare(enriched_orders: list[dict | None], seeded: Seeded, placed: Callable[[int, dict], bool]) -> Verdict:
    """The output's enriched orders (None: unreadable) against what was seeded.
    `placed(index, order)`: the sink's own part of a right output (a topic's key and
    header, a table's source column)."""
    seen: Counter[str] = Counter()
    wrong = 0
    unparseable = 0
    for index, enriched in enumerate(enriched_orders):
        order_id = None if enriched is None else enriched.get("order_id")
        if enriched is None or not isinstance(order_id, str):
            unparseable += 1
            continue
        seen[order_id] += 1
        order = seeded.committed.get(order_id)
        if order is None:
            continue
        expected = expected_enrichment(order)
        total = enriched.get("total")
        if (
            abs((math.nan if total is None else float(total)) - expected["total"]) > 0.005
            or enriched.get("item_count") != expected["item_count"]
            or enriched.get("tier") != expected["tier"]
            or enriched.get("customer_id") != order["customer_id"]
            or not placed(index, order)
        ):
            wrong += 1
    return Verdict(
        output_records=len(enriched_orders),
        duplicates=sum(times - 1 for times in seen.values() if times > 1),
        missing=len(set(seeded.committed) - set(seen)),
        leaked=len(set(seen) & seeded.aborted),
        unexpected=len(set(seen) - set(seeded.committed) - seeded.aborted) + unparseable,
        wrong_enrichment=wrong,
    )


def verify_table(warehouse: Path, seeded: Seeded) -> Verdict:
    """--sink iceberg: the table's current snapshot, read with pyiceberg, against what was seeded."""
    from oncelog.demo.lake import open_table, sink_snapshots, stray_data_files

    table = open_table(warehouse)
    rows = table.scan().to_arrow().to_pylist()
    return replace(
        compare(rows, seeded, lambda index, _order: bool(rows[index].get("source"))),
        snapshots=sink_snapshots(table),
        stray_files=len(stray_data_files(table)),
    )


# -- the run ------------------------------------------------------------------------------------


def _table_exists(warehouse: Path) -> bool:
    from oncelog.demo.lake import table_exists  # pyiceberg: only for --sink iceberg

    return table_exists(warehouse)


def run_demo(settings: DemoSettings, out=sys.stdout) -> int:
    from oncelog.broker.embedded import EmbeddedBroker

    say = printer(out)
    with tempfile.TemporaryDirectory(prefix="oncelog-demo-") as temporary:
        work = Path(temporary)
        data_dir = settings.data_dir or work / "broker"
        warehouse = (settings.warehouse or work / "lake").resolve()
        if settings.iceberg and settings.warehouse is not None and _table_exists(warehouse):
            # The orders of every run have the same ids: a second run would count the first's as duplicates.
            raise DemoError(f"{warehouse} already holds {OUTPUT_TABLE} from an earlier demo: give another "
                            "--warehouse, or remove that one")
        with EmbeddedBroker(data_dir, BROKER_CONFIG) as broker:
            bootstrap = broker.bootstrap_servers
            into = f"into Iceberg table {OUTPUT_TABLE}" if settings.iceberg else f"sink mode {settings.mode}"
            say(f"oncelog demo: order enrichment, exactly once, on Spark {MASTER} ({into})")
            say(f"  broker {bootstrap} (embedded, transaction.two.phase.commit.enable=true), data in {data_dir}")
            if settings.iceberg:
                kept = "" if settings.warehouse else " (removed at the end; --warehouse DIR keeps it)"
                say(f"  Iceberg catalog: embedded SQLite, {warehouse}/catalog.db, the table's files under "
                    f"{warehouse}{kept}")
            console = console_url(broker)
            if console is not None:
                say(f"  console {console} (the broker's http.listener; its /metrics there too): "
                    "the pipeline's reports, transactions, partitions, while the demo runs")
            create_topics(bootstrap, (INPUT_TOPIC,) if settings.iceberg else (INPUT_TOPIC, OUTPUT_TOPIC))
            seeder = OrderSeeder(bootstrap, INPUT_TOPIC, settings.messages, seed=settings.seed,
                                 transaction_size=transaction_size(settings.messages, settings.kills))
            record, seeded, faults_injected = _run_pipeline_through_faults(
                settings, bootstrap, work, seeder, say, warehouse)
            verdict = verify_table(warehouse, seeded) if settings.iceberg else verify(bootstrap, seeded)
            _report(say, settings, seeded, record, faults_injected, verdict, warehouse)
            return 0 if verdict.ok else 1


def _run_pipeline_through_faults(settings: DemoSettings, bootstrap: str, work: Path, seeder: OrderSeeder, say,
                                 warehouse: Path) -> tuple[RunRecord, Seeded, int]:
    """The run (oncelog.demo.driver); also the number of task failures injected."""
    checkpoint = work / "checkpoint"
    fault_dir = work / "faults"
    plan = FaultPlan(
        command=lambda trigger: pipeline_command(settings, bootstrap, checkpoint, fault_dir, trigger, warehouse),
        checkpoint=checkpoint, kills=settings.kills, seed=settings.seed, up_front=up_front(settings.messages),
    )
    record = run_through_kills(
        plan, seeder, work, say,
        f"  seeding {settings.messages:,} orders into {INPUT_TOPIC} ({PARTITIONS} partitions), every "
        f"{seeder.abort_every}th transaction aborted; {plan.up_front:,} up front, the rest while the pipeline runs",
    )
    faults_injected = len(list(fault_dir.glob("batch*"))) if fault_dir.is_dir() else 0
    return record, seeder.seeded, faults_injected


# -- the report ------------------------------------------------------------------------------


def _report(say, settings: DemoSettings, seeded: Seeded, record: RunRecord, faults_injected: int,
            verdict: Verdict, warehouse: Path) -> None:
    # Each driver's first micro-batch also starts Spark's Python workers and warms up the
    # JVM: reported on its own, and left out of the steady figures.
    first_batches = [driver.batches[0] for driver in record.drivers if driver.batches]
    steady = [b for driver in record.drivers for b in driver.batches[1:] if b["records"] > 0]
    processed = sum(b["records"] for b in steady)
    busy_ms = sum(b["duration_ms"] for b in steady)

    def line(label: str, value: str) -> None:
        say(f"{label:<24}{value}")

    say("")
    line("input committed", f"{len(seeded.committed):,} orders in {seeded.committed_transactions} transactions")
    line("input aborted", f"{len(seeded.aborted):,} orders in {seeded.aborted_transactions} transactions")
    if settings.iceberg:
        line("output records", f"{verdict.output_records:,} (the table's current snapshot, read with pyiceberg)")
    else:
        line("output records", f"{verdict.output_records:,} (read_committed)")
    line("duplicates", str(verdict.duplicates))
    line("missing", str(verdict.missing))
    line("aborted records leaked", str(verdict.leaked))
    line("wrong enrichment", str(verdict.wrong_enrichment))
    if verdict.unexpected:
        line("unexpected records", str(verdict.unexpected))
    if verdict.stuck_partitions:
        line("open transactions", f"partitions {verdict.stuck_partitions} of {OUTPUT_TOPIC} held back")
    line("task failures", f"{faults_injected} injected (first attempt of a task in micro-batch "
         f"{FAIL_BATCH_ID}), retried by Spark")
    line("driver kills", f"{len(record.kills)} (SIGKILL to the driver's process group, "
         f"{', '.join(record.kills) or '-'})")
    line("driver restarts", f"{record.restarts} (from the checkpoint)")
    if settings.iceberg:
        line("snapshots", f"{verdict.snapshots} (one per micro-batch with rows; each summary names the query "
             "and the micro-batch, so a re-run adds nothing)")
        line("stray data files", f"{verdict.stray_files} (files of failed or killed attempts in no snapshot; "
             "the sink deletes them after each commit)")
    else:
        gates = f" and {verdict.gate_records} gate records of batch mode" if verdict.gate_records else ""
        line("invisible output", f"{verdict.uncommitted_output:,} records of failed attempts{gates} in "
             f"{OUTPUT_TOPIC}'s log, aborted: read_committed never shows them")
    if busy_ms:
        line("throughput", f"{processed * 1000 / busy_ms:,.0f} records/s ({processed:,} records in "
             f"{len(steady)} micro-batches, {busy_ms / 1000:.1f} s)")
        for label, value in batch_timings(steady):
            line(label, value)
    line("machine", machine_load())
    warm_up = ", ".join(f"{batch['duration_ms'] / 1000:.1f}" for batch in first_batches)
    line("start-up", f"{len(record.drivers)} driver starts; first micro-batch after each start "
         f"{warm_up} s (Python workers, JVM warm-up); {record.wall_s:.0f} s wall in all")
    line("where to look", "`oncelog pipeline run --metrics-port P` serves a pipeline's metrics at "
         "http://127.0.0.1:P/metrics; the broker's console (http.listener, at /) shows every pipeline's "
         "reports (topic _oncelog_pipelines)")
    if settings.iceberg:
        from oncelog.demo.lake import read_command

        if settings.warehouse:
            line("the table", f"{OUTPUT_TABLE}, SQLite catalog {warehouse}/catalog.db")
            line("read it with", read_command(warehouse))
        else:
            line("the table", f"{OUTPUT_TABLE}, removed with the demo's temporary directory: add --warehouse DIR "
                 "to keep it (the demo then prints a command that reads it)")
    line("result", "OK" if verdict.ok else "FAILED")
