"""The coordinator's record of one transactional id, and its prepared transitions.

A change is made in two steps, as in Kafka's TransactionMetadata: a `prepare_*` method
checks the transition table and returns the target (`TxnTransit`, immutable) while
marking the transition pending; the coordinator appends the target to
`__transaction_state`; `complete_transition` then applies it. While a transition is
pending, other requests for the id get CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from oncelog.coordinator.txn.state import COMPLETED, TransactionState, check_transition

S = TransactionState
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE

TopicPartition = tuple[str, int]


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Clients never get MAX_EPOCH: the coordinator keeps it to fence the last epoch."""
    return producer_epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """A target state of a transactional id, as written to `__transaction_state`."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = S.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    # The PrepareAbort of an epoch fence failed to reach the log: the epoch was bumped in
    # memory but never handed to a client, so the next fence reuses it (Kafka's
    # hasFailedEpochFence) instead of burning another epoch on every retry.
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_transit(cls, transit: TxnTransit) -> TransactionMetadata:
        return cls(
            transit.transactional_id, transit.producer_id, transit.previous_producer_id, transit.producer_epoch,
            transit.last_producer_epoch, transit.txn_timeout_ms, transit.state, set(transit.partitions),
            transit.txn_start_timestamp, transit.txn_last_update_timestamp,
        )

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

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

    def snapshot(self) -> TxnTransit:
        return TxnTransit(
            self.transactional_id, self.producer_id, self.previous_producer_id, self.producer_epoch,
            self.last_producer_epoch, self.txn_timeout_ms, self.state, frozenset(self.partitions),
            self.txn_start_timestamp, self.txn_last_update_timestamp,
        )

    def _prepare(self, target: TransactionState, **changes) -> TxnTransit:
        if self.pending_state is not None:
            raise RuntimeError(f"{self.transactional_id!r} already has a pending transition to {self.pending_state}")
        check_transition(self.transactional_id, self.state, target)
        self.pending_state = target
        return replace(self.snapshot(), state=target, **changes)

    # -- the transitions ----------------------------------------------------------------

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now: int) -> TxnTransit | str:
        """InitProducerId on a completed id: bump the epoch (or, for a retry of a lost
        response, hand the current one again). Returns the transit or an error name."""
        if expected_epoch is None:
            new_epoch, last_epoch = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            new_epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            new_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return "producer_fenced"
        return self._prepare(
            S.EMPTY, previous_producer_id=self.producer_id, producer_epoch=new_epoch, last_producer_epoch=last_epoch,
            txn_timeout_ms=timeout_ms, partitions=frozenset(), txn_start_timestamp=-1, txn_last_update_timestamp=now,
        )

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                                     recorded_previous: bool) -> TxnTransit:
        """The epoch is exhausted: continue under a new producer id at epoch 0. The old id is
        remembered; its last epoch only if the client named it (so its retry is recognised)."""
        return self._prepare(
            S.EMPTY, producer_id=new_producer_id, previous_producer_id=self.producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if recorded_previous else NO_PRODUCER_EPOCH,
            txn_timeout_ms=timeout_ms, partitions=frozenset(), txn_start_timestamp=-1, txn_last_update_timestamp=now,
        )

    def prepare_fence_epoch(self) -> None:
        """An Ongoing transaction of a previous instance must be aborted: bump the epoch
        in place (Kafka does not persist PrepareEpochFence) and mark the fence pending.
        After a fence whose abort failed to persist, the epoch bumped then is reused."""
        if self.pending_state is not None:
            raise RuntimeError(f"{self.transactional_id!r} already has a pending transition to {self.pending_state}")
        check_transition(self.transactional_id, self.state, S.PREPARE_EPOCH_FENCE)
        if not self.has_failed_epoch_fence and self.producer_epoch < MAX_EPOCH:  # never past the last epoch
            self.producer_epoch += 1
        self.pending_state = S.PREPARE_EPOCH_FENCE

    def prepare_keep_prepared(self, timeout_ms: int, now: int) -> TxnTransit:
        """KIP-939 keepPreparedTxn: the Ongoing transaction stays (now with the 2PC
        timeout), the epoch is bumped so only the new owner can end it."""
        return self._prepare(
            S.ONGOING, producer_epoch=self.producer_epoch + 1, last_producer_epoch=self.producer_epoch,
            txn_timeout_ms=timeout_ms, txn_last_update_timestamp=now,
        )

    def prepare_add_partitions(self, partitions: set[TopicPartition], now: int) -> TxnTransit:
        start = now if self.state in COMPLETED else self.txn_start_timestamp
        return self._prepare(
            S.ONGOING, partitions=frozenset(self.partitions | partitions),
            txn_start_timestamp=start, txn_last_update_timestamp=now,
        )

    def prepare_end(self, commit: bool, now: int) -> TxnTransit:
        if self.pending_state is S.PREPARE_EPOCH_FENCE:
            self.pending_state = None  # the fence becomes this abort
            self.last_producer_epoch = NO_PRODUCER_EPOCH
        return self._prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, txn_last_update_timestamp=now)

    def prepare_complete(self, now: int) -> TxnTransit:
        target = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the PrepareCommit/PrepareAbort before it is in the log
        return self._prepare(target, partitions=frozenset(), txn_last_update_timestamp=now)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(S.DEAD, partitions=frozenset())

    def complete_transition(self, transit: TxnTransit) -> None:
        if self.pending_state is not transit.state:
            raise RuntimeError(
                f"{self.transactional_id!r}: completing {transit.state} but {self.pending_state} is pending"
            )
        check_transition(self.transactional_id, self.state, transit.state)
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None

    def abandon_transition(self) -> None:
        """The log append failed: the id stays as it was."""
        self.pending_state = None
