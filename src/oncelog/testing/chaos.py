"""`oncelog chaos`: a soak run under faults and lost responses, judged by the history
checker.

    result = run_chaos(ChaosSettings(duration=60, faults_per_minute=30))
    print(result.report.summary()); assert result.ok

    result = run_chaos(ChaosSettings(duration=60, faults_per_minute=8, brokers=3,  # a cluster
                                     faults=("kill", "pause", "partition", "disk")))

One run, in this order:

1. A broker process (`BrokerProcess`, log.dirs in a temporary directory unless given)
   behind a `FaultProxy`. The broker advertises the proxy's address, so every client
   talks only to the proxy, and every connection dies with the broker.
   With `brokers` = 3 (or more): a `ClusterProcess` of that many combined nodes (a
   broker and its etcd member each, with quick failure detection: 3 s broker sessions
   unless `session_timeout_ms` says otherwise), each broker behind its own proxy and
   advertising it in its registration, so clients reach every broker through its proxy
   while replication and transaction markers use the bound listeners, unfaulted. The
   internal topics keep Kafka's defaults (3 replicas; __transaction_state needs 2 in
   sync) with 3 partitions each. For partition faults each node runs in a network
   namespace of its own (`NetworkLab`; the proxies stay on the host, so clients reach a
   cut-off node as clients on its side of a partition would); for disk faults each
   node's log.dirs is a tmpfs of its own (`NodeDisks`). Both need root; a kind this
   machine cannot do is left out with a message.
2. Setup without faults: the topics (`chaos`, `chaos-in`, `chaos-out`, 3 partitions
   each; in a cluster a replica on every node and min.insync.replicas=2, and the setup
   waits until every replica is in sync) and the consume-transform-produce input,
   seeded in committed transactions.
3. The chaos phase, `duration` seconds. Concurrent workers (threads, each with its own
   confluent-kafka clients, all recording into one `History`):
   - two transactional writers on `chaos`, committing most transactions and aborting
     some, recreating their producer (same transactional id) after fatal errors;
   - an idempotent writer on `chaos`;
   - a read_committed and a read_uncommitted tailing consumer on all three topics;
   - a consume-transform-produce loop `chaos-in` -> `chaos-out` (group consumer with
     static membership, `send_offsets_to_transaction`, Transform records, some
     transactions aborted on purpose; every failed transaction rewinds the input to
     the group's committed offsets by recreating the consumer, as does a fatal
     consumer error such as a fenced static member);
   - the nemesis (`Nemesis`): a fault at a random moment within evenly spaced slots
     (about `faults_per_minute`), the enabled kinds in turn. On one broker: kill -9,
     restarted on the same port and log.dirs. In a cluster (`oncelog.testing.nemesis`)
     each fault hits one node, chosen a third of the time as the leader of a random
     chaos partition, a third as the coordinator of a transactional id or of the
     transform loop's group, otherwise at random (pauses and partitions also take the
     active controller): kill -9 (its etcd member dies with it; down for up to 4/3 of
     the session, so that sometimes the controller fences it and sometimes the
     restarted broker hands its leaderships over itself), SIGSTOP of its broker, of
     the whole node or of its etcd member, a network partition from the other nodes,
     or its disk filled, each for `fault_seconds`. Then the cure, and the next fault
     waits until every partition, internal ones included, has all its replicas in
     sync again (at most 30 s): never more than one node in trouble, as losing two of
     three loses the metadata quorum, which Kafka does not survive either;
   - the proxy (each broker's, in a cluster, with its own seed), on the Produce,
     AddPartitionsToTxn, EndTxn and TxnOffsetCommit requests,
     with R = `drop_rate`: drops a fraction R of their responses, closing the
     connection; cuts R/2 part way (a prefix, then close); delays R/2 by 300 ms; drops
     R/2 of the requests before they reach the broker, closing the connection; and sends
     R of the Produce requests the broker accepted a second time, 100 ms after the
     answer, on a new connection (a duplicate the broker must recognise).
4. The end: the nemesis stops (the broker left running; in a cluster every node up and
   no fault left in place),
   the proxy stops injecting, the workers end their open transactions and close; in a
   cluster the run waits until every replica of every partition is in sync (a problem
   after 60 s). It then waits until no coordinator lists an open transaction (every
   broker is asked: each lists the ids it coordinates) and every partition's last
   stable offset has reached its high watermark (abandoned transactions time out: the
   cleanup interval is 500 ms), takes the final reads (read_committed and
   read_uncommitted, offset 0 to the end offsets) and the group's committed offsets,
   and runs `check(history)`; each fault's stalls (`oncelog.testing.stalls`) come from
   the same history.
5. The broker (or every node) stops cleanly. In a cluster, the replicas of the chaos
   topics are then compared from each node's log.dirs (`oncelog.testing.replicas`):
   below the smallest high watermark every replica must hold the same batches; a
   difference fails the run like an anomaly.

Every loop is bounded in count and in time; clients talk to 127.0.0.1 only. A client
call that hangs past its own timeout (librdkafka bugs when a broker leaves the metadata,
see `RunState.bounded`) is left behind and its client replaced. A worker that fails in
an unexpected way (a bug of this harness, not a Kafka error) fails the run: the history
would not mean what it claims.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import KafkaError, KafkaException

from oncelog.admin.wire import Cluster as AdminCluster
from oncelog.errors import CommandError
from oncelog.storage.errors import LogError
from oncelog.testing.checker import Report, check
from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.history import (
    FinalReadIncomplete,
    History,
    Poll,
    RecordingConsumer,
    RecordingProducer,
    RecordingTransactionalProducer,
    observe_group_offsets,
    read_all,
)
from oncelog.testing.nemesis import FAULT_KINDS as NEMESIS_KINDS
from oncelog.testing.nemesis import ClusterNemesis, Fault, NodeDisks
from oncelog.testing.netns import NetworkLab, NetworkLabError
from oncelog.testing.process import BrokerProcess
from oncelog.testing.proxy import FaultPolicy, FaultProxy
from oncelog.testing.replicas import ReplicaComparison, compare_replicas
from oncelog.testing.stalls import FaultWindow, Stalls, fault_stalls

TOPIC = "chaos"
INPUT_TOPIC = "chaos-in"
OUTPUT_TOPIC = "chaos-out"
TOPICS = (TOPIC, INPUT_TOPIC, OUTPUT_TOPIC)
PARTITIONS = 3
CTP_GROUP = "chaos-ctp"
CTP_TRANSACTIONAL_ID = "chaos-ctp"
WRITER_TRANSACTIONAL_IDS = ("chaos-tx-1", "chaos-tx-2")

# Kafka API keys whose requests and responses the proxy may drop, cut or delay. Only
# Produce is duplicated: its sequence numbers make a copy harmless. A late copy of an
# EndTxn, AddPartitionsToTxn or TxnOffsetCommit, or a Produce held back past an abort,
# acts on the producer's next transaction (same epoch), in oncelog as in Kafka without
# KIP-890 part 2 (docs/reliability.md, "Known limitations"): not a fault to inject here.
PRODUCE, ADD_PARTITIONS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 0, 24, 26, 28
FAULTED_APIS = frozenset({PRODUCE, ADD_PARTITIONS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT})
DUPLICATED_APIS = frozenset({PRODUCE})
# The proxy's counters of injected faults (see oncelog.testing.proxy), in report order.
FAULT_KINDS = ("drop", "drop_and_close", "truncate_response", "delay", "drop_request_and_close",
               "duplicate_request")
RESPONSE_OUTCOMES = ("drop", "drop_and_close", "truncate_response", "delay", "forward")

TRANSACTION_TIMEOUT_MS = 10_000
BROKER_CONFIG = {
    # Abandoned transactions are aborted soon after their timeout, so the end of the run
    # does not wait for Kafka's 10 s cleanup period.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": str(PARTITIONS),
    # Few internal partitions: less to load after each kill, so restarts stay short.
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}
# Cluster mode: the topics get a replica on every node and need 2 in sync for acks=all
# (the internal topics keep Kafka's defaults: 3 replicas, 2 in sync for
# __transaction_state); fewer internal partitions, as every node replicates them all.
CLUSTER_CONFIG = {
    **BROKER_CONFIG,
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}
CLUSTER_TOPIC_CONFIG = {"min.insync.replicas": "2"}

# Client settings for a broker that vanishes every few seconds: reconnect quickly, give
# up on a dropped response after a few seconds instead of a minute.
CLIENT_BASE: dict[str, str | int | float] = {
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 250,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 250,
    "socket.timeout.ms": 5000,
    "socket.connection.setup.timeout.ms": 3000,
    "topic.metadata.refresh.interval.ms": 5000,
    # librdkafka re-bootstraps when its only broker goes away, decommissioning the broker
    # it had cached as group coordinator; send_offsets_to_transaction then waits for a
    # state change of that dead broker and hangs past its timeout until the coordinator
    # fences the producer (librdkafka issues 5511 and 5456). One broker on one address
    # gains nothing from re-bootstrapping.
    "metadata.recovery.strategy": "none",
    "log_level": 2,  # librdkafka logs every refused connection at level 3
}
# ONCELOG_CHAOS_DEBUG=eos,broker,... turns on those librdkafka debug contexts in every
# client of the run (to stderr): the way to see why a client call hangs.
if os.environ.get("ONCELOG_CHAOS_DEBUG"):
    CLIENT_BASE = {**CLIENT_BASE, "debug": os.environ["ONCELOG_CHAOS_DEBUG"], "log_level": 7}
PRODUCER_BASE = {
    **CLIENT_BASE,
    "linger.ms": 5,
    "request.timeout.ms": 3000,
    "acks": "all",
}

# Bounds: no loop runs past its deadline or its count.
MAX_TRANSACTIONS_PER_WRITER = 200_000
MAX_IDEMPOTENT_BURSTS = 1_000_000
MAX_CONSUMER_POLLS = 10_000_000
MAX_END_ATTEMPTS = 8
# commit/abort_transaction calls that ran out of time ("retry call to resume") before the
# producer is given up: librdkafka may never finish an EndTxn whose transaction
# coordinator was killed while it was in flight (cf. confluentinc/librdkafka#3779), and every
# further call only waits again. A new producer's init_transactions completes or aborts it.
MAX_END_TIMEOUTS = 2
CALL_TIMEOUT_S = 10.0
HANG_GRACE_S = 10.0  # past a client call's own timeout, before it is taken as hung (RunState.bounded)
WIND_DOWN_S = 60.0
TRANSACTIONS_END_TIMEOUT_S = TRANSACTION_TIMEOUT_MS / 1000 + 50.0
IN_SYNC_TIMEOUT_S = 60.0  # cluster mode: every replica back in the ISR at the end


class ChaosError(Exception):
    """The run could not be carried out (the broker did not come back, a worker crashed):
    no verdict on the broker's consistency is possible."""


@dataclass(frozen=True, slots=True)
class ChaosSettings:
    duration: float  # seconds of chaos (kills and faults)
    seed: int = 1
    faults_per_minute: float = 10.0  # planned; in a cluster fewer when nodes take long to settle
    drop_rate: float = 0.05
    data_dir: Path | None = None
    history_path: Path | None = None
    abort_fraction: float = 0.2  # transactions aborted on purpose
    progress_interval: float = 10.0
    brokers: int = 1  # 1: a standalone broker; more: a cluster of that many combined nodes
    # Fault kinds (oncelog.testing.nemesis.FAULT_KINDS), taken in turn; a standalone broker only knows kill.
    faults: tuple[str, ...] = ("kill",)
    fault_seconds: tuple[float, float] = (1.0, 10.0)  # how long a pause, partition or full disk lasts
    session_timeout_ms: int = 3000  # cluster: broker.session.timeout.ms (Kafka's default is 9000)


@dataclass(slots=True)
class ChaosResult:
    report: Report
    history: History
    faults: list[Fault]  # what the nemesis did, in order
    proxy_stats: Counter
    events: Counter  # worker counters: recreated producers, rewinds, ...
    problems: list[str] = field(default_factory=list)  # failures outside the checker's rules
    replicas: ReplicaComparison | None = None  # cluster mode: the replicas compared after the run
    stalls: list[Stalls] = field(default_factory=list)  # per fault, in the same order

    @property
    def kills(self) -> int:
        return sum(1 for fault in self.faults if fault.kind == "kill")

    @property
    def faults_injected(self) -> int:
        return sum(self.proxy_stats.get(kind, 0) for kind in FAULT_KINDS)

    def stall_lines(self) -> list[str]:
        """One line per fault, then the worst stalls of each kind."""
        lines = [f"fault {fault.number}: {fault.description}, {fault.ended - fault.began:.1f}s: {stalls.describe()}"
                 for fault, stalls in zip(self.faults, self.stalls, strict=False) if fault.ended is not None]
        for kind in dict.fromkeys(fault.kind for fault in self.faults):
            of_kind = [stalls for fault, stalls in zip(self.faults, self.stalls, strict=False) if fault.kind == kind]
            worst = {name: max((getattr(s, name) for s in of_kind if getattr(s, name) is not None), default=0.0)
                     for name in ("writes_led", "writes_elsewhere", "commits")}
            lines.append(f"stalls: {kind} faults={len(of_kind)} "
                         + " ".join(f"longest_{name}={value:.1f}s" for name, value in worst.items()))
        return lines

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.problems and (self.replicas is None or self.replicas.ok)

    def counts_line(self) -> str:
        s = self.report.stats
        polls = sum(1 for op in self.history.operations if type(op) is Poll)
        return (
            f"counts: operations={s.get('operations', 0)} sends_acknowledged={s.get('acked', 0)} "
            f"txns_committed={s.get('committed_txns', 0)} txns_aborted={s.get('aborted_txns', 0)} "
            f"txns_unknown={s.get('unknown_txns', 0)} polls={polls} broker_kills={self.kills} "
            + "".join(f"{kind}_faults={sum(1 for f in self.faults if f.kind == kind)} "
                      for kind in NEMESIS_KINDS if kind != "kill")
            + f"proxy_faults={self.faults_injected} ("
            + " ".join(f"{kind}={self.proxy_stats.get(kind, 0)}" for kind in FAULT_KINDS)
            + f"; {sum(self.proxy_stats.get(k, 0) for k in RESPONSE_OUTCOMES)} targeted responses, "
            f"duplicates_answered={self.proxy_stats.get('replay_answered', 0)})"
        )

    def events_line(self) -> str:
        return "events: " + " ".join(f"{name}={count}" for name, count in sorted(self.events.items()))


# ---------------------------------------------------------------------------------------
# Shared state of a run.


class RunState:
    """What every thread of one run shares: the history, the stop signal, counters."""

    def __init__(self, history: History, bootstrap: str, seed: int) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.events: Counter[str] = Counter()
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._seeds = random.Random(seed)

    def count(self, event: str, n: int = 1) -> None:
        with self._lock:
            self.events[event] += n

    def fail(self, where: str, error: BaseException) -> None:
        with self._lock:
            self.failures.append(f"{where}: {''.join(traceback.format_exception(error)).rstrip()}")
        self.stop.set()

    def rng(self) -> random.Random:
        """An independent, seeded generator for one thread."""
        with self._lock:
            return random.Random(self._seeds.getrandbits(64))

    def bounded(self, what: str, timeout: float, call: Callable[[], Any]) -> Any:
        """`call()` on a thread of its own, given `timeout` plus `HANG_GRACE_S` to return.
        librdkafka calls can hang past their own timeout when a broker they cached (a
        group coordinator) was decommissioned, i.e. left the metadata, as a fenced or
        dead broker does in Kafka too (confluentinc/librdkafka issues 5511, 5456, 3740);
        such a call is left hanging, counted as `client_hangs`, and ClientHang raised:
        the caller gives the client up and makes a new one."""
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                outcome["value"] = call()
            except BaseException as error:  # noqa: BLE001 - handed to the caller below
                outcome["error"] = error
            finally:
                done.set()

        threading.Thread(target=target, name=f"call: {what}", daemon=True).start()
        if not done.wait(timeout + HANG_GRACE_S):
            self.count("client_hangs")
            raise ClientHang(f"{what} did not return within {timeout + HANG_GRACE_S:.0f}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")


class ClientHang(Exception):
    """A client call that never returned (see RunState.bounded)."""


def _kafka_error(error: BaseException):
    """The KafkaError inside a KafkaException (None for anything else)."""
    if isinstance(error, KafkaException) and error.args:
        return error.args[0]
    return None


class _TransactionalProducer(RecordingTransactionalProducer):
    """A recording transactional producer whose transactions are numbered from
    `first_txn_seq`: a recreated producer (same transactional id) continues the
    numbering, so (transactional id, txn seq) stays unique in the history."""

    def __init__(self, history: History, config: Mapping[str, Any], *, client: str, first_txn_seq: int) -> None:
        super().__init__(history, config, client=client)
        self._txn_counter = itertools.count(first_txn_seq)

    @property
    def next_txn_seq(self) -> int:
        return 0 if self.txn_seq is None else self.txn_seq + 1


class TransactionalSession:
    """One transactional id across producer incarnations: creates the producer, runs
    `init_transactions`, ends transactions the way librdkafka's error classes demand,
    and recreates the producer after fatal errors (the new one fences the old)."""

    def __init__(self, run: RunState, transactional_id: str, name: str, extra: Mapping[str, Any] | None = None) -> None:
        self.run = run
        self.transactional_id = transactional_id
        self.name = name
        self.extra = dict(extra or {})
        self.producer: _TransactionalProducer | None = None
        self.incarnation = 0
        self.next_txn_seq = 0

    def ready(self) -> _TransactionalProducer | None:
        """The current producer, created and initialised if needed (None: gave up for
        now, the caller retries; always None after stop)."""
        if self.producer is not None:
            return self.producer
        if self.run.stop.is_set():
            return None
        producer = _TransactionalProducer(self.run.history, {
            **PRODUCER_BASE,
            "bootstrap.servers": self.run.bootstrap,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            **self.extra,
        }, client=f"{self.name}.{self.incarnation}", first_txn_seq=self.next_txn_seq)
        self.incarnation += 1
        self.run.count(f"{self.name}.producers_created")
        for _attempt in range(MAX_END_ATTEMPTS):
            if self.run.stop.is_set():
                break
            try:
                producer.init_transactions(CALL_TIMEOUT_S)
                self.producer = producer
                return producer
            except KafkaException as error:
                kafka_error = error.args[0]
                self.run.count(f"{self.name}.init_errors")
                if kafka_error.fatal() or not kafka_error.retriable():
                    break
        self._discard(producer)
        return None

    def discard(self) -> None:
        """Drop the current producer (after a fatal error): the next `ready()` makes a new
        one, whose init_transactions aborts or completes what the old one left open."""
        if self.producer is not None:
            self.run.count(f"{self.name}.producers_recreated")
            producer, self.producer = self.producer, None
            self._discard(producer)

    def forget(self) -> None:
        """Drop a producer stuck in a call that never returns (RunState.bounded), without
        touching it again: whatever it sent is left to the fencing by the next one."""
        if self.producer is not None:
            self.run.count(f"{self.name}.producers_abandoned")
            producer, self.producer = self.producer, None
            self.next_txn_seq = max(self.next_txn_seq, producer.next_txn_seq)

    def _discard(self, producer: _TransactionalProducer) -> None:
        self.next_txn_seq = max(self.next_txn_seq, producer.next_txn_seq)
        _close_quietly(producer, purge=True)

    def end(self, commit: bool) -> str:
        """Commit (or abort) the open transaction: "commit", "abort", or "failed" (the
        producer was discarded; the outcome is for the checker to find out). Retriable
        errors retry the same call, at most MAX_END_TIMEOUTS times after running out of
        time; an abortable one turns a commit into an abort."""
        producer = self.producer
        assert producer is not None
        timeouts = 0
        for _attempt in range(MAX_END_ATTEMPTS):
            try:
                if commit:
                    producer.commit_transaction(CALL_TIMEOUT_S)
                else:
                    producer.abort_transaction(CALL_TIMEOUT_S)
                return "commit" if commit else "abort"
            except KafkaException as error:
                kafka_error = error.args[0]
                self.run.count(f"{self.name}.{'commit' if commit else 'abort'}_errors")
                if kafka_error.fatal():
                    break
                if kafka_error.code() == KafkaError._TIMED_OUT:
                    timeouts += 1
                    if timeouts >= MAX_END_TIMEOUTS:
                        self.run.count(f"{self.name}.end_timeouts")
                        break
                if kafka_error.txn_requires_abort():
                    commit = False
                elif not kafka_error.retriable():
                    break
        self.discard()
        return "failed"

    def abandon(self, error: KafkaException | BufferError) -> str:
        """After an error inside a transaction (produce, send_offsets): abort it, or
        discard the producer if the error is fatal or the abort fails."""
        kafka_error = _kafka_error(error)
        if kafka_error is not None and kafka_error.fatal():
            self.discard()
            return "failed"
        return self.end(commit=False)

    def close(self) -> None:
        if self.producer is not None:
            producer, self.producer = self.producer, None
            self.next_txn_seq = max(self.next_txn_seq, producer.next_txn_seq)
            _close_quietly(producer)


def _close_quietly(producer: RecordingProducer, purge: bool = False) -> None:
    """Close a producer that may be in a fatal state (its flush raises then); records
    without a delivery report are recorded as indeterminate either way."""
    if purge:
        try:
            producer.producer.purge()  # undelivered records: reported as failed, not left hanging
        except KafkaException:
            pass  # a producer in a fatal state may report it here; close() below still records
    for attempt in range(3):
        try:
            producer.close(timeout=3 if purge else CALL_TIMEOUT_S)
            return
        except (KafkaException, SystemError):
            # confluent-kafka raises a fatal error once, from whichever call comes next
            # (2.16's flush sometimes as a SystemError: see history._clear_stray_error);
            # closing again flushes and records the leftovers.
            if attempt == 2:
                raise


def _is_fatal(error) -> bool:
    """Whether a message's error (None: no error) is a fatal one."""
    return error is not None and (error.fatal() or error.code() == KafkaError._FATAL)


def _close_consumer(run: RunState, consumer: RecordingConsumer) -> None:
    try:
        run.bounded("consumer close", CALL_TIMEOUT_S, consumer.close)
    except KafkaException:
        pass  # closing after a fatal error may report it again
    except ClientHang:
        pass  # counted; the consumer is left behind


def _send(producer: RecordingProducer, topic: str, *, value: str | None = None, partition: int | None = None,
          attempts: int = 50) -> str:
    """`producer.send`, waiting out a full local queue (bounded)."""
    for _attempt in range(attempts - 1):
        try:
            return producer.send(topic, value, partition=partition)
        except BufferError:
            producer.poll(0.05)
    return producer.send(topic, value, partition=partition)


# ---------------------------------------------------------------------------------------
# Workers.


class Worker(threading.Thread):
    """A thread whose unexpected exception fails the run (and stops the others)."""

    def __init__(self, run: RunState, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.run_state = run
        self.rng = run.rng()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as error:  # noqa: BLE001 (any failure of a worker fails the run)
            self.run_state.fail(self.name, error)

    def work(self) -> None:
        raise NotImplementedError


class TransactionalWriter(Worker):
    """Transactions of 1-8 records on random partitions of `chaos`; a fraction is aborted
    on purpose (half of those after a flush, so the aborted records are in the log)."""

    def __init__(self, run: RunState, name: str, transactional_id: str, abort_fraction: float) -> None:
        super().__init__(run, name)
        self.session = TransactionalSession(run, transactional_id, name)
        self.abort_fraction = abort_fraction

    def work(self) -> None:
        run, session = self.run_state, self.session
        try:
            for _ in range(MAX_TRANSACTIONS_PER_WRITER):
                if run.stop.is_set():
                    break
                producer = session.ready()
                if producer is None:
                    run.stop.wait(0.2)
                    continue
                try:
                    producer.begin_transaction()
                except KafkaException:
                    session.discard()
                    continue
                try:
                    for _record in range(self.rng.randint(1, 8)):
                        _send(producer, TOPIC, partition=self.rng.randrange(PARTITIONS))
                    producer.poll(0)
                    commit = self.rng.random() >= self.abort_fraction
                    if not commit and self.rng.random() < 0.5:
                        producer.flush(CALL_TIMEOUT_S)
                except (KafkaException, BufferError) as error:
                    run.count(f"{self.name}.send_errors")
                    outcome = session.abandon(error)
                else:
                    outcome = session.end(commit)
                run.count(f"{self.name}.{outcome}")
                run.stop.wait(self.rng.uniform(0, 0.05))
        finally:
            session.close()


class IdempotentWriter(Worker):
    """Bursts of 1-5 records to `chaos` through an idempotent producer, about 20 bursts
    a second; a fatal error recreates the producer (under a new client name)."""

    def work(self) -> None:
        run = self.run_state
        incarnation = 0
        fatal = threading.Event()

        def on_error(error) -> None:
            if error.fatal():
                fatal.set()

        def create() -> RecordingProducer:
            nonlocal incarnation
            producer = RecordingProducer(run.history, {
                **PRODUCER_BASE,
                "bootstrap.servers": run.bootstrap,
                "enable.idempotence": True,
                "message.timeout.ms": 30_000,
                "error_cb": on_error,
            }, client=f"{self.name}.{incarnation}")
            incarnation += 1
            return producer

        producer = create()
        try:
            for _ in range(MAX_IDEMPOTENT_BURSTS):
                if run.stop.is_set():
                    break
                if fatal.is_set():
                    run.count(f"{self.name}.producers_recreated")
                    _close_quietly(producer, purge=True)
                    fatal.clear()
                    producer = create()
                for _record in range(self.rng.randint(1, 5)):
                    try:
                        _send(producer, TOPIC)
                    except BufferError:
                        run.count(f"{self.name}.queue_full")
                    except KafkaException:
                        run.count(f"{self.name}.send_errors")
                try:
                    producer.poll(0)
                except KafkaException as error:  # confluent-kafka raises a fatal error from poll
                    if not error.args[0].fatal():
                        raise
                    fatal.set()
                run.stop.wait(0.05)
        finally:
            _close_quietly(producer)


class TailingConsumer(Worker):
    """Reads every partition of the three topics from offset 0 for the whole run, with
    one isolation level."""

    def __init__(self, run: RunState, name: str, isolation: str) -> None:
        super().__init__(run, name)
        self.isolation = isolation

    def work(self) -> None:
        from confluent_kafka import TopicPartition

        run = self.run_state
        consumer = RecordingConsumer(run.history, {
            **CLIENT_BASE,
            "bootstrap.servers": run.bootstrap,
            "group.id": f"chaos-tail-{self.name}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": self.isolation,
            "fetch.wait.max.ms": 100,
        }, client=self.name)
        try:
            consumer.assign([TopicPartition(topic, p, 0) for topic in TOPICS for p in range(PARTITIONS)])
            for _ in range(MAX_CONSUMER_POLLS):
                if run.stop.is_set():
                    break
                try:
                    consumer.consume(500, timeout=0.2)
                except KafkaException:
                    run.count(f"{self.name}.consume_errors")
                    run.stop.wait(0.1)
        finally:
            _close_consumer(run, consumer)


class TransformLoop(Worker):
    """Consume-transform-produce from `chaos-in` to `chaos-out`, exactly once.

    Each input record's output is derived from its value (`out:<value>`) and written to
    the same partition number, so a retried transaction writes the same output again.
    A transaction holds the batch's outputs and the next input offsets
    (`send_offsets_to_transaction`). After any transaction that did not commit, the
    consumer is recreated (static membership: it takes over the partitions at once) and
    resumes from the group's committed offsets, which the broker returns only once no
    transaction holds them pending.
    """

    def __init__(self, run: RunState, name: str, abort_fraction: float) -> None:
        super().__init__(run, name)
        self.session = TransactionalSession(run, CTP_TRANSACTIONAL_ID, name)
        self.abort_fraction = abort_fraction
        self.consumer_incarnation = 0
        self.consumer_failed = threading.Event()  # the current consumer reported a fatal error

    def new_consumer(self) -> RecordingConsumer:
        self.consumer_failed.clear()

        def on_error(error) -> None:
            if _is_fatal(error):
                self.consumer_failed.set()

        consumer = RecordingConsumer(self.run_state.history, {
            **CLIENT_BASE,
            "bootstrap.servers": self.run_state.bootstrap,
            "group.id": CTP_GROUP,
            "group.instance.id": f"{self.name}-member",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            # Fetches of about one input batch (5 records) per partition interleave the
            # partitions; with large ones every batch of ten comes from the partition
            # fetched first, and the frequent rewinds would never get past it.
            "max.partition.fetch.bytes": 256,
            "error_cb": on_error,
        }, client=f"{self.name}-consumer.{self.consumer_incarnation}")
        self.consumer_incarnation += 1
        consumer.subscribe([INPUT_TOPIC])
        return consumer

    def work(self) -> None:
        from confluent_kafka import TopicPartition

        run, session = self.run_state, self.session
        consumer = self.new_consumer()
        try:
            for _ in range(MAX_TRANSACTIONS_PER_WRITER * 10):
                if run.stop.is_set():
                    break
                producer = session.ready()
                if producer is None:
                    run.stop.wait(0.2)
                    continue
                try:
                    messages = consumer.consume(self.rng.randint(1, 10), timeout=0.3)
                    # A fatal consumer error may also come as an error message (code _FATAL;
                    # its fatal() flag is not set there) or only to the error callback: a
                    # static member fenced (FENCED_INSTANCE_ID) after the group coordinator
                    # moved in the middle of its rebalance, for one. The consumer is dead then.
                    fatal = next((m.error() for m in messages if _is_fatal(m.error())), None)
                    if fatal is not None or self.consumer_failed.is_set():
                        raise KafkaException(fatal or KafkaError(KafkaError._FATAL))
                except KafkaException:  # a fatal consumer error, e.g. a fenced static member
                    run.count(f"{self.name}.consume_errors")
                    _close_consumer(run, consumer)
                    consumer = self.new_consumer()
                    continue
                records = [m for m in messages if m.error() is None]
                if not records:
                    continue
                outcome = "failed"
                try:
                    producer.begin_transaction()
                except KafkaException:
                    session.discard()
                else:
                    try:
                        next_offsets: dict[int, int] = {}
                        for message in records:
                            input_value = message.value().decode()
                            output_value = f"out:{input_value}"
                            run.history.record_transform(producer.client, input_value, output_value)
                            _send(producer, OUTPUT_TOPIC, value=output_value, partition=message.partition())
                            next_offsets[message.partition()] = max(next_offsets.get(message.partition(), 0),
                                                                    message.offset() + 1)
                        offsets = [TopicPartition(INPUT_TOPIC, p, offset) for p, offset in sorted(next_offsets.items())]
                        run.bounded(f"{self.name}: send_offsets_to_transaction", CALL_TIMEOUT_S,
                                    functools.partial(producer.send_offsets, offsets, consumer, CTP_GROUP,
                                                      CALL_TIMEOUT_S))
                        commit = self.rng.random() >= self.abort_fraction
                    except ClientHang:
                        session.forget()  # the next producer's init_transactions fences it and aborts its transaction
                    except (KafkaException, BufferError) as error:
                        run.count(f"{self.name}.txn_errors")
                        outcome = session.abandon(error)
                    else:
                        outcome = session.end(commit)
                run.count(f"{self.name}.{outcome}")
                if outcome != "commit":
                    # The batch's inputs go back to the committed offsets.
                    run.count(f"{self.name}.rewinds")
                    _close_consumer(run, consumer)
                    consumer = self.new_consumer()
        finally:
            session.close()
            _close_consumer(run, consumer)


class Nemesis(threading.Thread):
    """One fault at a random moment in each of `planned` equal slots of the chaos phase:
    the enabled kinds taken in turn, in a seeded order, victims chosen by the brokers
    (`StandaloneBroker.inject`, `ChaosCluster.inject`). Each fault is held for a random
    while and then healed (a killed broker restarted, a paused one continued, a cut node
    reconnected, a full disk freed), even when the run is stopping; in a cluster the next
    fault waits until every replica is back in sync (`settle`), so that at most one node
    is ever in trouble. A fault that cannot be healed (a broker that does not come back)
    fails the run."""

    RESTART_ATTEMPTS = 3

    def __init__(self, run: RunState, brokers: StandaloneBroker | ChaosCluster, kinds: Sequence[str], planned: int,
                 duration: float, log: Callable[[str], None]) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.run_state = run
        self.brokers = brokers
        self.kinds = list(kinds)
        self.planned = planned
        self.duration = duration
        self.rng = run.rng()
        self.faults: list[Fault] = []
        self.finished = threading.Event()  # set when no fault will happen any more
        self.log = log

    @property
    def kills(self) -> int:
        return sum(1 for fault in self.faults if fault.kind == "kill")

    def run(self) -> None:
        try:
            self._on_schedule()
        except BaseException as error:  # noqa: BLE001 (any failure of the nemesis fails the run)
            self.run_state.fail("nemesis", error)
        finally:
            self.finished.set()

    def _on_schedule(self) -> None:
        start = time.monotonic()
        slot = self.duration / max(self.planned, 1)
        last_ready = start
        order = list(self.kinds)
        self.rng.shuffle(order)
        for index in range(self.planned):
            moment = max(start + slot * (index + self.rng.uniform(0.1, 0.9)),
                         last_ready + self.brokers.MIN_UPTIME_S)
            if moment >= start + self.duration or self.run_state.stop.wait(max(0.0, moment - time.monotonic())):
                break
            kind = order[index % len(order)]
            fault = self.brokers.inject(kind, self.rng)
            self.faults.append(fault)
            if self.brokers.REPORTS_FAULTS:
                self.run_state.count(f"faults.{kind}.{fault.target}")
            held = self.brokers.hold_time(kind, self.rng)
            self.run_state.stop.wait(held)  # healed even on stop
            began = time.monotonic()
            self._heal(fault)
            healed_in = time.monotonic() - began
            settled = self.brokers.settle(self.run_state.stop)
            if self.brokers.REPORTS_FAULTS:
                self.log(f"chaos: fault {fault.number} at {_clock(fault.began)}: {fault.description}, held "
                         f"{held:.1f}s, healed in {healed_in:.1f}s, {settled}")
            last_ready = time.monotonic()

    def _heal(self, fault: Fault) -> None:
        for attempt in range(1, self.RESTART_ATTEMPTS + 1):
            try:
                fault.heal()
                return
            except RuntimeError as error:
                self.log(f"chaos: healing fault {fault.number} ({fault.description}), attempt {attempt}, "
                         f"failed: {error}")
        raise ChaosError(f"fault {fault.number} ({fault.description}) could not be healed; the log of "
                         f"{self.brokers.name(fault.node)}: {self.brokers.log_path(fault.node)}")


def _clock(wall: float) -> str:
    """A wall-clock time as the broker logs print it (local time, milliseconds)."""
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f",{int(wall % 1 * 1000):03d}"


# ---------------------------------------------------------------------------------------
# What the clients talk to: one broker, or a cluster, each broker behind its own proxy.


def _fault_policy(settings: ChaosSettings, seed: int) -> FaultPolicy:
    # A dropped response always takes its connection with it: on a live connection later
    # responses would still arrive, which TCP never does (an idempotent producer then
    # takes a later acknowledgement for the earlier batch, and its retry of that batch
    # is out of sequence, as with Apache Kafka). Requests are likewise only dropped with
    # their connection. The other kinds at half the rate, duplicates at the full rate.
    rate = settings.drop_rate
    return FaultPolicy(api_keys=FAULTED_APIS, drop_response_and_close=rate, truncate_response=rate / 2,
                       delay_response=rate / 2, delay_ms=300, drop_request_and_close=rate / 2,
                       duplicate_request=rate, duplicate_api_keys=DUPLICATED_APIS, replay_delay_ms=100,
                       seed=seed, enabled=False)


class StandaloneBroker:
    """One broker process behind one proxy; the broker advertises the proxy's address."""

    MIN_UPTIME_S = 0.3  # between a restart and the next kill
    REPORTS_FAULTS = False  # about one kill every two seconds: counted, not logged one by one

    def __init__(self, root: Path, settings: ChaosSettings) -> None:
        self.broker = BrokerProcess(root / "broker", BROKER_CONFIG)
        if set(settings.faults) - {"kill"}:
            raise ChaosError(f"a standalone broker is only killed; {', '.join(settings.faults)} faults need a cluster")
        self.kinds = list(settings.faults)
        self._count = 0
        self.policies = [_fault_policy(settings, settings.seed)]
        self.proxies = [FaultProxy(("127.0.0.1", self.broker.port), self.policies[0])]

    @property
    def bootstrap(self) -> str:
        return self.proxies[0].address

    def start(self, log: Callable[[str], None]) -> None:
        proxy = self.proxies[0].start()
        self.broker.config["advertised.listeners"] = f"PLAINTEXT://{proxy.address}"
        self.broker.start()
        log(f"chaos: broker pid {self.broker.pid} on 127.0.0.1:{self.broker.port}, clients through the "
            f"proxy at {proxy.address}; log.dirs {self.broker.data_dir}, broker log {self.broker.log_path}")

    def create_topics(self) -> None:
        _create_topics(self.bootstrap, replication_factor=1)

    def inject(self, kind: str, rng: random.Random) -> Fault:
        if kind != "kill":
            raise ChaosError(f"a standalone broker is only killed, not given a {kind} fault")
        self._count += 1
        self.broker.kill()
        return Fault(self._count, "kill", 0, "broker", "kill -9 of the broker", frozenset(), time.time(),
                     cure=lambda: self.broker.start(timeout=60))

    def hold_time(self, kind: str, rng: random.Random) -> float:
        return rng.uniform(0, 0.3)

    def settle(self, stop: threading.Event) -> str:
        return "up"

    def name(self, victim: int) -> str:
        return "the broker"

    def log_path(self, victim: int) -> Path:
        return self.broker.log_path

    def ensure_running(self) -> None:
        if self.broker.process is None:
            try:
                self.broker.start(timeout=60)
            except RuntimeError as error:
                raise ChaosError(f"the broker did not restart: {error}") from None

    def wait_in_sync(self, timeout: float) -> str | None:
        return None  # one replica per partition

    def set_faults(self, enabled: bool) -> None:
        for policy in self.policies:
            policy.enabled = enabled

    def proxy_stats(self) -> Counter:
        return sum((Counter(proxy.stats) for proxy in self.proxies), Counter())

    def stop(self) -> None:
        """Clean shutdown; no error if already stopped."""
        try:
            self.broker.stop(timeout=30)
        except subprocess.TimeoutExpired:
            self.broker.kill()

    def compare_replicas(self) -> ReplicaComparison | None:
        return None

    def close(self) -> None:
        self.stop()
        for proxy in self.proxies:
            proxy.stop()


class ChaosCluster:
    """`brokers` combined nodes (`ClusterProcess`: a broker and its etcd member each, with
    quick failure detection), each broker behind its own proxy and advertising the
    proxy's address in its registration. Replication and markers between brokers use the
    bound listeners, so the proxies see client traffic only."""

    MIN_UPTIME_S = 1.0
    REPORTS_FAULTS = True
    KILL_DOWN_S = (0.0, 4.0 / 3)  # times the session: sometimes past it, fenced by the controller
    SETTLE_TIMEOUT_S = 30.0

    def __init__(self, root: Path, settings: ChaosSettings, log: Callable[[str], None]) -> None:
        self.settings = settings
        self.kinds = []
        nodes = range(1, settings.brokers + 1)
        self.network: NetworkLab | None = None
        self.disks: NodeDisks | None = None
        for kind in settings.faults:
            reason = {"partition": NetworkLab.unavailable, "disk": NodeDisks.unavailable}.get(kind, lambda: None)()
            if reason is not None:
                log(f"chaos: no {kind} faults: {reason}")
                continue
            self.kinds.append(kind)
        try:
            if "partition" in self.kinds:
                self.network = NetworkLab(nodes, seed=settings.seed).create()
            if "disk" in self.kinds:
                self.disks = NodeDisks(root / "cluster", nodes).mount()
        except (OSError, NetworkLabError) as error:
            self._release()
            raise ChaosError(f"cannot set up the faults: {error}") from None
        config = {**CLUSTER_CONFIG, "broker.session.timeout.ms": str(settings.session_timeout_ms)}
        self.cluster = ClusterProcess(root / "cluster", settings.brokers, config, network=self.network)
        self.policies = {node_id: _fault_policy(settings, settings.seed * 1000 + node_id)
                         for node_id in self.cluster.nodes}
        self.proxies = {node_id: FaultProxy((node.host, node.port), self.policies[node_id])
                        for node_id, node in self.cluster.nodes.items()}
        self.nemesis = ClusterNemesis(
            self.cluster, [(topic, p) for topic in TOPICS for p in range(PARTITIONS)],
            coordinator_keys=[(tid, 1) for tid in (*WRITER_TRANSACTIONAL_IDS, CTP_TRANSACTIONAL_ID)] + [(CTP_GROUP, 0)],
            network=self.network, disks=self.disks)

    @property
    def bootstrap(self) -> str:
        return ",".join(proxy.address for proxy in self.proxies.values())

    def start(self, log: Callable[[str], None]) -> None:
        for node_id, proxy in self.proxies.items():
            proxy.start()
            self.cluster.nodes[node_id].config["advertised.listeners"] = f"PLAINTEXT://{proxy.address}"
        try:
            self.cluster.start(timeout=120)
        except (RuntimeError, AssertionError) as error:
            raise ChaosError(f"the cluster did not start: {error}") from None
        for node_id, node in self.cluster.nodes.items():
            log(f"chaos: node {node_id} pid {node.pid} on {node.host}:{node.port}"
                + (f" (network namespace {self.network.namespace(node_id)})" if self.network else "")
                + f", clients through the proxy at {self.proxies[node_id].address}; log.dirs {node.data_dir}"
                + (" (a tmpfs of its own)" if self.disks else "") + f", broker log {node.log_path}")
        log(f"chaos: faults {', '.join(self.kinds) or 'none'}; broker sessions {self.settings.session_timeout_ms} ms")

    def create_topics(self) -> None:
        _create_topics(self.bootstrap, replication_factor=len(self.cluster.nodes), config=CLUSTER_TOPIC_CONFIG)
        try:
            for topic in TOPICS:
                self.cluster.wait_for_topic(topic, timeout=60)
        except AssertionError as error:
            raise ChaosError(str(error)) from None
        problem = self.wait_in_sync(IN_SYNC_TIMEOUT_S)
        if problem:
            raise ChaosError(f"after creating the topics: {problem}")

    def inject(self, kind: str, rng: random.Random) -> Fault:
        """A fault of `kind` on a victim `ClusterNemesis` chooses."""
        return self.nemesis.inject(kind, rng)

    def hold_time(self, kind: str, rng: random.Random) -> float:
        if kind == "kill":
            session_s = self.settings.session_timeout_ms / 1000
            return rng.uniform(self.KILL_DOWN_S[0] * session_s, self.KILL_DOWN_S[1] * session_s)
        return rng.uniform(*self.settings.fault_seconds)

    def settle(self, stop: threading.Event) -> str:
        """Wait (bounded; not past `stop`) until every node is registered and every
        partition, internal ones included, has a leader and all its replicas in sync."""
        began = time.monotonic()
        lagging = _wait_in_sync(self.cluster, self.SETTLE_TIMEOUT_S, stop)
        if lagging:
            return f"not all in sync after {time.monotonic() - began:.1f}s: {lagging[:5]}"
        return f"all replicas in sync {time.monotonic() - began:.1f}s later"

    def name(self, victim: int) -> str:
        return f"node {victim}"

    def log_path(self, victim: int) -> Path:
        return self.cluster.nodes[victim].log_path

    def ensure_running(self) -> None:
        self.nemesis.undo_all()  # nothing is left paused, cut off or full
        for node_id, node in self.cluster.nodes.items():
            if node.process is None:
                try:
                    self.cluster.start_node(node_id, timeout=60)
                except RuntimeError as error:
                    raise ChaosError(f"node {node_id} did not restart: {error}") from None

    def wait_in_sync(self, timeout: float) -> str | None:
        lagging = _wait_in_sync(self.cluster, timeout, threading.Event())
        return f"replicas not in sync within {timeout:.0f}s: {lagging}" if lagging else None

    def set_faults(self, enabled: bool) -> None:
        for policy in self.policies.values():
            policy.enabled = enabled

    def proxy_stats(self) -> Counter:
        return sum((Counter(proxy.stats) for proxy in self.proxies.values()), Counter())

    def stop(self) -> None:
        """Clean shutdown of every node, one at a time; a node that does not stop within
        30 s is killed."""
        for node_id in self.cluster.alive():
            try:
                self.cluster.stop(node_id)
            except subprocess.TimeoutExpired:
                self.cluster.kill(node_id)

    def compare_replicas(self) -> ReplicaComparison:
        """After `stop`: the chaos topics' replicas, batch by batch (oncelog.testing.replicas)."""
        return compare_replicas(self.cluster, TOPICS)

    def close(self) -> None:
        self.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        self._release()

    def _release(self) -> None:
        if self.disks is not None:
            self.disks.unmount()
        if self.network is not None:
            self.network.destroy()


def _wait_in_sync(cluster: ClusterProcess, timeout: float, stop: threading.Event) -> list[str]:
    """Until `_out_of_sync` finds nothing twice in a row, 0.5 s apart (metadata reaches
    the brokers asynchronously: one clean answer may predate the change that follows a
    restart); what it found last when `timeout` passes or `stop` is set."""
    deadline = time.monotonic() + timeout
    lagging = ["not asked yet"]
    clean_answers = 0
    while not stop.is_set() and time.monotonic() < deadline:
        lagging = _out_of_sync(cluster)
        clean_answers = 0 if lagging else clean_answers + 1
        if clean_answers == 2:
            return []
        stop.wait(0.5 if not lagging else 0.2)
    return lagging or ["stopped before a second look"]


def _out_of_sync(cluster: ClusterProcess) -> list[str]:
    """What each live node's metadata shows that is not fully in sync: a node missing from
    the registered brokers, a partition without leader or with a replica out of the ISR.
    Asked of every node, as metadata reaches them asynchronously."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from oncelog.protocol.client import WireClient

    alive = cluster.alive()
    if len(alive) < len(cluster.nodes):
        return [f"nodes up: {alive}"]
    lagging: list[str] = []
    for node_id in alive:
        try:
            with WireClient.connect(cluster.nodes[node_id].bootstrap_servers, timeout=5) as client:
                response = client.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                          include_topic_authorized_operations=False))
        except OSError as error:
            return [f"node {node_id}: {error}"]
        registered = sorted(broker.node_id for broker in response.brokers)
        if registered != sorted(cluster.nodes):
            lagging.append(f"node {node_id} sees brokers {registered}")
        for topic in response.topics:
            for p in topic.partitions:
                if topic.error_code or p.error_code or p.leader_id < 0 or set(p.isr_nodes) != set(p.replica_nodes):
                    lagging.append(f"node {node_id} sees {topic.name}-{p.partition_index} leader {p.leader_id} "
                                   f"isr {sorted(p.isr_nodes)} of {sorted(p.replica_nodes)}")
    return lagging


# ---------------------------------------------------------------------------------------
# The run.


def _create_topics(bootstrap: str, replication_factor: int, config: Mapping[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**CLIENT_BASE, "bootstrap.servers": bootstrap})
    new_topics = [NewTopic(t, PARTITIONS, replication_factor, config=dict(config or {})) for t in TOPICS]
    for topic, future in admin.create_topics(new_topics).items():
        try:
            future.result(30)
        except KafkaException as error:
            raise ChaosError(f"cannot create topic {topic}: {error}") from None


def _seed_inputs(history: History, bootstrap: str, count: int) -> None:
    """`count` input records for the transform loop, committed in transactions of up to
    1000 (so the input holds commit markers as a transactional source's would)."""
    producer = RecordingTransactionalProducer(history, {
        **PRODUCER_BASE, "bootstrap.servers": bootstrap, "transactional.id": "chaos-seed",
        # Small batches: the loop's small fetches then bring a few records of every
        # partition (a batch larger than max.partition.fetch.bytes comes only for the
        # first partition of a fetch, and the loop rewinds often).
        "batch.num.messages": 5,
    }, client="seed")
    try:
        producer.init_transactions(30)
        written = 0
        while written < count:
            producer.begin_transaction()
            for _ in range(min(1000, count - written)):
                _send(producer, INPUT_TOPIC, partition=written % PARTITIONS)
                written += 1
            producer.commit_transaction(60)
    except (KafkaException, BufferError) as error:
        raise ChaosError(f"cannot seed the transform loop's input: {error}") from None
    finally:
        producer.close(timeout=30)


def _open_transactions(bootstrap: str) -> list[str] | None:
    """Transactions the coordinators still have open (None: could not ask). Every broker
    is asked: in a cluster each lists the transactional ids it coordinates."""
    try:
        with AdminCluster(bootstrap, request_timeout_s=10) as cluster:
            listings = cluster.list_transactions()
    except (CommandError, OSError, ValueError):
        return None
    settled = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}
    return [f"{s.transactional_id}={s.transaction_state}" for _node, s in listings
            if s.transaction_state not in settled]


def _unstable_partitions(bootstrap: str) -> dict[str, tuple[int, int]] | None:
    """Partitions whose last stable offset is below the high watermark: {name: (lso, hw)}
    (None: could not ask)."""
    from confluent_kafka import Consumer, TopicPartition

    ends: dict[str, dict[str, int]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({**CLIENT_BASE, "bootstrap.servers": bootstrap, "group.id": "chaos-watermarks",
                             "isolation.level": isolation})
        try:
            ends[isolation] = {
                f"{topic}-{p}": consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
                for topic in TOPICS for p in range(PARTITIONS)
            }
        except KafkaException:
            return None
        finally:
            consumer.close()
    return {name: (lso, ends["read_uncommitted"][name]) for name, lso in ends["read_committed"].items()
            if lso != ends["read_uncommitted"][name]}


def _wait_for_transactions_to_end(bootstrap: str, timeout: float) -> str | None:
    """Wait until no transaction is open anywhere; the problem if that never happens."""
    deadline = time.monotonic() + timeout
    last = "no answer from the broker"
    while time.monotonic() < deadline:
        open_transactions = _open_transactions(bootstrap)
        unstable = _unstable_partitions(bootstrap) if open_transactions == [] else None
        if open_transactions == [] and unstable == {}:
            return None
        last = f"open transactions {open_transactions}, partitions with LSO < HW {unstable}"
        time.sleep(0.5)
    return f"transactions did not end within {timeout:.0f}s: {last}"


def _stacks(threads: Sequence[threading.Thread]) -> str:
    frames = sys._current_frames()
    return "\n".join(f"{thread.name}:\n{''.join(traceback.format_stack(frames[thread.ident]))}"
                     for thread in threads if thread.ident in frames)


def run_chaos(settings: ChaosSettings, out: TextIO = sys.stdout) -> ChaosResult:
    """Carry out one chaos run (see the module docstring); raises ChaosError when the run
    itself could not be carried out."""

    def log(line: str) -> None:
        print(line, file=out, flush=True)

    if settings.brokers < 1:
        raise ChaosError("a run needs at least one broker")
    temporary = None
    if settings.data_dir is None:
        temporary = tempfile.mkdtemp(prefix="oncelog-chaos-")
        root = Path(temporary)
    else:
        root = Path(settings.data_dir)
        root.mkdir(parents=True, exist_ok=True)
    brokers = StandaloneBroker(root, settings) if settings.brokers == 1 else ChaosCluster(root, settings, log)
    history = History()
    run = RunState(history, "", settings.seed)  # bootstrap: the proxies' addresses, once they run
    nemesis: Nemesis | None = None
    workers: list[Worker] = []
    problems: list[str] = []
    clean = False  # a temporary directory is removed only after a clean run
    try:
        brokers.start(log)
        run.bootstrap = brokers.bootstrap
        brokers.create_topics()
        inputs = max(2000, int(settings.duration * 60))
        _seed_inputs(history, brokers.bootstrap, inputs)
        planned = 0
        kinds = brokers.kinds
        if settings.faults_per_minute > 0 and kinds:
            planned = max(1, round(settings.faults_per_minute * settings.duration / 60))
        log(f"chaos: {settings.duration:.0f}s, seed {settings.seed}, {planned} faults planned ({', '.join(kinds)}), "
            f"drop rate {settings.drop_rate}, {inputs} input records seeded")

        # -- the chaos phase --------------------------------------------------------------
        brokers.set_faults(True)
        workers = [
            TransactionalWriter(run, "tx1", WRITER_TRANSACTIONAL_IDS[0], settings.abort_fraction),
            TransactionalWriter(run, "tx2", WRITER_TRANSACTIONAL_IDS[1], settings.abort_fraction),
            IdempotentWriter(run, "idem"),
            TailingConsumer(run, "tail-rc", "read_committed"),
            TailingConsumer(run, "tail-ru", "read_uncommitted"),
            TransformLoop(run, "ctp", settings.abort_fraction),
        ]
        for worker in workers:
            worker.start()
        nemesis = Nemesis(run, brokers, kinds, planned, settings.duration, log)
        if planned:
            nemesis.start()
        else:
            nemesis.finished.set()
        started = time.monotonic()
        deadline = started + settings.duration
        while not run.stop.is_set() and time.monotonic() < deadline:
            run.stop.wait(min(settings.progress_interval, max(0.0, deadline - time.monotonic())))
            faults = sum(brokers.proxy_stats()[kind] for kind in FAULT_KINDS)
            outcomes = " ".join(f"{name}={count}" for name, count in sorted(run.events.items())
                                if name.endswith(("commit", "abort", "failed")))
            log(f"chaos: t={time.monotonic() - started:.0f}s faults={len(nemesis.faults)} proxy_faults={faults} "
                f"operations={len(history)} {outcomes}")

        # -- the end: no more kills or faults; workers finish; transactions end ---------------
        run.stop.set()
        nemesis.finished.wait(120)
        if not nemesis.finished.is_set():
            raise ChaosError("the nemesis did not stop within 120s")
        chaos_ended = time.time()
        if run.failures:
            raise ChaosError("the run failed:\n" + "\n".join(run.failures))
        brokers.ensure_running()
        brokers.set_faults(False)
        wind_down = time.monotonic() + WIND_DOWN_S
        for worker in workers:
            worker.join(max(0.1, wind_down - time.monotonic()))
        stuck = [w for w in workers if w.is_alive()]
        if stuck:
            raise ChaosError(f"workers {[w.name for w in stuck]} did not stop within {WIND_DOWN_S:.0f}s; "
                             f"where they are:\n{_stacks(stuck)}")
        if run.failures:
            raise ChaosError("a worker failed:\n" + "\n".join(run.failures))
        problem = brokers.wait_in_sync(IN_SYNC_TIMEOUT_S)
        if problem:
            problems.append(problem)
        log(f"chaos: writers stopped after {len(nemesis.faults)} faults; waiting for every transaction to end")
        problem = _wait_for_transactions_to_end(brokers.bootstrap, TRANSACTIONS_END_TIMEOUT_S)
        if problem:
            problems.append(problem)

        # -- final reads and the verdict ---------------------------------------------------
        for isolation in ("read_committed", "read_uncommitted"):
            try:
                read_all(history, brokers.bootstrap, list(TOPICS), isolation, client=f"final-{isolation}",
                         timeout=120)
            except FinalReadIncomplete as error:
                problems.append(f"final read incomplete: {error}")
        try:
            observe_group_offsets(history, brokers.bootstrap, CTP_GROUP,
                                  [(INPUT_TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        except RuntimeError as error:
            problems.append(f"the group's committed offsets could not be read: {error}")
        report = check(history)
        if settings.history_path is not None:
            history.dump(settings.history_path)
        brokers.stop()
        try:
            replicas = brokers.compare_replicas()
        except (LogError, OSError) as error:  # a log dir that does not even load
            problems.append(f"the replicas could not be compared: {error!r}")
            replicas = None
        result = ChaosResult(report=report, history=history, faults=list(nemesis.faults),
                             proxy_stats=brokers.proxy_stats(), events=Counter(run.events), problems=problems,
                             replicas=replicas, stalls=_stalls(history, nemesis.faults, chaos_ended))
        clean = result.ok
        return result
    finally:
        run.stop.set()
        if nemesis is not None and nemesis.is_alive():
            nemesis.finished.wait(60)
        for worker in workers:
            if worker.ident is not None:  # Ctrl-C may come while they are being started
                worker.join(5)
        brokers.close()
        if settings.history_path is not None and not Path(settings.history_path).exists():
            history.dump(settings.history_path)
        if temporary is not None:
            if clean:
                shutil.rmtree(temporary, ignore_errors=True)
            else:
                log(f"chaos: kept the broker's log.dirs and log in {temporary} for inspection")


def _stalls(history: History, faults: list[Fault], chaos_ended: float) -> list[Stalls]:
    """Per fault, how long writes and commits stalled from its start until the next one."""
    ends = [fault.began for fault in faults[1:]] + [chaos_ended]
    return [fault_stalls(history, FaultWindow(fault.began, until, fault.led), topic=TOPIC,
                         partitions=range(PARTITIONS), writers=("idem",), transactional_ids=WRITER_TRANSACTIONAL_IDS)
            for fault, until in zip(faults, ends, strict=True)]


def print_result(result: ChaosResult, out: TextIO = sys.stdout, examples: int = 20) -> None:
    """The verdict: the checker's summary, the counts, the replica comparison (cluster
    mode), and for a failed run every anomaly kind's first `examples` anomalies with their
    offending records."""
    print(result.report.summary(), file=out)
    print(result.counts_line(), file=out)
    print(result.events_line(), file=out)
    for line in result.stall_lines():
        print(line, file=out)
    if result.replicas is not None:
        print(result.replicas.summary(), file=out)
        for mismatch in result.replicas.mismatches[:examples]:
            print(f"  {mismatch}", file=out)
    for problem in result.problems:
        print(f"problem: {problem}", file=out)
    if not result.report.ok:
        print("anomalies and their records:", file=out)
        for kind, anomalies in result.report.anomalies().items():
            for anomaly in anomalies[:examples]:
                print(f"  {anomaly}", file=out)
                for record in anomaly.records:
                    print(f"      {record}", file=out)
            if len(anomalies) > examples:
                print(f"  ... {len(anomalies) - examples} more {kind}", file=out)
    print("chaos: OK" if result.ok else "chaos: FAILED", file=out, flush=True)
