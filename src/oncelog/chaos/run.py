"""`oncelog chaos`: a soak run under faults and lost responses, judged by the history
checker.

    result = run_chaos(ChaosSettings(duration=60, faults_per_minute=30))
    print(result.report.summary()); assert result.ok

    result = run_chaos(ChaosSettings(duration=60, faults_per_minute=8, brokers=3,  # a cluster
                                     faults=("kill", "pause", "partition", "disk", "sessions")))

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
     restarted on the same port and log.dirs. In a cluster (`oncelog.chaos.nemesis`)
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
   and runs `check(history)`; each fault's stalls (`oncelog.chaos.stalls`) come from
   the same history.
5. The broker (or every node) stops cleanly. In a cluster, the replicas of the chaos
   topics are then compared from each node's log.dirs (`oncelog.chaos.replicas`):
   below the smallest high watermark every replica must hold the same batches; a
   difference fails the run like an anomaly.

Every loop is bounded in count and in time; clients talk to 127.0.0.1 only. A client
call that hangs past its own timeout (librdkafka bugs when a broker leaves the metadata,
see `RunState.bounded`) is left behind and its client replaced. A worker that fails in
an unexpected way (a bug of this harness, not a Kafka error) fails the run: the history
would not mean what it claims.

This module owns the run (`run_chaos`), its outcome (`ChaosResult`, `print_result`) and
the checks at its end. The parts it puts together: `oncelog.chaos.settings` (topics,
configurations, bounds, `ChaosSettings`), `oncelog.chaos.sessions` (the shared
`RunState`, transactional sessions), `oncelog.chaos.workers` (the client threads),
`oncelog.chaos.targets` (the broker or cluster under test, and the `Nemesis` thread).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from confluent_kafka import KafkaException

from oncelog.chaos.checker import Report, check
from oncelog.chaos.history import (
    FinalReadIncomplete,
    GroupOffsetObservation,
    History,
    Poll,
    RecordingTransactionalProducer,
    observe_group_offsets,
    read_all,
)
from oncelog.chaos.nemesis import FAULT_KINDS as NEMESIS_KINDS
from oncelog.chaos.nemesis import Fault
from oncelog.chaos.replicas import ReplicaComparison
from oncelog.chaos.sessions import RunState, send
from oncelog.chaos.settings import (
    CLIENT_BASE,
    CTP_GROUP,
    FAULT_KINDS,
    IN_SYNC_TIMEOUT_S,
    INPUT_TOPIC,
    PARTITIONS,
    PRODUCER_BASE,
    RESPONSE_OUTCOMES,
    TOPIC,
    TOPICS,
    TRANSACTIONS_END_TIMEOUT_S,
    WIND_DOWN_S,
    WRITER_TRANSACTIONAL_IDS,
    ChaosError,
    ChaosSettings,
)
from oncelog.chaos.stalls import FaultWindow, Stalls, fault_stalls
from oncelog.chaos.targets import ChaosCluster, Nemesis, StandaloneBroker
from oncelog.chaos.workers import IdempotentWriter, TailingConsumer, TransactionalWriter, TransformLoop, Worker
from oncelog.client.wire import Cluster as AdminCluster
from oncelog.errors import CommandError
from oncelog.storage.errors import LogError


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
        """One line per fault, then per kind of fault the worst stalls, and the longest wait
        of each partition with the fault it was in: not pooled, so a partition that waited
        for a whole fault shows under its own name."""
        faulted = [(fault, stalls) for fault, stalls in zip(self.faults, self.stalls, strict=False)]
        lines = [f"fault {fault.number}: {fault.description}, {fault.ended - fault.began:.1f}s: "
                 f"{stalls.describe(TOPIC)}" for fault, stalls in faulted if fault.ended is not None]
        for kind in dict.fromkeys(fault.kind for fault in self.faults):
            of_kind = [(fault, stalls) for fault, stalls in faulted if fault.kind == kind]
            worst = {name: max((getattr(s, name) for _, s in of_kind if getattr(s, name) is not None), default=0.0)
                     for name in ("writes_led", "writes_elsewhere", "commits")}
            lines.append(f"stalls: {kind} faults={len(of_kind)} "
                         + " ".join(f"longest_{name}={value:.1f}s" for name, value in worst.items()))
            per_partition: dict[int, tuple[float, int]] = {}  # partition -> (longest gap, fault number)
            for fault, stalls in of_kind:
                for partition, gap in stalls.writes.items():
                    if gap > per_partition.get(partition, (-1.0, 0))[0]:
                        per_partition[partition] = (gap, fault.number)
            if per_partition:
                lines.append(f"stalls: {kind} per partition "
                             + " ".join(f"{TOPIC}-{partition}={gap:.1f}s(fault {number})"
                                        for partition, (gap, number) in sorted(per_partition.items())))
        return lines

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.problems and (self.replicas is None or self.replicas.ok)

    def transform_line(self) -> str:
        """How far the transform loop's group got in each input partition."""
        committed = {o.partition: o.offset for o in self.history.of_type(GroupOffsetObservation)
                     if o.group == CTP_GROUP}
        return "transform: committed " + " ".join(f"{INPUT_TOPIC}-{p}={offset}"
                                                  for p, offset in sorted(committed.items()))

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
# The run.


def _seed_inputs(history: History, bootstrap: str, count: int, security: Mapping[str, str]) -> None:
    """`count` input records for the transform loop, committed in transactions of up to
    1000 (so the input holds commit markers as a transactional source's would)."""
    producer = RecordingTransactionalProducer(history, {
        **PRODUCER_BASE, "bootstrap.servers": bootstrap, **security, "transactional.id": "chaos-seed",
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
                send(producer, INPUT_TOPIC, partition=written % PARTITIONS)
                written += 1
            producer.commit_transaction(60)
    except (KafkaException, BufferError) as error:
        raise ChaosError(f"cannot seed the transform loop's input: {error}") from None
    finally:
        producer.close(timeout=30)


def _open_transactions(bootstrap: str, security: Mapping[str, str]) -> list[str] | None:
    """Transactions the coordinators still have open (None: could not ask). Every broker
    is asked: in a cluster each lists the transactional ids it coordinates."""
    try:
        with AdminCluster(bootstrap, request_timeout_s=10, properties=security) as cluster:
            listings = cluster.list_transactions()
    except (CommandError, OSError, ValueError):
        return None
    settled = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}
    return [f"{s.transactional_id}={s.transaction_state}" for _node, s in listings
            if s.transaction_state not in settled]


def _unstable_partitions(bootstrap: str, security: Mapping[str, str]) -> dict[str, tuple[int, int]] | None:
    """Partitions whose last stable offset is below the high watermark: {name: (lso, hw)}
    (None: could not ask)."""
    from confluent_kafka import Consumer, TopicPartition

    ends: dict[str, dict[str, int]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({**CLIENT_BASE, "bootstrap.servers": bootstrap, **security, "group.id": "chaos-watermarks",
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


def _wait_for_transactions_to_end(bootstrap: str, security: Mapping[str, str], timeout: float) -> str | None:
    """Wait until no transaction is open anywhere; the problem if that never happens."""
    deadline = time.monotonic() + timeout
    last = "no answer from the broker"
    while time.monotonic() < deadline:
        open_transactions = _open_transactions(bootstrap, security)
        unstable = _unstable_partitions(bootstrap, security) if open_transactions == [] else None
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
        run.security = dict(brokers.worker_security)
        brokers.create_topics()
        inputs = settings.seeded_inputs
        _seed_inputs(history, brokers.bootstrap, inputs, brokers.security)
        planned = 0
        kinds = brokers.kinds
        if settings.faults_per_minute > 0 and kinds:
            planned = max(1, round(settings.faults_per_minute * settings.duration / 60))
        log(f"chaos: {settings.duration:.0f}s, seed {settings.seed}, {planned} faults planned ({', '.join(kinds)}), "
            f"drop rate {'none (TLS)' if settings.secure else settings.drop_rate}, {inputs} input records seeded")

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
        problem = _wait_for_transactions_to_end(brokers.bootstrap, brokers.security, TRANSACTIONS_END_TIMEOUT_S)
        if problem:
            problems.append(problem)

        # -- final reads and the verdict ---------------------------------------------------
        for isolation in ("read_committed", "read_uncommitted"):
            try:
                read_all(history, brokers.bootstrap, list(TOPICS), isolation, client=f"final-{isolation}",
                         timeout=120, config=brokers.security)
            except FinalReadIncomplete as error:
                problems.append(f"final read incomplete: {error}")
        try:
            observed = observe_group_offsets(history, brokers.bootstrap, CTP_GROUP,
                                             [(INPUT_TOPIC, p) for p in range(PARTITIONS)], timeout=30,
                                             config=brokers.security)
        except RuntimeError as error:
            problems.append(f"the group's committed offsets could not be read: {error}")
        else:
            starved = [o.partition for o in observed if o.offset <= 0]
            if starved:  # every input partition holds seeded records from the start
                problems.append("the transform loop never committed an input of "
                                + ", ".join(f"{INPUT_TOPIC}-{p}" for p in starved))
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
    return [] if not faults else [fault_stalls(history, FaultWindow(fault.began, until, fault.led), topic=TOPIC,
                         partitions=range(PARTITIONS), writers=("idem",), transactional_ids=WRITER_TRANSACTIONAL_IDS)
            for fault, until in zip(faults, ends, strict=True)]


def print_result(result: ChaosResult, out: TextIO = sys.stdout, examples: int = 20) -> None:
    """The verdict: the checker's summary, the counts, the replica comparison (cluster
    mode), and for a failed run every anomaly kind's first `examples` anomalies with their
    offending records."""
    print(result.report.summary(), file=out)
    print(result.counts_line(), file=out)
    print(result.events_line(), file=out)
    print(result.transform_line(), file=out)
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
