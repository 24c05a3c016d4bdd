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

- Each partition has at most one batch in flight, so a batch that must be sent again
  (a stale leader, a lost connection, NOT_ENOUGH_REPLICAS) goes again with the same
  sequence and nothing behind it can overtake it; the broker's duplicate check makes a
  resent batch that was already appended count once. Batches for different partitions of
  one leader travel in one Produce request; several requests may be in flight per broker.
- PRODUCER_FENCED / INVALID_PRODUCER_EPOCH raise `Fenced`; any other non-retriable answer
  raises BrokerError, and the transaction must then be aborted (or left to the next
  `init()` of the id, which aborts it).
- Every call retries retriable answers until `timeout_s` from its start, then NoAnswer.
"""

from __future__ import annotations

import datetime
import time
from collections import deque
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncelog.client.cluster import GROUP_COORDINATOR, TRANSACTION_COORDINATOR, Cluster
from oncelog.client.config import ConfigError, positive_setting
from oncelog.client.connection import Connection
from oncelog.client.errors import (
    STALE_LEADER,
    BrokerError,
    ConnectionLost,
    raise_for,
)
from oncelog.client.records import RecordSet
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

TopicPartition = tuple[str, int]

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
        self._queues: dict[TopicPartition, deque[_Pending]] = {}
        self._in_flight: set[TopicPartition] = set()
        self._retry_at: dict[TopicPartition, tuple[float, float]] = {}  # (not before, next pause)
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
            self.cluster.check_coordinator_answer(response.error_code, self.transactional_id,
                                                  TRANSACTION_COORDINATOR, f"InitProducerId of {self.transactional_id!r}")
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
        self._queues.clear()
        self._in_flight.clear()
        self._retry_at.clear()
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
        queue = self._queues.setdefault(tp, deque())
        sequence = self._sequences.get(tp, 0)
        for record_set in record_sets:
            queue.append(_Pending(record_set, sequence))
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
        """Send every partition's next batch that may go; read answers when a connection
        has too many requests in flight, and (with `wait`) until nothing is left."""
        while True:
            self._send_ready()
            busy = [c for c, requests in self._requests.items() if requests]
            if not busy:
                if not any(self._queues.values()):
                    return
                # Batches wait for a leader, or for their pause after a retriable answer.
                now = time.monotonic()
                if now >= deadline:
                    self._give_up()
                waits = [at for tp, (at, _) in self._retry_at.items() if self._queues.get(tp)]
                time.sleep(max(0.001, min([*waits, now + 0.05]) - now))
                continue
            if not wait and all(len(self._requests[c]) < MAX_REQUESTS_IN_FLIGHT for c in busy):
                return
            self._receive(busy[0], deadline)

    def _send_ready(self) -> None:
        by_leader: dict[int, list[tuple[TopicPartition, _Pending]]] = {}
        now = time.monotonic()
        for tp, queue in self._queues.items():
            if not queue or tp in self._in_flight or self._retry_at.get(tp, (0.0, 0.0))[0] > now:
                continue
            try:
                leader = self.cluster.leader(*tp)
            except (BrokerError, ConnectionLost) as error:
                if isinstance(error, BrokerError) and not error.retriable:
                    raise
                continue  # retried on the next turn, until the deadline
            by_leader.setdefault(leader, []).append((tp, queue[0]))
        for leader, ready in by_leader.items():
            try:
                connection = self.cluster.connection(leader)
            except ConnectionLost:
                self.cluster.forget_leader(ready[0][0][0])
                continue
            requests = self._requests.setdefault(connection, deque())
            while ready and len(requests) < MAX_REQUESTS_IN_FLIGHT:
                taken, size = [], 0
                while ready and (not taken or size + ready[0][1].record_set.size <= REQUEST_BYTES):
                    taken.append(ready.pop(0))
                    size += taken[-1][1].record_set.size
                try:
                    correlation = self._send_produce(connection, taken)
                except ConnectionLost:
                    self._requeue_connection(connection)
                    break
                requests.append((correlation, taken))
                self._in_flight.update(tp for tp, _ in taken)

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

    def _receive(self, connection: Connection, deadline: float) -> None:
        correlation, taken = self._requests[connection][0]
        try:
            response = connection.receive(correlation, extra_wait_s=self.settings.request_timeout_ms / 1000)
        except ConnectionLost:
            self._requeue_connection(connection)
            return
        self._requests[connection].popleft()
        answers = {(topic.name, int(p.index)): p for topic in response.responses for p in topic.partition_responses}
        for tp, pending in taken:
            self._in_flight.discard(tp)
            answer = answers.get(tp)
            code = ErrorCode.network_exception if answer is None else ErrorCode(answer.error_code)
            if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                self._queues[tp].popleft()
                self._retry_at.pop(tp, None)
                continue
            message = getattr(answer, "error_message", None) if answer is not None else None
            what = f"Produce to {tp[0]}-{tp[1]} (transactional id {self.transactional_id!r})"
            if code in STALE_LEADER:
                self.cluster.forget_leader(tp[0])
            if code not in (ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                            ErrorCode.request_timed_out, ErrorCode.network_exception,
                            ErrorCode.corrupt_message) and code not in STALE_LEADER:
                raise_for(code, what, message)
            now = time.monotonic()
            if now >= deadline:
                raise_for(code, what + " (retried until the deadline)", message)
            # Retried after a pause: the batch stays first in its queue, with its sequence.
            pause = self._retry_at.get(tp, (0.0, FIRST_RETRY_PAUSE_S))[1]
            self._retry_at[tp] = (now + pause, min(pause * 2, LONGEST_RETRY_PAUSE_S))

    def _requeue_connection(self, connection: Connection) -> None:
        """The connection failed: its batches go again (same sequences) after the leaders
        are looked up again."""
        for _correlation, taken in self._requests.pop(connection, ()):
            for tp, _pending in taken:
                self._in_flight.discard(tp)
                self.cluster.forget_leader(tp[0])
        connection.close()

    def _give_up(self) -> None:
        waiting = sorted(f"{topic}-{partition}" for (topic, partition), queue in self._queues.items() if queue)
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
