"""The driver's side of the sink's batch mode: deciding, committing and cleaning up one
micro-batch's prepared transactions, and the gate that holds the output partitions'
last stable offset below a micro-batch until all of it is committed. See
docs/spark.md, "Mode batch", and oncelog.spark.sink.batch_mode for the tasks' side.

What it owns: `<checkpointLocation>/oncelog-sink/` (the decisions and the topics the gate
covers, written atomically and durably; the per-batch `metrics-<id>.json` there belong to
oncelog.spark.sink_summary) and the gate transactions (`<prefix>-<queryId>-gate-<random>`).
Every step is idempotent, so Spark's second `commit(N)` after a restart finishes whatever
the first left.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from oncelog.client.cluster import UnknownTopic
from oncelog.client.errors import ClientError
from oncelog.client.producer import TransactionalProducer
from oncelog.client.records import encode_records
from oncelog.spark import trace
from oncelog.spark.paths import DECISIONS_KEPT, SINK_STATE_DIR
from oncelog.spark.pause import pause_point
from oncelog.spark.sink.options import SinkError, SinkOptionError, SinkOptions, SinkWriteError
from oncelog.spark.sink.task import TaskResult
from oncelog.spark.sink.twophase import TwoPhaseClient

# Header of the gate transaction's one record per partition (aborted, so read_committed
# consumers never see it; read_uncommitted ones do).
GATE_HEADER = "oncelog.sink.gate"
# The gate's record has a key too: a compacted topic refuses a record without one (Kafka's
# INVALID_RECORD), and batch mode may write to compacted topics (e.g. the latest count per window).
GATE_KEY = GATE_HEADER.encode()
GATE_TIMEOUT_MS = 900_000  # until it is handed over (then it has none)

# Clusters (per client configuration) on which this process saw 2PC allowed.
_two_phase_confirmed: set = set()

HEADERS_ARROW_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def gate_header() -> pa.Array:
    return pa.array([[{"key": GATE_HEADER, "value": b""}]], HEADERS_ARROW_TYPE)


def batch_transactional_prefix(options: SinkOptions, query_id: str) -> str:
    return f"{options.transactional_id_prefix}-{query_id}-"


@dataclass
class Decision:
    """The driver's commit decision for one micro-batch, persisted before any EndTxn."""

    query_id: str
    batch_id: int
    transactions: list[dict]  # transactional_id, producer_id, producer_epoch, records, partition_id
    done: bool = False
    version: int = 1
    topics: list[str] = field(default_factory=list)


class SinkState:
    """`<checkpointLocation>/oncelog-sink/`: `batch-<id>.json` decisions and `topics.json`
    (topics the sink has written, which the gate covers). Writes are atomic and durable:
    temporary file, fsync, rename, fsync of the directory."""

    def __init__(self, checkpoint: Path) -> None:
        self.directory = checkpoint / SINK_STATE_DIR

    def _path(self, batch_id: int) -> Path:
        return self.directory / f"batch-{batch_id}.json"

    def load(self, batch_id: int) -> Decision | None:
        try:
            with open(self._path(batch_id)) as file:
                return Decision(**json.load(file))
        except FileNotFoundError:
            return None

    def save(self, decision: Decision) -> None:
        self._write(self._path(decision.batch_id), asdict(decision))
        old = self._path(decision.batch_id - DECISIONS_KEPT)
        old.unlink(missing_ok=True)

    def topics(self) -> list[str]:
        try:
            with open(self.directory / "topics.json") as file:
                return json.load(file)
        except FileNotFoundError:
            return []

    def add_topics(self, topics: Iterable[str]) -> None:
        known = self.topics()
        merged = sorted(set(known) | set(topics))
        if merged != known:
            self._write(self.directory / "topics.json", merged)

    def _write(self, path: Path, content) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
        with open(temporary, "w") as file:
            json.dump(content, file, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


@dataclass(frozen=True)
class BatchCommitted:
    """How `BatchCommitter.commit` went, for the sink's metrics (oncelog.spark.sink_summary)."""

    outcome: str  # "committed": decided now; "resumed": an earlier run's decision, finished now
    records: int  # in the decision's transactions
    commit_ms: float  # deciding and the EndTxn calls


class BatchCommitter:
    """The driver's side of mode=batch for one query: decide, commit, clean up, gate."""

    def __init__(self, options: SinkOptions, query_id: str, client: TwoPhaseClient) -> None:
        assert options.checkpoint_location is not None
        self.options = options
        self.query_id = query_id
        self.client = client
        self.cluster = client.cluster
        self.state = SinkState(options.checkpoint_location)
        self.prefix = batch_transactional_prefix(options, query_id)
        self.gate_prefix = f"{self.prefix}gate-"

    def commit(self, results: list[TaskResult], batch_id: int) -> BatchCommitted:
        started = time.perf_counter()
        decision = self.state.load(batch_id)
        outcome = "resumed" if decision is not None else "committed"
        if decision is None:
            with trace.step("sink.batch_commit.decide", batch=batch_id):
                decision = self._decide(results, batch_id)
            pause_point("batch:after-decision")
        if not decision.done:
            with trace.step("sink.batch_commit.end_txns", batch=batch_id):
                for transaction in decision.transactions:
                    self._commit_recorded(transaction)
            pause_point("batch:after-commit")
        committed = BatchCommitted(
            outcome=outcome,
            records=sum(int(transaction.get("records", 0)) for transaction in decision.transactions),
            commit_ms=(time.perf_counter() - started) * 1000,
        )
        # Everything else of this batch (losing attempts, an earlier run's tasks) and late
        # leftovers of earlier batches must be gone before the gate opens the partitions.
        with trace.step("sink.batch_commit.leftovers", batch=batch_id):
            self._abort_leftovers(batch_id, {t["transactional_id"] for t in decision.transactions})
        with trace.step("sink.batch_commit.markers", batch=batch_id):
            for transaction in decision.transactions:
                self.client.wait_complete(transaction["transactional_id"])
        with trace.step("sink.batch_commit.close_gate", batch=batch_id):
            self.close_gate()
        if not decision.done:
            decision.done = True
            self.state.save(decision)
        return committed

    def abort(self, results: list[TaskResult], batch_id: int) -> bool:
        """False when a recorded decision left nothing to abort (the re-run's commit
        finishes it); True when the batch's transactions were aborted."""
        decision = self.state.load(batch_id)
        if decision is not None and not decision.done:
            return False  # decided: only a commit(batch_id) may end these transactions, and it will
        kept = set() if decision is None else {t["transactional_id"] for t in decision.transactions}
        for result in results:
            if result.transactional_id and result.transactional_id not in kept:
                self._abort(result.transactional_id)
        self._abort_leftovers(batch_id, kept)
        self.close_gate()
        return True

    def _decide(self, results: list[TaskResult], batch_id: int) -> Decision:
        transactions = []
        for result in results:
            if result.query_id != self.query_id:
                raise SinkOptionError(
                    f"task results belong to query {result.query_id} but checkpointLocation="
                    f"{self.options.checkpoint_location} holds query {self.query_id}: option "
                    "checkpointLocation must be the query's own checkpoint location"
                )
            if result.batch_id != batch_id:
                raise SinkError(f"commit of batch {batch_id} got the result of batch {result.batch_id}")
            if result.transactional_id is None:
                continue
            # Last chance to refuse: after the decision is saved every one must commit.
            described = self.client.describe(result.transactional_id)
            if (described.state, described.producer_id) != ("Ongoing", result.producer_id):
                raise SinkWriteError(
                    f"the prepared transaction of task {result.partition_id} attempt {result.attempt} "
                    f"({result.transactional_id!r}) is no longer open (state {described.state or 'unknown'}); "
                    "the batch will be re-run"
                )
            transactions.append({
                "transactional_id": result.transactional_id, "producer_id": result.producer_id,
                "producer_epoch": result.producer_epoch, "records": result.records,
                "partition_id": result.partition_id, "attempt": result.attempt,
            })
        topics = sorted({topic for result in results for topic in result.topics})
        decision = Decision(self.query_id, batch_id, transactions, topics=topics)
        self.state.add_topics(topics)
        self.state.save(decision)
        return decision

    def _commit_recorded(self, transaction: dict) -> None:
        transactional_id = transaction["transactional_id"]
        kept = self.client.keep_prepared(transactional_id)
        if not kept.has_ongoing:
            return  # an earlier commit() of this batch already committed it
        if kept.ongoing_producer_id != transaction["producer_id"] or (
            kept.ongoing_producer_epoch < transaction["producer_epoch"]
        ):
            # Only this sink uses these ids and never reuses one: a different transaction
            # here means something outside the sink wrote under the id.
            raise SinkError(
                f"{transactional_id!r} holds producer {kept.ongoing_producer_id} epoch "
                f"{kept.ongoing_producer_epoch}, not the recorded producer {transaction['producer_id']} "
                f"epoch {transaction['producer_epoch']}: refusing to commit a transaction the sink did not decide on"
            )
        self.client.end(transactional_id, kept.producer_id, kept.producer_epoch, commit=True)

    def _abort(self, transactional_id: str) -> None:
        kept = self.client.keep_prepared(transactional_id)
        if kept.has_ongoing:
            self.client.end(transactional_id, kept.producer_id, kept.producer_epoch, commit=False)
            self.client.wait_complete(transactional_id)

    def _abort_leftovers(self, batch_id: int, kept: set[str]) -> None:
        """Abort open transactions of batches up to `batch_id` that the decision does not
        name: losing attempts, the tasks of an earlier run of the batch, and speculative
        attempts that handed over after their batch committed."""
        batch_of = re.compile(re.escape(self.prefix) + r"(\d+)-.+")
        for transactional_id in self.client.list_ongoing(re.escape(self.prefix) + r"\d+-.+"):
            match = batch_of.fullmatch(transactional_id)
            if match and int(match.group(1)) <= batch_id and transactional_id not in kept:
                self._abort(transactional_id)

    # The gate: one record per output partition in a transaction that is kept open (2PC, no
    # timeout) from before the batch's tasks write until after its transactions are all
    # committed, then aborted. The LSO of each partition stays at the gate's record, below
    # all of the batch's records, until then, and moves past all of them at once.

    def open_gate(self) -> None:
        with trace.step("sink.gate_open"):
            self._open_gate()

    def _open_gate(self) -> None:
        open_gates = self._open_gates()
        for gate_id in open_gates:
            # Already open (the batch is being re-run, or this is commit's writer). Owning it
            # with keepPreparedTxn also lifts the timeout of a gate whose opener died before
            # handing it over, and checks the brokers allow 2PC.
            self.client.keep_prepared(gate_id)
        if open_gates:
            return
        # Before anything is written: the brokers allow 2PC (ApiVersions cannot tell), or a
        # gate would be left open, holding back the partitions' LSO until its timeout.
        self._check_two_phase()
        topics = sorted(set(self.state.topics()) | set(self.options.topics)
                        | ({self.options.topic} if self.options.topic else set()))
        partitions = self._partitions(topics) if topics else []
        if not partitions:
            return  # nothing to hold back yet
        # A new id for every gate: an id is used for one transaction only, so its epoch
        # never runs out however long the query runs.
        gate_id = f"{self.gate_prefix}{uuid.uuid4().hex[:8]}"
        settings = replace(self.options.producer_settings, transaction_timeout_ms=GATE_TIMEOUT_MS)
        producer = TransactionalProducer(self.cluster, gate_id, settings, timeout_s=self.options.cluster_timeout_s)
        handed_over = False
        try:
            producer.init()
            producer.begin()
            record = encode_records(pa.array([GATE_KEY], pa.binary()), pa.array([b""], pa.binary()), gate_header(),
                                    max_batch_bytes=settings.max_batch_bytes, timestamp_ms=int(time.time() * 1000))
            for topic, partition in partitions:
                producer.write(topic, partition, record)
            producer.flush()
            self.client.keep_prepared(gate_id)
            handed_over = True
        except ClientError as error:
            raise SinkWriteError(f"could not open the gate transaction {gate_id!r}: {error}") from None
        finally:
            if not handed_over:  # never leave a half-opened gate holding the LSO back
                try:
                    producer.abort()
                except ClientError:
                    pass  # its timeout ends it; the next gate_open lists and reuses or aborts it

    def _check_two_phase(self) -> None:
        """InitProducerId v6 keepPreparedTxn on a probe id of the query, once per process."""
        if self.options.client in _two_phase_confirmed:
            return
        self.client.keep_prepared(f"{self.options.transactional_id_prefix}-{self.query_id}-probe")
        _two_phase_confirmed.add(self.options.client)

    def close_gate(self) -> None:
        for gate_id in self._open_gates():
            self._abort(gate_id)

    def _open_gates(self) -> list[str]:
        return self.client.list_ongoing(re.escape(self.gate_prefix) + ".+")

    def _partitions(self, topics: list[str]) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        deadline = time.monotonic() + self.options.cluster_timeout_s
        for topic in topics:
            try:
                count = self.cluster.retrying(f"Metadata for topic {topic!r}", deadline,
                                              functools.partial(self.cluster.partition_count, topic))
            except UnknownTopic:
                continue  # not created yet: nothing of it to hold back
            found.extend((topic, partition) for partition in range(count))
        return found


def abandon_query(bootstrap_servers: str, query_id: str, transactional_id_prefix: str = "oncelog-sink",
                  timeout_s: float = 60.0) -> list[str]:
    """Abort every transaction a mode=batch query left open (prepared tasks and its gate),
    for a query that will never run again: they have no timeout and hold back the LSO of
    the partitions they wrote. Returns the transactional ids it aborted."""
    pattern = re.escape(f"{transactional_id_prefix}-{query_id}-") + ".+"
    aborted = []
    with TwoPhaseClient(bootstrap_servers, timeout_s) as client:
        for transactional_id in client.list_ongoing(pattern):
            kept = client.keep_prepared(transactional_id)
            if kept.has_ongoing:
                client.end(transactional_id, kept.producer_id, kept.producer_epoch, commit=False)
                client.wait_complete(transactional_id)
                aborted.append(transactional_id)
    return aborted


