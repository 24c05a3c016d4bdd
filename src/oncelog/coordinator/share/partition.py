"""A share partition: one topic partition as one share group consumes it (KIP-932).

Many members read the same partition. Each record in the window the group has handed
out (its *in-flight* records, offsets from the share-partition start offset, SPSO, up to
the end offset, SPEO) has a state, a delivery count, and while acquired the member that
holds it and the time its acquisition lock runs out:

    AVAILABLE     may be handed to a member (never delivered, or released)
    ACQUIRED      handed to `member` until `lock_deadline_ms`
    ACKNOWLEDGED  processed (ACCEPT)
    ARCHIVED      never to be delivered again (REJECT, a gap, the delivery count limit,
                  an aborted record or a transaction marker under read_committed)

The transitions are the table `TRANSITIONS`; a record that would become AVAILABLE again
once it has been delivered `delivery_limit` times is ARCHIVED instead, so a record that
keeps failing its consumers is delivered a bounded number of times. The start offset
moves past every leading ACKNOWLEDGED or ARCHIVED record, and the window holds at most
`max_in_flight` records (group.share.partition.max.record.locks): no new record is
acquired beyond it.

This is the domain: offsets and states only. The manager (manager.py) reads the log,
says which offsets are data, aborted or control (`Span`), persists `snapshot()` before it
answers a client, and rebuilds a partition with `restore` after a restart or a leader
change; acquired records are persisted as AVAILABLE with their delivery count, so a
crash hands them out again, counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum

from oncelog.protocol.messages import ErrorCode


class RecordState(IntEnum):
    """A record's state, numbered as Kafka persists them (its RecordState ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class Event(Enum):
    """What happens to a record besides an acknowledgement."""

    ACQUIRE = "acquire"
    LOCK_EXPIRED = "lock expired"
    MEMBER_GONE = "member gone"  # its share session closed
    SKIP = "skip"  # aborted, a marker, or below the log start: never delivered


_ = RecordState
# (state, event or acknowledgement) -> next state. "Back to AVAILABLE" is AVAILABLE here;
# `_settle` turns it into ARCHIVED at the delivery count limit.
TRANSITIONS: dict[tuple[RecordState, Event | AckType], RecordState] = {
    (_.AVAILABLE, Event.ACQUIRE): _.ACQUIRED,
    (_.AVAILABLE, Event.SKIP): _.ARCHIVED,
    (_.ACQUIRED, AckType.ACCEPT): _.ACKNOWLEDGED,
    (_.ACQUIRED, AckType.RELEASE): _.AVAILABLE,
    (_.ACQUIRED, AckType.REJECT): _.ARCHIVED,
    (_.ACQUIRED, AckType.GAP): _.ARCHIVED,
    (_.ACQUIRED, AckType.RENEW): _.ACQUIRED,
    (_.ACQUIRED, Event.LOCK_EXPIRED): _.AVAILABLE,
    (_.ACQUIRED, Event.MEMBER_GONE): _.AVAILABLE,
}
del _


class SpanKind(Enum):
    DATA = "data"
    ABORTED = "aborted"  # a record of an aborted transaction, read_committed
    CONTROL = "control"  # a transaction marker


@dataclass(frozen=True, slots=True)
class Span:
    """Offsets `first`..`last` (inclusive) of the log, one batch's, and what they hold."""

    first: int
    last: int
    kind: SpanKind = SpanKind.DATA


@dataclass(frozen=True, slots=True)
class Acquired:
    """Offsets `first`..`last` handed to a member, each delivered `delivery_count` times."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of records with the same persisted state and delivery count."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """What is persisted of a share partition (Kafka's ShareSnapshot): the start offset
    and the in-flight records from it, ACQUIRED written as AVAILABLE."""

    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    state_epoch: int = 0

    @property
    def end_offset(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.start_offset

    @property
    def initialized(self) -> bool:
        """False for the state an admin reset leaves (DeleteShareGroupOffsets): start
        again where share.auto.offset.reset says, at this state epoch."""
        return self.start_offset >= 0


UNINITIALIZED = -1  # the start offset of a state reset to start again


@dataclass(slots=True)
class _Record:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    lock_deadline_ms: int = 0


_NEVER = 2**63 - 1


class AcknowledgeError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """Offsets `first`..`last` acknowledged with one type for all, or one per offset."""

    first: int
    last: int
    types: tuple[int, ...]


class SharePartition:
    def __init__(self, start_offset: int, *, delivery_limit: int, max_in_flight: int, state_epoch: int = 0) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.state_epoch = state_epoch
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self._records: dict[int, _Record] = {}  # every offset in [start_offset, end_offset)
        self._earliest_deadline_ms = _NEVER  # no acquisition lock runs out before it
        self.changes = 0  # counts every change of state: what the manager persists

    # ---- persisted form --------------------------------------------------------------------

    @classmethod
    def restore(cls, state: ShareState, *, delivery_limit: int, max_in_flight: int) -> SharePartition:
        partition = cls(state.start_offset, delivery_limit=delivery_limit, max_in_flight=max_in_flight,
                        state_epoch=state.state_epoch)
        for batch in state.batches:
            for offset in range(max(batch.first, state.start_offset), batch.last + 1):
                restored = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
                partition._records[offset] = _Record(restored, batch.delivery_count)
        partition.end_offset = max(state.end_offset, state.start_offset)
        for offset in range(partition.start_offset, partition.end_offset):
            partition._records.setdefault(offset, _Record(RecordState.AVAILABLE))
        partition._advance()
        return partition

    def snapshot(self) -> ShareState:
        """The persisted form of the current state."""
        batches: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self._records[offset]
            state = RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state
            last = batches[-1] if batches else None
            if last is not None and last.state is state and last.delivery_count == record.delivery_count:
                batches[-1] = StateBatch(last.first, offset, state, record.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, state, record.delivery_count))
        return ShareState(self.start_offset, tuple(batches), self.state_epoch)

    # ---- reading ---------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the log must be read from for the next acquisition: the first AVAILABLE
        in-flight record, else the end offset."""
        for offset in range(self.start_offset, self.end_offset):
            if self._records[offset].state is RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: an AVAILABLE in-flight record, or room
        in the window for new ones."""
        return (self.end_offset - self.start_offset < self.max_in_flight
                or any(r.state is RecordState.AVAILABLE for r in self._records.values()))

    def state_of(self, offset: int) -> tuple[RecordState, int] | None:
        """(state, delivery count) of an in-flight record, None outside the window."""
        record = self._records.get(offset)
        return None if record is None else (record.state, record.delivery_count)

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def done_in_flight(self) -> int:
        """In-flight records acknowledged or archived (past the start, behind others)."""
        return sum(1 for r in self._records.values() if r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))

    # ---- changes ---------------------------------------------------------------------------

    def acquire(self, member: str, spans: Iterable[Span], *, max_records: int, now_ms: int,
                lock_ms: int, from_offset: int | None = None) -> list[Acquired]:
        """Hand `member` up to `max_records` records of `spans` (the log as read, in offset
        order, from `from_offset`, default `next_fetch_offset()`): AVAILABLE in-flight
        ones again, then new ones up to the window's limit. Aborted and control offsets
        are archived, never handed out, and so are in-flight offsets the log no longer
        has (compacted away between `from_offset` and the spans); an AVAILABLE record
        already delivered `delivery_limit` times (after a restart, or a lowered limit)
        is archived too. The runs acquired, in order."""
        runs: list[Acquired] = []
        budget = max_records
        expected = max(self.start_offset, self.next_fetch_offset() if from_offset is None else from_offset)
        for span in spans:
            self._archive_missing(expected, min(span.first, self.end_offset))
            expected = max(expected, span.last + 1)
            for offset in range(max(span.first, self.start_offset), span.last + 1):
                if budget <= 0:
                    return self._finish(runs)
                record = self._records.get(offset)
                if record is None:
                    if offset < self.end_offset:
                        continue  # cannot be: the window has every offset
                    if offset - self.start_offset >= self.max_in_flight:
                        return self._finish(runs)
                    for gap in range(self.end_offset, offset):  # offsets the log does not have (compacted)
                        self._records[gap] = _Record(RecordState.ARCHIVED)
                    record = self._records[offset] = _Record(RecordState.AVAILABLE)
                    self.end_offset = offset + 1
                    self.changes += 1
                    if span.kind is not SpanKind.DATA:
                        record.state = TRANSITIONS[(record.state, Event.SKIP)]
                        continue
                if record.state is not RecordState.AVAILABLE:
                    continue
                if record.delivery_count >= self.delivery_limit:
                    record.state = TRANSITIONS[(record.state, Event.SKIP)]
                    self.changes += 1
                    continue
                record.state = TRANSITIONS[(record.state, Event.ACQUIRE)]
                record.delivery_count += 1
                record.member = member
                record.lock_deadline_ms = now_ms + lock_ms
                self._earliest_deadline_ms = min(self._earliest_deadline_ms, record.lock_deadline_ms)
                self.changes += 1
                budget -= 1
                last = runs[-1] if runs else None
                if last is not None and last.last == offset - 1 and last.delivery_count == record.delivery_count:
                    runs[-1] = Acquired(last.first, offset, record.delivery_count)
                else:
                    runs.append(Acquired(offset, offset, record.delivery_count))
        return self._finish(runs)

    def _archive_missing(self, first: int, end: int) -> None:
        """In-flight AVAILABLE offsets in [first, end) that the read did not return: gone
        from the log (compaction), archived."""
        for offset in range(max(first, self.start_offset), min(end, self.end_offset)):
            record = self._records[offset]
            if record.state is RecordState.AVAILABLE:
                record.state = TRANSITIONS[(record.state, Event.SKIP)]
                self.changes += 1

    def _finish(self, runs: list[Acquired]) -> list[Acquired]:
        self._advance()
        return runs

    def acknowledge(self, member: str, acknowledgements: Sequence[Acknowledgement], *, now_ms: int,
                    lock_ms: int, renew_allowed: bool = False) -> None:
        """Apply a member's acknowledgements, all or none: every offset must be ACQUIRED by
        `member`, else AcknowledgeError(INVALID_RECORD_STATE); malformed batches or types
        are INVALID_REQUEST."""
        changes: list[tuple[int, AckType]] = []
        previous_last = -1
        for batch in acknowledgements:
            if batch.first > batch.last or batch.first < 0:
                raise AcknowledgeError(ErrorCode.invalid_request,
                                       f"Invalid acknowledgement batch {batch.first}-{batch.last}")
            if batch.first <= previous_last:  # Kafka's validateAcknowledgementBatches
                raise AcknowledgeError(ErrorCode.invalid_request,
                                       f"Acknowledgement batch {batch.first}-{batch.last} overlaps or precedes "
                                       f"the one before it (ending at {previous_last})")
            previous_last = batch.last
            count = batch.last - batch.first + 1
            if len(batch.types) not in (1, count):
                raise AcknowledgeError(ErrorCode.invalid_request,
                                       f"Acknowledgement batch {batch.first}-{batch.last} has {len(batch.types)} "
                                       "acknowledge types")
            if count > self.max_in_flight:
                raise AcknowledgeError(ErrorCode.invalid_record_state,
                                       f"The records {batch.first}-{batch.last} are not acquired")
            for index, offset in enumerate(range(batch.first, batch.last + 1)):
                raw = batch.types[0] if len(batch.types) == 1 else batch.types[index]
                if raw not in AckType._value2member_map_ or (raw == AckType.RENEW and not renew_allowed):
                    raise AcknowledgeError(ErrorCode.invalid_request, f"Invalid acknowledge type {raw}")
                record = self._records.get(offset)
                if record is None or record.state is not RecordState.ACQUIRED or record.member != member:
                    raise AcknowledgeError(ErrorCode.invalid_record_state,
                                           f"The record at offset {offset} is not acquired by this member")
                changes.append((offset, AckType(raw)))
        for offset, ack in changes:
            record = self._records[offset]
            self.changes += 1
            if ack is AckType.RENEW:
                record.lock_deadline_ms = now_ms + lock_ms
                continue
            self._settle(record, TRANSITIONS[(record.state, ack)])
        self._advance()

    def expire_locks(self, now_ms: int) -> bool:
        """Records whose acquisition lock ran out go back (or, at the limit, to the
        archive). Whether any did. Cheap when no lock can have run out yet."""
        if now_ms < self._earliest_deadline_ms:
            return False
        expired = self._release(lambda record: record.lock_deadline_ms <= now_ms, Event.LOCK_EXPIRED)
        self._earliest_deadline_ms = self._exact_deadline()
        return expired

    def release_member(self, member: str) -> bool:
        """`member`'s acquired records go back: its share session closed."""
        return self._release(lambda record: record.member == member, Event.MEMBER_GONE)

    def next_lock_deadline(self) -> int | None:
        """No lock runs out before this (a bound: a lock renewed or given back since may
        make it early); None when nothing is acquired."""
        return None if self._earliest_deadline_ms == _NEVER else self._earliest_deadline_ms

    def _exact_deadline(self) -> int:
        return min((r.lock_deadline_ms for r in self._records.values() if r.state is RecordState.ACQUIRED),
                   default=_NEVER)

    def move_start(self, log_start_offset: int) -> bool:
        """The log lost records below `log_start_offset` (retention, DeleteRecords): the
        window starts there at least. Whether it moved."""
        if log_start_offset <= self.start_offset:
            return False
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            del self._records[offset]
        self.start_offset = log_start_offset
        self.changes += 1
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance()
        return True

    def _release(self, selected, event: Event) -> bool:
        changed = False
        for record in self._records.values():
            if record.state is RecordState.ACQUIRED and selected(record):
                self._settle(record, TRANSITIONS[(record.state, event)])
                self.changes += 1
                changed = True
        if changed:
            self._advance()
        return changed

    def _settle(self, record: _Record, state: RecordState) -> None:
        if state is RecordState.AVAILABLE and record.delivery_count >= self.delivery_limit:
            state = RecordState.ARCHIVED
        record.state = state
        if state is not RecordState.ACQUIRED:
            record.member = None
            record.lock_deadline_ms = 0

    def _advance(self) -> None:
        """Move the start offset past the leading records that are done."""
        while self.start_offset < self.end_offset:
            record = self._records[self.start_offset]
            if record.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self._records[self.start_offset]
            self.start_offset += 1
