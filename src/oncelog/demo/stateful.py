"""`oncelog demo --stateful`: the seeds' Kafka Streams application (windowed counts,
branches, a stream-table join; oncelog.demo.streams) as one exactly-once pipeline on
Spark, through aborted input and driver kills, checked against an independent computation.

1. An embedded broker (KIP-939 two-phase commit on); topics `input-events`, the compacted
   `reference-data`, and the outputs `windowed-counts` (compacted), `high-priority-events`,
   `normal-priority-events`, `enriched-events`.
2. A transactional producer writes events and table updates (oncelog.demo.events); every
   fifth transaction of each kind is aborted. About a third of the events is written up front,
   the rest while the pipeline runs.
3. The pipeline runner reads both input topics read_committed and writes all four outputs
   from one query in update output mode, in batch mode by default (each micro-batch
   visible in all four at once). Its driver is killed with SIGKILL right after the sink
   committed a micro-batch but before Spark's commit log recorded it, and again in the
   middle of a micro-batch (oncelog.demo.driver); each new driver continues from the
   checkpoint, state included.
4. A read_committed consumer reads the four outputs and the report compares each with
   what the committed input must give (oncelog.demo.events.expected_outputs): every
   window's last count, every branch, every join, with duplicates, missing records,
   aborted input leaked and wrong results counted. Exit 1 if any of them is not 0.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from oncelog.demo.driver import MASTER, DemoError, FaultPlan, RunRecord, run_through_kills, transaction_size, up_front
from oncelog.demo.events import EventSeeder, Expected, SeededEvents, event_id, expected_outputs
from oncelog.demo.report import batch_timings, console_url, machine_load, printer
from oncelog.demo.topics import (
    BROKER_CONFIG,
    COUNTS_TOPIC,
    ENRICHED_TOPIC,
    EVENTS_TOPIC,
    HIGH_TOPIC,
    NORMAL_TOPIC,
    PARTITIONS,
    REFERENCE_TOPIC,
    SINK_TOPICS,
    SOURCE_TOPICS,
    OutputRead,
    create_topics,
    read_topic,
)

TRANSFORM = "oncelog.demo.streams:event_streams"
TRIGGER = "processing-time=200ms"
COMPACTED = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class StatefulSettings:
    messages: int = 20_000  # events
    mode: str = "batch"  # the Kafka sink's
    kills: int = 2  # alternately between the sink's commit and Spark's commit log, and mid-batch
    data_dir: Path | None = None
    seed: int = 7


def pipeline_command(settings: StatefulSettings, bootstrap: str, checkpoint: Path, trigger: str) -> list[str]:
    # No --max-offsets-per-trigger: a micro-batch takes everything committed when it starts,
    # so it never holds an event without the table updates committed before it (see
    # oncelog.demo.events).
    return [
        sys.executable, "-m", "oncelog.spark.pipeline",
        "--source", ",".join(SOURCE_TOPICS),
        "--sink", ",".join(SINK_TOPICS), "--mode", settings.mode, "--output-mode", "update",
        "--transform", TRANSFORM,
        "--checkpoint", str(checkpoint),
        "--bootstrap-servers", bootstrap,
        "--trigger", trigger,
        "--master", MASTER,
        "--progress", "json",
        "--metrics-port", "0",
    ]


# -- verification ------------------------------------------------------------------------------


@dataclass
class OutputCheck:
    """One output topic against what the committed input must give."""

    topic: str
    records: int = 0
    duplicates: int = 0
    missing: int = 0
    leaked: int = 0  # from aborted input
    wrong: int = 0  # a wrong count, join, branch or key; for the counts also an update out of order
    unexpected: int = 0  # from no input (unreadable, a window or event never written, a tombstone)
    stuck_partitions: tuple[int, ...] = ()  # held back by an open transaction

    @property
    def anomalies(self) -> int:
        return self.duplicates + self.missing + self.leaked + self.wrong + self.unexpected + len(self.stuck_partitions)


def check_counts(read: OutputRead, expected: Expected) -> OutputCheck:
    """Update mode: each window's counts in the order written, every one higher than the
    last (the same count twice is a micro-batch written twice); the last one exact."""
    # Read before the log cleaner could compact the topic (its active segments are never
    # cleaned), so every update written is still there.
    check = OutputCheck(COUNTS_TOPIC, records=len(read.values), unexpected=read.tombstones)
    last: dict[str, int] = {}
    for key, value in zip(read.keys, read.values, strict=True):
        try:
            window, count = (key or b"").decode(), int(value)
        except ValueError:
            check.unexpected += 1
            continue
        if window in last and count == last[window]:
            check.duplicates += 1
        elif window in last and count < last[window]:
            check.wrong += 1
        last[window] = count
    check.missing = len(set(expected.counts) - set(last))
    check.unexpected += len(set(last) - set(expected.counts))
    check.wrong += sum(1 for window, count in last.items() if window in expected.counts
                       and count != expected.counts[window])
    return check


def check_branch(topic: str, read: OutputRead, expected: dict[str, str], seeded: SeededEvents) -> OutputCheck:
    """Every committed event of the branch once, with its key; nothing else."""
    check = OutputCheck(topic, records=len(read.values), unexpected=read.tombstones)
    committed_values = seeded.event_values()
    seen: Counter[str] = Counter()
    for key, raw in zip(read.keys, read.values, strict=True):
        value = raw.decode(errors="replace")
        seen[value] += 1
        if value in expected:
            check.wrong += key != expected[value].encode()
        elif event_id(value) in seeded.aborted_events:
            check.leaked += 1
        elif value in committed_values:
            check.wrong += 1  # another branch's event, or one no branch takes
        else:
            check.unexpected += 1
    check.duplicates = sum(times - 1 for times in seen.values() if times > 1)
    check.missing = len(set(expected) - set(seen))
    return check


def check_enriched(read: OutputRead, expected: Expected, seeded: SeededEvents) -> OutputCheck:
    """Every committed event whose key the table held when it came once, `event:reference`
    with the reference the table held then; no aborted event or table value."""
    check = OutputCheck(ENRICHED_TOPIC, records=len(read.values), unexpected=read.tombstones)
    committed_ids = {event_id(value) for value in seeded.event_values()}
    seen: Counter[str] = Counter()
    for key, raw in zip(read.keys, read.values, strict=True):
        value = raw.decode(errors="replace")
        event, _, reference = value.rpartition(":")
        identity = event_id(event)
        seen[identity] += 1
        if identity in seeded.aborted_events or reference in seeded.aborted_table_values:
            check.leaked += 1
        elif identity in expected.enriched:
            expected_key, expected_value = expected.enriched[identity]
            check.wrong += key != expected_key.encode() or value != expected_value
        elif identity in committed_ids:
            check.wrong += 1  # an event joined while its key had no entry
        else:
            check.unexpected += 1
    check.duplicates = sum(times - 1 for times in seen.values() if times > 1)
    check.missing = len(set(expected.enriched) - set(seen))
    return check


def verify(bootstrap: str, seeded: SeededEvents) -> list[OutputCheck]:
    expected = expected_outputs(seeded)
    reads = {topic: read_topic(bootstrap, topic, "read_committed") for topic in SINK_TOPICS}
    checks = [
        check_counts(reads[COUNTS_TOPIC], expected),
        check_branch(HIGH_TOPIC, reads[HIGH_TOPIC], expected.high, seeded),
        check_branch(NORMAL_TOPIC, reads[NORMAL_TOPIC], expected.normal, seeded),
        check_enriched(reads[ENRICHED_TOPIC], expected, seeded),
    ]
    for check in checks:
        check.stuck_partitions = tuple(reads[check.topic].stuck_partitions)
    return checks


# -- the run --------------------------------------------------------------------------------------


def run_stateful_demo(settings: StatefulSettings, out=sys.stdout) -> int:
    from oncelog.broker.embedded import EmbeddedBroker

    say = printer(out)
    with tempfile.TemporaryDirectory(prefix="oncelog-demo-stateful-") as temporary:
        work = Path(temporary)
        data_dir = settings.data_dir or work / "broker"
        with EmbeddedBroker(data_dir, BROKER_CONFIG) as broker:
            bootstrap = broker.bootstrap_servers
            say(f"oncelog demo --stateful: the seeds' Kafka Streams application (windowed counts, branches, "
                f"a stream-table join), exactly once, on Spark {MASTER} (sink mode {settings.mode}, "
                "update output mode)")
            say(f"  broker {bootstrap} (embedded, transaction.two.phase.commit.enable=true), data in {data_dir}")
            console = console_url(broker)
            if console is not None:
                say(f"  console {console} (the broker's http.listener): the pipeline's reports while the demo runs")
            create_topics(bootstrap, (*SOURCE_TOPICS, *SINK_TOPICS),
                          {REFERENCE_TOPIC: COMPACTED, COUNTS_TOPIC: COMPACTED})
            seeder = EventSeeder(bootstrap, settings.messages, seed=settings.seed,
                                 transaction_size=transaction_size(settings.messages, settings.kills))
            checkpoint = work / "checkpoint"
            plan = FaultPlan(
                command=lambda trigger: pipeline_command(settings, bootstrap, checkpoint, trigger),
                checkpoint=checkpoint, kills=settings.kills, seed=settings.seed, up_front=up_front(settings.messages),
                commit_pause=f"commit:return:{settings.mode}", trigger=TRIGGER,
            )
            record = run_through_kills(
                plan, seeder, work, say,
                f"  seeding {settings.messages:,} events into {EVENTS_TOPIC} and table updates into {REFERENCE_TOPIC} "
                f"({PARTITIONS} partitions each), every {seeder.abort_every}th transaction of each aborted; "
                f"{plan.up_front:,} events up front, the rest while the pipeline runs",
            )
            checks = verify(bootstrap, seeder.seeded)
            report(say, seeder.seeded, record, checks)
            return 0 if not any(check.anomalies for check in checks) else 1


def report(say, seeded: SeededEvents, record: RunRecord, checks: list[OutputCheck]) -> None:
    steady = [b for driver in record.drivers for b in driver.batches[1:] if b["records"] > 0]
    first_batches = [driver.batches[0] for driver in record.drivers if driver.batches]

    def line(label: str, value: str) -> None:
        say(f"{label:<24}{value}")

    say("")
    line("input committed", f"{seeded.count(EVENTS_TOPIC):,} events and {seeded.count(REFERENCE_TOPIC):,} table "
         f"updates in {seeded.committed_transactions} transactions")
    line("input aborted", f"{seeded.count(EVENTS_TOPIC, committed=False):,} events and "
         f"{seeded.count(REFERENCE_TOPIC, committed=False):,} table updates in {seeded.aborted_transactions} "
         "transactions")
    say(f"{'output (read_committed)':<24}{'records':>9}{'duplicates':>12}{'missing':>9}{'leaked':>8}{'wrong':>7}")
    for check in checks:
        # An aborted event in a count is not told apart: it makes the window's count wrong.
        leaked = "-" if check.topic == COUNTS_TOPIC else str(check.leaked)
        say(f"{check.topic:<24}{check.records:>9,}{check.duplicates:>12}{check.missing:>9}{leaked:>8}"
            f"{check.wrong:>7}")
    line("duplicates", str(sum(check.duplicates for check in checks)))
    line("missing", str(sum(check.missing for check in checks)))
    line("aborted records leaked", str(sum(check.leaked for check in checks)))
    line("wrong results", f"{sum(check.wrong for check in checks)} (a window's last count, a join's reference, "
         "a branch or a key; counts written out of order)")
    unexpected = sum(check.unexpected for check in checks)
    if unexpected:
        line("unexpected records", str(unexpected))
    for check in checks:
        if check.stuck_partitions:
            line("open transactions", f"partitions {list(check.stuck_partitions)} of {check.topic} held back")
    line("driver kills", f"{len(record.kills) + len(record.commit_kills)} (SIGKILL to the driver's process group: "
         f"{record.describe_kills()})")
    line("driver restarts", f"{record.restarts} (from the checkpoint, state included)")
    if steady:
        line("micro-batches", f"{len(steady)} with records after each driver's first; each writes all four outputs")
        for label, value in batch_timings(steady):
            line(label, value)
    line("machine", machine_load())
    warm_up = ", ".join(f"{batch['duration_ms'] / 1000:.1f}" for batch in first_batches)
    line("start-up", f"{len(record.drivers)} driver starts; first micro-batch after each start {warm_up} s; "
         f"{record.wall_s:.0f} s wall in all")
    line("result", "OK" if not any(check.anomalies for check in checks) else "FAILED")


__all__ = ["DemoError", "StatefulSettings", "run_stateful_demo"]
