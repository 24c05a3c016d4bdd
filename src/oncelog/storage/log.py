"""The log of one topic-partition: its segments, offsets, flush, retention and recovery.

Directory `<log.dir>/<topic>-<partition>/` holds the segments (see segment.py). The log
owns the offsets Kafka reports for a partition:

    log_start_offset  first offset a consumer may fetch (moves with retention, DeleteRecords)
    high_watermark    last offset + 1 visible to consumers: the log end offset on a
                      standalone log; on a `replicated` log, whatever the replication
                      side sets through `update_high_watermark` (restored at load from
                      the log manager's `replication-offset-checkpoint`)
    log_end_offset    next offset to assign
    recovery_point    offsets below it are known to be fsynced

An append is five steps, each a method: validate the batches (`_validate_append`),
check them against the producer state (`_check_producer_state`: a duplicate of a
recent batch returns its original offsets and writes nothing), assign offsets
(`_assign_offsets`), write (`_write`), then update offsets and producer state
(`_update_after_append`).

The log also owns the partition's idempotent producer state (producer_state.py). It is
snapshotted when a segment rolls and at a clean close, and rebuilt on open from the
newest snapshot plus the batch headers after it, leaving out producers expired by then
(producer.id.expiration.ms, as Kafka does). Aborted transactions go to the transaction
index with a last stable offset computed from the log alone, so the leader, followers
and a replay write identical entries.

Replication: a follower appends the leader's bytes with `append_as_follower` (offsets,
leader epochs and timestamps kept). The leader epoch cache (leader_epoch.py, file
`leader-epoch-checkpoint`) is assigned from every append, truncated with the log, and
moved with the log start; it is rebuilt from the batch headers when the file is missing.

Compaction (cleaner.py) rewrites inactive segments and swaps them in through
`replace_segments`; `open` first completes a swap that a crash interrupted. While a
cleaning round runs, `cleaning` holds it: deleting, truncating or closing the log, or
retention deleting segments, aborts that round (`_abort_cleaning`), because the
cleaner's thread is reading those segments' files and writing `.cleaned` files here.

Everything here is synchronous and called from the broker's single event loop (the
cleaner's thread reads segment files through its own handles, never this object).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import struct
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from crc32c import crc32c

from oncelog import clock
from oncelog.protocol.record_batch import (
    ATTRIBUTES_POSITION,
    CRC_POSITION,
    HEADER_SIZE,
    MAX_TIMESTAMP_POSITION,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    CorruptRecordError,
    parse_batches,
    read_control_record,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
)
from oncelog.stats import Histogram
from oncelog.storage import producer_snapshot, swap
from oncelog.storage.config import LogConfig
from oncelog.storage.errors import (
    CorruptBatchError,
    CorruptLogError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    TransactionCoordinatorFencedError,
    UnexpectedAppendOffsetError,
    topic_partition_name,
)
from oncelog.storage.framed_file import TEMP_SUFFIX, fsync_descriptor, fsync_directory, fsync_file, open_for_fsync
from oncelog.storage.leader_epoch import FILE_NAME as LEADER_EPOCH_CHECKPOINT_FILE
from oncelog.storage.leader_epoch import LeaderEpochCache
from oncelog.storage.open_files import OpenFiles
from oncelog.storage.producer_state import (
    CompletedTxn,
    ProducerBatch,
    ProducerStateConfig,
    ProducerStateManager,
    Verdict,
)
from oncelog.storage.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentFlush,
    close_quietly,
    parse_segment_base_offset,
)
from oncelog.storage.txn_index import AbortedTxn, TransactionIndex

logger = logging.getLogger("oncelog.storage")

_ATTRIBUTES = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_CRC = struct.Struct(">I")

# Leftovers of interrupted writes or of Kafka-style renames; removed when a log opens.
_STALE_SUFFIXES = (TEMP_SUFFIX, ".deleted", swap.CLEANED_SUFFIX, swap.SWAP_SUFFIX)

NO_TIMESTAMP = -1
SNAPSHOTS_RETAINED = 3
DELETE_RECORDS_HIGH_WATERMARK = -1  # DeleteRecords' "up to the high watermark"


class CleaningRound(Protocol):
    """What the log knows of a running cleaning round (cleaner.CleaningInProgress)."""

    def abort(self, reason: str) -> None:
        """The round must not swap anything in: its segments are changing or going."""


class AppendOrigin(Enum):
    """Who appends: clients are held to Kafka's produce rules; replication keeps offsets."""

    CLIENT = "client"
    COORDINATOR = "coordinator"  # control markers, internal topics
    REPLICATION = "replication"  # batches already carry the leader's offsets


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int  # -1 when nothing was appended
    last_offset: int
    log_append_time_ms: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # a retry of a recent batch: offsets are the original's


@dataclass(slots=True, eq=False)
class LogFlush:
    """One log's flush, taken on the event loop by `PartitionLog.take_flush`, which
    opens every file it will fsync. `sync` does the fsyncs (the segments' data and
    index files, the transaction index, the directory) and may run on another thread,
    as Kafka's flushes run on its scheduler thread, so that a large rolled segment's
    fsync never stalls requests; `finish`, back on the loop, puts the index files in
    place and moves the recovery point."""

    log: PartitionLog
    segments: list[SegmentFlush]
    txn_index: tuple[int, int] | None  # (descriptor, change count) when it has unsynced changes
    directory: tuple[int, int] | None  # (descriptor, change count) when it has unsynced entries
    rolled: bool  # taken because a segment rolled
    up_to: int  # the log end offset when taken: the recovery point once finished
    truncations: int
    started: float
    unsynced_files: list[tuple[int, Path]] = field(default_factory=list)  # (descriptor, path): see _unsynced_files
    error: StorageError | None = None

    def sync(self) -> None:
        """Every fsync of the flush, on any thread; a failure is kept for `finish`."""
        try:
            for segment in self.segments:
                segment.sync()
            if self.txn_index is not None:
                fsync_descriptor(self.txn_index[0], self.log.txn_index.path)
            for fd, path in self.unsynced_files:
                if fd >= 0:
                    fsync_descriptor(fd, path)
            if self.directory is not None:
                fsync_descriptor(self.directory[0], self.log.directory)
        except StorageError as error:
            self.error = error
        finally:
            self.close_descriptors()

    def close_descriptors(self) -> None:
        for segment in self.segments:
            segment.close_descriptors()
        for fd, _path in self.unsynced_files:
            if fd >= 0:
                close_quietly(fd)
        self.unsynced_files = [(-1, path) for _fd, path in self.unsynced_files]  # the paths, for `discard`
        for name in ("txn_index", "directory"):
            opened = getattr(self, name)
            if opened is not None and opened[0] >= 0:
                close_quietly(opened[0])
                setattr(self, name, (-1, opened[1]))

    def finish(self, now_ms: int | None = None) -> None:
        """Complete the synced flush (on the loop). Raises its StorageError, if any,
        after reporting it as any storage failure of the log is reported."""
        self.log.finish_flush(self, now_ms)

    def discard(self) -> None:
        """Give up the flush, synced or not (on the loop): what it wrote is removed, and
        what it covered waits for the next flush."""
        self.log.keep_unsynced_files(path for _fd, path in self.unsynced_files)
        self.close_descriptors()
        for segment in self.segments:
            segment.discard()
        self.log.flush_discarded(self)


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes  # whole batches, straight from the segment files
    first_offset: int  # base offset of the first batch in `records`, -1 when empty
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


def _reports_storage_errors(method):
    """An I/O failure in `method` reaches the log's `storage_failed` hook before it
    propagates (Kafka's LogDirFailureChannel): in a cluster the broker then takes the
    log dir offline (oncelog.cluster.runtime). Nested calls may report one failure twice."""

    @functools.wraps(method)
    def checked(self: PartitionLog, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except StorageError as error:
            if self.storage_failed is not None:
                self.storage_failed(self, error)
            raise

    return checked


class PartitionLog:
    """One topic-partition's log. Create with `PartitionLog.open`."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig,
                 segments: list[LogSegment], *, log_start_offset: int, now_ms: int,
                 producer_state_config: ProducerStateConfig | None = None, replicated: bool = False,
                 leader_epoch_cache: LeaderEpochCache | None = None, open_files: OpenFiles | None = None,
                 new: bool = False) -> None:
        self.directory = directory
        # The budget of open descriptors every segment of this log counts in (None: each keeps its own open).
        self._open_files = open_files
        for segment in segments:
            segment.join(open_files)
        self.topic = topic
        self.partition = partition
        self.name = topic_partition_name(topic, partition)
        self._config = config
        self._segments = segments
        self._segment_bases = [segment.base_offset for segment in segments]
        self.log_end_offset = segments[-1].next_offset
        self.log_start_offset = log_start_offset
        self.high_watermark = self.log_end_offset
        # False: standalone, the high watermark follows the log end offset. True: only
        # update_high_watermark (and truncation, log-start moves) change it.
        self.replicated = replicated
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = now_ms
        self._roll_flush_pending = False  # a rolled segment awaits its fsync
        # Files written without an fsync (producer snapshots a roll wrote, the leader epoch
        # checkpoint a flush wrote), for the next flush to fsync.
        self._unsynced_files: list[Path] = []
        # Entries created, renamed or removed in the directory, and how many of them an fsync covered.
        self._directory_changes = self._directory_synced_changes = 0
        self._truncations = 0  # a flush taken before a truncation does not move the recovery point
        self._closed = False
        self.producer_state = ProducerStateManager(self.name, producer_state_config)
        # `new`: the directory was just made, there are no files to read.
        self.txn_index = TransactionIndex(directory, new=new)
        self.leader_epoch_cache = leader_epoch_cache or LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT_FILE,
                                                                         new=new)
        self.cleaning: CleaningRound | None = None  # the running cleaning round (cleaner.py)
        # Called with (this log, the error) when a write, flush or delete fails (set by the LogManager).
        self.storage_failed: Callable[[PartitionLog, StorageError], None] | None = None
        # Flush times, shared by the LogManager's logs (Kafka's LogFlushRateAndTimeMs, for /metrics).
        self.flush_stats: Histogram | None = None

    # -- opening and recovery ------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, topic: str, partition: int, config: LogConfig, *,
               now_ms: int | None = None, producer_state_config: ProducerStateConfig | None = None,
               replicated: bool = False, sync_parent: bool = True,
               open_files: OpenFiles | None = None) -> PartitionLog:
        """A new, empty log in `directory`, which must not exist yet (else `open` it):
        its directory and first segment file, nothing to list, read or recover. With
        `sync_parent` False the caller fsyncs the parent directory (once for many)."""
        try:
            directory.mkdir()
        except FileExistsError:
            return cls.open(directory, topic, partition, config, recover=False, now_ms=now_ms,
                            producer_state_config=producer_state_config, replicated=replicated,
                            open_files=open_files)
        except OSError as exc:
            raise StorageError(str(directory), f"cannot create log directory: {exc.strerror}", exc.errno) from exc
        if sync_parent:
            fsync_directory(directory.parent)
        segment = LogSegment.create(directory, 0, fresh=True)
        return cls(directory, topic, partition, config, [segment], log_start_offset=0,
                   now_ms=clock.now_ms() if now_ms is None else now_ms,
                   producer_state_config=producer_state_config, replicated=replicated, open_files=open_files,
                   new=True)

    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, config: LogConfig, *, recover: bool,
             recovery_point: int | None = None, log_start_offset: int | None = None,
             now_ms: int | None = None, producer_state_config: ProducerStateConfig | None = None,
             replicated: bool = False, high_watermark: int | None = None,
             open_files: OpenFiles | None = None) -> PartitionLog:
        """Open (or create) the log in `directory`; its segments' descriptors count in
        `open_files` when given.

        With `recover` (no clean shutdown), segments from the one holding
        `recovery_point` onwards (only the last one when it is None) are rescanned and
        truncated at the first torn or corrupt batch; any segment after a truncation is
        dropped. Other segments load their index files, rebuilding them when missing or
        damaged. `log_start_offset` comes from the log-start checkpoint.

        A `replicated` log starts with `high_watermark` (from the replication-offset
        checkpoint; the log start offset when None) kept within [log start, log end]; a
        standalone log's high watermark is its log end offset.
        """
        now_ms = clock.now_ms() if now_ms is None else now_ms
        name = topic_partition_name(topic, partition)
        if not directory.is_dir():
            try:
                directory.mkdir(parents=True)
            except OSError as exc:
                raise StorageError(str(directory), f"cannot create log directory: {exc.strerror}", exc.errno) from exc
            fsync_directory(directory.parent)
        # Compaction: finish a segment swap a crash interrupted, before listing segments.
        swapped = swap.complete_interrupted_swaps(directory, name)
        bases = _clean_directory(directory)
        # A corrupt epoch checkpoint fails the open here, before any segment is opened.
        epoch_checkpoint = directory / LEADER_EPOCH_CHECKPOINT_FILE
        leader_epoch_cache, rebuild_epochs = LeaderEpochCache.load(epoch_checkpoint)
        if not recover:
            first_to_recover = len(bases)
        elif recovery_point is None:
            first_to_recover = max(len(bases) - 1, 0)
        else:
            first_to_recover = max(bisect_right(bases, recovery_point) - 1, 0)

        segments: list[LogSegment] = []
        recovered: list[LogSegment] = []
        try:
            for number, base in enumerate(bases):
                segment = LogSegment.open(directory, base)
                segments.append(segment)
                rescan = number >= first_to_recover
                if not rescan and not segment.load_indexes(config.index_interval_bytes, now_ms):
                    logger.warning("%s: index of segment %d is missing or damaged; rebuilding it", name, base)
                    rescan = True
                truncated = segment.recover(config.index_interval_bytes, now_ms) if rescan else 0
                if rescan:
                    recovered.append(segment)
                if len(segments) > 1 and segments[-2].next_offset > base:
                    raise CorruptLogError(
                        str(segment.log_path),
                        f"segment starts at offset {base} but the previous one ends at offset "
                        f"{segments[-2].next_offset - 1}",
                    )
                if truncated and number < len(bases) - 1:
                    dropped = bases[number + 1 :]
                    logger.warning(
                        "%s: dropping %d segment(s) after the truncation in segment %d: base offsets %s",
                        name, len(dropped), base, dropped,
                    )
                    for later in dropped:
                        LogSegment.open(directory, later).delete()
                    break
            if not segments:
                segments.append(LogSegment.create(directory, log_start_offset or 0))
        except BaseException:
            for segment in segments:
                segment.close_without_flush()
            raise

        start = max(log_start_offset or 0, segments[0].base_offset)
        log = cls(directory, topic, partition, config, segments, log_start_offset=start, now_ms=now_ms,
                  producer_state_config=producer_state_config, replicated=replicated,
                  leader_epoch_cache=leader_epoch_cache, open_files=open_files)
        if log.log_start_offset > log.log_end_offset:
            logger.warning(
                "%s: log start offset %d is past the recovered log end offset %d; starting the log there",
                name, log.log_start_offset, log.log_end_offset,
            )
            log.truncate_fully_and_start_at(log.log_start_offset)
        else:
            log._rebuild_producer_state(now_ms)
            log._load_leader_epochs(log._segments if rebuild_epochs else recovered)
        if replicated:
            log.high_watermark = log.log_start_offset
            log.update_high_watermark(log.log_start_offset if high_watermark is None else high_watermark)
        if swapped:
            log.drop_orphan_aborted_txns()
        if recovered:
            # A recovered inactive segment (a crash far from its last flush, a missing
            # checkpoint, a damaged index) is made durable now, one at a time, as before:
            # a later flush would hold descriptors for them all at once. The active one,
            # what a crash usually leaves to recover, waits for the next flush, as in
            # Kafka's LogLoader: the recovery point stays at its base until then, so a
            # crash before it recovers the segment again. Opening thousands of
            # partitions after a crash costs no fsync and no file creation each.
            active = log._segments[-1]
            for segment in recovered:
                if segment is not active and segment in log._segments:
                    segment.flush(write_indexes=True)
            if any(segment is not active for segment in recovered):
                fsync_directory(directory)
            if active in recovered:
                active.mark_unsynced()
                log.recovery_point = min(max(active.base_offset, log.log_start_offset), log.log_end_offset)
                log._directory_changes += 1
            logger.info(
                "%s: recovered %d segment(s); log start offset %d, log end offset %d",
                name, len(recovered), log.log_start_offset, log.log_end_offset,
            )
        return log

    def _load_leader_epochs(self, scanned: list[LogSegment]) -> None:
        """Bring the epoch cache in line with the loaded log: drop entries past its end
        (a crash or truncation cut it), assign the epochs of the `scanned` segments'
        batches above the latest known one (as Kafka's segment recovery does; all
        segments when the checkpoint file was missing), and move the first entry to the
        log start offset."""
        cache = self.leader_epoch_cache
        cache.truncate_from_end(self.log_end_offset)
        starts: list[tuple[int, int]] = []
        for segment in scanned:
            if segment not in self._segments:
                continue
            for epoch, start_offset in segment.leader_epoch_starts():
                if epoch >= 0 and epoch > max(cache.latest_epoch, starts[-1][0] if starts else -1):
                    starts.append((epoch, start_offset))
        if starts:
            cache.assign_all(starts, persist=False)  # written by the next flush, as the segments are
            logger.info("%s: leader epochs %s assigned from the batch headers", self.name, starts)
        cache.truncate_from_start(self.log_start_offset)

    def release_inactive_descriptors(self) -> None:
        """Close the descriptors of every segment but the active one (they reopen at
        their next use): a log opened on a log dir thread, before its owner uses it."""
        for segment in self._segments[:-1]:
            segment.release_descriptor(counted=True)

    # -- properties ----------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply new settings; they take effect from the next append, roll or retention run."""
        self._config = config

    @property
    def last_stable_offset(self) -> int:
        """The read_committed bound: the high watermark, or the first offset of the oldest
        transaction that is open or whose marker is not below the high watermark yet, when
        that is lower, but never below the log start offset (as
        Kafka's UnifiedLog: DeleteRecords past an open transaction's first offset moves
        the bound up with it)."""
        first_unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        if first_unstable is None or first_unstable > self.high_watermark:
            return self.high_watermark
        return max(first_unstable, self.log_start_offset)

    def update_high_watermark(self, offset: int) -> bool:
        """Set the high watermark to `offset` kept within [log start, log end]; returns
        whether it changed. The replication side decides the value (a leader: the
        minimum log end offset over the ISR, never moving back; a follower: the leader's
        high watermark capped at its own log end offset), so any value in range is taken."""
        new = min(max(offset, self.log_start_offset), self.log_end_offset)
        if new == self.high_watermark:
            return False
        self.high_watermark = new
        self.producer_state.on_high_watermark_updated(new)
        return True

    def set_replicated(self, replicated: bool) -> None:
        """Hand the high watermark to the replication side (True) or back to the log
        (False: it becomes the log end offset again and follows it)."""
        self.replicated = replicated
        if not replicated:
            self.high_watermark = self.log_end_offset
            self.producer_state.on_high_watermark_updated(self.high_watermark)

    def expire_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle past producer.id.expiration.ms (open transactions stay);
        their ids."""
        return self.producer_state.remove_expired(now_ms)

    def begin_leader_epoch(self, epoch: int) -> int:
        """This replica becomes leader in `epoch`: the epoch starts at the log end offset
        (returned), as Kafka's Partition.makeLeader records it in the leader-epoch cache."""
        start = self.log_end_offset
        self.leader_epoch_cache.assign(epoch, start)
        return start

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch (see LeaderEpochCache.end_offset_for)."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end),
        for read_committed fetches."""
        return self.txn_index.collect(start_offset, end_offset)

    @property
    def closed(self) -> bool:
        """Closed or deleted: it serves nothing any more."""
        return self._closed

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._segment_bases)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    # -- compaction hooks (the work is in cleaner.py) -------------------------------------

    def _abort_cleaning(self, reason: str) -> None:
        """The running cleaning round, if any, must not swap anything in: the segments it
        read are changing or going (Kafka's abortCleaning before deletion or truncation)."""
        if self.cleaning is not None:
            self.cleaning.abort(reason)

    def forget_aborted_txns(self, marker_offsets: Iterable[int]) -> None:
        """Durably remove the aborted-transaction entries of these markers: a swap drops
        the markers, and read_committed consumers must never get an abort without one."""
        self.txn_index.remove(set(marker_offsets))
        self.txn_index.flush()

    def drop_orphan_aborted_txns(self) -> None:
        """After a swap completed on open: forget the aborted-transaction entries whose
        marker is no longer in the log."""
        orphans = set()
        for entry in self.txn_index.entries:
            if entry.last_offset < self.log_start_offset or entry.last_offset >= self.log_end_offset:
                continue
            records = self.read(entry.last_offset, 1, upper_bound=self.log_end_offset).records
            try:
                first = read_header(records, 0) if records else None
            except CorruptRecordError:
                first = None
            if first is None or first.base_offset != entry.last_offset or not first.is_control:
                orphans.add(entry.last_offset)
        if orphans:
            logger.info("%s: dropping %d aborted-transaction entries whose markers were cleaned",
                        self.name, len(orphans))
            self.forget_aborted_txns(orphans)

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy)."""
        return list(self._segments)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put the cleaned segment `new` in place of the consecutive inactive segments `old`
        (their files are already swapped on disk); the old ones are closed."""
        first = self._segments.index(old[0])
        if self._segments[first : first + len(old)] != old or first + len(old) >= len(self._segments):
            raise ValueError(f"{self.name}: segments to replace are not consecutive inactive segments")
        self._segments[first : first + len(old)] = [new]
        self._segment_bases[first : first + len(old)] = [new.base_offset]
        new.join(self._open_files)
        self._directory_changes += 1
        for segment in old:
            segment.close_without_flush()

    # -- appending -----------------------------------------------------------------------

    @_reports_storage_errors
    def append(self, records: bytearray | memoryview, batches: Sequence[BatchHeader], *, now_ms: int,
               origin: AppendOrigin = AppendOrigin.CLIENT, leader_epoch: int = 0,
               marker_transaction_version: int = 0) -> AppendResult:
        """Append whole batches (`batches` from `parse_batches(records)`), rewriting in
        `records` their base offsets, partition leader epoch and, with LogAppendTime,
        their timestamps and CRC. `marker_transaction_version`: the transaction version
        of the coordinator's markers in `records` (2: KIP-890 part 2's epoch rule).
        `leader_epoch` starts a new entry in the leader epoch cache when it is above the
        latest one there. With origin REPLICATION offsets and epochs are kept as written
        (use `append_as_follower`, which also checks the CRCs)."""
        if not batches:
            return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset)
        self._validate_append(records, batches, origin)
        if origin is AppendOrigin.CLIENT:
            duplicate = self._check_producer_state(batches)
            if duplicate is not None:
                return duplicate
        elif origin is AppendOrigin.COORDINATOR:
            self._check_markers(records, batches, marker_transaction_version)
        base_offset, last_offset, log_append_time_ms = self._assign_offsets(
            records, batches, origin, leader_epoch, now_ms
        )
        # Before the write, as Kafka: the checkpoint never misses an epoch the log holds.
        self._assign_leader_epochs(batches, origin, leader_epoch, base_offset)
        self._write(records, batches, last_offset, now_ms)
        self._update_after_append(records, batches, base_offset, last_offset, origin, now_ms)
        return AppendResult(base_offset, last_offset, log_append_time_ms, self.log_start_offset)

    def append_as_follower(self, records: bytes | bytearray | memoryview, now_ms: int) -> AppendResult:
        """Append bytes fetched from the leader: whole batches (data, control and
        coordinator batches alike) with the leader's offsets, leader epochs and
        timestamps. The first batch must not start below the log end offset
        (UnexpectedAppendOffsetError; gaps are allowed, compaction leaves them) and every
        CRC must match (CorruptBatchError). Producer state, the aborted-transaction index
        and the leader epoch cache are updated from the batches exactly as on the leader;
        segments roll as usual. The high watermark does not move (on a replicated log)."""
        try:
            batches = parse_batches(records, verify_crc=True)
        except CorruptRecordError as exc:
            raise CorruptBatchError(self.name, str(exc)) from exc
        if not batches:
            return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset)
        if batches[0].base_offset < self.log_end_offset:
            raise UnexpectedAppendOffsetError(
                self.name, batches[0].base_offset, batches[0].last_offset, self.log_end_offset
            )
        return self.append(records, batches, now_ms=now_ms, origin=AppendOrigin.REPLICATION)

    def _assign_leader_epochs(self, batches: Sequence[BatchHeader], origin: AppendOrigin, leader_epoch: int,
                              base_offset: int) -> None:
        cache = self.leader_epoch_cache
        if origin is AppendOrigin.REPLICATION:
            # Kafka assigns every batch's epoch; only a change of epoch can alter the
            # cache here, because its latest entry never starts past the log end.
            latest = cache.latest_epoch
            for header in batches:
                epoch = header.partition_leader_epoch
                if epoch >= 0 and epoch != latest:  # -1: a batch without an epoch
                    cache.assign(epoch, header.base_offset)
                    latest = epoch
        elif leader_epoch > cache.latest_epoch:
            cache.assign(leader_epoch, base_offset, persist=False)  # written by the next flush

    def _check_producer_state(self, batches: Sequence[BatchHeader]) -> AppendResult | None:
        """Kafka's idempotence checks for client batches. Returns the original offsets
        when the batch duplicates a recent one; raises when it must be refused."""
        for header in batches:
            if not header.has_producer_id:
                continue
            check = self.producer_state.check(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                transactional=header.is_transactional, offset_hint=self.log_end_offset,
            )
            if check.verdict is Verdict.APPEND:
                continue
            if check.verdict is Verdict.DUPLICATE:
                original = check.duplicate_of
                assert original is not None  # a DUPLICATE names its original
                logger.debug("%s: duplicate batch of producer %d, sequences %d-%d, at offset %d",
                             self.name, header.producer_id, original.first_seq, original.last_seq,
                             original.first_offset)
                return AppendResult(original.first_offset, original.last_offset, original.timestamp,
                                    self.log_start_offset, duplicate=True)
            _raise_refusal(self.name, check)
        return None

    def _check_markers(self, records: bytearray | memoryview, batches: Sequence[BatchHeader],
                       transaction_version: int) -> None:
        for header in batches:
            if header.is_control and header.has_producer_id:
                _kind, coordinator_epoch = _control_record(records, header)
                check = self.producer_state.check_marker(header.producer_id, header.producer_epoch, coordinator_epoch,
                                                         offset_hint=self.log_end_offset,
                                                         transaction_version=transaction_version)
                if check.verdict is not Verdict.APPEND:
                    _raise_refusal(self.name, check)

    def _validate_append(self, records: bytearray | memoryview, batches: Sequence[BatchHeader],
                         origin: AppendOrigin) -> None:
        if batches[0].position != 0 or batches[-1].position + batches[-1].size != len(records):
            raise ValueError("batches must be the headers of all of `records`, as parse_batches returns them")
        config = self._config
        # Kafka refuses an append larger than segment.bytes; Kafka 4 makes that moot with
        # a 1 MiB minimum segment.bytes. oncelog keeps Kafka 3's 14-byte minimum (small
        # segments are handy in tests), so such an append gets a segment of its own, and
        # only positions that would not fit the index's int32 are refused.
        if len(records) > INT32_MAX:
            raise RecordBatchTooLargeError(self.name, len(records), INT32_MAX)
        if origin is AppendOrigin.CLIENT and len(batches) > 1:
            # Kafka: a v2 produce carries one batch per partition.
            raise InvalidRecordError(self.name, f"a produce request holds {len(batches)} batches, Kafka allows one")
        expected_offset = self.log_end_offset
        for header in batches:
            # A follower takes what its leader accepted, even under another
            # max.message.bytes (Kafka's appendAsFollower ignores the record size).
            if header.size > config.max_message_bytes and origin is not AppendOrigin.REPLICATION:
                raise RecordTooLargeError(self.name, header.size, config.max_message_bytes)
            if origin is AppendOrigin.CLIENT:
                _check_client_batch(self.name, header)
            elif origin is AppendOrigin.REPLICATION:
                if header.base_offset < expected_offset:
                    raise InvalidRecordError(
                        self.name,
                        f"replicated batch at offset {header.base_offset} is below the expected {expected_offset}",
                    )
                expected_offset = header.next_offset

    def _assign_offsets(self, records: bytearray | memoryview, batches: Sequence[BatchHeader],
                        origin: AppendOrigin, leader_epoch: int, now_ms: int) -> tuple[int, int, int]:
        """Write final offsets (and LogAppendTime) into the batches; (first, last, append time)."""
        if origin is AppendOrigin.REPLICATION:
            return batches[0].base_offset, batches[-1].last_offset, NO_TIMESTAMP
        log_append_time_ms = now_ms if self._config.log_append_time else NO_TIMESTAMP
        first_offset = offset = self.log_end_offset
        for header in batches:
            set_base_offset(records, header, offset)
            set_partition_leader_epoch(records, header, leader_epoch)
            if log_append_time_ms != NO_TIMESTAMP:
                _set_log_append_time(records, header, log_append_time_ms)
            offset += header.last_offset_delta + 1
        return first_offset, offset - 1, log_append_time_ms

    def _write(self, records: bytearray | memoryview, batches: Sequence[BatchHeader], last_offset: int,
               now_ms: int) -> None:
        segment = self._segment_for_append(len(records), last_offset, now_ms)
        segment.append(records, batches, now_ms=now_ms, index_interval_bytes=self._config.index_interval_bytes)

    def _update_after_append(self, records: bytearray | memoryview, batches: Sequence[BatchHeader],
                             base_offset: int, last_offset: int, origin: AppendOrigin, now_ms: int) -> None:
        offset = base_offset
        for header in batches:
            if origin is AppendOrigin.REPLICATION:
                offset = header.base_offset
            if header.has_producer_id and not (header.is_control and header.size <= HEADER_SIZE):
                # (a marker the leader's cleaner emptied changes nothing, as on replay)
                control = _control_record(records, header) if header.is_control else None
                # The max timestamp as written (the append time with LogAppendTime), which
                # is also what a replay of the log after a restart reads.
                (written_max_timestamp,) = _INT64.unpack_from(records, header.position + MAX_TIMESTAMP_POSITION)
                self._record_producer_batch(_producer_batch(header, offset, control, written_max_timestamp))
            offset += header.last_offset_delta + 1
        self.log_end_offset = last_offset + 1
        if not self.replicated:
            self.high_watermark = self.log_end_offset  # standalone; replication moves it separately
            self.producer_state.on_high_watermark_updated(self.high_watermark)
        if self.log_end_offset - self.recovery_point >= self._config.flush_messages:
            self.flush(now_ms)

    # -- producer state ------------------------------------------------------------------

    def _record_producer_batch(self, batch: ProducerBatch) -> None:
        completed = self.producer_state.record(batch)
        if completed is not None and completed.is_aborted:
            self._index_abort(completed)

    def _index_abort(self, completed: CompletedTxn) -> None:
        # Not self.last_stable_offset: that depends on the high watermark, which differs
        # between replicas and between a live append and a replay.
        self.txn_index.append(AbortedTxn(
            completed.producer_id, completed.first_offset, completed.last_offset,
            self.producer_state.last_stable_offset_after(completed),
        ))

    def _rebuild_producer_state(self, now_ms: int | None = None) -> None:
        """Load the newest usable snapshot at or below the log end offset, then replay the
        batch headers after it. Snapshots above the log end (after a truncation) go.
        Producers expired by `now_ms` are left out of both, as Kafka's loadFromSnapshot
        does, so a producer that expired before a restart stays expired after it."""
        now_ms = clock.now_ms() if now_ms is None else now_ms
        producer_snapshot.delete_snapshots(self.directory, above=self.log_end_offset)
        self.txn_index.truncate_to(self.log_end_offset)
        entries, start = {}, self.log_start_offset
        for offset in reversed(producer_snapshot.snapshot_offsets(self.directory)):
            loaded = producer_snapshot.read_snapshot(producer_snapshot.snapshot_path(self.directory, offset))
            if loaded is not None:
                entries, start = loaded, max(offset, self.log_start_offset)
                break
        self.producer_state.load(entries, now_ms)
        replayed = 0
        number = max(bisect_right(self._segment_bases, start) - 1, 0)
        for segment in self._segments[number:]:
            for batch in segment.producer_batches(start):
                completed = self.producer_state.record(batch)
                if (completed is not None and completed.is_aborted
                        and not self.txn_index.contains(completed.last_offset)):
                    self._index_abort(completed)
                replayed += 1
        self.producer_state.remove_expired(now_ms)
        if replayed or entries:
            logger.info("%s: producer state of %d producer(s) loaded from offset %d, %d batch(es) replayed",
                        self.name, len(self.producer_state.producers), start, replayed)

    @_reports_storage_errors
    def take_producer_snapshot(self, *, sync: bool = True) -> None:
        """Snapshot the producer state at the log end offset; keep the newest few. Without
        `sync`, the snapshot is fsynced by the next flush (as Kafka's roll leaves it to the
        asynchronous flush of the rolled segment)."""
        path = producer_snapshot.write_snapshot(self.directory, self.log_end_offset,
                                                self.producer_state.producers, sync=sync)
        if not sync:
            self._unsynced_files.append(path)
        offsets = producer_snapshot.snapshot_offsets(self.directory)
        if len(offsets) > SNAPSHOTS_RETAINED:
            producer_snapshot.delete_snapshots(self.directory, below=offsets[-SNAPSHOTS_RETAINED])

    def _segment_for_append(self, append_size: int, last_offset: int, now_ms: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.size == 0:
            return segment
        config = self._config
        if (
            segment.size + append_size > config.segment_bytes
            or (segment.rolling_base_ms is not None and now_ms - segment.rolling_base_ms > config.segment_ms)
            or segment.index_is_full(config.segment_index_bytes)
            or last_offset - segment.base_offset > INT32_MAX
        ):
            return self.roll()
        return segment

    @_reports_storage_errors
    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when the active one is
        empty). The old segment's fsync and index files are written at the next flush."""
        active = self._segments[-1]
        if active.size == 0:
            return active
        active.on_become_inactive()
        self.take_producer_snapshot(sync=False)
        segment = LogSegment.create(self.directory, self.log_end_offset)
        segment.join(self._open_files)
        self._segments.append(segment)
        self._segment_bases.append(segment.base_offset)
        self._roll_flush_pending = True
        self._directory_changes += 1
        logger.debug("%s: rolled a new segment at offset %d", self.name, segment.base_offset)
        return segment

    # -- flushing ------------------------------------------------------------------------

    @_reports_storage_errors
    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything after the recovery point and move it to the log end offset,
        in the calling thread."""
        flush = self.take_flush()
        flush.sync()
        flush.finish(now_ms)

    @_reports_storage_errors
    def take_flush(self) -> LogFlush:
        """The flush of everything after the recovery point, to `sync` anywhere and
        `finish` on the loop; appends may go on in between. Whatever has unsynced changes
        when it is taken is opened and fsynced by it, even if another flush in flight
        took it too: a flush finishes only what it synced itself."""
        # The epochs of what this flush covers are durable before its recovery point is:
        # written here, fsynced with the rest on the flush's thread.
        if self.leader_epoch_cache.persist(sync=False):
            self._unsynced_files.append(self.leader_epoch_cache.path)
            self._directory_changes += 1
        flush = LogFlush(self, [], None, None, self._roll_flush_pending, self.log_end_offset, self._truncations,
                         time.perf_counter())
        try:
            first = max(bisect_right(self._segment_bases, self.recovery_point) - 1, 0)
            active = self._segments[-1]
            for segment in self._segments[first:]:
                taken = segment.take_flush(write_indexes=segment is not active)
                if taken is not None:
                    flush.segments.append(taken)
            changes = self.txn_index.unsynced_changes
            if changes is not None:
                flush.txn_index = (open_for_fsync(self.txn_index.path, os.O_WRONLY | os.O_CREAT), changes)
            for path in self._unsynced_files:
                if path.exists():  # else pruned meanwhile
                    flush.unsynced_files.append((open_for_fsync(path, os.O_RDONLY), path))
            self._unsynced_files = []
            if self._directory_changes != self._directory_synced_changes:
                flush.directory = (open_for_fsync(self.directory, os.O_RDONLY | os.O_DIRECTORY),
                                   self._directory_changes)
        except StorageError:
            flush.discard()
            raise
        self._roll_flush_pending = False
        return flush

    @_reports_storage_errors
    def finish_flush(self, flush: LogFlush, now_ms: int | None = None) -> None:
        """See `LogFlush.finish`."""
        if self._closed:  # closed (and flushed) or deleted meanwhile: nothing to record
            flush.discard()
            return
        if flush.error is not None:
            flush.discard()
            raise flush.error
        try:
            for segment in flush.segments:
                if segment.finish() and segment.index_contents:
                    # The renames are durable at the next directory fsync, which this
                    # makes due; a crash before it leaves an older index, which opening
                    # the log checks and completes.
                    self._directory_changes += 1
        except StorageError:
            flush.discard()
            raise
        if flush.txn_index is not None:
            self.txn_index.synced(flush.txn_index[1])
        if flush.directory is not None:
            self._directory_synced_changes = max(self._directory_synced_changes, flush.directory[1])
        if flush.truncations == self._truncations:  # else the flushed offsets may be gone
            self.recovery_point = max(self.recovery_point, min(flush.up_to, self.log_end_offset))
        self._last_flush_ms = clock.now_ms() if now_ms is None else now_ms
        if self.flush_stats is not None:
            self.flush_stats.observe(time.perf_counter() - flush.started)

    def keep_unsynced_files(self, paths: Iterable[Path]) -> None:
        """Files a discarded flush did not fsync: for the next one."""
        self._unsynced_files[:0] = [path for path in paths if path not in self._unsynced_files]

    def flush_discarded(self, flush: LogFlush) -> None:
        """What `flush` took waits for the next one."""
        self._roll_flush_pending = self._roll_flush_pending or flush.rolled

    def flush_is_due(self, now_ms: int) -> bool:
        """Whether flush.ms has passed with unflushed data, or a rolled segment waits."""
        return self._roll_flush_pending or self._directory_changes != self._directory_synced_changes or (
            self.log_end_offset > self.recovery_point and now_ms - self._last_flush_ms >= self._config.flush_ms
        )

    # -- reading -------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, *, upper_bound: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the batch holding `fetch_offset`, up to `max_bytes`.

        Stops before any batch whose base offset is >= `upper_bound` (default: the high
        watermark). With `min_one_batch` the first batch is returned even when it alone
        exceeds `max_bytes`. One pread per segment touched, after header-only lookups.
        """
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(self.name, fetch_offset, self.log_start_offset, self.log_end_offset)
        bound = self.high_watermark if upper_bound is None else min(upper_bound, self.log_end_offset)
        if fetch_offset >= bound:
            return self._read_result(b"")
        number = max(bisect_right(self._segment_bases, fetch_offset) - 1, 0)
        pieces: list[bytes] = []
        remaining = max_bytes
        offset = fetch_offset
        segments = self._segments
        while number < len(segments):
            data, reached_segment_end = segments[number].read(
                offset, remaining, bound, min_one_batch=min_one_batch and not pieces
            )
            if data:
                pieces.append(data)
                remaining -= len(data)
            if not reached_segment_end or remaining <= 0:
                break
            number += 1
            if number < len(segments):
                offset = segments[number].base_offset
        if not pieces:
            return self._read_result(b"")
        return self._read_result(pieces[0] if len(pieces) == 1 else b"".join(pieces))

    def _read_result(self, records: bytes) -> ReadResult:
        first_offset = _INT64.unpack_from(records)[0] if records else -1
        return ReadResult(records, first_offset, self.high_watermark, self.log_start_offset, self.log_end_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start offset whose
        timestamp is >= `timestamp_ms` (ListOffsets by time), or None.
        The caller hides results at or past the high watermark / LSO."""
        for segment in self._segments:
            if segment.next_offset <= self.log_start_offset or segment.max_timestamp < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp (ListOffsets
        -3), or None when no batch has a timestamp. The offset is raised to the log start
        offset. The caller hides results at or past the high watermark / LSO."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.next_offset <= self.log_start_offset or segment.max_timestamp < 0:
                continue
            if best is None or segment.max_timestamp > best.max_timestamp:
                best = segment
        if best is None:
            return None
        found = best.max_timestamp_record()
        if found is None:
            return None
        offset, timestamp = found
        return max(offset, self.log_start_offset), timestamp

    # -- retention and truncation --------------------------------------------------------

    @_reports_storage_errors
    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms and retention.bytes (when cleanup.policy
        has delete) and those wholly below the log start offset. Returns how many."""
        config = self._config
        deleted = 0
        if config.deletes_old_segments:
            if config.retention_ms >= 0:
                retention_ms = config.retention_ms
                deleted += self._delete_oldest_segments(
                    lambda segment, _next: now_ms - segment.largest_timestamp() > retention_ms,
                    f"retention.ms {retention_ms}",
                )
            if config.retention_bytes >= 0:
                excess = self.size_in_bytes - config.retention_bytes
                if excess > 0:
                    def over_size(segment: LogSegment, _next: LogSegment | None) -> bool:
                        nonlocal excess
                        if excess - segment.size >= 0:
                            excess -= segment.size
                            return True
                        return False

                    deleted += self._delete_oldest_segments(over_size, f"retention.bytes {config.retention_bytes}")
        deleted += self._delete_segments_below_log_start()
        return deleted

    @_reports_storage_errors
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (-1: the high
        watermark) and delete whole segments below it. Returns the new log start offset."""
        if offset == DELETE_RECORDS_HIGH_WATERMARK:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                self.name, offset, self.log_start_offset, self.log_end_offset,
                f"cannot delete records past the high watermark {self.high_watermark}",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_segments_below_log_start()
        return self.log_start_offset

    def _delete_segments_below_log_start(self) -> int:
        start = self.log_start_offset
        return self._delete_oldest_segments(
            lambda _segment, next_segment: next_segment is not None and next_segment.base_offset <= start,
            f"log start offset {start}",
        )

    def _delete_oldest_segments(self, deletable: Callable[[LogSegment, LogSegment | None], bool],
                                reason: str) -> int:
        """Delete the leading segments for which `deletable(segment, next)` holds.

        As in Kafka, a non-empty active segment can be deleted too: a new empty segment
        is rolled first, so the log always keeps one.
        """
        segments = self._segments
        count = 0
        for number, segment in enumerate(segments):
            next_segment = segments[number + 1] if number + 1 < len(segments) else None
            if next_segment is None and segment.size == 0:
                break
            if not deletable(segment, next_segment):
                break
            count += 1
        if count == 0:
            return 0
        self._abort_cleaning(f"segments deleted due to {reason}")
        if count == len(segments):
            self.roll()
        doomed = segments[:count]
        del segments[:count]
        del self._segment_bases[:count]
        for segment in doomed:
            logger.info(
                "%s: deleting segment %d (offsets %d to %d, %d bytes) due to %s",
                self.name, segment.base_offset, segment.base_offset, segment.next_offset - 1, segment.size, reason,
            )
            segment.delete()
        self._directory_changes += 1
        self.log_start_offset = max(self.log_start_offset, segments[0].base_offset)
        self.txn_index.drop_below(self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        self.recovery_point = max(self.recovery_point, segments[0].base_offset)
        return count

    @_reports_storage_errors
    def truncate_to(self, offset: int) -> None:
        """Remove everything from the batch holding `offset` on (replication, recovery).

        If `offset` is inside a batch, that whole batch goes and the log end offset
        becomes its base offset. Leader epochs, producer state and aborted transactions
        past the new end go with it; the high watermark is capped at it.
        """
        if offset < 0:
            raise OffsetOutOfRangeError(self.name, offset, self.log_start_offset, self.log_end_offset)
        if offset >= self.log_end_offset:
            # Nothing to remove, but an epoch that started at the end and wrote nothing
            # goes, as in Kafka: a follower must not keep fetching with a last epoch the
            # leader never had data for (it would be told to truncate here forever).
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return
        if offset <= self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._abort_cleaning(f"truncation to offset {offset}")
        old_end = self.log_end_offset
        self._cut_to(offset)
        logger.info("%s: truncated from log end offset %d to %d", self.name, old_end, self.log_end_offset)

    def _cut_to(self, offset: int) -> None:
        """Cut the segments back to the batch holding `offset` and drop what lay past the
        new end: leader epochs, producer state and aborted transactions; the other
        offsets are capped at it."""
        self._truncations += 1
        while self._segments[-1].base_offset > offset:
            self._segments.pop().delete()
            self._segment_bases.pop()
            self._directory_changes += 1
        self._segments[-1].truncate_to(offset)
        self.log_end_offset = self._segments[-1].next_offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state()  # also drops aborted transactions at or after the new end
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    @_reports_storage_errors
    def discard_unwritten_tail(self) -> None:
        """Drop the batches of an append that failed after they reached the active segment
        (its producer state or aborted-transaction index could not be written: a full
        disk), which the log end offset never took: they are cut from the segment, and
        the producer state is rebuilt from the log. For a log dir that takes writes
        again; Kafka loads such a dir's logs anew at its next start."""
        active = self._segments[-1]
        if active.next_offset <= self.log_end_offset:
            return
        logger.warning("%s: dropping offsets %d to %d, written by an append that failed", self.name,
                       self.log_end_offset, active.next_offset - 1)
        self._cut_to(self.log_end_offset)  # within the active segment, which the cleaner never touches

    @_reports_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at `offset`."""
        self._abort_cleaning(f"full truncation to offset {offset}")
        self._truncations += 1
        for segment in self._segments:
            segment.delete()
        segment = LogSegment.create(self.directory, offset)
        segment.join(self._open_files)
        self._segments[:] = [segment]
        self._segment_bases[:] = [offset]
        self._directory_changes += 1
        self.log_end_offset = self.log_start_offset = self.high_watermark = self.recovery_point = offset
        producer_snapshot.delete_snapshots(self.directory, above=-1)
        self.producer_state.load({})
        self.txn_index.clear()
        self.leader_epoch_cache.clear()
        logger.info("%s: truncated fully; the log now starts at offset %d", self.name, offset)

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Write every index, fsync everything; the log cannot be used afterwards."""
        if self._closed:
            return
        self._abort_cleaning("the log is closing")
        self.take_producer_snapshot()
        self.leader_epoch_cache.persist()
        self.txn_index.flush()
        for path in self._unsynced_files:  # written by a roll or a flush since discarded
            if path.exists():
                fsync_file(path)
        self._unsynced_files = []
        for segment in self._segments:
            segment.close()
        fsync_directory(self.directory)
        self.recovery_point = self.log_end_offset
        self._closed = True

    def close_without_flush(self) -> None:
        """Release the files without writing anything (error paths)."""
        self._abort_cleaning("the log is closing")
        for segment in self._segments:
            segment.close_without_flush()
        self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the partition's directory. A running
        cleaning round is aborted first, so its thread creates no file here any more."""
        self._abort_cleaning("the partition is being deleted")
        self.close_without_flush()
        try:
            shutil.rmtree(self.directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(self.name, f"cannot delete {self.directory}: {exc.strerror}", exc.errno) from exc

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name!r}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self._segments)})"
        )


def _control_record(records: bytearray | memoryview, header: BatchHeader) -> tuple[int, int]:
    start = header.position + HEADER_SIZE
    return read_control_record(memoryview(records)[start : header.position + header.size])


def _producer_batch(header: BatchHeader, base_offset: int, control: tuple[int, int] | None = None,
                    max_timestamp: int | None = None) -> ProducerBatch:
    return ProducerBatch(
        header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
        base_offset, base_offset + header.last_offset_delta,
        header.max_timestamp if max_timestamp is None else max_timestamp,
        is_transactional=header.is_transactional, is_control=header.is_control,
        control_type=None if control is None else int(control[0]),
        coordinator_epoch=-1 if control is None else control[1],
    )


_REFUSALS = {
    Verdict.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    Verdict.OUT_OF_ORDER_SEQUENCE: OutOfOrderSequenceError,
    Verdict.INVALID_TXN_STATE: InvalidTxnStateError,
    Verdict.COORDINATOR_FENCED: TransactionCoordinatorFencedError,
}


def _raise_refusal(name: str, check) -> None:
    raise _REFUSALS[check.verdict](name, check.message)


def _check_client_batch(name: str, header: BatchHeader) -> None:
    """Kafka's per-batch produce checks (LogValidator.validateBatch), header only."""
    if header.record_count <= 0:
        raise InvalidRecordError(name, f"invalid reported record count {header.record_count} in a batch")
    if header.record_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            name,
            f"inconsistent batch offset range: last offset delta {header.last_offset_delta} "
            f"with {header.record_count} records",
        )
    if header.is_control:
        raise InvalidRecordError(name, "clients are not allowed to write control records")
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordError(
            name, f"invalid sequence number {header.base_sequence} in a batch with producer id {header.producer_id}"
        )


def _set_log_append_time(records: bytearray | memoryview, header: BatchHeader, now_ms: int) -> None:
    """Stamp a batch with LogAppendTime: attribute bit, max timestamp and a new CRC32C."""
    position = header.position
    (attributes,) = _ATTRIBUTES.unpack_from(records, position + ATTRIBUTES_POSITION)
    _ATTRIBUTES.pack_into(records, position + ATTRIBUTES_POSITION, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(records, position + MAX_TIMESTAMP_POSITION, now_ms)
    checksum = crc32c(memoryview(records)[position + ATTRIBUTES_POSITION : position + header.size])
    _CRC.pack_into(records, position + CRC_POSITION, checksum)


def _clean_directory(directory: Path) -> list[int]:
    """Remove leftovers of interrupted writes; return the segment base offsets, sorted."""
    bases = []
    index_files = []
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise StorageError(str(directory), f"cannot list: {exc.strerror}", exc.errno) from exc
    for name in names:
        if name.endswith(_STALE_SUFFIXES):
            logger.info("%s: removing leftover file %s", directory, name)
            (directory / name).unlink(missing_ok=True)
            continue
        base = parse_segment_base_offset(name, LOG_SUFFIX)
        if base is not None:
            bases.append(base)
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            index_base = parse_segment_base_offset(name, suffix)
            if index_base is not None:
                index_files.append((index_base, name))
    present = set(bases)
    for index_base, name in index_files:
        if index_base not in present:
            logger.info("%s: removing index file %s without a segment", directory, name)
            (directory / name).unlink(missing_ok=True)
    return sorted(bases)
