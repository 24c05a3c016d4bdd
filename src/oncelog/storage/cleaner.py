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
   `<base>.log.cleaned` (and its `.index.cleaned`, `.timeindex.cleaned`) is written and
   fsynced, renamed to `<base>.log.swap` (from here on recovery completes the swap),
   the aborted-transaction entries of dropped markers are removed, the old segments'
   files are deleted, the indexes and then the swap file get the segment names. On
   open, `complete_interrupted_swaps` finishes a swap a crash interrupted and `.cleaned`
   leftovers are discarded (the files' names and their recovery are swap.py's).

Who runs what (Kafka's cleaner thread and LogCleanerManager): a round is a sequence of
steps (`LogCleaner._round`). On the event loop: choosing the partition, taking an
immutable `CleaningPlan` (segments, bounds, aborted transactions, producers, horizons),
and, after each group, checking that the plan still holds and swapping. On the cleaner
thread (`_CleaningWork`): everything that reads or writes record data: the offset map,
the filter, writing and fsyncing the cleaned files and building their indexes. The
thread reads the closed segments through its own read-only handles (only the cleaner
rewrites them, and only by a swap on the loop) and never touches a PartitionLog.
While a round runs the log holds its `CleaningInProgress`: deleting the partition,
truncating it, closing it or deleting segments by retention aborts the round (Kafka's
abortCleaning); the thread stops at its next batch and can no longer create files in
the partition's directory, and the loop discards what it wrote. The broker runs rounds
on one thread of its own (log.cleaner.threads=1); `clean` and `clean_filthiest` run
the same steps in the calling thread.

Deviations from Kafka: one partition is cleaned at a time; retention deleting segments
of a partition being cleaned aborts the round instead of waiting for it; batches at or
past the first uncleanable offset are copied untouched even in the segment that holds
it; the offset map holds whole keys rather than their MD5. log.cleaner.threads,
log.cleaner.io.* and log.cleaner.io.max.bytes.per.second are accepted and ignored.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog import clock
from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    read_control_record,
)
from oncelog.storage import batch_records
from oncelog.storage.errors import CorruptLogError, LogError, StorageError
from oncelog.storage.framed_file import fsync_directory, read_partition_offsets, write_json_file
from oncelog.storage.segment import (
    INDEX_ENTRY_SIZE,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from oncelog.storage.swap import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    rename,
    unlink_cleaned_files,
    unlink_segment_files,
)
from oncelog.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from oncelog.storage.log import PartitionLog
    from oncelog.storage.manager import LogManager

logger = logging.getLogger("oncelog.storage.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CHECKPOINT_MAGIC = b"OLCC"
_CHECKPOINT_VERSION = 1
_BYTES_PER_MAP_ENTRY = 24  # Kafka's SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset

# A step of a round to run on the cleaner thread, and how a caller runs one there.
ThreadStep = Callable[[], Any]
RunInThread = Callable[[ThreadStep], Awaitable[Any]]


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
    first_dirty_offset: int = 0  # the checkpoint the round started from
    segments_cleaned: int = 0
    batches_read: int = 0
    batches_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0


class CleaningAbortedError(Exception):
    """The round was aborted (the partition was deleted, truncated, closed or lost
    segments to retention while it ran): its output is discarded."""


@dataclass(frozen=True, slots=True)
class SegmentToClean:
    """What the cleaner thread knows of one inactive segment, read on the loop."""

    base_offset: int
    next_offset: int
    size: int
    index_entry_count: int
    time_index_entry_count: int
    largest_timestamp: int  # for the cleaned file's modification time


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """Everything a round's thread work needs, taken on the loop when the round starts
    (Kafka's LogToClean plus what cleanSegments reads from the log). Immutable."""

    name: str
    directory: Path
    first_dirty_offset: int
    upper_bound: int  # the first uncleanable offset
    segments: tuple[SegmentToClean, ...]  # the inactive segments below upper_bound, oldest first
    aborted_txns: tuple[AbortedTxn, ...]  # the aborted-transaction entries overlapping them
    # producer id -> (offset of its last data batch or None, epoch): their last batch stays
    active_producers: Mapping[int, tuple[int | None, int]]
    now_ms: int
    delete_horizon_ms: int  # now + delete.retention.ms
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    max_map_entries: int


class CleaningInProgress:
    """A partition's running round (Kafka's LogCleaningInProgress state), held by its
    PartitionLog as `cleaning` so that deleting, truncating or closing the partition,
    or retention deleting its segments, can abort the round.

    The lock makes "not aborted, so create this file" atomic against `abort`: once
    `abort` returns, the cleaner thread creates no file in the partition's directory,
    so a directory being removed stays removed. It is held for an open() only.
    """

    def __init__(self, log: PartitionLog, plan: CleaningPlan, segments: list[LogSegment]) -> None:
        self.log = log
        self.plan = plan
        self.segments = segments  # the live segments of the plan, to check before each swap
        self.abort_reason: str | None = None
        self._lock = threading.Lock()

    def abort(self, reason: str) -> None:
        """Stop the round (loop side): the thread stops at its next check, the loop
        discards its output instead of swapping it in."""
        with self._lock:
            if self.abort_reason is not None:
                return
            self.abort_reason = reason
        logger.info("%s: aborting the cleaning round: %s", self.plan.name, reason)

    def raise_if_aborted(self) -> None:
        if self.abort_reason is not None:
            raise CleaningAbortedError(f"{self.plan.name}: cleaning aborted: {self.abort_reason}")

    def create_file(self, path: Path) -> int:
        """Create (or truncate) a `.cleaned` file for reading and writing, unless the
        round was aborted (cleaner thread side)."""
        with self._lock:
            self.raise_if_aborted()
            try:
                return os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as exc:
                raise StorageError(str(path), f"cannot create cleaned file: {exc.strerror}", exc.errno) from exc

    def live_segments(self, base_offsets: Sequence[int]) -> list[LogSegment] | None:
        """The log's segments at `base_offsets` if the round still holds: not aborted,
        and those segments still consecutive inactive segments of the log."""
        if self.abort_reason is not None:
            return None
        bases = set(base_offsets)
        wanted = [segment for segment in self.segments if segment.base_offset in bases]
        if not wanted or len(wanted) != len(bases):
            return None
        current = self.log.segments
        try:
            first = next(number for number, segment in enumerate(current) if segment is wanted[0])
        except StopIteration:
            return None
        if current[first : first + len(wanted)] != wanted or first + len(wanted) >= len(current):
            return None
        return wanted

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


def _aborted_overlapping(entries: Sequence[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    return [entry for entry in entries if entry.last_offset >= start and entry.first_offset < end]


def _control_type(buffer: bytes, header: BatchHeader) -> ControlType | None:
    """The marker's type; None for a marker an earlier round emptied."""
    if header.size <= HEADER_SIZE:
        return None
    start = header.position + HEADER_SIZE
    return read_control_record(memoryview(buffer)[start : header.position + header.size])[0]


# -- the cleaner -------------------------------------------------------------------------


class LogCleaner:
    """Cleans the compacted partitions of a LogManager, one round at a time.

    Its state (checkpoints, rounds in progress) belongs to the event loop; only the
    `_CleaningWork` of a round runs on the cleaner thread.
    """

    def __init__(self, logs: LogManager, config: CleanerConfig) -> None:
        self._logs = logs
        self.config = config
        self._checkpoints: dict[tuple[str, int], int] = {}
        self._in_progress: dict[tuple[str, int], CleaningInProgress] = {}
        self.uncleanable: dict[tuple[str, int], str] = {}  # partition -> why cleaning failed
        self.rounds_aborted = 0  # rounds whose output was discarded
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

    def is_cleaning(self, topic: str, partition: int) -> bool:
        """Whether a round of this partition is running."""
        return (topic, partition) in self._in_progress

    def abort_all(self, reason: str) -> None:
        """Abort every running round (the broker stopping)."""
        for in_progress in list(self._in_progress.values()):
            in_progress.abort(reason)

    # -- choosing and running rounds -----------------------------------------------------

    def _filthiest(self, now_ms: int) -> tuple[PartitionLog, CleanableRange] | None:
        best: tuple[float, PartitionLog, CleanableRange] | None = None
        for log in self._logs.partitions():
            key = (log.topic, log.partition)
            if not log.config.compacts or key in self.uncleanable or key in self._in_progress:
                continue
            cleanable = self.cleanable_range(log, now_ms)
            if cleanable.first_uncleanable_offset <= cleanable.first_dirty_offset or cleanable.dirty_bytes == 0:
                continue
            ratio = cleanable.dirty_ratio
            if not (cleanable.needs_compaction_now or ratio > log.config.min_cleanable_dirty_ratio):
                continue
            if best is None or ratio > best[0]:
                best = (ratio, log, cleanable)
        return None if best is None else (best[1], best[2])

    def clean_filthiest(self, now_ms: int | None = None) -> CleanerStats | None:
        """Clean the compacted partition most in need of it, if any qualifies, in the
        calling thread. Returns the round's stats, or None when nothing was cleaned."""
        if not self.config.enabled:
            return None
        now_ms = clock.now_ms() if now_ms is None else now_ms
        chosen = self._filthiest(now_ms)
        if chosen is None:
            return None
        log, cleanable = chosen
        with _MarkUncleanable(self, log):
            return _run_steps_here(self._round(log, now_ms, cleanable))
        return None

    async def clean_filthiest_in_thread(self, now_ms: int, run_in_thread: RunInThread) -> CleanerStats | None:
        """`clean_filthiest` with the round's heavy steps run by `run_in_thread` (the
        broker's cleaner thread); the loop only plans, checks and swaps. Cancelling it
        aborts the round and returns once the thread has stopped and its output is gone."""
        if not self.config.enabled:
            return None
        chosen = self._filthiest(now_ms)
        if chosen is None:
            return None
        log, cleanable = chosen
        with _MarkUncleanable(self, log):
            return await self._run_steps_in_thread(self._round(log, now_ms, cleanable), run_in_thread)
        return None

    def clean(self, log: PartitionLog, now_ms: int, cleanable: CleanableRange | None = None) -> CleanerStats | None:
        """One cleaning round of `log` in the calling thread (Kafka's Cleaner.doClean).
        Returns None when the round was aborted."""
        return _run_steps_here(self._round(log, now_ms, cleanable or self.cleanable_range(log, now_ms)))

    async def _run_steps_in_thread(self, steps: Generator[ThreadStep, Any, CleanerStats | None],
                                   run_in_thread: RunInThread) -> CleanerStats | None:
        try:
            step = next(steps)
            while True:
                running = asyncio.ensure_future(run_in_thread(step))
                try:
                    result = await asyncio.shield(running)
                except asyncio.CancelledError:
                    # A thread cannot be interrupted: abort the round, wait for the thread
                    # to notice, let the round discard what it wrote, then give up.
                    self.abort_all("the cleaner is stopping")
                    await asyncio.wait([running])
                    _finish_aborted_steps(steps, running)
                    raise
                except Exception as exc:  # noqa: BLE001 (handed to the round, which decides)
                    step = steps.throw(exc)
                else:
                    step = steps.send(result)
        except StopIteration as done:
            return done.value

    def _round(self, log: PartitionLog, now_ms: int,
               cleanable: CleanableRange) -> Generator[ThreadStep, Any, CleanerStats | None]:
        """One round as steps. The code here runs on the caller's thread (the loop);
        each yielded callable is thread work, and what it returns (or raises) comes back
        at the `yield`. Returns the stats, or None when the round was aborted."""
        started = time.perf_counter()
        first_dirty = cleanable.first_dirty_offset
        stats = CleanerStats(end_offset=first_dirty, first_dirty_offset=first_dirty)
        if cleanable.first_uncleanable_offset <= first_dirty:
            return stats
        key = (log.topic, log.partition)
        if key in self._in_progress:
            raise RuntimeError(f"{log.name}: a cleaning round is already running")
        if log.cleaning is not None:
            raise RuntimeError(f"{log.name}: another cleaner is cleaning this log")
        in_progress = self._begin(log, now_ms, cleanable)
        try:
            work = _CleaningWork(in_progress.plan, in_progress, stats)
            try:
                yield work.build_offset_map
                for group in work.groups:
                    in_progress.raise_if_aborted()
                    try:
                        cleaned = yield partial(work.clean_group, group)
                    except Exception:
                        # Removed here, on the loop, never by the thread: a deleted
                        # partition's directory may be in the middle of its rmtree.
                        unlink_cleaned_files(log.directory, group[0].base_offset)
                        raise
                    old = in_progress.live_segments([segment.base_offset for segment in group])
                    if old is None:
                        cleaned.discard()
                        self._aborted(in_progress)
                        return None
                    swap_segments(log, old, cleaned)
            except Exception:
                if in_progress.abort_reason is None:
                    raise
                self._aborted(in_progress)
                return None
            stats.end_offset = work.end_offset
            self._checkpoints[key] = work.end_offset
            self._write_checkpoint(log)
        finally:
            del self._in_progress[key]
            log.cleaning = None
        logger.info(
            "%s: cleaned offsets below %d in %.0f ms: %d segment(s), %d of %d bytes kept, %d record(s) removed",
            log.name, stats.end_offset, (time.perf_counter() - started) * 1000, stats.segments_cleaned,
            stats.bytes_written, stats.bytes_read, stats.records_removed,
        )
        return stats

    def _begin(self, log: PartitionLog, now_ms: int, cleanable: CleanableRange) -> CleaningInProgress:
        """Take the round's plan and mark the partition as being cleaned."""
        config = log.config
        upper_bound = cleanable.first_uncleanable_offset
        segments = [segment for segment in log.segments[:-1] if segment.base_offset < upper_bound]
        described = tuple(
            SegmentToClean(segment.base_offset, segment.next_offset, segment.size, segment.index_entry_count,
                           segment.time_index_entry_count, segment.largest_timestamp())
            for segment in segments
        )
        first_base = described[0].base_offset if described else upper_bound
        plan_end = described[-1].next_offset if described else upper_bound
        plan = CleaningPlan(
            name=log.name,
            directory=log.directory,
            first_dirty_offset=cleanable.first_dirty_offset,
            upper_bound=upper_bound,
            segments=described,
            aborted_txns=tuple(_aborted_overlapping(log.txn_index.entries, first_base, plan_end)),
            active_producers={
                entry.producer_id: (entry.last_offset if entry.last_offset >= 0 else None, entry.producer_epoch)
                for entry in log.producer_state.producers.values()
            },
            now_ms=now_ms,
            delete_horizon_ms=now_ms + config.delete_retention_ms,
            segment_bytes=config.segment_bytes,
            segment_index_bytes=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            max_map_entries=self.config.max_map_entries,
        )
        in_progress = CleaningInProgress(log, plan, segments)
        self._in_progress[(log.topic, log.partition)] = in_progress
        log.cleaning = in_progress
        return in_progress

    def _aborted(self, in_progress: CleaningInProgress) -> None:
        self.rounds_aborted += 1
        logger.info("%s: cleaning round aborted, its output discarded: %s",
                    in_progress.plan.name, in_progress.abort_reason or "the log changed")

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


class _MarkUncleanable:
    """As Kafka marks a partition uncleanable when a round fails: log it, skip it from
    now on (until restart). An aborted round is not a failure."""

    def __init__(self, cleaner: LogCleaner, log: PartitionLog) -> None:
        self._cleaner = cleaner
        self._log = log

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, _traceback) -> bool:
        if exc is None or not isinstance(exc, (LogError, ValueError)):
            return False
        self._cleaner.uncleanable[(self._log.topic, self._log.partition)] = str(exc)
        logger.error("%s: cleaning failed, the partition will not be cleaned again until restart: %s",
                     self._log.name, exc)
        return True


def _run_steps_here(steps: Generator[ThreadStep, Any, CleanerStats | None]) -> CleanerStats | None:
    """Run a round's steps, thread work included, in the calling thread."""
    try:
        step = next(steps)
        while True:
            try:
                result = step()
            except Exception as exc:  # noqa: BLE001 (handed to the round, which decides)
                step = steps.throw(exc)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value


def _finish_aborted_steps(steps: Generator[ThreadStep, Any, CleanerStats | None], finished: asyncio.Future) -> None:
    """Hand an aborted round the outcome of its last thread step, so it discards what
    that step wrote; any further step is not run."""
    try:
        if finished.cancelled():
            steps.throw(CleaningAbortedError("the cleaner thread step was cancelled"))
        elif (error := finished.exception()) is not None:
            steps.throw(error)
        else:
            steps.send(finished.result())
    except StopIteration:
        return
    except Exception:
        logger.exception("error while discarding an aborted cleaning round")
        return
    steps.close()


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        return read_partition_offsets(path, _CHECKPOINT_MAGIC, _CHECKPOINT_VERSION)
    except CorruptLogError as exc:
        # Losing it costs one full re-clean, never data.
        logger.warning("%s: ignoring unreadable cleaner checkpoint: %s", path, exc)
        return {}



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


class _CleaningWork:
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
        tracker.add_aborted(_aborted_overlapping(plan.aborted_txns, start, upper_bound))
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
        self.tracker.add_aborted(_aborted_overlapping(plan.aborted_txns, base, group[-1].next_offset))
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
            cleaned.write_indexes(sync=True, open_file=in_progress.create_file)
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



# -- files: writing, swapping, recovering ------------------------------------------------


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise StorageError(str(path), f"cannot write cleaned segment: {exc.strerror}", exc.errno) from exc


def swap_segments(log: PartitionLog, old: list[LogSegment], cleaned: CleanedSegment) -> LogSegment:
    """Replace the segments `old` by the fsynced cleaned segment, crash-safely (on the
    loop: renames, unlinks and directory fsyncs only).

    Order: rename the log file to `.swap` (the commit point: recovery completes the swap
    from here), drop the index entries of dropped abort markers (durably), delete the old
    files, give the indexes and then the swap file their segment names, swap in memory.
    Old segments stay readable through their open file handles until the in-memory swap.
    """
    directory = log.directory
    new = cleaned.segment
    base = old[0].base_offset
    swap_path = directory / (segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
    try:
        rename(new.log_path, swap_path)
        fsync_directory(directory)
        if cleaned.dropped_abort_markers:
            log.forget_aborted_txns(cleaned.dropped_abort_markers)
            fsync_directory(directory)
        for segment in old:
            unlink_segment_files(directory, segment.base_offset)
        # The old files at `base` are gone: the new indexes cannot be taken for theirs.
        rename(new.index_path, directory / segment_file_name(base, INDEX_SUFFIX))
        rename(new.time_index_path, directory / segment_file_name(base, TIME_INDEX_SUFFIX))
        rename(swap_path, directory / segment_file_name(base, LOG_SUFFIX))
        fsync_directory(directory)
    except BaseException:
        new.close_without_flush()
        raise
    new.use_file_suffix("")
    log.replace_segments(old, new)
    return new
