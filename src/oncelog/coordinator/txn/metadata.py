"""The coordinator's record of one transactional id, and its prepared transitions.

A change is made in two steps, as in Kafka's TransactionMetadata: a `prepare_*` method
checks the transition table and returns the target (`TxnTransit`, immutable) while
marking the transition pending; the coordinator appends the target to
`__transaction_state`; `complete_transition` then applies it. While a transition is
pending, other requests for the id get CONCURRENT_TRANSACTIONS.

Transaction version 2 (KIP-890 part 2, `client_transaction_version` 2): ending a
transaction bumps the producer epoch (`prepare_end`), so its markers and the next
transaction carry epoch + 1; when the epoch is exhausted the end also allocates
`next_producer_id`, which `prepare_complete` switches to at epoch 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from oncelog.coordinator.txn.state import COMPLETED, TransactionState, check_transition
from oncelog.names import TopicPartition

log = logging.getLogger("oncelog.txn")

S = TransactionState
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE



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
    # KIP-890 part 2: the producer id the client continues with after an epoch overflow
    # (set by a TV2 end, applied by its completion), and the client's transaction version.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


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
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @classmethod
    def from_transit(cls, transit: TxnTransit) -> TransactionMetadata:
        return cls(
            transit.transactional_id, transit.producer_id, transit.previous_producer_id, transit.producer_epoch,
            transit.last_producer_epoch, transit.txn_timeout_ms, transit.state, set(transit.partitions),
            transit.txn_start_timestamp, transit.txn_last_update_timestamp,
            next_producer_id=transit.next_producer_id, client_transaction_version=transit.client_transaction_version,
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
        return self._transit({})

    def _transit(self, changes: dict) -> TxnTransit:
        """The current state as a TxnTransit, with `changes` applied (one construction:
        every request that changes an id builds one)."""
        values: dict[str, Any] = {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "previous_producer_id": self.previous_producer_id, "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch, "txn_timeout_ms": self.txn_timeout_ms,
            "state": self.state, "partitions": self.partitions, "txn_start_timestamp": self.txn_start_timestamp,
            "txn_last_update_timestamp": self.txn_last_update_timestamp, "next_producer_id": self.next_producer_id,
            "client_transaction_version": self.client_transaction_version,
        }
        values.update(changes)
        values["partitions"] = frozenset(values["partitions"])
        return TxnTransit(**values)

    def _prepare(self, target: TransactionState, **changes) -> TxnTransit:
        if self.pending_state is not None:
            raise RuntimeError(f"{self.transactional_id!r} already has a pending transition to {self.pending_state}")
        check_transition(self.transactional_id, self.state, target,
                         changes.get("client_transaction_version", self.client_transaction_version))
        self.pending_state = target
        changes["state"] = target
        return self._transit(changes)

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

    def prepare_add_partitions(self, partitions: set[TopicPartition], now: int,
                               transaction_version: int | None = None) -> TxnTransit:
        """`transaction_version`: 2 for KIP-890 part 2's implicit adds (Produce v12,
        TxnOffsetCommit v5), 0 for AddPartitionsToTxn/AddOffsetsToTxn; None keeps it."""
        start = now if self.state in COMPLETED else self.txn_start_timestamp
        if transaction_version is None:
            transaction_version = self.client_transaction_version
        return self._prepare(
            S.ONGOING, partitions=frozenset(self.partitions | partitions),
            txn_start_timestamp=start, txn_last_update_timestamp=now, client_transaction_version=transaction_version,
        )

    def prepare_end(self, commit: bool, now: int, *, transaction_version: int = 0,
                    next_producer_id: int = NO_PRODUCER_ID, nothing_added: bool = False) -> TxnTransit:
        """EndTxn (or the coordinator's own abort). With transaction version 2 the epoch is
        bumped here (not past MAX_EPOCH: an abort at MAX_EPOCH, possible only after a fence
        at the last epoch, keeps it) and `next_producer_id` is recorded for an exhausted
        epoch; `nothing_added` is TV2's abort from a completed state, which starts now."""
        if self.pending_state is S.PREPARE_EPOCH_FENCE:
            self.pending_state = None  # the fence becomes this abort
            self.last_producer_epoch = NO_PRODUCER_EPOCH
        target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if transaction_version < 2:
            return self._prepare(target, txn_last_update_timestamp=now, client_transaction_version=transaction_version)
        if self.producer_epoch < MAX_EPOCH:
            bumped_epoch = self.producer_epoch + 1
        elif commit:
            raise RuntimeError(f"{self.transactional_id!r}: committing at epoch {MAX_EPOCH}, which no client is given")
        else:
            log.error("aborting the transaction of %r (producer %d) at epoch %d: it is not bumped past the last epoch",
                      self.transactional_id, self.producer_id, self.producer_epoch)
            bumped_epoch = self.producer_epoch
        return self._prepare(
            target, producer_epoch=bumped_epoch, last_producer_epoch=self.producer_epoch,
            next_producer_id=next_producer_id, client_transaction_version=transaction_version,
            txn_start_timestamp=now if nothing_added else self.txn_start_timestamp, txn_last_update_timestamp=now,
        )

    def prepare_complete(self, now: int) -> TxnTransit:
        target = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the PrepareCommit/PrepareAbort before it is in the log
        rotation = {}
        if self.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            # The epoch overflowed: the client continues under the new producer id at epoch
            # 0; the last epoch stays the one it last used with the old id (for its retry).
            rotation = {"producer_id": self.next_producer_id, "previous_producer_id": self.producer_id,
                        "producer_epoch": 0}
        return self._prepare(target, partitions=frozenset(), txn_last_update_timestamp=now,
                             next_producer_id=NO_PRODUCER_ID, **rotation)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(S.DEAD, partitions=frozenset())

    def complete_transition(self, transit: TxnTransit) -> None:
        if self.pending_state is not transit.state:
            raise RuntimeError(
                f"{self.transactional_id!r}: completing {transit.state} but {self.pending_state} is pending"
            )
        check_transition(self.transactional_id, self.state, transit.state, transit.client_transaction_version)
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.next_producer_id = transit.next_producer_id
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None

    def abandon_transition(self) -> None:
        """The log append failed: the id stays as it was."""
        self.pending_state = None
