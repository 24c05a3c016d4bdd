"""One transactional id's metadata (an immutable record) and the coordinator's entry that
holds it while a transition is written.

`TransactionMetadata` is what `__transaction_state` holds for an id, and what the rest of
the broker reads. A change is made as in Kafka's TransactionMetadata, in three steps: a
`TxnEntry.prepare_*` method builds the whole target record, `validate_transition` checks
it against the current one (Kafka's valid previous states and the rules of its
completeTransitionTo) and the entry holds it as pending; the coordinator appends it to
`__transaction_state`; `complete` then makes it the current record, whole (or `abandon`
drops it when the append failed). While a transition is pending, other requests for the
id get CONCURRENT_TRANSACTIONS. A prepared transition the rules refuse is a coordinator
bug: it raises IllegalTransitionError and the entry stays as it was.

Transaction version 2 (KIP-890 part 2, `client_transaction_version` 2): ending a
transaction bumps the producer epoch (`prepare_end`), so its markers and the next
transaction carry epoch + 1; when the epoch is exhausted the end also allocates
`next_producer_id`, which `prepare_complete` switches to at epoch 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from oncelog.coordinator.txn.state import COMPLETED, IllegalTransitionError, TransactionState, check_transition
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode

log = logging.getLogger("oncelog.txn")

S = TransactionState
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Clients never get MAX_EPOCH: the coordinator keeps it to fence the last epoch."""
    return producer_epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionMetadata:
    """A transactional id's state, as written to `__transaction_state` (the last epoch
    excepted: no version of the record holds it)."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = S.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # KIP-890 part 2: the producer id the client continues with after an epoch overflow
    # (set by a TV2 end, applied by its completion), and the client's transaction version.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def accepts_expected_producer(self, expected_producer_id: int, expected_epoch: int) -> bool:
        """KIP-360 InitProducerId naming the producer id and epoch the client had: it is not
        fenced if the id is fresh (no epoch yet: the client's id expired, it gets the new
        one), names the current producer id (the epoch is checked by the bump), or names
        the previous id with an exhausted epoch (a retry of the rotation to a new id)."""
        return (
            self.producer_epoch == NO_PRODUCER_EPOCH
            or expected_producer_id == self.producer_id
            or (expected_producer_id == self.previous_producer_id and is_epoch_exhausted(expected_epoch))
        )


def validate_transition(current: TransactionMetadata, target: TransactionMetadata) -> None:
    """Raise IllegalTransitionError unless `target` may follow `current`: the checks of
    Kafka's TransactionMetadata.completeTransitionTo on the producer id, epoch, timeout,
    start time and partitions, then TransactionState's valid previous states."""
    broken = _broken_rule(current, target)
    if broken is not None:
        raise IllegalTransitionError(
            f"transactional id {current.transactional_id!r} cannot go from {current.state.display_name} to "
            f"{target.state.display_name}: {broken} (producer {current.producer_id} epoch {current.producer_epoch}"
            f" -> producer {target.producer_id} epoch {target.producer_epoch})"
        )
    check_transition(current.transactional_id, current.state, target.state, target.client_transaction_version)


def _broken_rule(current: TransactionMetadata, target: TransactionMetadata) -> str | None:
    """What `target` breaks of the rules for its state, None when it keeps them."""
    same_producer = (target.producer_id, target.producer_epoch) == (current.producer_id, current.producer_epoch)
    if target.transactional_id != current.transactional_id:
        return "another transactional id"
    if target.producer_id < 0 or (target.producer_epoch < 0 and target.state is not S.DEAD):
        return "no producer id or epoch"
    state = target.state
    if state is S.EMPTY:  # InitProducerId: the epoch bumped (or retried), or a new producer id at epoch 0
        bumped = target.producer_id == current.producer_id and target.producer_epoch in (
            current.producer_epoch, current.producer_epoch + 1)
        rotated = target.producer_id != current.producer_id and target.producer_epoch == 0
        if not (bumped or rotated):
            return "the epoch is neither bumped nor a new producer id's"
        if target.partitions or target.txn_start_timestamp != -1:
            return "a transaction is left open"
        return None
    if state is S.ONGOING:  # partitions added, or (KIP-939) the prepared transaction kept under a bumped epoch
        kept = (current.state is S.ONGOING and target.producer_id == current.producer_id
                and target.producer_epoch == current.producer_epoch + 1 and target.partitions == current.partitions)
        if not kept and not (same_producer and target.txn_timeout_ms == current.txn_timeout_ms):
            return "the producer or the timeout changed"
        if not current.partitions <= target.partitions:
            return "partitions were dropped"
        return None
    if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):  # EndTxn
        if target.client_transaction_version >= 2:
            bumped = (target.last_producer_epoch == current.producer_epoch
                      and target.producer_epoch == min(current.producer_epoch + 1, MAX_EPOCH))
            valid_producer = target.producer_id == current.producer_id and bumped
            # TV2 may abort from a completed state: that abort of nothing starts now.
            valid_start = target.txn_start_timestamp == current.txn_start_timestamp or current.state in COMPLETED
        else:
            valid_producer, valid_start = same_producer, target.txn_start_timestamp == current.txn_start_timestamp
        if not valid_producer:
            return "the producer epoch is not the one the end may have"
        if target.partitions != current.partitions or target.txn_timeout_ms != current.txn_timeout_ms:
            return "the partitions or the timeout changed"
        if not valid_start:
            return "the start time changed"
        return None
    if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):  # the markers are written
        overflow = current.client_transaction_version >= 2 and current.next_producer_id != NO_PRODUCER_ID
        if overflow:
            valid_producer = (target.producer_id, target.producer_epoch, target.previous_producer_id) == (
                current.next_producer_id, 0, current.producer_id)
        else:
            valid_producer = same_producer
        if not valid_producer:
            return "the producer is not the one that prepared it"
        if target.txn_timeout_ms != current.txn_timeout_ms or target.txn_start_timestamp == -1:
            return "the timeout changed or the transaction never started"
        if target.partitions:
            return "partitions are left in the transaction"
        return None
    if state is S.PREPARE_EPOCH_FENCE:
        if target.producer_id != current.producer_id or target.producer_epoch not in (
                current.producer_epoch, current.producer_epoch + 1):
            return "the fence does not bump the epoch by one"
        return None
    if target.partitions:  # Dead: the id is expired
        return "partitions are left in the transaction"
    return None


@dataclass(slots=True)
class TxnEntry:
    """The coordinator's entry for one transactional id: its current metadata, the
    transition being written (`pending`), and whether the abort of an epoch fence failed
    to reach the log."""

    current: TransactionMetadata
    # The prepared target while it is appended; for an epoch fence (never written, as in
    # Kafka) the fenced record, until the abort that follows it takes its place.
    pending: TransactionMetadata | None = None
    # The PrepareAbort of an epoch fence failed to reach the log: the epoch was bumped in
    # memory but never handed to a client, so the next fence reuses it (Kafka's
    # hasFailedEpochFence) instead of burning another epoch on every retry.
    has_failed_epoch_fence: bool = False

    @property
    def in_transition(self) -> bool:
        return self.pending is not None

    @property
    def fencing(self) -> bool:
        """An epoch fence waits for its abort."""
        return self.pending is not None and self.pending.state is S.PREPARE_EPOCH_FENCE

    # -- the transitions ----------------------------------------------------------------

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now: int
                                ) -> TransactionMetadata | ErrorCode:
        """InitProducerId on a completed id: bump the epoch (or, for a retry of a lost
        response, hand the current one again); PRODUCER_FENCED for another epoch."""
        current = self.current
        if expected_epoch is None:
            new_epoch, last_epoch = current.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif current.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == current.producer_epoch:
            new_epoch, last_epoch = current.producer_epoch + 1, current.producer_epoch
        elif expected_epoch == current.last_producer_epoch:
            new_epoch, last_epoch = current.producer_epoch, current.last_producer_epoch
        else:
            return ErrorCode.producer_fenced
        return self._prepare(replace(
            current, state=S.EMPTY, previous_producer_id=current.producer_id, producer_epoch=new_epoch,
            last_producer_epoch=last_epoch, txn_timeout_ms=timeout_ms, partitions=frozenset(),
            txn_start_timestamp=-1, txn_last_update_timestamp=now,
        ))

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                                     recorded_previous: bool) -> TransactionMetadata:
        """The epoch is exhausted: continue under a new producer id at epoch 0. The old id is
        remembered; its last epoch only if the client named it (so its retry is recognised)."""
        current = self.current
        return self._prepare(replace(
            current, state=S.EMPTY, producer_id=new_producer_id, previous_producer_id=current.producer_id,
            producer_epoch=0, last_producer_epoch=current.producer_epoch if recorded_previous else NO_PRODUCER_EPOCH,
            txn_timeout_ms=timeout_ms, partitions=frozenset(), txn_start_timestamp=-1, txn_last_update_timestamp=now,
        ))

    def prepare_fence_epoch(self) -> None:
        """An Ongoing transaction of a previous instance must be aborted: bump the epoch
        (Kafka does not persist PrepareEpochFence, so the bump is the current record's at
        once) and hold the fence as pending until its abort is prepared. After a fence
        whose abort failed to persist, the epoch bumped then is reused."""
        current = self.current
        bump = not self.has_failed_epoch_fence and current.producer_epoch < MAX_EPOCH  # never past the last epoch
        fenced = replace(current, producer_epoch=current.producer_epoch + 1 if bump else current.producer_epoch)
        self._prepare(replace(fenced, state=S.PREPARE_EPOCH_FENCE))
        self.current = fenced

    def prepare_keep_prepared(self, timeout_ms: int, now: int) -> TransactionMetadata:
        """KIP-939 keepPreparedTxn: the Ongoing transaction stays (now with the 2PC
        timeout), the epoch is bumped so only the new owner can end it."""
        current = self.current
        return self._prepare(replace(
            current, state=S.ONGOING, producer_epoch=current.producer_epoch + 1,
            last_producer_epoch=current.producer_epoch, txn_timeout_ms=timeout_ms, txn_last_update_timestamp=now,
        ))

    def prepare_add_partitions(self, partitions: set[TopicPartition], now: int,
                               transaction_version: int | None = None) -> TransactionMetadata:
        """`transaction_version`: 2 for KIP-890 part 2's implicit adds (Produce v12,
        TxnOffsetCommit v5), 0 for AddPartitionsToTxn/AddOffsetsToTxn; None keeps it."""
        current = self.current
        return self._prepare(replace(
            current, state=S.ONGOING, partitions=current.partitions | partitions,
            txn_start_timestamp=now if current.state in COMPLETED else current.txn_start_timestamp,
            txn_last_update_timestamp=now,
            client_transaction_version=(current.client_transaction_version if transaction_version is None
                                        else transaction_version),
        ))

    def prepare_end(self, commit: bool, now: int, *, transaction_version: int = 0,
                    next_producer_id: int = NO_PRODUCER_ID, nothing_added: bool = False) -> TransactionMetadata:
        """EndTxn (or the coordinator's own abort). With transaction version 2 the epoch is
        bumped here (not past MAX_EPOCH: an abort at MAX_EPOCH, possible only after a fence
        at the last epoch, keeps it) and `next_producer_id` is recorded for an exhausted
        epoch; `nothing_added` is TV2's abort from a completed state, which starts now."""
        if self.fencing:  # the fence becomes this abort
            self.pending = None
            self.current = replace(self.current, last_producer_epoch=NO_PRODUCER_EPOCH)
        current = self.current
        target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if transaction_version < 2:
            return self._prepare(replace(current, state=target, txn_last_update_timestamp=now,
                                         client_transaction_version=transaction_version))
        if current.producer_epoch < MAX_EPOCH:
            bumped_epoch = current.producer_epoch + 1
        elif commit:
            raise RuntimeError(f"{current.transactional_id!r}: committing at epoch {MAX_EPOCH}, which no client "
                               "is given")
        else:
            log.error("aborting the transaction of %r (producer %d) at epoch %d: it is not bumped past the last epoch",
                      current.transactional_id, current.producer_id, current.producer_epoch)
            bumped_epoch = current.producer_epoch
        return self._prepare(replace(
            current, state=target, producer_epoch=bumped_epoch, last_producer_epoch=current.producer_epoch,
            next_producer_id=next_producer_id, client_transaction_version=transaction_version,
            txn_start_timestamp=now if nothing_added else current.txn_start_timestamp, txn_last_update_timestamp=now,
        ))

    def prepare_complete(self, now: int) -> TransactionMetadata:
        """The markers are written: CompleteCommit or CompleteAbort, with no partitions."""
        current = self.current
        target = replace(current, state=S.COMPLETE_COMMIT if current.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT,
                         partitions=frozenset(), txn_last_update_timestamp=now, next_producer_id=NO_PRODUCER_ID)
        if current.client_transaction_version >= 2 and current.next_producer_id != NO_PRODUCER_ID:
            # The epoch overflowed: the client continues under the new producer id at epoch
            # 0; the last epoch stays the one it last used with the old id (for its retry).
            target = replace(target, producer_id=current.next_producer_id, previous_producer_id=current.producer_id,
                             producer_epoch=0)
        prepared = self._prepare(target)
        self.has_failed_epoch_fence = False  # the PrepareCommit/PrepareAbort before it is in the log
        return prepared

    def prepare_dead(self) -> TransactionMetadata:
        return self._prepare(replace(self.current, state=S.DEAD, partitions=frozenset()))

    def _prepare(self, target: TransactionMetadata) -> TransactionMetadata:
        """Hold `target` as the pending transition, once Kafka's rules allow it."""
        if self.pending is not None:
            raise RuntimeError(f"{self.current.transactional_id!r} already has a pending transition to "
                               f"{self.pending.state.display_name}")
        validate_transition(self.current, target)
        self.pending = target
        return target

    # -- completing them ----------------------------------------------------------------

    def complete(self, target: TransactionMetadata) -> None:
        """`target` is in the log: it becomes the current record, whole."""
        if self.pending is not target:
            pending = "nothing" if self.pending is None else self.pending.state.display_name
            raise RuntimeError(f"{self.current.transactional_id!r}: completing {target.state.display_name} but "
                               f"{pending} is pending")
        self.current, self.pending = target, None

    def abandon(self) -> None:
        """The log append failed: the id stays as it was."""
        self.pending = None
