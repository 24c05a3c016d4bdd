"""Log compaction for topics with cleanup.policy=compact: Kafka's LogCleaner.

This module owns running cleaning rounds: `LogCleaner` (which partition's round runs
when, the cleaner checkpoints in `cleaner-offset-checkpoint`, marking partitions
uncleanable, running a round's steps on the loop and the cleaner thread, aborting) and
swapping each cleaned segment into the log (`swap_segments`). A round has three parts:

1. Plan (cleaner_plan.py, on the loop): choose the filthiest eligible partition and
   its dirty range, from the cleaner checkpoint to the first uncleanable offset, and
   take an immutable `CleaningPlan` of it.
2. Clean (cleaner_work.py, on the cleaner thread): build the offset map (key -> offset
   of its latest record in the dirty range), then rewrite every segment from the log
   start up to the end of the map, in groups that fit one segment, keeping what Kafka's
   RecordFilter keeps; offsets never change.
3. Swap (here): each group's cleaned segment replaces its segments, crash-safely, as
   Kafka does: `<base>.log.cleaned` (and its `.index.cleaned`, `.timeindex.cleaned`) is
   written and fsynced, the aborted-transaction entries of dropped markers are removed
   and the log file is renamed to `<base>.log.swap` (`begin_swap`); once the cleaner
   thread has fsynced the transaction index and the directory, recovery completes the
   swap from there, and the loop deletes the old segments' files and gives the indexes
   and then the swap file their segment names (`finish_swap`). On open,
   `complete_interrupted_swaps` finishes a swap a crash interrupted and `.cleaned`
   leftovers are discarded (the files' names and their recovery are swap.py's).

Who runs what (Kafka's cleaner thread and LogCleanerManager): a round is a sequence of
steps (`LogCleaner._round`). On the event loop: choosing the partition, taking an
immutable `CleaningPlan` (segments, bounds, aborted transactions, producers, horizons),
and, after each group, checking that the plan still holds and the renames and unlinks
of the swap. On the cleaner thread (`CleaningWork`): everything that reads or writes
record data: the offset map, the filter, writing and fsyncing the cleaned files and
building their indexes; and every fsync of the swap and of the cleaner checkpoint, which
a slow disk can make seconds long. The
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
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog import clock
from oncelog.storage import cleaner_plan
from oncelog.storage.cleaner_plan import CleanableRange, CleaningAbortedError, CleaningInProgress
from oncelog.storage.cleaner_work import CleanedSegment, CleanerStats, CleaningWork
from oncelog.storage.errors import CorruptLogError, LogError
from oncelog.storage.framed_file import (
    fsync_descriptor,
    open_for_fsync,
    read_partition_offsets,
    write_json_file,
)
from oncelog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    close_quietly,
    segment_file_name,
)
from oncelog.storage.swap import (
    SWAP_SUFFIX,
    rename,
    unlink_cleaned_files,
    unlink_segment_files,
)

if TYPE_CHECKING:
    from oncelog.storage.log import PartitionLog
    from oncelog.storage.manager import LogManager

__all__ = [
    "CHECKPOINT_FILE",
    "CleanableRange",
    "CleanedSegment",
    "CleanerConfig",
    "CleanerStats",
    "CleaningAbortedError",
    "CleaningInProgress",
    "LogCleaner",
    "begin_swap",
    "finish_swap",
]

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
    """Broker-wide cleaner settings (log.cleaner.*; the broker's cleaner loop reads
    log.cleaner.backoff.ms itself, at every pause)."""

    enabled: bool = True
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9

    @property
    def max_map_entries(self) -> int:
        return max(int(self.dedupe_buffer_size / _BYTES_PER_MAP_ENTRY * self.io_buffer_load_factor), 1)


# -- the cleaner -------------------------------------------------------------------------


class LogCleaner:
    """Cleans the compacted partitions of a LogManager, one round at a time.

    Its state (checkpoints, rounds in progress) belongs to the event loop; only the
    `CleaningWork` of a round (cleaner_work.py) runs on the cleaner thread.
    """

    def __init__(self, logs: LogManager, config: CleanerConfig) -> None:
        self._logs = logs
        self.config = config
        self._checkpoints: dict[tuple[str, int], int] = {}
        self._in_progress: dict[tuple[str, int], CleaningInProgress] = {}
        self.uncleanable: dict[tuple[str, int], str] = {}  # partition -> why cleaning failed
        self.rounds_aborted = 0  # rounds whose output was discarded
        self.totals = CleanerTotals()  # of the rounds completed, for /metrics
        for directory in logs.log_dirs:
            self._checkpoints.update(_read_checkpoint(directory / CHECKPOINT_FILE))

    def first_dirty_offset(self, log: PartitionLog) -> int:
        return cleaner_plan.first_dirty_offset(log, self._checkpoints.get((log.topic, log.partition)))

    def cleanable_range(self, log: PartitionLog, now_ms: int) -> CleanableRange:
        """Kafka's LogCleanerManager.cleanableOffsets and dirty ratio for one partition."""
        return cleaner_plan.cleanable_range(log, self._checkpoints.get((log.topic, log.partition)), now_ms)

    def is_cleaning(self, topic: str, partition: int) -> bool:
        """Whether a round of this partition is running."""
        return (topic, partition) in self._in_progress

    def abort_all(self, reason: str) -> None:
        """Abort every running round (the broker stopping)."""
        for in_progress in list(self._in_progress.values()):
            in_progress.abort(reason)

    # -- choosing and running rounds -----------------------------------------------------

    def _filthiest(self, now_ms: int) -> tuple[PartitionLog, CleanableRange] | None:
        skip = self.uncleanable.keys() | self._in_progress.keys()
        return cleaner_plan.filthiest(self._logs.partitions(), self._checkpoints, skip, now_ms)

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
            work = CleaningWork(in_progress.plan, in_progress, stats)
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
                    bases = [segment.base_offset for segment in group]
                    if in_progress.live_segments(bases) is None:
                        cleaned.discard()
                        self._aborted(in_progress)
                        return None
                    commit = begin_swap(log, cleaned, in_progress)
                    try:
                        yield commit.sync  # the commit point, durable off the loop
                    except Exception:
                        in_progress.take_back_swap()
                        cleaned.discard()
                        raise
                    if commit.txn_index is not None:
                        log.txn_index.synced(commit.txn_index[2])
                    old = in_progress.live_segments(bases)
                    if old is None:  # aborted meanwhile (the abort took the swap back), or the log changed
                        in_progress.take_back_swap()
                        cleaned.discard()
                        self._aborted(in_progress)
                        return None
                    finish_swap(log, old, cleaned, in_progress)
            except Exception:
                if in_progress.abort_reason is None:
                    raise
                self._aborted(in_progress)
                return None
            stats.end_offset = work.end_offset
            self._checkpoints[key] = work.end_offset
            checkpoint = self._checkpoint_of(log)
            if checkpoint is not None:
                try:
                    yield checkpoint
                except Exception:
                    if in_progress.abort_reason is None:
                        raise  # its directory was deleted meanwhile otherwise
        finally:
            del self._in_progress[key]
            log.cleaning = None
        seconds = time.perf_counter() - started
        self.totals.add(stats, seconds)
        logger.info(
            "%s: cleaned offsets below %d in %.0f ms: %d segment(s), %d of %d bytes kept, %d record(s) removed",
            log.name, stats.end_offset, seconds * 1000, stats.segments_cleaned,
            stats.bytes_written, stats.bytes_read, stats.records_removed,
        )
        return stats

    def max_dirty_ratio(self, now_ms: int) -> float:
        """The highest dirty ratio over the compacted partitions (Kafka's max-dirty-percent
        / 100): how far behind cleaning is."""
        ratios = [self.cleanable_range(log, now_ms).dirty_ratio for log in self._logs.partitions()
                  if log.config.compacts and log.segments]
        return max(ratios, default=0.0)

    def _begin(self, log: PartitionLog, now_ms: int, cleanable: CleanableRange) -> CleaningInProgress:
        """Take the round's plan and mark the partition as being cleaned."""
        in_progress = cleaner_plan.plan_round(log, cleanable, now_ms, self.config.max_map_entries)
        self._in_progress[(log.topic, log.partition)] = in_progress
        log.cleaning = in_progress
        return in_progress

    def _aborted(self, in_progress: CleaningInProgress) -> None:
        self.rounds_aborted += 1
        logger.info("%s: cleaning round aborted, its output discarded: %s",
                    in_progress.plan.name, in_progress.abort_reason or "the log changed")

    def _checkpoint_of(self, log: PartitionLog) -> ThreadStep | None:
        """The write of the cleaner checkpoint of `log`'s directory as it is now: a step
        for the cleaner thread (a temporary file, a rename and two fsyncs)."""
        directory = self._logs.log_dir_of(log.topic, log.partition)
        if directory is None:
            return None
        offsets = []
        for other in self._logs.partitions():
            key = (other.topic, other.partition)
            if key in self._checkpoints and self._logs.log_dir_of(*key) == directory:
                offsets.append([other.topic, other.partition, self._checkpoints[key]])
        return partial(write_json_file, directory / CHECKPOINT_FILE, _CHECKPOINT_MAGIC, _CHECKPOINT_VERSION,
                       {"offsets": sorted(offsets)})


@dataclass(slots=True)
class CleanerTotals:
    """What the completed rounds did, summed (Kafka's LogCleaner metrics count the same)."""

    rounds: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    last_round_seconds: float = 0.0

    def add(self, stats: CleanerStats, seconds: float) -> None:
        self.rounds += 1
        self.bytes_read += stats.bytes_read
        self.bytes_written += stats.bytes_written
        self.records_removed += stats.records_removed
        self.last_round_seconds = seconds


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


# -- swapping a cleaned segment in ------------------------------------------------------


@dataclass(slots=True)
class SwapCommit:
    """What makes a begun swap durable: fsyncs of the transaction index (when its entries
    of dropped abort markers changed it) and of the directory (the `.swap` name), in that
    order, on the cleaner thread. The descriptors are opened on the loop (`begin_swap`),
    so the thread creates nothing in a directory that may be being removed; `sync`
    closes them."""

    txn_index: tuple[int, Path, int] | None  # (descriptor, path, change count to mark synced)
    directory: tuple[int, Path]

    def sync(self) -> None:
        try:
            if self.txn_index is not None:
                fsync_descriptor(self.txn_index[0], self.txn_index[1])
            fsync_descriptor(*self.directory)
        finally:
            self.close()

    def close(self) -> None:
        if self.txn_index is not None:
            close_quietly(self.txn_index[0])
        close_quietly(self.directory[0])


def begin_swap(log: PartitionLog, cleaned: CleanedSegment, in_progress: CleaningInProgress) -> SwapCommit:
    """Begin replacing the segments of `cleaned` by it (on the loop, renames only): drop
    the index entries of its dropped abort markers (the transactions have no data left in
    the old segments either, so this holds whether the swap completes or not), and rename
    its log file to `.swap`, which decides the swap once durable (recovery completes it).
    Until `finish_swap`, aborting the round takes the swap back (`take_back_swap`)."""
    new = cleaned.segment
    swap_path = log.directory / (segment_file_name(new.base_offset, LOG_SUFFIX) + SWAP_SUFFIX)
    txn_index = directory = None
    try:
        if cleaned.dropped_abort_markers:
            log.txn_index.remove(set(cleaned.dropped_abort_markers))
        changes = log.txn_index.unsynced_changes
        if changes is not None:
            txn_index = (open_for_fsync(log.txn_index.path, os.O_WRONLY), log.txn_index.path, changes)
        directory = (open_for_fsync(log.directory, os.O_RDONLY | os.O_DIRECTORY), log.directory)
        rename(new.log_path, swap_path)
    except BaseException:
        for opened in (txn_index, directory):
            if opened is not None:
                close_quietly(opened[0])
        new.close_without_flush()
        raise
    in_progress.swap_path = swap_path
    return SwapCommit(txn_index, directory)


def finish_swap(log: PartitionLog, old: list[LogSegment], cleaned: CleanedSegment,
                in_progress: CleaningInProgress) -> LogSegment:
    """Complete a swap whose `.swap` name is durable (on the loop, in one go: renames and
    unlinks only): delete the old files, give the indexes and then the swap file their
    segment names, swap in memory. The renames are durable at the log's next flush (its
    directory changed); a crash before leaves the `.swap` file, which opening completes.
    Old segments stay readable through their open file handles until the in-memory swap."""
    directory = log.directory
    new = cleaned.segment
    base = old[0].base_offset
    swap_path = in_progress.swap_path
    assert swap_path is not None  # begin_swap named it
    in_progress.swap_path = None
    try:
        for segment in old:
            unlink_segment_files(directory, segment.base_offset)
        # The old files at `base` are gone: the new indexes cannot be taken for theirs.
        rename(new.index_path, directory / segment_file_name(base, INDEX_SUFFIX))
        rename(new.time_index_path, directory / segment_file_name(base, TIME_INDEX_SUFFIX))
        rename(swap_path, directory / segment_file_name(base, LOG_SUFFIX))
    except BaseException:
        new.close_without_flush()
        raise
    new.use_file_suffix("")
    log.replace_segments(old, new)
    return new
