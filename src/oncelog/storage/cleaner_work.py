"""The heavy part of a cleaning round, on the cleaner thread (Kafka's Cleaner).

This module owns what reads and writes record data: building the offset map, grouping
the planned segments, filtering their batches and writing the cleaned segments with
their indexes as fsynced `.cleaned` files (`CleaningWork`, which produces a
`CleanedSegment` per group), and the round's `CleanerStats`. It touches files only: it
knows the log through the immutable `CleaningPlan` (cleaner_plan.py), reads the closed
segments through read-only handles of its own, creates files only through the round's
`CleaningInProgress`, and stops at its next batch once the round is aborted. The loop
swaps its output in (cleaner.py).

1. The offset map: key -> offset of its latest record in the dirty section, leaving out
   aborted transactions (from the aborted-transaction index) and markers. At most
   log.cleaner.dedupe.buffer.size / 24 * 0.9 keys (Kafka's 24 bytes per slot and load
   factor): when full, the round ends early and the next one continues.
2. Every segment from the log start up to the end of the map is rewritten, in groups
   whose total fits segment.bytes, applying Kafka's RecordFilter per batch:
   - a record is kept when it is the latest for its key (or beyond the map); records
     without a key go; a tombstone (null value) stays until its batch's delete horizon
     (set to now + delete.retention.ms the first time a round keeps it, KIP-534);
   - batches of aborted transactions go;
   - a COMMIT/ABORT marker stays while data of its transaction was seen in this round,
     then gets a delete horizon and goes once that has passed;
   - the last data batch of each producer in the producer state (or its last marker,
     when it has no data batch) stays, emptied of records if none is kept, so the
     producer's sequence and epoch survive a restart; so does the round's last batch;
   - offsets never change: kept batches keep base offset, last offset delta, producer
     id, epoch and base sequence (see batch_records.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from oncelog import clock
from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    read_control_record,
)
from oncelog.storage import batch_records
from oncelog.storage.cleaner_plan import CleaningInProgress, CleaningPlan, SegmentToClean, aborted_overlapping
from oncelog.storage.errors import StorageError
from oncelog.storage.framed_file import write_fully
from oncelog.storage.index import INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from oncelog.storage.segment import INT32_MAX, LOG_SUFFIX, LogSegment, segment_file_name
from oncelog.storage.swap import CLEANED_SUFFIX, unlink_cleaned_files
from oncelog.storage.txn_index import AbortedTxn


@dataclass(slots=True)
class CleanerStats:
    """What a round did: counted by the thread work, its checkpoint set by the loop."""

    end_offset: int = 0  # the new cleaner checkpoint
    first_dirty_offset: int = 0  # the checkpoint the round started from
    segments_cleaned: int = 0
    batches_read: int = 0
    batches_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0


# -- transactions seen while cleaning (Kafka's CleanedTransactionMetadata) ----------------


@dataclass(slots=True)
class _AbortedTxnSeen:
    entry: AbortedTxn
    last_observed_batch_offset: int | None = None


@dataclass(slots=True)
class _TransactionTracker:
    """Which transactions the batches read so far belong to, in offset order.

    `on_data_batch` says whether a data batch belongs to an aborted transaction (and can
    go); `on_marker` whether a marker's transaction had no data in this round (so the
    marker may go once its delete horizon has passed). `dropped_abort_markers` collects
    the markers whose aborted-transaction index entries are no longer needed.
    """

    pending: list[AbortedTxn] = field(default_factory=list)  # by first offset, not started yet
    known: set[int] = field(default_factory=set)  # marker offsets already added
    ongoing_aborted: dict[int, _AbortedTxnSeen] = field(default_factory=dict)
    ongoing_committed: set[int] = field(default_factory=set)
    dropped_abort_markers: set[int] = field(default_factory=set)

    def add_aborted(self, entries: list[AbortedTxn]) -> None:
        fresh = [entry for entry in entries if entry.last_offset not in self.known]
        if fresh:
            self.known.update(entry.last_offset for entry in fresh)
            self.pending = sorted(self.pending + fresh, key=lambda entry: entry.first_offset)

    def _start_up_to(self, offset: int) -> None:
        started = 0
        while started < len(self.pending) and self.pending[started].first_offset <= offset:
            entry = self.pending[started]
            self.ongoing_aborted[entry.producer_id] = _AbortedTxnSeen(entry)
            started += 1
        if started:
            del self.pending[:started]

    def on_data_batch(self, header: BatchHeader) -> bool:
        self._start_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self.ongoing_aborted.get(header.producer_id)
        if aborted is not None:
            aborted.last_observed_batch_offset = header.last_offset
            return True
        self.ongoing_committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, control_type: ControlType | None) -> bool:
        self._start_up_to(header.last_offset)
        producer_id = header.producer_id
        if control_type is None:
            return True  # emptied by an earlier round: its transaction is gone already
        if control_type is ControlType.ABORT:
            aborted = self.ongoing_aborted.pop(producer_id, None)
            if aborted is not None and aborted.last_observed_batch_offset is not None:
                return False  # data of this transaction was read: keep marker and index entry
            self.dropped_abort_markers.add(header.base_offset)
            return True
        if producer_id in self.ongoing_committed:
            self.ongoing_committed.discard(producer_id)
            return False
        return True


def _control_type(buffer: bytes, header: BatchHeader) -> ControlType | None:
    """The marker's type; None for a marker an earlier round emptied."""
    if header.size <= HEADER_SIZE:
        return None
    start = header.position + HEADER_SIZE
    return read_control_record(memoryview(buffer)[start : header.position + header.size])[0]


# -- the work ----------------------------------------------------------------------------


def _group_segments(plan: CleaningPlan, end_offset: int) -> list[tuple[SegmentToClean, ...]]:
    """The planned segments below `end_offset`, in runs that fit one segment: total size
    within segment.bytes, index entries within segment.index.bytes, offsets within int32
    (Kafka's groupSegmentsBySize)."""
    segments = [s for s in plan.segments if s.base_offset < end_offset]
    groups: list[tuple[SegmentToClean, ...]] = []
    index = 0
    while index < len(segments):
        group = [segments[index]]
        size = segments[index].size
        entries = segments[index].index_entry_count
        time_entries = segments[index].time_index_entry_count
        index += 1
        while index < len(segments):
            candidate = segments[index]
            last_offset = segments[index + 1].base_offset - 1 if index + 1 < len(segments) else plan.upper_bound - 1
            if (
                size + candidate.size > plan.segment_bytes
                or (entries + candidate.index_entry_count) * INDEX_ENTRY_SIZE > plan.segment_index_bytes
                or (time_entries + candidate.time_index_entry_count) * TIME_INDEX_ENTRY_SIZE
                > plan.segment_index_bytes
                or (candidate.size > 0 and last_offset - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(candidate)
            size += candidate.size
            entries += candidate.index_entry_count
            time_entries += candidate.time_index_entry_count
            index += 1
        groups.append(tuple(group))
    return groups


@dataclass(slots=True)
class CleanedSegment:
    """One group's cleaned segment, written and fsynced under `.cleaned` names with its
    indexes, waiting for the loop to swap it in (or discard it)."""

    segment: LogSegment  # open on the `.cleaned` file, indexes built
    dropped_abort_markers: frozenset[int]  # aborted-transaction entries to remove at the swap

    def discard(self) -> None:
        """Close and remove the cleaned files (on the loop)."""
        self.segment.close_without_flush()
        unlink_cleaned_files(self.segment.directory, self.segment.base_offset)


class CleaningWork:
    """The heavy part of one round (Kafka's Cleaner), run on the cleaner thread: it
    reads the planned segments through handles of its own, builds the offset map,
    filters and writes the cleaned segments. It knows the log only through the plan,
    and stops at the next batch once the round is aborted."""

    def __init__(self, plan: CleaningPlan, in_progress: CleaningInProgress, stats: CleanerStats) -> None:
        self.plan = plan
        self.in_progress = in_progress
        self.stats = stats
        self.offset_map: dict[bytes, int] = {}
        self.latest_offset = plan.first_dirty_offset - 1
        self.end_offset = plan.first_dirty_offset
        self.groups: list[tuple[SegmentToClean, ...]] = []
        self.tracker = _TransactionTracker()
        # What the filter reads, as attributes for speed.
        self.upper_bound = plan.upper_bound
        self.now_ms = plan.now_ms
        self.active_producers = plan.active_producers
        self.delete_horizon_ms = plan.delete_horizon_ms

    def _read_batches(self, segment: SegmentToClean):
        reader = LogSegment.open_read_only(self.plan.directory, segment.base_offset, segment.size)
        try:
            for buffer, headers in reader.read_batches():
                self.in_progress.raise_if_aborted()
                yield buffer, headers
        finally:
            reader.close_without_flush()

    def build_offset_map(self) -> None:
        """Build the offset map, then the groups of segments to rewrite."""
        self.offset_map, self.latest_offset = self._offset_map()
        self.end_offset = self.latest_offset + 1
        self.groups = _group_segments(self.plan, self.end_offset)

    def _offset_map(self) -> tuple[dict[bytes, int], int]:
        """key -> offset of its latest record in [first dirty, upper bound), and the
        offset the map is complete up to (Kafka's buildOffsetMap)."""
        plan = self.plan
        start, upper_bound = plan.first_dirty_offset, plan.upper_bound
        offset_map: dict[bytes, int] = {}
        limit = plan.max_map_entries
        tracker = _TransactionTracker()
        tracker.add_aborted(aborted_overlapping(plan.aborted_txns, start, upper_bound))
        in_progress = self.in_progress
        latest = start - 1
        segments = plan.segments
        for number, segment in enumerate(segments):
            if segment.next_offset <= start:
                continue
            if segment.base_offset >= upper_bound:
                break
            next_start = segments[number + 1].base_offset if number + 1 < len(segments) else upper_bound
            for buffer, headers in self._read_batches(segment):
                for header in headers:
                    if header.base_offset >= upper_bound:
                        return offset_map, latest
                    if header.last_offset < start:
                        continue
                    in_progress.raise_if_aborted()
                    if header.is_control:
                        tracker.on_marker(header, _control_type(buffer, header))
                    elif not tracker.on_data_batch(header):
                        for record in batch_records.decode_records(buffer, header):
                            offset = header.base_offset + record.offset_delta
                            if record.key is None or offset < start:
                                continue
                            if len(offset_map) >= limit and record.key not in offset_map:
                                return offset_map, latest  # full: the next round goes on from here
                            offset_map[record.key] = offset
                    latest = max(latest, header.last_offset)
            latest = max(latest, min(next_start, upper_bound) - 1)
        return offset_map, latest

    def clean_group(self, group: tuple[SegmentToClean, ...]) -> CleanedSegment:
        """Write the group's cleaned segment and its indexes as fsynced `.cleaned` files."""
        plan = self.plan
        in_progress = self.in_progress
        base = group[0].base_offset
        self.tracker.add_aborted(aborted_overlapping(plan.aborted_txns, base, group[-1].next_offset))
        self.tracker.dropped_abort_markers.clear()
        cleaned_path = plan.directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
        fd = in_progress.create_file(cleaned_path)
        cleaned = LogSegment(plan.directory, base, fd, 0, CLEANED_SUFFIX)
        try:
            written = 0
            for segment in group:
                for buffer, headers in self._read_batches(segment):
                    pieces = []
                    for header in headers:
                        in_progress.raise_if_aborted()
                        pieces.append(self._filter(buffer, header))
                    data = b"".join(piece for piece in pieces if piece)
                    if data:
                        _write_all(fd, data, cleaned_path)
                        written += len(data)
                    self.stats.bytes_read += sum(header.size for header in headers)
                    self.stats.batches_read += len(headers)
            try:
                os.fsync(fd)
            except OSError as exc:
                raise StorageError(str(cleaned_path), f"cannot fsync: {exc.strerror}", exc.errno) from exc
            # Like Kafka's setLastModified: an emptied segment ages for retention.ms as its data did.
            modified_ns = max(segment.largest_timestamp for segment in group) * 1_000_000
            try:
                os.utime(fd, ns=(modified_ns, modified_ns))
            except OSError as exc:
                raise StorageError(str(cleaned_path), f"cannot set its time: {exc.strerror}", exc.errno) from exc
            cleaned.recover(plan.index_interval_bytes, clock.now_ms())
            cleaned.on_become_inactive()
            cleaned.write_indexes(in_progress.create_file)
        except BaseException:
            cleaned.close_without_flush()  # the loop removes the files
            raise
        self.stats.bytes_written += written
        self.stats.segments_cleaned += len(group)
        return CleanedSegment(cleaned, frozenset(self.tracker.dropped_abort_markers))

    def _filter(self, buffer: bytes, header: BatchHeader) -> bytes | None:
        """The batch as it is to be written to the cleaned segment, or None to drop it."""
        if header.base_offset >= self.upper_bound:
            return _whole(buffer, header)
        if header.is_control:
            can_discard = self.tracker.on_marker(header, _control_type(buffer, header))
            has_horizon = batch_records.has_delete_horizon(header)
            discard_records = can_discard and has_horizon and header.base_timestamp <= self.now_ms
        else:
            can_discard = self.tracker.on_data_batch(header)
            discard_records = can_discard
        retain_empty = False
        if header.has_producer_id:
            last = self.active_producers.get(header.producer_id)
            if last is not None:
                last_data_offset, epoch = last
                if last_data_offset is not None:
                    retain_empty = header.last_offset == last_data_offset
                else:
                    retain_empty = header.is_control and header.producer_epoch == epoch
        if header.next_offset == self.upper_bound:
            retain_empty = True  # the round's last batch keeps the log's last offset known
        if discard_records and not retain_empty:
            self.stats.records_removed += header.record_count
            return None
        if discard_records:
            records: list[batch_records.StoredRecord] = []
            originals = header.record_count
        elif header.is_control:
            records = batch_records.decode_records(buffer, header)
            originals = len(records)
        else:
            decoded = batch_records.decode_records(buffer, header)
            records = [record for record in decoded if self._retain(header, record)]
            originals = len(decoded)
        self.stats.records_removed += originals - len(records)
        if not records:
            return batch_records.empty_batch(header) if retain_empty else None
        has_tombstone = not header.is_control and any(not record.has_value for record in records)
        marker_for_empty_txn = can_discard and header.is_control
        has_horizon = batch_records.has_delete_horizon(header)
        set_horizon = (has_tombstone or marker_for_empty_txn) and not has_horizon
        if len(records) == originals and not set_horizon:
            return _whole(buffer, header)
        horizon = self.delete_horizon_ms if set_horizon else (header.base_timestamp if has_horizon else None)
        return batch_records.rebuild_batch(buffer, header, records, delete_horizon_ms=horizon)

    def _retain(self, header: BatchHeader, record: batch_records.StoredRecord) -> bool:
        """Kafka's Cleaner.shouldRetainRecord."""
        offset = header.base_offset + record.offset_delta
        if offset > self.latest_offset:
            return True
        if record.key is None:
            return False
        if offset < self.offset_map.get(record.key, -1):
            return False
        if record.has_value:
            return True
        return not batch_records.has_delete_horizon(header) or self.now_ms < header.base_timestamp


def _whole(buffer: bytes, header: BatchHeader) -> bytes:
    return bytes(memoryview(buffer)[header.position : header.position + header.size])


def _write_all(fd: int, data: bytes, path: Path) -> None:
    try:
        write_fully(fd, data)
    except OSError as exc:
        raise StorageError(str(path), f"cannot write cleaned segment: {exc.strerror}", exc.errno) from exc

