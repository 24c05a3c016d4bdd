"""The state one chaos run shares, and the client sessions its threads use.

`RunState` is what every thread of a run shares (the history, the stop signal, counters,
seeded generators) and the bound on a client call that hangs (`bounded`, `ClientHang`).
`TransactionalSession` is one transactional id across producer incarnations: it ends
transactions the way librdkafka's error classes demand and recreates the producer after
fatal errors. `send` and `close_quietly` produce and close without being stalled by a
full queue or a producer in a fatal state. Used by the workers (`oncelog.chaos.workers`),
the nemesis (`oncelog.chaos.targets`) and the run's setup (`oncelog.chaos.run`).
"""

from __future__ import annotations

import itertools
import random
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from oncelog.chaos.history import History, RecordingProducer, RecordingTransactionalProducer
from oncelog.chaos.settings import (
    CALL_TIMEOUT_S,
    HANG_GRACE_S,
    MAX_END_ATTEMPTS,
    MAX_END_TIMEOUTS,
    PRODUCER_BASE,
    TRANSACTION_TIMEOUT_MS,
)


class RunState:
    """What every thread of one run shares: the history, the stop signal, counters."""

    def __init__(self, history: History, bootstrap: str, seed: int) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.security: dict[str, str] = {}  # how clients log in (a secured cluster), set with `bootstrap`
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
            **self.run.security,
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
        close_quietly(producer, purge=True)

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
            close_quietly(producer)


def close_quietly(producer: RecordingProducer, purge: bool = False) -> None:
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


def send(producer: RecordingProducer, topic: str, *, value: str | None = None, partition: int | None = None,
         attempts: int = 50) -> str:
    """`producer.send`, waiting out a full local queue (bounded)."""
    for _attempt in range(attempts - 1):
        try:
            return producer.send(topic, value, partition=partition)
        except BufferError:
            producer.poll(0.05)
    return producer.send(topic, value, partition=partition)
