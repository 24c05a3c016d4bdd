"""A transactional, idempotent producer of whole record batches, speaking the classic
transaction protocol (KIP-98, the one librdkafka and Spark's Kafka sink use) with
standard APIs only, so it runs against any Kafka 2.5+ cluster:

    producer = TransactionalProducer(cluster, "my-id", settings, timeout_s=60)
    producer.init()                       # FindCoordinator + InitProducerId: fences older producers
    producer.begin()
    producer.write("orders", 0, record_sets)   # AddPartitionsToTxn once, then Produce
    producer.send_offsets("group", {("orders", 0): 42})   # AddOffsetsToTxn + TxnOffsetCommit
    producer.commit()                      # waits for every batch, then EndTxn

What it owns: the producer id and epoch, each partition's next sequence number, the
partitions and group in the open transaction, and the batches not yet acknowledged.

- Up to five batches of a partition are in flight, all to its leader's one connection, so
  they are answered in order. After a retriable answer (a stale leader, a lost
  connection, NOT_ENOUGH_REPLICAS) the failed batch and every batch behind it go again,
  in order, with their sequences, once all have answered; the broker's duplicate check
  makes a resent batch that was already appended count once. One Produce request carries
  the next batch of each partition the broker leads; up to five requests are in flight
  per connection, as Kafka allows idempotent producers. Answers are read as they arrive
  while more rows are encoded.
- PRODUCER_FENCED / INVALID_PRODUCER_EPOCH raise `Fenced`; any other non-retriable answer
  raises BrokerError, and the transaction must then be aborted (or left to the next
  `init()` of the id, which aborts it).
- Every call retries retriable answers until `timeout_s` from its start, then NoAnswer.
"""

from __future__ import annotations

import datetime
import time
from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from oncelog.client.cluster import GROUP_COORDINATOR, TRANSACTION_COORDINATOR, Cluster, UnknownTopic
from oncelog.client.config import ConfigError, positive_setting
from oncelog.client.connection import Connection
from oncelog.client.errors import (
    STALE_LEADER,
    BrokerError,
    ConnectionLost,
    raise_for,
)
from oncelog.client.records import RecordSet
from oncelog.names import TopicPartition
from oncelog.protocol.messages import RequestBuilder
from oncelog.protocol.record_batch import Compression

PRODUCE_KEY = 0
INIT_PRODUCER_ID_KEY = 22
ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
TXN_OFFSET_COMMIT_KEY = 28

MAX_REQUESTS_IN_FLIGHT = 5  # per broker connection, as Kafka allows idempotent producers
REQUEST_BYTES = 4 << 20  # batches gathered into one Produce request up to about this size
FIRST_RETRY_PAUSE_S = 0.01
LONGEST_RETRY_PAUSE_S = 0.5


_CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


@dataclass(frozen=True)
class ProducerSettings:
    """From librdkafka's names: transaction.timeout.ms, batch.size (capped by
    message.max.bytes), compression.type (or compression.codec), request.timeout.ms."""

    transaction_timeout_ms: int = 60_000
    max_batch_bytes: int = 1_000_000
    codec: int = Compression.NONE
    request_timeout_ms: int = 30_000

    @classmethod
    def from_settings(cls, settings: dict[str, str]) -> ProducerSettings:
        name = "compression.type" if "compression.type" in settings else "compression.codec"
        codec_name = str(settings.get(name, "none")).lower()
        if codec_name not in _CODECS:
            raise ConfigError(f"{name}={codec_name}: use one of {', '.join(_CODECS)}")
        batch = positive_setting(settings, "batch.size", cls.max_batch_bytes)
        largest = positive_setting(settings, "message.max.bytes", 1_000_000)
        return cls(
            transaction_timeout_ms=positive_setting(settings, "transaction.timeout.ms", cls.transaction_timeout_ms),
            max_batch_bytes=max(1024, min(batch, largest)),
            codec=_CODECS[codec_name],
            request_timeout_ms=positive_setting(settings, "request.timeout.ms", cls.request_timeout_ms),
        )


@dataclass
class _Pending:
    """A batch of one partition, built with its sequence the first time it is sent."""

    record_set: RecordSet
    sequence: int
    batch: bytes | None = None


@dataclass
class _Partition:
    """One partition's batches in the open transaction, in sequence order: not yet sent,
    in flight (all to one connection, answered in order), and, after a retriable answer,
    the failed batch and those behind it until all have answered and go again."""

    unsent: deque[_Pending] = field(default_factory=deque)
    in_flight: deque[_Pending] = field(default_factory=deque)
    connection: Connection | None = None
    failed: list[_Pending] | None = None
    not_before: float = 0.0
    pause: float = FIRST_RETRY_PAUSE_S

    @property
    def done(self) -> bool:
        return not self.unsent and not self.in_flight and self.failed is None


# Produce answers after which a batch goes again (besides a stale leader's).
_RESEND = frozenset({
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out,
    ErrorCode.network_exception, ErrorCode.corrupt_message,
})


class TransactionalProducer:
    def __init__(self, cluster: Cluster, transactional_id: str, settings: ProducerSettings, *,
                 timeout_s: float) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.settings = settings
        self.timeout_s = timeout_s
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        self._in_transaction: set[TopicPartition] = set()
        self._offsets_added: set[str] = set()
        self._partitions: dict[TopicPartition, _Partition] = {}
        # Produce requests in flight per connection: (correlation id, what each carries).
        self._requests: dict[Connection, deque[tuple[int, list[tuple[TopicPartition, _Pending]]]]] = {}
        self.records_written = 0

    # -- the producer id ------------------------------------------------------------------

    def init(self) -> tuple[int, int]:
        """InitProducerId: a new epoch for the id, fencing every older producer of it (and
        aborting its open transaction). Returns (producer id, epoch)."""

        def call():
            connection = self.cluster.coordinator(self.transactional_id, TRANSACTION_COORDINATOR)
            version = connection.version(INIT_PRODUCER_ID_KEY, 0, 4)
            request = RequestBuilder(INIT_PRODUCER_ID_KEY, version).make(
                "InitProducerIdRequest", transactional_id=self.transactional_id,
                transaction_timeout=datetime.timedelta(milliseconds=self.settings.transaction_timeout_ms),
                producer_id=-1, producer_epoch=-1,
            )
            response = connection.request(request)
            self.cluster.check_coordinator_answer(response.error_code, self.transactional_id, TRANSACTION_COORDINATOR,
                                                  f"InitProducerId of {self.transactional_id!r}")
            return int(response.producer_id), int(response.producer_epoch)

        self.producer_id, self.producer_epoch = self._retrying("InitProducerId", call)
        self._sequences.clear()
        self._reset_transaction()
        return self.producer_id, self.producer_epoch

    def _reset_transaction(self) -> None:
        self._in_transaction.clear()
        self._offsets_added.clear()
        self._drop_batches()
        self.records_written = 0

    def _drop_batches(self) -> None:
        self._partitions.clear()
        self._requests.clear()

    # -- transactions ----------------------------------------------------------------------

    def begin(self) -> None:
        """Start a transaction (nothing is sent until a partition or offsets are added)."""
        if self.producer_id < 0:
            raise RuntimeError("init() first")
        self._reset_transaction()

    def write(self, topic: str, partition: int, record_sets: list[RecordSet]) -> None:
        """Queue batches for a partition (adding it to the transaction first) and send what
        can go now. Acknowledgements are collected by later calls and by `flush()`."""
        if not record_sets:
            return
        tp = (topic, partition)
        if tp not in self._in_transaction:
            self.add_partitions([tp])
        unsent = self._partitions.setdefault(tp, _Partition()).unsent
        sequence = self._sequences.get(tp, 0)
        for record_set in record_sets:
            unsent.append(_Pending(record_set, sequence))
            sequence = (sequence + record_set.count) % (1 << 31)
            self.records_written += record_set.count
        self._sequences[tp] = sequence
        self._pump(deadline=self._deadline(), wait=False)

    def add_partitions(self, partitions: list[TopicPartition]) -> None:
        """AddPartitionsToTxn for partitions not yet in the transaction."""
        new = sorted(set(partitions) - self._in_transaction)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)

        def call():
            connection = self.cluster.coordinator(self.transactional_id, TRANSACTION_COORDINATOR)
            version = connection.version(ADD_PARTITIONS_TO_TXN_KEY, 0, 3)
            build = RequestBuilder(ADD_PARTITIONS_TO_TXN_KEY, version)
            topics = tuple(build.make("AddPartitionsToTxnTopic", name=topic, partitions=tuple(parts))
                           for topic, parts in by_topic.items())
            request = build.make(
                "AddPartitionsToTxnRequest", v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id, v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=topics,
            )
            response = connection.request(request)
            failed = [(ErrorCode(result.partition_error_code), f"{topic.name}-{result.partition_index}")
                      for topic in response.results_by_topic_v3_and_below
                      for result in topic.results_by_partition if result.partition_error_code != ErrorCode.none]
            # The partition that failed, not those the coordinator then did not try.
            failed.sort(key=lambda failure: failure[0] == ErrorCode.operation_not_attempted)
            for code, where in failed[:1]:
                self._check_txn_answer(code, f"AddPartitionsToTxn of {where}")

        self._retrying("AddPartitionsToTxn", call)
        self._in_transaction.update(new)

    def send_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit `offsets` for `group_id` with the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit to the group's coordinator, as a member-less group: generation -1)."""
        if group_id not in self._offsets_added:
            def add():
                connection = self.cluster.coordinator(self.transactional_id, TRANSACTION_COORDINATOR)
                version = connection.version(ADD_OFFSETS_TO_TXN_KEY, 0, 3)
                request = RequestBuilder(ADD_OFFSETS_TO_TXN_KEY, version).make(
                    "AddOffsetsToTxnRequest", transactional_id=self.transactional_id,
                    producer_id=self.producer_id, producer_epoch=self.producer_epoch, group_id=group_id,
                )
                self._check_txn_answer(connection.request(request).error_code, "AddOffsetsToTxn")

            self._retrying("AddOffsetsToTxn", add)
            self._offsets_added.add(group_id)
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((partition, offset))

        def commit_offsets():
            connection = self.cluster.coordinator(group_id, GROUP_COORDINATOR)
            version = connection.version(TXN_OFFSET_COMMIT_KEY, 0, 3)
            build = RequestBuilder(TXN_OFFSET_COMMIT_KEY, version)
            topics = tuple(
                build.make("TxnOffsetCommitRequestTopic", name=topic, partitions=tuple(
                    build.make("TxnOffsetCommitRequestPartition", partition_index=partition,
                               committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")
                    for partition, offset in parts))
                for topic, parts in by_topic.items()
            )
            request = build.make(
                "TxnOffsetCommitRequest", transactional_id=self.transactional_id, group_id=group_id,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch, generation_id=-1,
                member_id="", group_instance_id=None, topics=topics,
            )
            response = connection.request(request)
            for topic in response.topics:
                for result in topic.partitions:
                    self.cluster.check_coordinator_answer(
                        result.error_code, group_id, GROUP_COORDINATOR,
                        f"TxnOffsetCommit of {group_id!r} for {topic.name}-{result.partition_index}")

        self._retrying("TxnOffsetCommit", commit_offsets)

    def flush(self) -> None:
        """Wait until every queued batch is acknowledged (or raise)."""
        self._pump(deadline=self._deadline(), wait=True)

    def commit(self) -> None:
        """Flush, then EndTxn(commit). A transaction that added nothing ends without a request."""
        self.flush()
        self._end(commit=True)

    def abort(self) -> None:
        """EndTxn(abort) for whatever the transaction added; unacknowledged batches are
        dropped (the abort covers any that were appended)."""
        for connection, requests in self._requests.items():
            if requests:
                connection.close()  # their answers no longer matter
        self._drop_batches()
        self._end(commit=False)

    def _end(self, *, commit: bool) -> None:
        if not self._in_transaction and not self._offsets_added:
            self._reset_transaction()
            return

        def call():
            connection = self.cluster.coordinator(self.transactional_id, TRANSACTION_COORDINATOR)
            version = connection.version(END_TXN_KEY, 0, 3)
            request = RequestBuilder(END_TXN_KEY, version).make(
                "EndTxnRequest", transactional_id=self.transactional_id, producer_id=self.producer_id,
                producer_epoch=self.producer_epoch, committed=commit,
            )
            self._check_txn_answer(connection.request(request).error_code, "EndTxn")

        self._retrying("EndTxn(commit)" if commit else "EndTxn(abort)", call)
        self._reset_transaction()

    # -- sending batches -------------------------------------------------------------------

    def _pump(self, *, deadline: float, wait: bool) -> None:
        """Send what may go and take the answers that have come. Without `wait`, block only
        while a connection's request limit holds batches back; with it, until every batch is
        acknowledged (or raise)."""
        while True:
            self._send_ready()
            self._take_arrived_answers(deadline)
            busy = [c for c, requests in self._requests.items() if requests]
            if not wait:
                full = [c for c in busy if len(self._requests[c]) >= MAX_REQUESTS_IN_FLIGHT]
                if not full or not any(state.unsent for state in self._partitions.values()):
                    return
                self._receive(full[0], deadline)
                continue
            if all(state.done for state in self._partitions.values()):
                return
            if busy:
                self._receive(busy[0], deadline)
                continue
            # Nothing in flight: batches wait for a leader, or for their pause after a
            # retriable answer.
            now = time.monotonic()
            if now >= deadline:
                self._give_up()
            waits = [state.not_before for state in self._partitions.values() if state.unsent]
            time.sleep(max(0.001, min([*waits, now + 0.05]) - now))

    def _send_ready(self) -> None:
        """One Produce request per leader and turn, holding the next batch of each partition
        that may send (several requests per connection, up to MAX_REQUESTS_IN_FLIGHT)."""
        now = time.monotonic()
        by_connection: dict[Connection, list[TopicPartition]] = {}
        for tp, state in self._partitions.items():
            if not state.unsent or state.failed is not None or state.not_before > now:
                continue
            try:
                connection = self.cluster.connection(self.cluster.leader(*tp))
            except (BrokerError, ConnectionLost, UnknownTopic) as error:
                if isinstance(error, BrokerError) and not error.retriable:
                    raise
                self.cluster.forget_leader(tp[0])
                continue  # retried on the next turn, until the deadline
            if state.in_flight and state.connection is not connection:
                continue  # the leader moved: what went to the old one must come back first
            by_connection.setdefault(connection, []).append(tp)
        for connection, partitions in by_connection.items():
            requests = self._requests.setdefault(connection, deque())
            while len(requests) < MAX_REQUESTS_IN_FLIGHT:
                taken: list[tuple[TopicPartition, _Pending]] = []
                size = 0
                for tp in partitions:
                    state = self._partitions[tp]
                    if not state.unsent or len(state.in_flight) >= MAX_REQUESTS_IN_FLIGHT:
                        continue
                    if taken and size + state.unsent[0].record_set.size > REQUEST_BYTES:
                        break
                    pending = state.unsent.popleft()
                    state.in_flight.append(pending)
                    state.connection = connection
                    taken.append((tp, pending))
                    size += pending.record_set.size
                if not taken:
                    break
                try:
                    correlation = self._send_produce(connection, taken)
                except ConnectionLost:
                    requests.append((-1, taken))
                    self._connection_lost(connection)
                    break
                requests.append((correlation, taken))

    def _send_produce(self, connection: Connection, taken: list[tuple[TopicPartition, _Pending]]) -> int:
        version = connection.version(PRODUCE_KEY, 3, 8)
        build = RequestBuilder(PRODUCE_KEY, version)
        by_topic: dict[str, list] = {}
        for (topic, partition), pending in taken:
            if pending.batch is None:
                pending.batch = pending.record_set.batch(
                    producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                    base_sequence=pending.sequence, transactional=True)
            by_topic.setdefault(topic, []).append(
                build.make("PartitionProduceData", index=partition, records=pending.batch))
        request = build.make(
            "ProduceRequest", transactional_id=self.transactional_id, acks=-1,
            timeout=datetime.timedelta(milliseconds=self.settings.request_timeout_ms),
            topic_data=tuple(build.make("TopicProduceData", name=topic, partition_data=tuple(parts))
                             for topic, parts in by_topic.items()),
        )
        return connection.send(request)

    def _take_arrived_answers(self, deadline: float) -> None:
        """Read the answers that have already arrived, without waiting for any."""
        for connection, requests in list(self._requests.items()):
            while requests and connection.answer_arrived(requests[0][0]):
                self._receive(connection, deadline)

    def _receive(self, connection: Connection, deadline: float) -> None:
        """Wait for the oldest Produce answer on `connection` and act on it per partition."""
        correlation, taken = self._requests[connection][0]
        try:
            response = connection.receive(correlation, extra_wait_s=self.settings.request_timeout_ms / 1000)
        except ConnectionLost:
            self._connection_lost(connection)
            return
        self._requests[connection].popleft()
        answers = {(topic.name, int(p.index)): p for topic in response.responses for p in topic.partition_responses}
        for tp, pending in taken:
            state = self._partitions[tp]
            sent = state.in_flight.popleft()
            assert sent is pending, "a partition's answers come back in the order its batches went"
            answer = answers.get(tp)
            code = ErrorCode.network_exception if answer is None else ErrorCode(answer.error_code)
            if state.failed is not None:
                state.failed.append(pending)  # goes again after the batch that failed
            elif code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                state.pause = FIRST_RETRY_PAUSE_S
            else:
                self._retriable_or_raise(tp, code, answer, deadline)
                state.failed = [pending]
                now = time.monotonic()
                state.not_before, state.pause = now + state.pause, min(state.pause * 2, LONGEST_RETRY_PAUSE_S)
            if state.failed is not None and not state.in_flight:
                # Every batch after the failed one has answered: all of them go again, in
                # order, with their sequences (a resent batch already written is answered
                # as a duplicate).
                state.unsent.extendleft(reversed(state.failed))
                state.failed = None
                state.connection = None

    def _retriable_or_raise(self, tp: TopicPartition, code: ErrorCode, answer, deadline: float) -> None:
        message = getattr(answer, "error_message", None) if answer is not None else None
        what = f"Produce to {tp[0]}-{tp[1]} (transactional id {self.transactional_id!r})"
        if code in STALE_LEADER:
            self.cluster.forget_leader(tp[0])
        elif code not in _RESEND:
            raise_for(code, what, message)
        if time.monotonic() >= deadline:
            raise_for(code, what + " (retried until the deadline)", message)

    def _connection_lost(self, connection: Connection) -> None:
        """The connection failed: the batches it carried go again (same sequences, in
        order) once the leaders are looked up again."""
        self._requests.pop(connection, None)
        connection.close()
        for tp, state in self._partitions.items():
            if state.connection is connection:
                state.unsent.extendleft(reversed([*(state.failed or ()), *state.in_flight]))
                state.in_flight.clear()
                state.failed = None
                state.connection = None
                self.cluster.forget_leader(tp[0])

    def _give_up(self) -> None:
        waiting = sorted(f"{topic}-{partition}" for (topic, partition), state in self._partitions.items()
                         if state.unsent)
        raise BrokerError(ErrorCode.request_timed_out,
                          f"Produce to {', '.join(waiting)}: no leader could be reached in time")

    # -- helpers ---------------------------------------------------------------------------

    def _check_txn_answer(self, code: int, what: str) -> None:
        self.cluster.check_coordinator_answer(code, self.transactional_id, TRANSACTION_COORDINATOR,
                                              f"{what} of {self.transactional_id!r}")

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout_s

    def _retrying(self, what: str, call):
        return self.cluster.retrying(f"{what} of {self.transactional_id!r}", self._deadline(), call)
