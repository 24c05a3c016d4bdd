"""Log compaction for topics with cleanup.policy=compact: Kafka's LogCleaner.

What a cleaning round does to one partition (Kafka's Cleaner.doClean):

1. Pick the range. The dirty section starts at the partition's cleaner checkpoint
   (`cleaner-offset-checkpoint` in its log dir; the log start when there is none) and
   ends at the first uncleanable offset: the lowest of the last stable offset, the
   active segment's base offset, and the first segment newer than min.compaction.lag.ms.
   A partition is cleaned when dirty / (clean + dirty) bytes is above
   min.cleanable.dirty.ratio, or when its oldest dirty data is older than
   max.compaction.lag.ms. The filthiest eligible partition goes first.
2. Build the offset map: key -> offset of its latest record in the dirty section,
   leaving out aborted transactions (from the aborted-transaction index) and markers.
   At most log.cleaner.dedupe.buffer.size / 24 * 0.9 keys (Kafka's 24 bytes per slot
   and load factor): when full, the round ends early and the next one continues.
3. Rewrite every segment from the log start up to the end of the map, in groups whose
   total fits segment.bytes, applying Kafka's RecordFilter per batch:
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
4. Swap each group's cleaned segment in, crash-safely, as Kafka does:
   `<base>.log.cleaned` is written and fsynced, renamed to `<base>.log.swap` (from here
   on recovery completes the swap), the aborted-transaction entries of dropped markers
   are removed, the old segments' files are deleted and the swap file is renamed to
   `<base>.log`; its indexes are rebuilt. On open, `complete_interrupted_swaps` finishes
   a swap a crash interrupted and `.cleaned` leftovers are discarded.

Deviations from Kafka: cleaning runs on the broker's event loop (one partition per
round, between requests) rather than on cleaner threads; batches at or past the first
uncleanable offset are copied untouched even in the segment that holds it; the offset
map holds whole keys rather than their MD5. log.cleaner.threads, log.cleaner.io.* and
log.cleaner.io.max.bytes.per.second are accepted and ignored.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    CorruptRecordError,
    read_control_record,
    read_header,
)
from oncelog.storage import batch_records
from oncelog.storage.errors import CorruptLogError, LogError, StorageError
from oncelog.storage.framed_file import fsync_directory, read_json_file, write_json_file
from oncelog.storage.segment import (
    INDEX_ENTRY_SIZE,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_base_offset,
    segment_file_name,
)
from oncelog.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from oncelog.storage.log import PartitionLog
    from oncelog.storage.manager import LogManager

logger = logging.getLogger("oncelog.storage.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_CHECKPOINT_MAGIC = b"OLCC"
_CHECKPOINT_VERSION = 1
_BYTES_PER_MAP_ENTRY = 24  # Kafka's SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset
_HEADER_PREFIX = 27  # baseOffset .. lastOffsetDelta: enough to walk a swap file


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-wide cleaner settings (log.cleaner.*)."""

    enabled: bool = True
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9

    @property
    def max_map_entries(self) -> int:
        return max(int(self.dedupe_buffer_size / _BYTES_PER_MAP_ENTRY * self.io_buffer_load_factor), 1)


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """Kafka's LogToClean: where a partition's dirty section lies and how dirty it is."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms has passed for the oldest dirty data

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanerStats:
    end_offset: int = 0  # the new cleaner checkpoint
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


def _aborted_overlapping(log: PartitionLog, start: int, end: int) -> list[AbortedTxn]:
    return [entry for entry in log.txn_index.entries if entry.last_offset >= start and entry.first_offset < end]


def _control_type(buffer: bytes, header: BatchHeader) -> ControlType | None:
    """The marker's type; None for a marker an earlier round emptied."""
    if header.size <= HEADER_SIZE:
        return None
    start = header.position + HEADER_SIZE
    return read_control_record(memoryview(buffer)[start : header.position + header.size])[0]


# -- the cleaner -------------------------------------------------------------------------


class LogCleaner:
    """Cleans the compacted partitions of a LogManager, one round at a time."""

    def __init__(self, logs: LogManager, config: CleanerConfig) -> None:
        self._logs = logs
        self.config = config
        self._checkpoints: dict[tuple[str, int], int] = {}
        self.uncleanable: dict[tuple[str, int], str] = {}  # partition -> why cleaning failed
        for directory in logs.log_dirs:
            self._checkpoints.update(_read_checkpoint(directory / CHECKPOINT_FILE))

    def first_dirty_offset(self, log: PartitionLog) -> int:
        checkpoint = self._checkpoints.get((log.topic, log.partition))
        if checkpoint is None or checkpoint < log.log_start_offset or checkpoint > log.log_end_offset:
            return log.log_start_offset
        return checkpoint

    def cleanable_range(self, log: PartitionLog, now_ms: int) -> CleanableRange:
        """Kafka's LogCleanerManager.cleanableOffsets and dirty ratio for one partition."""
        config = log.config
        segments = log.segments
        first_dirty = self.first_dirty_offset(log)
        first_uncleanable = min(log.last_stable_offset, segments[-1].base_offset)
        inactive_dirty = [s for s in segments[:-1] if s.next_offset > first_dirty]
        if config.min_compaction_lag_ms > 0:
            for segment in inactive_dirty:
                if segment.largest_timestamp() > now_ms - config.min_compaction_lag_ms:
                    first_uncleanable = min(first_uncleanable, segment.base_offset)
                    break
        first_uncleanable = max(first_uncleanable, first_dirty)
        clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
        dirty_bytes = sum(
            s.size for s in segments if s.next_offset > first_dirty and s.base_offset < first_uncleanable
        )
        needs_now = False
        if inactive_dirty and config.max_compaction_lag_ms < 2**63 - 1 and first_uncleanable > first_dirty:
            first_timestamp = inactive_dirty[0].rolling_base_ms
            needs_now = first_timestamp is not None and now_ms - first_timestamp > config.max_compaction_lag_ms
        return CleanableRange(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, needs_now)

    def clean_filthiest(self, now_ms: int | None = None) -> CleanerStats | None:
        """Clean the compacted partition most in need of it, if any qualifies (the
        periodic task). Returns the round's stats, or None when nothing was cleaned."""
        if not self.config.enabled:
            return None
        now_ms = _wall_clock_ms() if now_ms is None else now_ms
        best: tuple[float, PartitionLog, CleanableRange] | None = None
        for log in self._logs.partitions():
            if not log.config.compacts or (log.topic, log.partition) in self.uncleanable:
                continue
            cleanable = self.cleanable_range(log, now_ms)
            if cleanable.first_uncleanable_offset <= cleanable.first_dirty_offset or cleanable.dirty_bytes == 0:
                continue
            ratio = cleanable.dirty_ratio
            if not (cleanable.needs_compaction_now or ratio > log.config.min_cleanable_dirty_ratio):
                continue
            if best is None or ratio > best[0]:
                best = (ratio, log, cleanable)
        if best is None:
            return None
        _ratio, log, cleanable = best
        key = (log.topic, log.partition)
        try:
            return self.clean(log, now_ms, cleanable)
        except (LogError, batch_records.CodecUnavailableError, ValueError) as exc:
            # As Kafka marks a partition uncleanable: log it, skip it from now on.
            self.uncleanable[key] = str(exc)
            logger.error("%s: cleaning failed, the partition will not be cleaned again until restart: %s",
                         log.name, exc)
            return None

    def clean(self, log: PartitionLog, now_ms: int, cleanable: CleanableRange | None = None) -> CleanerStats:
        """One cleaning round of `log` (Kafka's Cleaner.doClean)."""
        started = time.perf_counter()
        cleanable = cleanable or self.cleanable_range(log, now_ms)
        first_dirty, upper_bound = cleanable.first_dirty_offset, cleanable.first_uncleanable_offset
        stats = CleanerStats(end_offset=first_dirty)
        if upper_bound <= first_dirty:
            return stats
        offset_map, latest_offset = self._build_offset_map(log, first_dirty, upper_bound, stats)
        end_offset = latest_offset + 1
        stats.end_offset = end_offset
        active_producers = {
            entry.producer_id: (entry.last_offset if entry.last_offset >= 0 else None, entry.producer_epoch)
            for entry in log.producer_state.producers.values()
        }
        tracker = _TransactionTracker()
        round_ = _Round(log, offset_map, latest_offset, upper_bound, now_ms, tracker, active_producers, stats)
        for group in _group_segments(log, end_offset, upper_bound):
            round_.clean_group(group)
        self._checkpoints[(log.topic, log.partition)] = end_offset
        self._write_checkpoint(log)
        logger.info(
            "%s: cleaned offsets below %d in %.0f ms: %d segment(s), %d of %d bytes kept, %d record(s) removed",
            log.name, end_offset, (time.perf_counter() - started) * 1000, stats.segments_cleaned,
            stats.bytes_written, stats.bytes_read, stats.records_removed,
        )
        return stats

    def _build_offset_map(self, log: PartitionLog, start: int, upper_bound: int,
                          stats: CleanerStats) -> tuple[dict[bytes, int], int]:
        """key -> offset of its latest record in [start, upper_bound), and the offset the
        map is complete up to (Kafka's buildOffsetMap)."""
        offset_map: dict[bytes, int] = {}
        limit = self.config.max_map_entries
        tracker = _TransactionTracker()
        tracker.add_aborted(_aborted_overlapping(log, start, upper_bound))
        latest = start - 1
        segments = log.segments
        for number, segment in enumerate(segments):
            if segment.next_offset <= start:
                continue
            if segment.base_offset >= upper_bound:
                break
            next_start = segments[number + 1].base_offset if number + 1 < len(segments) else upper_bound
            for buffer, headers in segment.read_batches():
                for header in headers:
                    if header.base_offset >= upper_bound:
                        return offset_map, latest
                    if header.last_offset < start:
                        continue
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

    def _write_checkpoint(self, log: PartitionLog) -> None:
        directory = self._logs.log_dir_of(log.topic, log.partition)
        if directory is None:
            return
        offsets = []
        for other in self._logs.partitions():
            key = (other.topic, other.partition)
            if key in self._checkpoints and self._logs.log_dir_of(*key) == directory:
                offsets.append([other.topic, other.partition, self._checkpoints[key]])
        write_json_file(directory / CHECKPOINT_FILE, _CHECKPOINT_MAGIC, _CHECKPOINT_VERSION,
                        {"offsets": sorted(offsets)})


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    if not path.exists():
        return {}
    try:
        _version, document = read_json_file(path, _CHECKPOINT_MAGIC, (_CHECKPOINT_VERSION,))
        return {(str(topic), int(partition)): int(offset) for topic, partition, offset in document["offsets"]}
    except (CorruptLogError, KeyError, TypeError, ValueError) as exc:
        # Losing it costs one full re-clean, never data.
        logger.warning("%s: ignoring unreadable cleaner checkpoint: %s", path, exc)
        return {}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _group_segments(log: PartitionLog, end_offset: int, upper_bound: int) -> list[list[LogSegment]]:
    """The inactive segments below `end_offset`, in runs that fit one segment: total size
    within segment.bytes, index entries within segment.index.bytes, offsets within int32
    (Kafka's groupSegmentsBySize)."""
    config = log.config
    segments = [s for s in log.segments[:-1] if s.base_offset < end_offset]
    groups: list[list[LogSegment]] = []
    index = 0
    while index < len(segments):
        group = [segments[index]]
        size = segments[index].size
        entries = segments[index].index_entry_count
        time_entries = segments[index].time_index_entry_count
        index += 1
        while index < len(segments):
            candidate = segments[index]
            last_offset = segments[index + 1].base_offset - 1 if index + 1 < len(segments) else upper_bound - 1
            if (
                size + candidate.size > config.segment_bytes
                or (entries + candidate.index_entry_count) * INDEX_ENTRY_SIZE > config.segment_index_bytes
                or (time_entries + candidate.time_index_entry_count) * TIME_INDEX_ENTRY_SIZE
                > config.segment_index_bytes
                or (candidate.size > 0 and last_offset - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(candidate)
            size += candidate.size
            entries += candidate.index_entry_count
            time_entries += candidate.time_index_entry_count
            index += 1
        groups.append(group)
    return groups


class _Round:
    """One cleaning round's filter and swaps (Kafka's cleanSegments / cleanInto)."""

    def __init__(self, log: PartitionLog, offset_map: dict[bytes, int], latest_offset: int, upper_bound: int,
                 now_ms: int, tracker: _TransactionTracker, active_producers: dict[int, tuple[int | None, int]],
                 stats: CleanerStats) -> None:
        self.log = log
        self.offset_map = offset_map
        self.latest_offset = latest_offset
        self.upper_bound = upper_bound
        self.now_ms = now_ms
        self.tracker = tracker
        self.active_producers = active_producers
        self.stats = stats
        self.delete_horizon_ms = now_ms + log.config.delete_retention_ms

    def clean_group(self, group: list[LogSegment]) -> None:
        log = self.log
        directory = log.directory
        base = group[0].base_offset
        group_end = group[-1].next_offset
        self.tracker.add_aborted(_aborted_overlapping(log, base, group_end))
        self.tracker.dropped_abort_markers.clear()
        cleaned_path = directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
        fd = _create(cleaned_path)
        try:
            written = 0
            for segment in group:
                for buffer, headers in segment.read_batches():
                    pieces = [self._filter(buffer, header) for header in headers]
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
        except BaseException:
            os.close(fd)
            cleaned_path.unlink(missing_ok=True)
            raise
        os.close(fd)
        # Like Kafka's setLastModified: an emptied segment ages for retention.ms as its data did.
        modified_ns = max(segment.largest_timestamp() for segment in group) * 1_000_000
        try:
            os.utime(cleaned_path, ns=(modified_ns, modified_ns))
        except OSError as exc:
            raise StorageError(str(cleaned_path), f"cannot set its time: {exc.strerror}", exc.errno) from exc
        self.stats.bytes_written += written
        self.stats.segments_cleaned += len(group)
        swap_segments(log, group, cleaned_path, self.tracker.dropped_abort_markers)

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


# -- files: writing, swapping, recovering ------------------------------------------------


def _create(path: Path) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise StorageError(str(path), f"cannot create cleaned segment: {exc.strerror}", exc.errno) from exc


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise StorageError(str(path), f"cannot write cleaned segment: {exc.strerror}", exc.errno) from exc


def _rename(source: Path, target: Path) -> None:
    try:
        os.replace(source, target)
    except OSError as exc:
        raise StorageError(str(source), f"cannot rename to {target.name}: {exc.strerror}", exc.errno) from exc


def _unlink_segment_files(directory: Path, base: int) -> None:
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (directory / segment_file_name(base, suffix)).unlink(missing_ok=True)


def swap_segments(log: PartitionLog, old: list[LogSegment], cleaned_path: Path,
                  dropped_abort_markers: set[int]) -> LogSegment:
    """Replace the segments `old` by the fsynced cleaned file, crash-safely.

    Order: rename to `.swap` (the commit point: recovery completes the swap from here),
    drop the index entries of dropped abort markers (durably), delete the old files,
    rename the swap file to the segment name, rebuild its indexes, swap in memory.
    Old segments stay readable through their open file handles until the in-memory swap.
    """
    directory = log.directory
    base = old[0].base_offset
    swap_path = directory / (segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
    _rename(cleaned_path, swap_path)
    fsync_directory(directory)
    if dropped_abort_markers:
        log.txn_index.remove(dropped_abort_markers)
        log.txn_index.flush()
        fsync_directory(directory)
    for segment in old:
        _unlink_segment_files(directory, segment.base_offset)
    _rename(swap_path, directory / segment_file_name(base, LOG_SUFFIX))
    fsync_directory(directory)
    new = _open_rebuilt(directory, base, log.config.index_interval_bytes)
    log.replace_segments(old, new)
    return new


def _open_rebuilt(directory: Path, base: int, index_interval_bytes: int) -> LogSegment:
    segment = LogSegment.open(directory, base)
    now_ms = _wall_clock_ms()
    segment.recover(index_interval_bytes, now_ms)
    segment.on_become_inactive()
    segment.write_indexes(sync=True)
    return segment


def _swap_file_next_offset(path: Path) -> int | None:
    """The offset after the last batch of a swap file (None when it holds none), read
    from batch headers only: the file was fsynced before it got its swap name."""
    next_offset = None
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            position = 0
            while position + _HEADER_PREFIX <= size:
                file.seek(position)
                prefix = file.read(_HEADER_PREFIX)
                base = int.from_bytes(prefix[0:8], "big", signed=True)
                length = int.from_bytes(prefix[8:12], "big", signed=True)
                last_delta = int.from_bytes(prefix[23:27], "big", signed=True)
                if length < HEADER_SIZE - 12 or position + length + 12 > size:
                    break
                next_offset = base + last_delta + 1
                position += length + 12
    except OSError as exc:
        raise StorageError(str(path), f"cannot read swap file: {exc.strerror}", exc.errno) from exc
    return next_offset


def complete_interrupted_swaps(directory: Path, name: str) -> bool:
    """Discard `.cleaned` files and complete `.swap` files a crash left in `directory`
    (Kafka's LogLoader): the segments a swap file covers are deleted and it takes their
    place. Returns whether a swap was completed."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageError(str(directory), f"cannot list: {exc.strerror}", exc.errno) from exc
    completed = False
    for file_name in sorted(names):
        if file_name.endswith(CLEANED_SUFFIX):
            logger.info("%s: discarding unfinished cleaned segment %s", name, file_name)
            (directory / file_name).unlink(missing_ok=True)
    for file_name in sorted(names):
        if not file_name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = parse_segment_base_offset(file_name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)
        if base is None:
            continue
        swap_path = directory / file_name
        next_offset = _swap_file_next_offset(swap_path)
        end = base if next_offset is None else next_offset
        replaced = []
        for other in os.listdir(directory):
            other_base = parse_segment_base_offset(other, LOG_SUFFIX)
            if other_base is not None and base <= other_base < end:
                replaced.append(other_base)
        logger.warning("%s: completing the interrupted swap of cleaned segment %d (replacing segments %s)",
                       name, base, sorted(replaced))
        for other_base in replaced:
            _unlink_segment_files(directory, other_base)
        _unlink_segment_files(directory, base)
        _rename(swap_path, directory / segment_file_name(base, LOG_SUFFIX))
        completed = True
    if completed:
        fsync_directory(directory)
    return completed


def drop_orphan_aborted_txns(log: PartitionLog) -> None:
    """After a completed swap: forget aborted-transaction entries whose marker is no
    longer in the log, so read_committed consumers never get an abort without its marker."""
    orphans = set()
    for entry in log.txn_index.entries:
        if entry.last_offset < log.log_start_offset or entry.last_offset >= log.log_end_offset:
            continue
        records = log.read(entry.last_offset, 1, upper_bound=log.log_end_offset).records
        if not records:
            orphans.add(entry.last_offset)
            continue
        first = _read_prefix_header(records)
        if first is None or first.base_offset != entry.last_offset or not first.is_control:
            orphans.add(entry.last_offset)
    if orphans:
        logger.info("%s: dropping %d aborted-transaction entries whose markers were cleaned",
                    log.name, len(orphans))
        log.txn_index.remove(orphans)
        log.txn_index.flush()


def _read_prefix_header(records: bytes) -> BatchHeader | None:
    try:
        return read_header(records, 0)
    except CorruptRecordError:
        return None
