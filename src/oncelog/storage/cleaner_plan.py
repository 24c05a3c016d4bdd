"""Planning a cleaning round, on the event loop (Kafka's LogCleanerManager).

This module owns choosing what to clean: which compacted partition is filthiest
(`filthiest`), where its dirty section lies (`cleanable_range`), and the immutable
`CleaningPlan` the round's thread work runs from (`plan_round`), together with the
round's `CleaningInProgress` handle through which the loop aborts it.

The range: the dirty section starts at the partition's cleaner checkpoint (the log start
when there is none) and ends at the first uncleanable offset: the lowest of the last
stable offset, the active segment's base offset, and the first segment newer than
min.compaction.lag.ms. A partition is cleaned when dirty / (clean + dirty) bytes is above
min.cleanable.dirty.ratio, or when its oldest dirty data is older than
max.compaction.lag.ms. The filthiest eligible partition goes first.

Everything here reads a PartitionLog, so it runs on the loop; the cleaner thread sees the
log only through the plan (cleaner_work.py). The checkpoints themselves are the
LogCleaner's (cleaner.py).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.storage.errors import StorageError
from oncelog.storage.framed_file import fsync_directory
from oncelog.storage.segment import LogSegment
from oncelog.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from oncelog.storage.log import PartitionLog

logger = logging.getLogger("oncelog.storage.cleaner")


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
        self.swap_path: Path | None = None  # a begun swap's `.swap` file (cleaner.begin_swap)
        self._lock = threading.Lock()

    def abort(self, reason: str) -> None:
        """Stop the round (loop side): the thread stops at its next check, the loop
        discards its output instead of swapping it in, and a begun swap is taken back
        before the caller goes on to delete or truncate the segments it would replace."""
        with self._lock:
            if self.abort_reason is not None:
                return
            self.abort_reason = reason
        self.take_back_swap()
        logger.info("%s: aborting the cleaning round: %s", self.plan.name, reason)

    def take_back_swap(self) -> None:
        """Remove a begun swap's `.swap` file, durably (loop side, before the caller
        deletes or truncates: the rare path of a round aborted in the middle of its swap),
        so that opening the log never completes it: the old segments stand. A directory
        that cannot be changed any more is the log dir failure its caller meets next."""
        swap_path, self.swap_path = self.swap_path, None
        if swap_path is None:
            return
        try:
            swap_path.unlink(missing_ok=True)
            fsync_directory(swap_path.parent)
        except (OSError, StorageError) as exc:
            logger.error("%s: cannot take back the swap %s: %s", self.plan.name, swap_path.name, exc)

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


def aborted_overlapping(entries: Sequence[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    return [entry for entry in entries if entry.last_offset >= start and entry.first_offset < end]


# -- choosing the partition and the range ------------------------------------------------


def first_dirty_offset(log: PartitionLog, checkpoint: int | None) -> int:
    """Where the dirty section starts: the cleaner checkpoint, unless it is missing or
    outside the log."""
    if checkpoint is None or checkpoint < log.log_start_offset or checkpoint > log.log_end_offset:
        return log.log_start_offset
    return checkpoint


def cleanable_range(log: PartitionLog, checkpoint: int | None, now_ms: int) -> CleanableRange:
    """Kafka's LogCleanerManager.cleanableOffsets and dirty ratio for one partition."""
    config = log.config
    segments = log.segments
    first_dirty = first_dirty_offset(log, checkpoint)
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


def filthiest(logs: Iterable[PartitionLog], checkpoints: Mapping[tuple[str, int], int],
              skip: Container[tuple[str, int]], now_ms: int) -> tuple[PartitionLog, CleanableRange] | None:
    """The compacted partition most in need of cleaning and its range, if any qualifies;
    partitions in `skip` (uncleanable, or being cleaned) are passed over."""
    best: tuple[float, PartitionLog, CleanableRange] | None = None
    for log in logs:
        key = (log.topic, log.partition)
        if not log.config.compacts or key in skip:
            continue
        cleanable = cleanable_range(log, checkpoints.get(key), now_ms)
        if cleanable.first_uncleanable_offset <= cleanable.first_dirty_offset or cleanable.dirty_bytes == 0:
            continue
        ratio = cleanable.dirty_ratio
        if not (cleanable.needs_compaction_now or ratio > log.config.min_cleanable_dirty_ratio):
            continue
        if best is None or ratio > best[0]:
            best = (ratio, log, cleanable)
    return None if best is None else (best[1], best[2])


# -- taking the plan ---------------------------------------------------------------------


def plan_round(log: PartitionLog, cleanable: CleanableRange, now_ms: int, max_map_entries: int) -> CleaningInProgress:
    """Take the round's plan from the log; the caller marks the partition as being cleaned."""
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
        aborted_txns=tuple(aborted_overlapping(log.txn_index.entries, first_base, plan_end)),
        active_producers={
            entry.producer_id: (entry.last_offset if entry.last_offset >= 0 else None, entry.producer_epoch)
            for entry in log.producer_state.producers.values()
        },
        now_ms=now_ms,
        delete_horizon_ms=now_ms + config.delete_retention_ms,
        segment_bytes=config.segment_bytes,
        segment_index_bytes=config.segment_index_bytes,
        index_interval_bytes=config.index_interval_bytes,
        max_map_entries=max_map_entries,
    )
    return CleaningInProgress(log, plan, segments)

