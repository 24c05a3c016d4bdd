"""KIP-890 on a partition leader whose transactional id is coordinated by another broker
(cluster mode): Kafka's AddPartitionsToTxnManager and the verification guard of its log.

- Before a transactional Produce or TxnOffsetCommit is appended here, the id's
  coordinator (the leader of its `__transaction_state` partition) is asked with
  AddPartitionsToTxn v5: `verify_only` (part 1: is the partition in the producer's
  ongoing transaction?) or, for Produce v12 and TxnOffsetCommit v5 (part 2), an add.
  `verify` answers the coordinator's error code per partition, NETWORK_EXCEPTION when
  the coordinator did not answer and COORDINATOR_NOT_AVAILABLE when there is none (or
  it is this broker, still loading); the callers translate them for their clients.
- One request in flight per coordinator broker; the transactions that arrive meanwhile
  go together in the next one, as Kafka batches them. For one transactional id, waits
  with the same producer, epoch and operation share an entry; otherwise, as in Kafka,
  a lower epoch is refused INVALID_PRODUCER_EPOCH and, of two at one epoch, the
  earlier gets NETWORK_EXCEPTION.
- A partition where the producer has a transaction open at the same epoch is not
  asked about (`needs_verification`): the coordinator has it in that transaction, as
  Kafka's log reasons. (Kafka compares producer ids only; the epoch matters here
  because with transaction version 2 the next transaction, under the next epoch, can
  start before the previous one's marker reached the partition.)
- Guards: between the coordinator's answer and the append, the transaction may end
  and its marker land on the partition (a timeout abort, a fence). A guard is taken
  before asking and dropped by the producer's next marker or transactional batch on
  the partition (`release`), and by a change of leader epoch; an append checks that
  its guard still holds (Kafka's VerificationGuard).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.kernel.internal_topics import TRANSACTION_STATE, partition_for
from oncelog.kernel.node import VerificationGuard
from oncelog.kernel.peer import PeerPool
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode, request_class

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.txn.verification")

ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_PARTITIONS_TO_TXN_VERSION = 5  # the broker-to-coordinator form, with TRANSACTION_ABORTABLE


@dataclass(slots=True)
class _Entry:
    """One transaction of the next request to a coordinator, and who waits for it."""

    producer_id: int
    producer_epoch: int
    verify_only: bool
    partitions: set[TopicPartition]
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class TransactionVerifier:
    def __init__(self, broker: Node, timeout_ms: int) -> None:
        self._broker = broker
        self._timeout_s = timeout_ms / 1000
        self._peers = PeerPool(broker, "txn-verification")
        self._queued: dict[int, dict[str, _Entry]] = defaultdict(dict)  # coordinator -> transactional id -> entry
        self._senders: dict[int, asyncio.Task] = {}
        self._guards: dict[tuple[str, int, int], VerificationGuard] = {}

    # -- guards -----------------------------------------------------------------------------

    def needs_verification(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> bool:
        return not self._open_at_epoch(topic, partition, producer_id, producer_epoch)

    def guard(self, topic: str, partition: int, producer_id: int, leader_epoch: int) -> VerificationGuard:
        """The producer's guard on the partition, taken now unless one is out already."""
        key = (topic, partition, producer_id)
        held = self._guards.get(key)
        if held is None or held.leader_epoch != leader_epoch:
            held = self._guards[key] = VerificationGuard(leader_epoch)
        return held

    def holds(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              guard: VerificationGuard | None, leader_epoch: int) -> bool:
        """Whether a batch may be appended: its transaction is open on the partition at
        its epoch, or its verification's guard was not dropped since it was taken."""
        if self._open_at_epoch(topic, partition, producer_id, producer_epoch):
            return True
        return (guard is not None and guard.leader_epoch == leader_epoch
                and self._guards.get((topic, partition, producer_id)) is guard)

    def release(self, topic: str, partition: int, producer_id: int) -> None:
        """The producer's marker or transactional batch was appended to the partition."""
        if self._guards:
            self._guards.pop((topic, partition, producer_id), None)

    def drop(self, topic: str, partition: int, producer_id: int, guard: VerificationGuard) -> None:
        """The verification was refused: its guard is of no use."""
        if self._guards.get((topic, partition, producer_id)) is guard:
            del self._guards[(topic, partition, producer_id)]

    def _open_at_epoch(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> bool:
        partition_log = self._broker.logs.partition(topic, partition)
        entry = None if partition_log is None else partition_log.producer_state.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None \
            and entry.producer_epoch == producer_epoch

    # -- asking the coordinator -------------------------------------------------------------

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: set[TopicPartition], *, verify_only: bool) -> dict[TopicPartition, ErrorCode]:
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None or coordinator == self._broker.node_id:
            # No leader, or this broker is about to load the partition: retriable.
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        queued = self._queued[coordinator]
        entry = queued.get(transactional_id)
        if entry is not None and (entry.producer_id, entry.producer_epoch, entry.verify_only) == (
                producer_id, producer_epoch, verify_only):
            entry.partitions |= partitions
        else:
            if entry is not None:
                if entry.producer_epoch > producer_epoch:
                    return dict.fromkeys(partitions, ErrorCode.invalid_producer_epoch)
                stale = ErrorCode.invalid_producer_epoch if entry.producer_epoch < producer_epoch \
                    else ErrorCode.network_exception
                entry.answer.set_result(dict.fromkeys(entry.partitions, stale))
            entry = queued[transactional_id] = _Entry(producer_id, producer_epoch, verify_only, set(partitions))
        sender = self._senders.get(coordinator)
        if sender is None or sender.done():
            self._senders[coordinator] = asyncio.get_running_loop().create_task(self._send_queued(coordinator))
        answers = await asyncio.shield(entry.answer)
        return {tp: answers.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    def _coordinator_of(self, transactional_id: str) -> int | None:
        """The broker leading the id's `__transaction_state` partition, None when none
        does (the topic does not exist yet, or the partition has no leader now)."""
        leadership = self._broker.leadership
        partitions = leadership.partition_count(TRANSACTION_STATE)
        if partitions is None:
            return None
        leader = leadership.leader_of(TRANSACTION_STATE, partition_for(transactional_id, partitions))
        return None if leader is None or leader < 0 else leader

    async def _send_queued(self, coordinator: int) -> None:
        """Send what is queued for `coordinator`, one request at a time, until nothing is."""
        queued = self._queued[coordinator]
        while queued:
            batch = dict(queued)
            queued.clear()
            try:
                answers = await self._send(coordinator, batch)
            except BaseException:  # cancelled (shutdown) or broken: nobody is left waiting
                for entry in batch.values():
                    if not entry.answer.done():
                        entry.answer.set_result(dict.fromkeys(entry.partitions, ErrorCode.network_exception))
                raise
            for transactional_id, entry in batch.items():
                if not entry.answer.done():
                    entry.answer.set_result(answers.get(transactional_id, {}))

    async def _send(self, coordinator: int, batch: dict[str, _Entry]) -> dict[str, dict[TopicPartition, ErrorCode]]:
        def everywhere(code: ErrorCode) -> dict[str, dict[TopicPartition, ErrorCode]]:
            return {tid: dict.fromkeys(entry.partitions, code) for tid, entry in batch.items()}

        peer = self._peers.get(coordinator)
        if peer is None:
            return everywhere(ErrorCode.coordinator_not_available)
        try:
            response = await peer.request(_request(batch), self._timeout_s)
        except (ConnectionError, TimeoutError) as error:
            log.info("AddPartitionsToTxn to broker %d failed: %s", coordinator, error)
            return everywhere(ErrorCode.network_exception)
        if response.error_code != ErrorCode.none:
            return everywhere(ErrorCode(response.error_code))
        answers: dict[str, dict[TopicPartition, ErrorCode]] = {}
        for result in response.results_by_transaction:
            answers[result.transactional_id] = {
                (topic.name, partition.partition_index): ErrorCode(partition.partition_error_code)
                for topic in result.topic_results for partition in topic.results_by_partition
            }
        return answers

    def close(self) -> None:
        for sender in self._senders.values():
            sender.cancel()
        self._senders.clear()
        self._peers.close()


def _request(batch: dict[str, _Entry]):
    request_type: Any = request_class(ADD_PARTITIONS_TO_TXN_KEY, ADD_PARTITIONS_TO_TXN_VERSION)
    module = sys.modules[request_type.__module__]
    transactions = []
    for transactional_id, entry in batch.items():
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in sorted(entry.partitions):
            by_topic[topic].append(partition)
        transactions.append(module.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id,
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            verify_only=entry.verify_only,
            topics=tuple(module.AddPartitionsToTxnTopic(name=topic, partitions=tuple(partitions))
                         for topic, partitions in by_topic.items()),
        ))
    return request_type(transactions=tuple(transactions))
