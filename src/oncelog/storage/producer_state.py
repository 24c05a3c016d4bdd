"""Idempotent producer state of one partition: who wrote what, with which sequence numbers.

Owns, per producer id, the epoch, the last five batches (sequence range, offsets,
timestamp), the coordinator epoch and the first offset of the producer's open
transaction. `ProducerStateManager.check()` answers for one incoming client batch in
Kafka's order (UnifiedLog's duplicate lookup, then ProducerAppendInfo's epoch, sequence
and transaction checks):

1. a duplicate of one of the last 5 batches of the same epoch -> Duplicate(original offsets)
   ...unless the batch is transactional and the one it repeats
   belongs to a transaction that has ended (deviation, see check())
                                                              -> OUT_OF_ORDER_SEQUENCE_NUMBER
2. a lower epoch                                              -> INVALID_PRODUCER_EPOCH
3. a new (higher) epoch that does not start at sequence 0     -> OUT_OF_ORDER_SEQUENCE_NUMBER
   the same epoch, sequence not last + 1 (wrapping at Int.MAX;
   "last" is -1 when no batch of this epoch is kept, e.g. the
   entry came from a marker, so only 0 follows it)           -> OUT_OF_ORDER_SEQUENCE_NUMBER
4. a non-transactional batch while the producer has an open
   transaction (at any epoch)                                 -> INVALID_TXN_STATE
- an unknown producer id (never seen, expired or evicted), or
  one without an epoch: any sequence is accepted (KIP-360)

Transactions: a producer's first transactional batch on the partition opens its
transaction (`current_txn_first_offset`); the COMMIT/ABORT marker closes it and
`record()` returns the CompletedTxn, which the log turns into an aborted-transaction
index entry when aborted. A marker with an older producer epoch is
INVALID_PRODUCER_EPOCH, with an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.
The first offset of the oldest open transaction is the partition's first unstable
offset, which bounds the last stable offset; a transaction completed by a marker stays
unstable until the high watermark passes the marker (Kafka's unreplicated transactions),
so read_committed never gets ahead of a marker a failing leader could lose.

Bounds (ProducerStateConfig, from the broker settings):
- `producer.id.expiration.ms`: a producer idle that long with no open transaction is
  forgotten, by the broker's periodic `remove_expired()` and whenever state is loaded
  from a snapshot or the log, so an expired producer stays expired across restarts.
- `producer.id.max.entries.per.partition`: Kafka has no such cap. When a new producer
  would exceed it, the least recently written entry without an open transaction is
  evicted, and is then treated like an expired one. Entries of open transactions are
  never evicted (the coordinator's timeout bounds them), so the cap can be exceeded only
  while more producers than the cap have transactions open here.

`record()` applies a batch after it is in the log; recovery replays batch headers
through the same `record()`. Nothing here reads record bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

logger = logging.getLogger("oncelog.storage")

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT_MAX = 2**31 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
DEFAULT_MAX_ENTRIES_PER_PARTITION = 100_000


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    """The broker settings producer state obeys (Kafka's ProducerStateManagerConfig)."""

    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS  # producer.id.expiration.ms
    max_entries: int = DEFAULT_MAX_ENTRIES_PER_PARTITION  # producer.id.max.entries.per.partition

    def __post_init__(self) -> None:
        if self.max_entries < 1:
            raise ValueError(f"the producer entry cap must be at least 1, got {self.max_entries}")


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp as written (the append time with LogAppendTime)


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    # At most NUM_BATCHES_TO_RETAIN, oldest first. A list, not a deque: an empty deque
    # already costs ~600 bytes, and a partition may hold many entries.
    batches: list[BatchMetadata] = field(default_factory=list)
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def add_batch(self, batch: BatchMetadata) -> None:
        if len(self.batches) >= NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.batches.append(batch)

    def in_open_transaction(self, batch: BatchMetadata) -> bool:
        """Whether `batch` was written in this producer's transaction that is still open here."""
        return self.current_txn_first_offset is not None and batch.first_offset >= self.current_txn_first_offset

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


def next_sequence(last_seq: int) -> int:
    """The only sequence `in_sequence` accepts after `last_seq` (0 after NO_SEQUENCE)."""
    return 0 if last_seq == INT_MAX else last_seq + 1


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What the producer state needs from one batch header."""

    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int  # as written in the log: the append time with LogAppendTime
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

    def __init__(self, partition_name: str, config: ProducerStateConfig | None = None) -> None:
        self.partition_name = partition_name
        self.config = config or ProducerStateConfig()
        # Ordered least recently written first (record() moves an entry to the end): the
        # eviction order when the cap is reached, and the order snapshots keep.
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction: derived from the entries'
        # current_txn_first_offset, kept beside them so the LSO is cheap to read.
        self._open_txns: dict[int, int] = {}
        # producer id -> the timestamp of its open transaction's first batch here (after a
        # restart, of the producer's last batch: the first is not in the snapshot).
        self._open_txn_started_ms: dict[int, int] = {}
        # (marker offset, first offset) of transactions completed by a marker that may not
        # be below the high watermark yet, in offset order (Kafka's unreplicatedTxns):
        # until it is, a leader that fails could lose the marker, so they stay unstable.
        self._unreplicated: list[tuple[int, int]] = []

    def load(self, entries: dict[int, ProducerStateEntry], now_ms: int | None = None) -> None:
        """Replace the state (from a snapshot, or empty). With `now_ms`, entries expired
        by then are left out, as Kafka's loadFromSnapshot does; the cap is applied."""
        if now_ms is not None:
            entries = {pid: e for pid, e in entries.items() if not self.is_expired(e, now_ms)}
        self.producers = entries
        self._open_txns = {
            pid: e.current_txn_first_offset for pid, e in entries.items() if e.current_txn_first_offset is not None
        }
        self._open_txn_started_ms = {pid: entries[pid].last_timestamp for pid in self._open_txns}
        self._unreplicated = []
        self._evict_over_cap()

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """First offset of the oldest transaction that is open, or completed by a marker
        at or above `high_watermark` (not yet replicated), or None when there is none
        (Kafka's firstUnstableOffset)."""
        first = min(self._open_txns.values()) if self._open_txns else None
        for marker_offset, first_offset in self._unreplicated:
            if marker_offset >= high_watermark:
                first = first_offset if first is None else min(first, first_offset)
        return first

    def open_transaction_count(self) -> int:
        """Transactions open in this partition (their markers not yet written here)."""
        return len(self._open_txns)

    def oldest_open_transaction_started_ms(self) -> int | None:
        """When the open transaction with the lowest first offset began here (its first
        batch's timestamp), or None when no transaction is open: for /metrics."""
        if not self._open_txns:
            return None
        oldest = min(self._open_txns, key=self._open_txns.__getitem__)
        return self._open_txn_started_ms.get(oldest)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark
        (Kafka's onHighWatermarkUpdated): on every replica, leader or follower."""
        if self._unreplicated and self._unreplicated[0][0] < high_watermark:
            self._unreplicated = [entry for entry in self._unreplicated if entry[0] >= high_watermark]

    def first_unstable_offset_excluding(self, producer_id: int) -> int | None:
        """First offset of the oldest open transaction of another producer, or None."""
        return min((first for pid, first in self._open_txns.items() if pid != producer_id), default=None)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The last stable offset an aborted-transaction index entry records (Kafka's
        lastStableOffset(completedTxn)): the first offset of the oldest other transaction
        open when the marker is applied, else the offset after the marker. Computed from
        the log alone, so a leader, its followers and a replay agree on it."""
        first = self.first_unstable_offset_excluding(completed.producer_id)
        return completed.last_offset + 1 if first is None else first

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, *,
              transactional: bool = False, offset_hint: int = -1) -> Check:
        """Validate an incoming client batch against the state; changes nothing.
        `offset_hint` is where the batch would go (the log end offset), for messages."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return APPEND  # KIP-360: unknown producers are accepted with any sequence
        duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
        where = f"at offset {offset_hint} in partition {self.partition_name}"
        if duplicate is not None:
            if transactional and not entry.in_open_transaction(duplicate):
                # Deviation from Kafka, which answers with the original offsets: the batch
                # it repeats belongs to a transaction that has ended (its marker is
                # written), and no client may retry a batch of an ended transaction. A
                # client reusing the sequence numbers of aborted records (librdkafka does
                # after purging possibly persisted ones at abort_transaction, in the same
                # epoch) would otherwise see its new records acknowledged at the aborted
                # records' offsets and lose them from the transaction it then commits.
                return Check(
                    Verdict.OUT_OF_ORDER_SEQUENCE,
                    message=f"Transactional batch of producer {producer_id} with epoch {epoch} {where} repeats "
                    f"sequence numbers {first_seq}-{last_seq} of the batch at offset {duplicate.first_offset}, "
                    "which belongs to a transaction that has ended: a retry of an ended transaction's batch, "
                    f"or sequence numbers reused in the same epoch (expected sequence {next_sequence(entry.last_seq)})",
                )
            return Check(Verdict.DUPLICATE, duplicate_of=duplicate)
        current_epoch = entry.producer_epoch
        if epoch < current_epoch:
            return Check(
                Verdict.INVALID_PRODUCER_EPOCH,
                message=f"Epoch of producer {producer_id} {where} is {epoch}, which is smaller than the last "
                f"seen epoch {current_epoch} (incoming sequence {first_seq})",
            )
        if epoch != current_epoch:
            # A new epoch starts at sequence 0, unless the entry never had an epoch.
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                return Check(
                    Verdict.OUT_OF_ORDER_SEQUENCE,
                    message=f"Invalid sequence number for new epoch {epoch} of producer {producer_id} {where}: "
                    f"{first_seq} (incoming seq. number), expected sequence 0 "
                    f"(current producer epoch {current_epoch})",
                )
        elif current_epoch != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, first_seq):
            # With no batch of this epoch kept (the entry came from a marker, say), the
            # last sequence is NO_SEQUENCE and only 0 follows it.
            return Check(
                Verdict.OUT_OF_ORDER_SEQUENCE,
                message=f"Out of order sequence number for producer {producer_id} with epoch {epoch} {where}: "
                f"{first_seq} (incoming seq. number), expected sequence {next_sequence(entry.last_seq)} "
                f"(current end sequence number {entry.last_seq})",
            )
        if not transactional and entry.current_txn_first_offset is not None:
            return Check(
                Verdict.INVALID_TXN_STATE,
                message=f"Expected transactional write from producer {producer_id} with epoch {epoch} {where} "
                f"(incoming sequence {first_seq}): it has a transaction open since offset "
                f"{entry.current_txn_first_offset}",
            )
        return APPEND

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, *, offset_hint: int = -1,
                     transaction_version: int = 0) -> Check:
        """Validate a COMMIT/ABORT marker from a transaction coordinator.

        Transaction version 2 (KIP-890 part 2): the coordinator bumps the epoch before it
        writes the markers, so a marker must carry an epoch above the producer's epoch on
        the partition; one at that epoch is a late or repeated marker and would end the
        producer's next transaction, so it is INVALID_PRODUCER_EPOCH, unless no
        transaction is open here (a retried marker: accepted again, as Kafka does)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return APPEND
        where = f"at offset {offset_hint} in partition {self.partition_name}"
        if epoch < entry.producer_epoch:
            return Check(
                Verdict.INVALID_PRODUCER_EPOCH,
                message=f"Transaction marker of producer {producer_id} {where} has epoch {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}",
            )
        if transaction_version >= 2 and epoch == entry.producer_epoch and entry.current_txn_first_offset is not None:
            return Check(
                Verdict.INVALID_PRODUCER_EPOCH,
                message=f"Transaction marker of producer {producer_id} {where} has epoch {epoch}, the epoch of its "
                f"transaction open since offset {entry.current_txn_first_offset}; a transaction version 2 marker "
                "must be above it",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return Check(
                Verdict.COORDINATOR_FENCED,
                message=f"Transaction marker of producer {producer_id} with epoch {epoch} {where} comes from "
                f"coordinator epoch {coordinator_epoch}, older than the last seen {entry.coordinator_epoch}",
            )
        return APPEND

    def record(self, batch: ProducerBatch) -> CompletedTxn | None:
        """Apply a batch that is now in the log (also used when replaying the log).
        Returns the transaction a COMMIT/ABORT marker completed, if it had data here."""
        entry = self.producers.pop(batch.producer_id, None)
        if entry is None:
            entry = ProducerStateEntry(batch.producer_id)
            self.producers[batch.producer_id] = entry
            self._evict_over_cap(keep=batch.producer_id)
        else:
            self.producers[batch.producer_id] = entry  # now the most recently written
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
            self._open_txn_started_ms.pop(batch.producer_id, None)
            self._unreplicated.append((batch.first_offset, first_offset))
            return CompletedTxn(batch.producer_id, first_offset, batch.first_offset, batch.control_type == 0)
        if batch.first_seq != NO_SEQUENCE:
            entry.add_batch(
                BatchMetadata(batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset,
                              batch.max_timestamp)
            )
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.first_offset
            self._open_txns[batch.producer_id] = batch.first_offset
            self._open_txn_started_ms[batch.producer_id] = batch.max_timestamp
        return None

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        """Kafka's isProducerExpired: idle past producer.id.expiration.ms, no open transaction."""
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.config.producer_id_expiration_ms
        )

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle longer than `producer.id.expiration.ms` with no open transaction."""
        expired = [pid for pid, entry in self.producers.items() if self.is_expired(entry, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return expired

    def _evict_over_cap(self, keep: int | None = None) -> list[int]:
        """Evict least recently written entries without an open transaction (never `keep`,
        the one being written) until the cap holds or only such entries are left."""
        excess = len(self.producers) - self.config.max_entries
        if excess <= 0:
            return []
        victims = []
        for pid, entry in self.producers.items():
            if pid != keep and entry.current_txn_first_offset is None:
                victims.append(pid)
                if len(victims) == excess:
                    break
        for pid in victims:
            del self.producers[pid]
        if victims:
            logger.debug("%s: evicted %d producer(s) past the cap of %d: %s",
                         self.partition_name, len(victims), self.config.max_entries, victims[:10])
        return victims

    def active_producers(self) -> list[ProducerStateEntry]:
        return sorted(self.producers.values(), key=lambda e: e.producer_id)
