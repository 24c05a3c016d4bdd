"""The transaction coordinator: owns every transactional id's metadata and drives the
two-phase commit.

    InitProducerId  -> Empty (epoch bumped; an Ongoing transaction of a previous
                       instance is first aborted through PrepareEpochFence)
    AddPartitions / AddOffsets -> Ongoing
    EndTxn          -> PrepareCommit | PrepareAbort   (persisted, then answered)
    markers         -> COMMIT/ABORT control batch on every partition of the transaction
                    -> CompleteCommit | CompleteAbort (persisted)

Transaction version 2 (KIP-890 part 2; `transaction.version` finalized at 2 and a client
that uses it: EndTxn v5, Produce v12, TxnOffsetCommit v5): every end of a transaction
bumps the producer epoch, which EndTxn v5 returns and the markers carry (on an exhausted
epoch, the client continues under a new producer id at epoch 0); Produce v12 and
TxnOffsetCommit v5 add their partition to the transaction themselves (`add_partitions`
with transaction version 2) instead of being verified against it. Each transaction then
has its own epoch, so a late EndTxn, Produce or TxnOffsetCommit of an earlier one is
fenced. The coordinator's own aborts (timeouts, fencing) follow the finalized level, as
Kafka's do.

Partition leaders check a transactional write against the coordinator before appending
it (KIP-890: `verify_partition`, or for transaction version 2 `add_partitions`):
in-process when this broker coordinates the id, otherwise through AddPartitionsToTxn
v4-v5 to the coordinator's broker (verification.py).

Every change is prepared whole on the id's entry (pending; metadata.py checks it against
Kafka's rules), appended to the id's partition of `__transaction_state` (`_write`), then
completed whole; the handler answers once the append is replicated (`replicated`, see
coordinator_log.py). Timers abort transactions older than
their timeout (fencing the producer) and expire idle ids.

The coordinator of a transactional id is the leader of its `__transaction_state`
partition. A standalone broker leads them all: on start-up it loads every partition
under a new, higher coordinator epoch (persisted, see coordinator_epoch.py). In cluster
mode a partition is loaded when this broker becomes its leader, with the partition's
leader epoch as coordinator epoch, and dropped when it stops leading it; requests for
the ids of other partitions get NOT_COORDINATOR. Loading finishes every transaction
left in PrepareCommit or PrepareAbort (markers.py writes the markers, to each
partition's leader), so none stays half visible after a crash or a failover. Markers
are written only once the PrepareCommit/PrepareAbort record is replicated, and carry
the coordinator epoch, so a zombie coordinator's markers are fenced.

All of this runs on the broker's event loop; expected protocol outcomes are returned as
error codes, broken invariants raise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.clock import now_ms
from oncelog.coordinator.coordinator_log import CoordinatorLog, append_failure
from oncelog.coordinator.txn import log as txn_log
from oncelog.coordinator.txn.coordinator_epoch import NO_COORDINATOR_EPOCH
from oncelog.coordinator.txn.markers import MarkerChannel, TxnMarker
from oncelog.coordinator.txn.metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnEntry,
)
from oncelog.coordinator.txn.state import COMPLETED, TransactionState
from oncelog.coordinator.txn.stats import TxnStats, TxnStatsSnapshot
from oncelog.coordinator.txn.verification import TransactionVerifier
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.kernel.node import ProducerIdsUnavailable
from oncelog.kernel.partitions import AppendRefused, read_all_batches
from oncelog.names import TopicPartition
from oncelog.protocol import record_batch
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.txn")

S = TransactionState
MARKER_RETRY_S = 1.0


TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1  # a 2PC transaction waits for its decision, however long


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """EndTxn's answer; with transaction version 2 also the producer id and epoch the
    client continues with (after this transaction completes)."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    ongoing_txn_producer_id: int = -1  # KIP-939: the prepared transaction kept open, if any
    ongoing_txn_producer_epoch: int = -1


def _completing(entry: TxnEntry) -> bool:
    """Whether EndTxn must wait (CONCURRENT_TRANSACTIONS): a transition is being written
    (other than the coordinator's own epoch fence, which its abort goes on with), or the
    transaction is decided and its markers are on their way. Kafka holds a pending
    CompleteCommit/CompleteAbort from the moment PrepareCommit/PrepareAbort is written
    until the markers are, so every EndTxn in a Prepare state meets a pending transition."""
    if entry.in_transition and not entry.fencing:
        return True
    return entry.current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)


def _answer_to_end_v0(entry: TxnEntry, producer_id: int, epoch: int, *, commit: bool,
                      from_client: bool) -> EndTxnResult | None:
    """The answer to a classic EndTxn that writes nothing (a refusal, or the retry of an
    end that went through); None when the Ongoing transaction is to be ended."""
    metadata = entry.current
    if metadata.producer_id != producer_id:
        return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
    # Clients must send their exact epoch; the coordinator's own aborts use the bumped one.
    if (from_client and epoch != metadata.producer_epoch) or epoch < metadata.producer_epoch:
        return EndTxnResult(ErrorCode.producer_fenced)
    if _completing(entry):
        return EndTxnResult(ErrorCode.concurrent_transactions)
    state = metadata.state
    if state is S.ONGOING:
        return None
    if state is S.COMPLETE_COMMIT:
        return EndTxnResult(ErrorCode.none if commit else ErrorCode.invalid_txn_state)
    if state is S.COMPLETE_ABORT:
        return EndTxnResult(ErrorCode.invalid_txn_state if commit else ErrorCode.none)
    return EndTxnResult(ErrorCode.invalid_txn_state)  # Empty: nothing to end


def _answer_to_end_v2(entry: TxnEntry, producer_id: int, epoch: int, *, commit: bool,
                      from_client: bool) -> EndTxnResult | None:
    """KIP-890 part 2, as Kafka's TransactionCoordinator.endTransaction for TV2: the
    answer to an EndTxn that writes nothing, None when the end is to be written. The
    epoch in the request tells a retry from a new request: the retry of an end that went
    through names the epoch before the bump (or, after an overflow, the last epoch of the
    previous producer id), a request of the current transaction the current epoch,
    anything else is fenced. From a completed state a new abort is allowed (the client
    may not know whether its transaction started): it bumps the epoch too."""
    metadata = entry.current
    state = metadata.state
    epoch_fence = entry.fencing
    retry_after_overflow = (not epoch_fence and metadata.previous_producer_id == producer_id
                            and epoch == MAX_EPOCH - 1 and metadata.producer_epoch == 0)
    retry_after_bump = not epoch_fence and metadata.producer_epoch == epoch + 1
    if epoch_fence:
        # The coordinator's own abort, with the epoch its fence bumped (classic rule).
        valid_epoch = (not from_client or epoch == metadata.producer_epoch) and epoch >= metadata.producer_epoch
    elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        valid_epoch = retry_after_bump or retry_after_overflow or epoch == metadata.producer_epoch
    else:
        valid_epoch = epoch == metadata.producer_epoch
    retry = retry_after_bump or retry_after_overflow
    if metadata.producer_id != producer_id and not retry_after_overflow:
        return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
    # Before the epoch (KAFKA-18464): the client answered for its commit already has
    # the bumped epoch, and the empty abort it may send next, while the markers are
    # still on their way, must wait for them rather than fence the producer.
    if _completing(entry):
        return EndTxnResult(ErrorCode.concurrent_transactions)
    if not valid_epoch:
        return EndTxnResult(ErrorCode.producer_fenced)
    current = EndTxnResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)
    invalid = EndTxnResult(ErrorCode.invalid_txn_state)
    if state is S.ONGOING:
        return None
    if state is S.COMPLETE_COMMIT:
        if commit:
            return current if retry else invalid
        return invalid if retry else None
    if state is S.COMPLETE_ABORT:
        if commit:
            # At a retry's epoch only the coordinator's own abort can come first: the
            # client's commit raced it and is fenced, which it recovers from (KAFKA-20785).
            return EndTxnResult(ErrorCode.producer_fenced) if retry else invalid
        return current if retry else None
    if state is S.EMPTY:
        return invalid if commit else None
    raise RuntimeError(f"{metadata.transactional_id!r} is in state {state} during EndTxn")


class TransactionCoordinator:
    def __init__(self, broker: Node) -> None:
        self.broker = broker
        config = broker.config
        self.num_partitions: int = config["transaction.state.log.num.partitions"]
        self.max_timeout_ms: int = config["transaction.max.timeout.ms"]
        self.id_expiration_ms: int = config["transactional.id.expiration.ms"]
        self.two_phase_commit_enabled: bool = config["transaction.two.phase.commit.enable"]
        # The finalized transaction.version: 2 turns on KIP-890 part 2 for the
        # coordinator's own aborts and writes TransactionLogValue v1 records.
        self.transaction_version: int = config["transaction.version"]
        # The partitions of __transaction_state this broker leads, each with its
        # coordinator epoch, are in `self.log` (taken in on_leadership).
        self._entries: dict[str, TxnEntry] = {}
        self.log = CoordinatorLog(broker, TRANSACTION_STATE, config["request.timeout.ms"], self.num_partitions)
        self.stats = TxnStats()  # for /metrics
        self.markers = MarkerChannel(broker, config["request.timeout.ms"])
        # Cluster mode: this broker's partitions asking other brokers' coordinators (KIP-890).
        self.verification = TransactionVerifier(broker, config["request.timeout.ms"])
        self._completions: dict[str, asyncio.Task] = {}  # transactional id -> its phase two

    def close(self) -> None:
        """Stop every phase two in progress (broker shutdown)."""
        for task in self._completions.values():
            task.cancel()
        self._completions.clear()
        self.markers.close()
        self.verification.close()

    # -- start-up and FindCoordinator ----------------------------------------------------

    def on_leadership(self, partition: int, leader: bool, coordinator_epoch: int) -> None:
        """This broker became leader of a `__transaction_state` partition (load it, finish
        its interrupted commits and aborts, and coordinate its ids at `coordinator_epoch`)
        or stopped leading it (drop it)."""
        self._unload_partition(partition)
        if leader:
            self.log.take(partition, coordinator_epoch)
            started = time.perf_counter()
            self._load_partition(partition)
            self.stats.loads.observe(time.perf_counter() - started)

    @property
    def txns(self) -> dict[str, TransactionMetadata]:
        """Every transactional id's metadata now (a new mapping; the records are immutable)."""
        return {transactional_id: entry.current for transactional_id, entry in self._entries.items()}

    def stats_snapshot(self) -> TxnStatsSnapshot:
        """The counters, with the transactions completing now and those kept prepared."""
        prepared = sum(1 for metadata in self.txns.values()
                       if metadata.state is S.ONGOING and metadata.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS)
        return self.stats.snapshot(len(self._completions), prepared)

    def _load_partition(self, partition: int) -> None:
        loaded: dict[str, TxnEntry] = {}
        for buffer, header in read_all_batches(self.broker, TRANSACTION_STATE, partition):
            if header.is_control:
                continue
            for record in record_batch.iter_records(buffer, header):
                assert record.key is not None  # every record of the transaction log has a key
                transactional_id = txn_log.decode_key(record.key)
                if record.value is None:
                    loaded.pop(transactional_id, None)
                else:
                    loaded[transactional_id] = TxnEntry(txn_log.decode_value(transactional_id, record.value))
        self._entries.update(loaded)
        self.log.loaded(partition)
        unfinished = [t for t, entry in loaded.items() if entry.current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)]
        if loaded:
            log.info("%s-%d: loaded %d transactional id(s) at coordinator epoch %d; completing %d interrupted "
                     "transaction(s)", TRANSACTION_STATE, partition, len(loaded), self._epoch_of(partition),
                     len(unfinished))
        for transactional_id in unfinished:
            self._schedule_markers(transactional_id)

    def _unload_partition(self, partition: int) -> None:
        if not self.log.release(partition):
            return
        dropped = [t for t in self._entries if self.partition_of(t) == partition]
        for transactional_id in dropped:
            del self._entries[transactional_id]
            task = self._completions.pop(transactional_id, None)
            if task is not None:
                task.cancel()
        if dropped:
            log.info("%s-%d: no longer its leader; dropped %d transactional id(s)", TRANSACTION_STATE, partition,
                     len(dropped))

    def _epoch_of(self, partition: int) -> int:
        epoch = self.log.epoch_of(partition)
        return NO_COORDINATOR_EPOCH if epoch is None else epoch

    def owner_error(self, transactional_id: str) -> ErrorCode:
        """NOT_COORDINATOR unless this broker coordinates the id (leads its partition)."""
        return ErrorCode.none if self.log.owns(self.partition_of(transactional_id)) else ErrorCode.not_coordinator

    async def replicated(self, transactional_id: str) -> ErrorCode:
        """Wait until this coordinator's writes to the id's partition are on the ISR."""
        return await self.log.replicated(self.partition_of(transactional_id))

    def _new_producer_id(self) -> int | None:
        try:
            return self.broker.producer_ids.next_producer_id()
        except ProducerIdsUnavailable:
            return None

    def partition_of(self, transactional_id: str) -> int:
        return self.log.partition_of(transactional_id)

    # -- InitProducerId -------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
                         expected_epoch: int, now: int, *, enable_2pc: bool = False,
                         keep_prepared: bool = False) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if keep_prepared and not enable_2pc:
            return InitResult(ErrorCode.invalid_request)
        if enable_2pc:
            # KIP-939: a transaction prepared for an external decision must not time out.
            if not self.two_phase_commit_enabled:
                return InitResult(ErrorCode.transactional_id_authorization_failed)
            timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS
        elif timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        expected = None if expected_producer_id < 0 else (expected_producer_id, expected_epoch)
        owner = self.owner_error(transactional_id)
        if owner is not ErrorCode.none:
            return InitResult(owner)
        entry = self._entries.get(transactional_id)
        if entry is None:
            producer_id = self._new_producer_id()
            if producer_id is None:
                return InitResult(ErrorCode.coordinator_load_in_progress)
            entry = self._entries[transactional_id] = TxnEntry(TransactionMetadata(
                transactional_id=transactional_id, producer_id=producer_id, txn_timeout_ms=timeout_ms,
                txn_last_update_timestamp=now,
            ))
        metadata = entry.current
        # Kafka's order: a pending transition first, then the KIP-360 producer check.
        if entry.in_transition:
            return InitResult(ErrorCode.concurrent_transactions)
        if expected is not None and not metadata.accepts_expected_producer(*expected):
            return InitResult(ErrorCode.producer_fenced)
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return InitResult(ErrorCode.concurrent_transactions)
        if metadata.state is S.ONGOING and keep_prepared:
            # KIP-939: keep the prepared transaction for the caller to commit or abort,
            # under a new epoch that fences the instance that prepared it.
            kept = entry.prepare_keep_prepared(timeout_ms, now)
            error = self._write(entry, kept)
            if error is not ErrorCode.none:
                return InitResult(error)
            return InitResult(ErrorCode.none, kept.producer_id, kept.producer_epoch, metadata.producer_id,
                              metadata.producer_epoch)
        if metadata.state is S.ONGOING:
            # A previous instance died mid-transaction: fence it and abort its transaction;
            # the new instance retries until the abort is complete.
            log.info("fencing producer %d of %r: aborting its ongoing transaction", metadata.producer_id,
                     transactional_id)
            self.stats.fenced += 1
            error = self._fence_and_abort(entry, now)
            return InitResult(error if error is not ErrorCode.none else ErrorCode.concurrent_transactions)
        if metadata.state not in COMPLETED:
            raise RuntimeError(f"{transactional_id!r} is in state {metadata.state} during InitProducerId")
        target: TransactionMetadata | ErrorCode
        if metadata.epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
            producer_id = self._new_producer_id()
            if producer_id is None:
                return InitResult(ErrorCode.coordinator_load_in_progress)
            target = entry.prepare_producer_id_rotation(producer_id, timeout_ms, now,
                                                        recorded_previous=expected is not None)
        else:
            target = entry.prepare_increment_epoch(timeout_ms, None if expected is None else expected[1], now)
            if isinstance(target, ErrorCode):
                return InitResult(target)
        error = self._write(entry, target)
        if error is not ErrorCode.none:
            return InitResult(error)
        return InitResult(ErrorCode.none, target.producer_id, target.producer_epoch)

    # -- adding partitions ----------------------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int
                        ) -> tuple[ErrorCode, TxnEntry | None]:
        owner = self.owner_error(transactional_id)
        if owner is not ErrorCode.none:
            return owner, None
        entry = self._entries.get(transactional_id)
        if entry is None or entry.current.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if entry.current.producer_epoch != epoch:
            return ErrorCode.producer_fenced, None
        if entry.in_transition or entry.current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, entry

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: set[TopicPartition], now: int, *, transaction_version: int = 0) -> ErrorCode:
        """AddPartitionsToTxn and AddOffsetsToTxn (transaction version 0), and KIP-890 part
        2's implicit adds of Produce v12 and TxnOffsetCommit v5 (transaction version 2)."""
        error, entry = self._check_producer(transactional_id, producer_id, epoch)
        if error is not ErrorCode.none:
            return error
        assert entry is not None  # with ErrorCode.none
        if entry.current.state is S.ONGOING and partitions <= entry.current.partitions:
            return ErrorCode.none  # a retry: nothing new to record
        return self._write(entry, entry.prepare_add_partitions(partitions, now, transaction_version))

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str, now: int) -> ErrorCode:
        offsets_partition = self.offsets_partition_for(group_id)
        return self.add_partitions(transactional_id, producer_id, epoch, {(CONSUMER_OFFSETS, offsets_partition)}, now)

    def offsets_partition_for(self, group_id: str) -> int:
        """The group's `__consumer_offsets` partition. The client's FindCoordinator for the
        group created the topic; a marker for a partition that does not exist is skipped."""
        return self.broker.group_coordinator.partition_for_group(group_id)

    def verify_partition(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 1: a transactional write is accepted only for a partition of the
        producer's current transaction. The coordinator's answers, as Kafka's
        handleVerifyPartitionsInTransaction gives them (the Produce path translates
        PRODUCER_FENCED and CONCURRENT_TRANSACTIONS for the client, as Kafka's broker does)."""
        owner = self.owner_error(transactional_id)
        if owner is not ErrorCode.none:
            return owner
        entry = self._entries.get(transactional_id)
        metadata = None if entry is None else entry.current
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions  # the markers are on their way: retry
        if tp in metadata.partitions:  # partitions are only held while a transaction is open
            return ErrorCode.none
        # Kafka's coordinator says TRANSACTION_ABORTABLE, which its broker sends as
        # INVALID_TXN_STATE to producers older than Produce v11.
        return ErrorCode.invalid_txn_state

    # -- ending transactions --------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, *, commit: bool,
                        from_client: bool = True, now: int, transaction_version: int = 0) -> ErrorCode:
        return self.end_transaction_result(
            transactional_id, producer_id, epoch, commit=commit, from_client=from_client, now=now,
            transaction_version=transaction_version,
        ).error

    def end_transaction_result(self, transactional_id: str, producer_id: int, epoch: int, *, commit: bool,
                               from_client: bool = True, now: int, transaction_version: int = 0) -> EndTxnResult:
        """EndTxn, or the coordinator's own abort (`from_client=False`). Clients of
        EndTxn v5 use transaction version 2, older ones 0; the coordinator's aborts use
        the finalized level. The request is answered at once when it ends nothing (a
        refusal, or the retry of an end that went through); otherwise the end is
        written (`_write_end`)."""
        owner = self.owner_error(transactional_id)
        if owner is not ErrorCode.none:
            return EndTxnResult(owner)
        entry = self._entries.get(transactional_id)
        if entry is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if transaction_version >= 2:
            answer = _answer_to_end_v2(entry, producer_id, epoch, commit=commit, from_client=from_client)
        else:
            answer = _answer_to_end_v0(entry, producer_id, epoch, commit=commit, from_client=from_client)
        if answer is not None:
            return answer
        ended = self._write_end(entry, commit, now, transaction_version)
        return ended if transaction_version >= 2 else EndTxnResult(ended.error)

    def _write_end(self, entry: TxnEntry, commit: bool, now: int, transaction_version: int) -> EndTxnResult:
        """Prepare PrepareCommit/PrepareAbort, write it and start the markers; answer what
        the client continues with. With transaction version 2 the epoch is bumped (and,
        on an exhausted epoch, the next producer id allocated)."""
        epoch_fence = entry.fencing
        next_producer_id = NO_PRODUCER_ID
        # The coordinator's own abort rotates an exhausted epoch too (KAFKA-20090): its
        # client's late EndTxn is then a retry answered with the new producer id.
        if transaction_version >= 2 and entry.current.epoch_exhausted:
            new_producer_id = self._new_producer_id()
            if new_producer_id is None:
                if epoch_fence:  # let go of the fence, or the id answers CONCURRENT_TRANSACTIONS for good
                    entry.abandon()
                    entry.has_failed_epoch_fence = True  # its bumped epoch was never handed out: reused next time
                return EndTxnResult(ErrorCode.coordinator_load_in_progress)
            next_producer_id = new_producer_id
        nothing_added = entry.current.state is not S.ONGOING  # TV2's abort from a completed state
        target = entry.prepare_end(commit, now, transaction_version=transaction_version,
                                   next_producer_id=next_producer_id, nothing_added=nothing_added)
        error = self._write(entry, target)
        if error is not ErrorCode.none:
            if epoch_fence:
                # The fenced epoch stays in memory but not in the log, and no client has it:
                # the next fence reuses it rather than bumping again.
                entry.has_failed_epoch_fence = True
                log.warning("the epoch fence of %r (producer %d, epoch %d) was not written: %s",
                            target.transactional_id, target.producer_id, entry.current.producer_epoch, error.name)
            return EndTxnResult(error)
        self._schedule_markers(target.transactional_id)
        if target.next_producer_id != NO_PRODUCER_ID:
            return EndTxnResult(ErrorCode.none, target.next_producer_id, 0)
        return EndTxnResult(ErrorCode.none, target.producer_id, target.producer_epoch)

    def _schedule_markers(self, transactional_id: str, delay_s: float = 0.0) -> None:
        """Start phase two for the id (once: a running one is left alone). The client is
        answered once PrepareCommit/PrepareAbort is durable; the markers follow."""
        running = self._completions.get(transactional_id)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(self._complete(transactional_id, delay_s))
        self._completions[transactional_id] = task
        task.add_done_callback(lambda done: self._completions.pop(transactional_id, None)
                               if self._completions.get(transactional_id) is done else None)

    async def _complete(self, transactional_id: str, delay_s: float) -> None:
        if delay_s:
            await asyncio.sleep(delay_s)
        entry = self._entries.get(transactional_id)
        if entry is None or entry.current.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT) or entry.in_transition:
            return
        prepared = entry.current  # PrepareCommit/PrepareAbort, as written
        partition = self.partition_of(transactional_id)
        epoch = self._epoch_of(partition)

        def still_current() -> bool:
            return (self._entries.get(transactional_id) is entry and self._epoch_of(partition) == epoch
                    and entry.current is prepared)

        # No marker before the decision is on the ISR: a new coordinator must find it.
        if await self.log.replicated(partition) is not ErrorCode.none:
            if still_current():
                self._retry_markers(transactional_id)
            return
        commit = prepared.state is S.PREPARE_COMMIT
        marker = TxnMarker(prepared.producer_id, prepared.producer_epoch, epoch, commit=commit,
                           transaction_version=prepared.client_transaction_version)
        if not await self.markers.write(marker, prepared.partitions, still_current):
            return
        if not still_current():
            return
        now = now_ms()
        if self._write(entry, entry.prepare_complete(now)) is not ErrorCode.none:
            self._retry_markers(transactional_id)
            return
        self.stats.completed(commit, max(now - prepared.txn_last_update_timestamp, 0) / 1000)

    def _retry_markers(self, transactional_id: str) -> None:
        self._completions.pop(transactional_id, None)
        self._schedule_markers(transactional_id, MARKER_RETRY_S)

    # -- timers -----------------------------------------------------------------------------

    def abort_timed_out(self, now: int) -> list[str]:
        """Abort Ongoing transactions older than their timeout, fencing their producers."""
        aborted = []
        for entry in list(self._entries.values()):
            metadata = entry.current
            if (
                metadata.state is S.ONGOING
                and not entry.in_transition
                and metadata.txn_start_timestamp + metadata.txn_timeout_ms < now
            ):
                self.stats.timed_out += 1
                log.info("aborting transaction of %r (producer %d epoch %d): open for %d ms, timeout %d ms",
                         metadata.transactional_id, metadata.producer_id, metadata.producer_epoch,
                         now - metadata.txn_start_timestamp, metadata.txn_timeout_ms)
                self._fence_and_abort(entry, now)
                aborted.append(metadata.transactional_id)
        return aborted

    def abort_ongoing(self, transactional_id: str, now: int, by: str) -> ErrorCode:
        """An operator's abort of an open transaction (the console's): as a timeout
        aborts it, fencing its producer. TRANSACTIONAL_ID_NOT_FOUND, or INVALID_TXN_STATE
        unless it is Ongoing with no transition in flight."""
        entry = self._entries.get(transactional_id)
        if entry is None:
            return ErrorCode.transactional_id_not_found
        metadata = entry.current
        if metadata.state is not S.ONGOING or entry.in_transition:
            return ErrorCode.invalid_txn_state
        log.warning("%s aborts the transaction of %r (producer %d epoch %d), open for %d ms", by, transactional_id,
                    metadata.producer_id, metadata.producer_epoch, now - metadata.txn_start_timestamp)
        self._fence_and_abort(entry, now)
        return ErrorCode.none

    def _fence_and_abort(self, entry: TxnEntry, now: int) -> ErrorCode:
        """Fence the producer of an Ongoing transaction (its epoch bumped) and abort it."""
        entry.prepare_fence_epoch()
        fenced = entry.current
        return self.end_transaction(fenced.transactional_id, fenced.producer_id, fenced.producer_epoch,
                                    commit=False, from_client=False, now=now,
                                    transaction_version=self.transaction_version)

    def expire_ids(self, now: int) -> list[str]:
        """Remove ids idle for transactional.id.expiration.ms (tombstone, then forget)."""
        expired = []
        for transactional_id, entry in list(self._entries.items()):
            if (
                entry.current.state in COMPLETED
                and not entry.in_transition
                and now - entry.current.txn_last_update_timestamp >= self.id_expiration_ms
            ):
                dead = entry.prepare_dead()
                if self._append(dead, tombstone=True) is ErrorCode.none:
                    del self._entries[transactional_id]  # Dead is never completed: the id is gone
                    expired.append(transactional_id)
                else:
                    entry.abandon()
        return expired

    # -- persistence ------------------------------------------------------------------------

    def _write(self, entry: TxnEntry, target: TransactionMetadata) -> ErrorCode:
        """Append the entry's prepared `target` to `__transaction_state`, then complete it
        (or abandon it when the append failed)."""
        error = self._append(target)
        if error is ErrorCode.none:
            entry.complete(target)
        else:
            entry.abandon()
        return error

    def _append(self, metadata: TransactionMetadata, *, tombstone: bool = False) -> ErrorCode:
        now = now_ms()
        partition = self.partition_of(metadata.transactional_id)
        value_version = txn_log.FLEXIBLE_VALUE_VERSION if self.transaction_version >= 2 else txn_log.VERSION
        record = record_batch.Record(
            txn_log.encode_key(metadata.transactional_id),
            None if tombstone else txn_log.encode_value(metadata, value_version),
        )
        try:
            self.log.append(partition, record_batch.build_batch([record], timestamp_ms=now), now_ms=now)
        except Exception as error:  # noqa: BLE001 (any failure of the append becomes the client's error code)
            code = append_failure(error)
            log.log(logging.INFO if isinstance(error, LookupError | AppendRefused) else logging.ERROR,
                    "appending to %s-%d failed (%s): %s", TRANSACTION_STATE, partition, code.name, error)
            return code
        return ErrorCode.none

    # -- admin ------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        entry = self._entries.get(transactional_id)
        return None if entry is None else entry.current

    def list(self, states: set[TransactionState] | None, producer_ids: set[int] | None,
             min_duration_ms: int, now: int) -> list[TransactionMetadata]:
        """As Kafka's listTransactionStates: Dead ids (being expired) are never listed; a
        duration filter (>= 0) keeps ids whose transaction started more than that long ago,
        whatever their state (an id that never started one has start time -1, so it stays)."""
        found = []
        for metadata in (entry.current for entry in self._entries.values()):
            if metadata.state is S.DEAD:
                continue
            if states and metadata.state not in states:
                continue
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and now - metadata.txn_start_timestamp <= min_duration_ms:
                continue
            found.append(metadata)
        return sorted(found, key=lambda m: m.transactional_id)


__all__ = ["NO_PRODUCER_EPOCH", "EndTxnResult", "InitResult", "TransactionCoordinator"]
