"""Idempotent producer state of one partition: who wrote what, with which sequence numbers.

Owns, per producer id, the epoch, the last five batches (sequence range, offsets,
timestamp), the coordinator epoch and the first offset of the producer's open
transaction. `ProducerStateManager.check()` answers for one incoming batch, exactly as
Kafka's ProducerAppendInfo does:

- a duplicate of one of the last 5 batches of the same epoch  -> Duplicate(original offsets)
- a lower epoch                                               -> INVALID_PRODUCER_EPOCH
- a new (higher) epoch that does not start at sequence 0      -> OUT_OF_ORDER_SEQUENCE_NUMBER
- the same epoch, sequence not last + 1 (wrapping at Int.MAX) -> OUT_OF_ORDER_SEQUENCE_NUMBER
- an unknown producer id: any sequence is accepted (KIP-360)

Transactions: a producer's first transactional batch on the partition opens its
transaction (`current_txn_first_offset`); the COMMIT/ABORT marker closes it and
`record()` returns the CompletedTxn, which the log turns into an aborted-transaction
index entry when aborted. A non-transactional batch from a producer with an open
transaction is INVALID_TXN_STATE; a marker with an older producer epoch is
INVALID_PRODUCER_EPOCH, with an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.
The first offset of the oldest open transaction is the partition's first unstable
offset, which bounds the last stable offset.

`record()` applies a batch after it is in the log; recovery replays batch headers
through the same `record()`. Nothing here reads record bytes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class Verdict(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    INVALID_TXN_STATE = "invalid_txn_state"
    COORDINATOR_FENCED = "transaction_coordinator_fenced"


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    duplicate_of: BatchMetadata | None = None
    message: str = ""


APPEND = Check(Verdict.APPEND)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT_MAX)


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What the producer state needs from one batch header."""

    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    control_type: int | None = None  # 0 abort, 1 commit (control batches only)
    coordinator_epoch: int = -1  # from the marker's value (control batches only)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class ProducerStateManager:
    """The producer entries of one partition. Single owner: the partition's log."""

    def __init__(self, partition_name: str) -> None:
        self.partition_name = partition_name
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction: derived from the entries'
        # current_txn_first_offset, kept beside them so the LSO is cheap to read.
        self._open_txns: dict[int, int] = {}

    def load(self, entries: dict[int, ProducerStateEntry]) -> None:
        """Replace the state (from a snapshot, or empty)."""
        self.producers = entries
        self._open_txns = {
            pid: e.current_txn_first_offset for pid, e in entries.items() if e.current_txn_first_offset is not None
        }

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None when none is open."""
        return min(self._open_txns.values()) if self._open_txns else None

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, *,
              transactional: bool = False, offset_hint: int = -1) -> Check:
        """Validate an incoming client batch against the state; changes nothing."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.producer_epoch == NO_PRODUCER_EPOCH:
            return APPEND  # KIP-360: unknown producers are accepted with any sequence
        duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
        if duplicate is not None:
            return Check(Verdict.DUPLICATE, duplicate_of=duplicate)
        if not transactional and entry.current_txn_first_offset is not None and epoch == entry.producer_epoch:
            return Check(
                Verdict.INVALID_TXN_STATE,
                message=f"Expected transactional write from producer {producer_id} at offset {offset_hint} in "
                f"partition {self.partition_name}: it has a transaction open since offset "
                f"{entry.current_txn_first_offset}",
            )
        if epoch < entry.producer_epoch:
            return Check(
                Verdict.INVALID_PRODUCER_EPOCH,
                message=f"Epoch of producer {producer_id} in {self.partition_name} is {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}",
            )
        if epoch > entry.producer_epoch:
            if first_seq != 0:
                return Check(
                    Verdict.OUT_OF_ORDER_SEQUENCE,
                    message=f"Invalid sequence number for new epoch of producer {producer_id} in "
                    f"{self.partition_name}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch); expected sequence 0",
                )
            return APPEND
        if not entry.batches or in_sequence(entry.last_seq, first_seq):
            return APPEND
        return Check(
            Verdict.OUT_OF_ORDER_SEQUENCE,
            message=f"Out of order sequence number for producer {producer_id} epoch {epoch} in "
            f"{self.partition_name}: {first_seq} (incoming seq. number), expected {entry.last_seq + 1} "
            f"(current end sequence number {entry.last_seq})",
        )

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> Check:
        """Validate a COMMIT/ABORT marker from a transaction coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return APPEND
        if epoch < entry.producer_epoch:
            return Check(
                Verdict.INVALID_PRODUCER_EPOCH,
                message=f"Transaction marker of producer {producer_id} in {self.partition_name} has epoch {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return Check(
                Verdict.COORDINATOR_FENCED,
                message=f"Transaction marker of producer {producer_id} in {self.partition_name} comes from "
                f"coordinator epoch {coordinator_epoch}, older than the last seen {entry.coordinator_epoch}",
            )
        return APPEND

    def record(self, batch: ProducerBatch) -> CompletedTxn | None:
        """Apply a batch that is now in the log (also used when replaying the log).
        Returns the transaction a COMMIT/ABORT marker completed, if it had data here."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            entry = self.producers[batch.producer_id] = ProducerStateEntry(batch.producer_id)
        if batch.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = batch.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, batch.max_timestamp)
        if batch.is_control:
            entry.coordinator_epoch = max(entry.coordinator_epoch, batch.coordinator_epoch)
            first_offset = entry.current_txn_first_offset
            if first_offset is None:
                return None
            entry.current_txn_first_offset = None
            del self._open_txns[batch.producer_id]
            return CompletedTxn(batch.producer_id, first_offset, batch.first_offset, batch.control_type == 0)
        if batch.first_seq != NO_SEQUENCE:
            entry.batches.append(
                BatchMetadata(batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset, batch.max_timestamp)
            )
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.first_offset
            self._open_txns[batch.producer_id] = batch.first_offset
        return None

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle longer than `producer.id.expiration.ms` with no open transaction."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return expired

    def active_producers(self) -> list[ProducerStateEntry]:
        return sorted(self.producers.values(), key=lambda e: e.producer_id)
