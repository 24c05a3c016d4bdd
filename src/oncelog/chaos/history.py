"""Operation histories for the consistency checker, and recording Kafka clients.

A history is a list of operations, one JSON object per line when saved: every send and
its acknowledgement, every transaction outcome, every record a consumer returned, the
group offsets committed and observed. `oncelog.chaos.checker.check` reads it and
reports the anomalies of the Jepsen taxonomy for Kafka.

    history = History()
    with RecordingProducer(history, {"bootstrap.servers": bootstrap}, client="p1") as producer:
        producer.send("orders")                 # value "p1:0", unique in the history
    read_all(history, bootstrap, ["orders"], "read_committed")
    report = check(history)

Values identify records: a recording producer makes each value `"{client}:{n}"` unless
told otherwise, so the checker can tell which send a read record came from. `time` is
wall-clock seconds (`time.time()`) when the outcome became known to the client; all
recorders of one history must share a clock (one host).

Operations beyond the five the checker needs most (Send, TxnOutcome, Poll,
GroupOffsetCommit, GroupOffsetObservation):
- `Seek`: a consumer's position was set (assign at an offset, seek, restart), so its
  next poll of that partition may legitimately go back.
- `ReadComplete`: a full read of one partition from offset 0 reached `end_offset`
  (the end offsets taken when the read began, at `started`); the reader's polls of that
  partition are a *final read* the checker compares acknowledgements with.
- `Transform`: a consume-transform-produce step turned `input_value` into
  `output_value`, for the group-offset atomicity rule.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self, TypeAlias, TypeVar

Isolation = Literal["read_committed", "read_uncommitted"]
Outcome = Literal["commit", "abort", "unknown"]

ISOLATIONS: tuple[str, ...] = ("read_committed", "read_uncommitted")
OUTCOMES: tuple[str, ...] = ("commit", "abort", "unknown")


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """One produce call and its delivery report.

    `acked_offset` is set when the broker acknowledged the record, `error` when the
    delivery failed or never came (then the record may or may not be in the log).
    `partition` is the one the delivery report named, or the requested one (-1: unknown).
    `txn_id`/`txn_seq` name the transaction the record was sent in (None: none).
    """

    client: str
    topic: str
    partition: int
    value: str
    key: str | None = None
    acked_offset: int | None = None
    error: str | None = None
    txn_id: str | None = None
    txn_seq: int | None = None
    time: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOutcome:
    """How a commit or abort call ended.

    "unknown": the call raised an error that leaves the outcome open (retriable, fatal
    or a timeout); a later TxnOutcome for the same transaction may settle it.
    `requested_time` is when the commit/abort call began: no read_committed reader may
    see the transaction's records before a commit was requested.
    """

    client: str
    transactional_id: str
    txn_seq: int
    outcome: Outcome
    time: float
    requested_time: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Poll:
    """One record a consumer returned to the application."""

    client: str
    topic: str
    partition: int
    offset: int
    value: str | None
    isolation: Isolation
    time: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Seek:
    """A consumer's position for a partition was set to `offset` (assign, seek, restart;
    -1: a logical position such as the committed offset)."""

    client: str
    topic: str
    partition: int
    offset: int
    time: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadComplete:
    """`client` read `topic`/`partition` from offset 0 up to `end_offset`, the end offset
    (high watermark or last stable offset, per isolation) taken at `started`."""

    client: str
    topic: str
    partition: int
    isolation: Isolation
    end_offset: int
    started: float
    time: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOffsetCommit:
    """A group offset committed for an input partition, inside transaction
    (`txn_id`, `txn_seq`) or directly (both None)."""

    group: str
    topic: str
    partition: int
    offset: int
    txn_id: str | None = None
    txn_seq: int | None = None
    time: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOffsetObservation:
    """The group's committed offset for a partition as a final OffsetFetch returned it
    (-1: none committed)."""

    group: str
    topic: str
    partition: int
    offset: int
    time: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Transform:
    """A consume-transform-produce step mapped `input_value` to `output_value`."""

    client: str
    input_value: str
    output_value: str
    time: float


Operation: TypeAlias = (
    Send | TxnOutcome | Poll | Seek | ReadComplete | GroupOffsetCommit | GroupOffsetObservation | Transform
)
OPERATION_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (Send, TxnOutcome, Poll, Seek, ReadComplete, GroupOffsetCommit, GroupOffsetObservation, Transform)
}


def to_json(operation: Operation) -> str:
    return json.dumps({"type": type(operation).__name__, **dataclasses.asdict(operation)}, sort_keys=True)


def from_json(line: str) -> Operation:
    fields = json.loads(line)
    cls = OPERATION_TYPES.get(fields.pop("type", None))
    if cls is None:
        raise ValueError(f"not a history operation: {line.strip()[:200]}")
    return cls(**fields)


_Op = TypeVar("_Op", bound=Operation)


class History:
    """Operations in the order they were recorded; safe to append from many threads."""

    def __init__(self, operations: Iterable[Operation] = ()) -> None:
        self._lock = threading.RLock()  # see _clear_stray_error
        self._operations: list[Operation] = list(operations)

    def append(self, operation: _Op) -> _Op:
        if type(operation).__name__ not in OPERATION_TYPES:
            raise TypeError(f"not a history operation: {operation!r}")
        with self._lock:
            self._operations.append(operation)
        return operation

    def extend(self, operations: Iterable[Operation]) -> None:
        for operation in operations:
            self.append(operation)

    @property
    def operations(self) -> list[Operation]:
        """A snapshot copy, in recording order."""
        with self._lock:
            return list(self._operations)

    def of_type(self, cls: type) -> list:
        return [op for op in self.operations if type(op) is cls]

    def record_transform(self, client: str, input_value: str, output_value: str) -> Transform:
        return self.append(Transform(client=client, input_value=input_value, output_value=output_value,
                                     time=time.time()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._operations)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.operations)

    def dump(self, path: str | Path) -> None:
        """Write the history as JSON lines (one operation a line)."""
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(to_json(operation) + "\n" for operation in self.operations)

    @classmethod
    def load(cls, path: str | Path) -> History:
        with open(path, encoding="utf-8") as source:
            return cls(from_json(line) for line in source if line.strip())


# ---------------------------------------------------------------------------------------
# Recording wrappers around confluent-kafka (librdkafka).


def _text(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    return data.decode("utf-8", "backslashreplace")


def _clear_stray_error() -> None:
    """confluent-kafka (2.16) can call a delivery callback while the producer's fatal error
    is already set as the current exception. The callback's first call into C code then
    does its work and raises SystemError ("returned a result with an exception set") on
    the way back: if that call is a lock's __enter__, the lock stays held and the next
    callback on the thread waits for it forever (the chaos run hung so). So the callback's
    first C call is this harmless one, which absorbs the stray error; the producer raises
    its fatal error again from the next call into it, as it always does."""
    try:
        time.monotonic()
    except SystemError:
        pass


class RecordingProducer:
    """A confluent-kafka Producer that records a Send for every delivery report.

    `send()` makes the value `"{client}:{n}"` unless one is given. Records still without
    a delivery report at `close()` are recorded with error "indeterminate" (they may or
    may not be in the log). Callers must `poll()`/`flush()` as with any Producer: the
    reports, and so the records, arrive there.
    """

    def __init__(self, history: History, config: Mapping[str, Any], *, client: str) -> None:
        from confluent_kafka import Producer

        self.history = history
        self.client = client
        self._producer = Producer(dict(config))
        self._counter = itertools.count()
        self._tokens = itertools.count()
        self._lock = threading.RLock()  # see _clear_stray_error
        self._pending: dict[int, tuple[str, int, str, str | None, str | None, int | None]] = {}
        self._txn: tuple[str, int] | None = None  # (transactional id, txn seq) while one is open

    @property
    def producer(self):
        """The wrapped confluent_kafka.Producer."""
        return self._producer

    def next_value(self) -> str:
        return f"{self.client}:{next(self._counter)}"

    def send(self, topic: str, value: str | None = None, *, key: str | None = None,
             partition: int | None = None) -> str:
        """Produce one record; returns its value. The Send is recorded on delivery."""
        value = self.next_value() if value is None else value
        txn_id, txn_seq = self._txn or (None, None)
        token = next(self._tokens)
        with self._lock:
            self._pending[token] = (topic, -1 if partition is None else partition, value, key, txn_id, txn_seq)

        def delivered(error, message) -> None:
            # First of all, before looking up a method of `self`: with the stray error set,
            # CPython's type lookup of a method defined on a base class (a subclass's
            # instance) clears it and fails with AttributeError instead.
            _clear_stray_error()
            self._delivered(token, error, message)

        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        try:
            self._producer.produce(topic, value=value.encode(), key=None if key is None else key.encode(),
                                   on_delivery=delivered, **extra)
        except BaseException as error:
            with self._lock:
                self._pending.pop(token, None)
            self._record(topic, -1 if partition is None else partition, value, key, None,
                         f"produce raised: {error}", txn_id, txn_seq)
            raise
        return value

    def _delivered(self, token: int, error, message) -> None:
        _clear_stray_error()
        with self._lock:
            pending = self._pending.pop(token, None)
        if pending is None:
            return
        topic, partition, value, key, txn_id, txn_seq = pending
        reported_partition = message.partition() if message is not None else None
        if reported_partition is not None and reported_partition >= 0:
            partition = reported_partition
        if error is None:
            self._record(topic, partition, value, key, message.offset(), None, txn_id, txn_seq)
        else:
            self._record(topic, partition, value, key, None, str(error), txn_id, txn_seq)

    def _record(self, topic, partition, value, key, offset, error, txn_id, txn_seq) -> None:
        self.history.append(Send(
            client=self.client, topic=topic, partition=partition, value=value, key=key,
            acked_offset=offset, error=error, txn_id=txn_id, txn_seq=txn_seq, time=time.time(),
        ))

    def poll(self, timeout: float = 0) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 30.0) -> int:
        return self._producer.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Flush, then record whatever is still unreported as indeterminate."""
        self._producer.flush(timeout)
        with self._lock:
            leftovers = list(self._pending.values())
            self._pending.clear()
        for topic, partition, value, key, txn_id, txn_seq in leftovers:
            self._record(topic, partition, value, key, None, "indeterminate: no delivery report", txn_id, txn_seq)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class RecordingTransactionalProducer(RecordingProducer):
    """A transactional RecordingProducer: sends carry the open transaction, and every
    commit/abort records a TxnOutcome.

    Transactions are numbered per producer from 0 (`txn_seq`). A commit that raises
    records "unknown" (whatever librdkafka says, the coordinator may have committed);
    the caller then retries the commit or aborts, which records the final outcome.
    """

    def __init__(self, history: History, config: Mapping[str, Any], *, client: str) -> None:
        if "transactional.id" not in config:
            raise ValueError("a transactional producer needs transactional.id")
        super().__init__(history, config, client=client)
        self.transactional_id = str(config["transactional.id"])
        self._txn_counter = itertools.count()
        self._current_seq: int | None = None

    @property
    def txn_seq(self) -> int | None:
        """The number of the open (or last) transaction."""
        return self._current_seq

    def init_transactions(self, timeout: float = 30.0) -> None:
        self._producer.init_transactions(timeout)

    def begin_transaction(self) -> int:
        self._producer.begin_transaction()
        self._current_seq = next(self._txn_counter)
        self._txn = (self.transactional_id, self._current_seq)
        return self._current_seq

    def send_offsets(self, offsets: Sequence, consumer: RecordingConsumer | Any, group: str | None = None,
                     timeout: float = 30.0) -> None:
        """`send_offsets_to_transaction`, recording a GroupOffsetCommit per partition.

        `offsets` are confluent_kafka TopicPartitions holding the next offset to consume.
        """
        if self._txn is None:
            raise RuntimeError("send_offsets outside a transaction")
        group = group or getattr(consumer, "group_id", None)
        if group is None:
            raise ValueError("send_offsets needs the consumer group id")
        inner = getattr(consumer, "consumer", consumer)
        self._producer.send_offsets_to_transaction(list(offsets), inner.consumer_group_metadata(), timeout)
        now = time.time()
        for tp in offsets:
            self.history.append(GroupOffsetCommit(
                group=group, topic=tp.topic, partition=tp.partition, offset=tp.offset,
                txn_id=self._txn[0], txn_seq=self._txn[1], time=now,
            ))

    def commit_transaction(self, timeout: float = 30.0) -> None:
        self._end(commit=True, timeout=timeout)

    def abort_transaction(self, timeout: float = 30.0) -> None:
        self._end(commit=False, timeout=timeout)

    def _end(self, *, commit: bool, timeout: float) -> None:
        if self._current_seq is None:
            raise RuntimeError("no transaction to end")
        requested = time.time()
        seq = self._current_seq
        try:
            if commit:
                self._producer.commit_transaction(timeout)
            else:
                self._producer.abort_transaction(timeout)
        except BaseException:
            self._outcome(seq, "unknown", requested)
            raise
        self._outcome(seq, "commit" if commit else "abort", requested)
        self._txn = None

    def _outcome(self, seq: int, outcome: Outcome, requested: float) -> None:
        self.history.append(TxnOutcome(
            client=self.client, transactional_id=self.transactional_id, txn_seq=seq, outcome=outcome,
            time=time.time(), requested_time=requested,
        ))


class RecordingConsumer:
    """A confluent-kafka Consumer that records a Poll for every record it returns, and a
    Seek whenever the application sets a position (assign with an offset, seek).

    The isolation level is the consumer's `isolation.level` (librdkafka's default is
    read_committed).
    """

    def __init__(self, history: History, config: Mapping[str, Any], *, client: str) -> None:
        from confluent_kafka import Consumer

        config = dict(config)
        self.history = history
        self.client = client
        self.group_id: str | None = config.get("group.id")
        self.isolation: Isolation = config.get("isolation.level", "read_committed")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation.level must be one of {ISOLATIONS}, got {self.isolation!r}")
        self._consumer = Consumer(config)

    @property
    def consumer(self):
        """The wrapped confluent_kafka.Consumer."""
        return self._consumer

    def assign(self, partitions: Sequence) -> None:
        self._consumer.assign(list(partitions))
        self._record_seeks(partitions)

    def seek(self, partition) -> None:
        self._consumer.seek(partition)
        self._record_seeks([partition])

    def subscribe(self, topics: Sequence[str], on_assign=None, **callbacks) -> None:
        """Subscribe; every assignment records a Seek (the position restarts from the
        committed offset, which may be behind what this consumer already returned)."""

        def assigned(consumer, partitions) -> None:
            self._record_seeks(partitions)
            if on_assign is not None:
                on_assign(consumer, partitions)

        self._consumer.subscribe(list(topics), on_assign=assigned, **callbacks)

    def _record_seeks(self, partitions: Sequence) -> None:
        now = time.time()
        for tp in partitions:
            # A logical offset (beginning, end, stored: negative in librdkafka) is -1 here.
            self.history.append(Seek(client=self.client, topic=tp.topic, partition=tp.partition,
                                     offset=max(tp.offset, -1), time=now))

    def poll(self, timeout: float = 1.0):
        message = self._consumer.poll(timeout)
        if message is not None:
            self._record([message])
        return message

    def consume(self, num_messages: int = 1, timeout: float = 1.0) -> list:
        messages = self._consumer.consume(num_messages, timeout)
        self._record(messages)
        return messages

    def _record(self, messages: Sequence) -> None:
        now = time.time()
        for message in messages:
            if message.error() is None:
                self.history.append(Poll(
                    client=self.client, topic=message.topic(), partition=message.partition(),
                    offset=message.offset(), value=_text(message.value()), isolation=self.isolation, time=now,
                ))

    def __getattr__(self, name: str):
        # commit, committed, position, close, ...: the plain Consumer's.
        if name == "_consumer":
            raise AttributeError(name)  # construction failed before the consumer existed
        return getattr(self._consumer, name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self._consumer.close()


class FinalReadIncomplete(Exception):
    """A full read did not reach the end offsets in time (its polls stay recorded)."""


_reader_counter = itertools.count()


def read_all(history: History, bootstrap_servers: str, topics: Sequence[str], isolation: Isolation, *,
             client: str | None = None, timeout: float = 60.0, config: Mapping[str, Any] | None = None) -> list[Poll]:
    """Read every partition of `topics` from offset 0 to its end offset as of now, recording
    the Polls and a ReadComplete per partition; returns the polls.

    The end offset is the high watermark for read_uncommitted and the last stable offset
    for read_committed (librdkafka asks ListOffsets with the consumer's isolation).
    Raises FinalReadIncomplete when a partition does not reach its end within `timeout`.
    """
    from confluent_kafka import KafkaError, TopicPartition

    client = client or f"reader-{isolation}-{next(_reader_counter)}"
    consumer = RecordingConsumer(history, {
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"oncelog-history-{client}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        **dict(config or {}),
    }, client=client)
    try:
        started = time.time()
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=10)
            topic_metadata = metadata.topics.get(topic)
            if topic_metadata is None or topic_metadata.error is not None:
                raise FinalReadIncomplete(f"cannot read {topic}: {getattr(topic_metadata, 'error', 'no metadata')}")
            for partition in sorted(topic_metadata.partitions):
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
                ends[(topic, partition)] = high
        pending = {tp for tp, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in ends])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            messages = consumer.consume(1000, timeout=0.2)
            for message in messages:
                tp = (message.topic(), message.partition())
                if message.error() is None:
                    if message.offset() + 1 >= ends[tp]:
                        pending.discard(tp)
                elif message.error().code() == KafkaError._PARTITION_EOF and message.offset() >= ends[tp]:
                    pending.discard(tp)
            if pending:
                # read_committed skips aborted records and markers: the position, not
                # the last record, says whether the end was reached.
                for tp in consumer.position([TopicPartition(t, p) for t, p in pending]):
                    if tp.offset >= ends[(tp.topic, tp.partition)]:
                        pending.discard((tp.topic, tp.partition))
        now = time.time()
        for (topic, partition), end in ends.items():
            if (topic, partition) not in pending:
                history.append(ReadComplete(client=client, topic=topic, partition=partition, isolation=isolation,
                                            end_offset=end, started=started, time=now))
        polls = [op for op in history.operations if type(op) is Poll and op.client == client]
        if pending:
            raise FinalReadIncomplete(
                f"{client}: {sorted(pending)} did not reach their end offsets "
                f"{ {tp: ends[tp] for tp in pending} } within {timeout}s"
            )
        return polls
    finally:
        consumer.close()


def observe_group_offsets(history: History, bootstrap_servers: str, group: str, partitions: Sequence[tuple[str, int]],
                          timeout: float = 10.0, config: Mapping[str, Any] | None = None
                          ) -> list[GroupOffsetObservation]:
    """A final OffsetFetch of `group`'s committed offsets (read_committed: offsets of open
    transactions are not returned), recorded as GroupOffsetObservations."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", **dict(config or {})})
    try:
        committed = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout)
    finally:
        consumer.close()
    now = time.time()
    observations = []
    for tp in committed:
        if tp.error is not None:
            raise RuntimeError(f"OffsetFetch for {group} {tp.topic}-{tp.partition} failed: {tp.error}")
        observations.append(history.append(GroupOffsetObservation(
            group=group, topic=tp.topic, partition=tp.partition, offset=tp.offset if tp.offset >= 0 else -1, time=now,
        )))
    return observations
