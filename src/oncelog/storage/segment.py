"""One log segment: a `.log` file of whole record batches and its two sparse indexes.

This module owns a segment's files (their names, opening, appending, reading, recovery,
truncation, flushing) and when its indexes get entries; the indexes' entries, searches
and file format are index.py's.

Files, named after the segment's base offset zero-padded to 20 digits (as in Kafka):

    00000000000000000000.log        record batches, exactly as produced (offsets assigned)
    00000000000000000000.index      offset index: (relative offset int32, position int32)
    00000000000000000000.timeindex  time index: (timestamp int64, relative offset int32)

Both indexes get an entry at most every `index.interval.bytes` of log (the first batch
of a segment never needs one: position 0 is implied); the time index gets one with each
offset-index entry when the largest timestamp grew, and once more when the segment
stops being active.

The indexes live in memory (index.py's `OffsetIndex` and `TimeIndex`, over `array`s)
and are written to disk, whole, when the segment stops being active (roll), on flush of
a rolled segment, and on close. The active segment's index files are not rewritten on
flush: after a crash the active segment is always rescanned by recovery, so only a
clean close needs them.

A segment moves batches as opaque bytes and reads batch headers only (the 43 bytes up to
and including maxTimestamp), with one exception off the produce/fetch path: a lookup by
timestamp (ListOffsets) decodes the batches the headers point it to, usually one, to
answer with a record's offset and timestamp, as Kafka does.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from oncelog.protocol.record_batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POSITION,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    read_control_record,
    read_header,
    scan_valid_prefix,
)
from oncelog.storage.batch_records import decode_records
from oncelog.storage.errors import CorruptLogError, StorageError
from oncelog.storage.framed_file import write_fully
from oncelog.storage.index import INDEX_ENTRY_SIZE, NO_TIMESTAMP, TIME_INDEX_ENTRY_SIZE, OffsetIndex, TimeIndex
from oncelog.storage.open_files import OpenFiles
from oncelog.storage.producer_state import ProducerBatch

logger = logging.getLogger("oncelog.storage")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
INT32_MAX = 2**31 - 1

# baseOffset, batchLength, (leader epoch, magic, crc skipped), attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence: what a segment and
# the producer state need from a batch header (the record count is not read).
_SCAN = struct.Struct(">qi9xhiqqqhi")
# baseOffset, batchLength, partitionLeaderEpoch: for rebuilding the leader epoch cache.
_EPOCH_SCAN = struct.Struct(">qii")
_BASE_OFFSET = struct.Struct(">q")
_MAX_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">qi")

# Header scans read this much at a time: an index interval of batches plus slack.
_SCAN_CHUNK = 16 * 1024
# Recovery reads the log in chunks of this size (a larger batch is read whole).
_RECOVERY_CHUNK = 8 * 1024 * 1024

_fdatasync = getattr(os, "fdatasync", os.fsync)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_base_offset(file_name: str, suffix: str = LOG_SUFFIX) -> int | None:
    """The base offset in a `<20 digits><suffix>` file name, or None for other names."""
    stem = file_name[: -len(suffix)] if file_name.endswith(suffix) else ""
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def _storage_error(path: Path, action: str, exc: OSError) -> StorageError:
    return StorageError(str(path), f"cannot {action}: {exc.strerror}", exc.errno)


class RecentReads:
    """The latest segment reads of the whole process, up to `budget` bytes (least
    recently used out first). A leader's followers fetch the same new batches one after
    the other (as do consumers that keep up): when the second asks for exactly the range
    the first read (no append in between), it gets the same bytes without a pread, which
    took 0.3 of a leader's 7 sampled ms per replicated MB. Keys name a segment and a
    byte range; reads larger than a quarter of the budget are not kept."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: collections.OrderedDict[tuple[object, int, int], bytes] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # several embedded brokers, each on its own thread, share it

    def get(self, key: tuple[object, int, int]) -> bytes | None:
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
            return data

    def put(self, key: tuple[object, int, int], data: bytes) -> None:
        if len(data) > self.budget // 4:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= len(previous)
            self._entries[key] = data
            self._bytes += len(data)
            while self._bytes > self.budget:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)


RECENT_READS = RecentReads(16 * 1024 * 1024)


class LogSegment:
    """One segment file and its in-memory offset and time indexes."""

    __slots__ = (
        "_bytes_since_index_entry",
        "_changes",
        "_closed",
        "_fd",
        "_files",
        "_indexes_dirty",
        "_log_dirty",
        "_offset_index",
        "_reads_key",
        "_time_index",
        "base_offset",
        "directory",
        "index_path",
        "log_path",
        "max_timestamp",
        "next_offset",
        "offset_of_max_timestamp",
        "rolling_base_ms",
        "size",
        "time_index_path",
    )

    def __init__(self, directory: Path, base_offset: int, fd: int, size: int, file_suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.use_file_suffix(file_suffix)
        self.size = size
        # This segment's name in RECENT_READS; a new one when bytes already read may
        # change (the segment is cut back: `_forget_reads`).
        self._reads_key = object()
        self.next_offset = base_offset  # offset after the last batch; known once loaded
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.rolling_base_ms: int | None = None  # segment.ms counts from here
        self._fd = fd
        self._files: OpenFiles | None = None  # the budget this segment's descriptor counts in
        self._closed = False
        self._reset_indexes()
        self._log_dirty = False
        self._indexes_dirty = False
        self._changes = 0  # writes and truncations so far: a `SegmentFlush` is current while equal

    def join(self, files: OpenFiles | None) -> None:
        """Count this segment's descriptor in `files`, which may close it when others are
        used more recently (it reopens at the next use); None: keep it open."""
        if files is self._files:
            return
        if self._files is not None:
            self._files.discard(self)
        self._files = files
        if files is not None and self._fd >= 0:
            files.add(self)

    def release_descriptor(self, *, counted: bool = False) -> None:
        """Close the descriptor until the next use (OpenFiles does; with `counted`, the
        segment's own owner, which also takes it out of OpenFiles' count)."""
        if counted and self._files is not None:
            self._files.discard(self)
        if self._fd >= 0:
            close_quietly(self._fd)
            self._fd = -1

    def _descriptor(self) -> int:
        """The log file's descriptor, reopened if `OpenFiles` closed it (-1 once the
        segment is closed: the call then fails with EBADF, a StorageError)."""
        fd = self._fd
        files = self._files
        if fd >= 0:
            if files is not None:
                files.use(self)
            return fd
        if self._closed:
            return -1
        try:
            fd = self._fd = os.open(self.log_path, os.O_RDWR)
        except OSError as exc:
            raise _storage_error(self.log_path, "reopen segment", exc) from exc
        if files is not None:
            files.add(self)
        return fd

    def use_file_suffix(self, file_suffix: str) -> None:
        """Name the segment's files `<base>.log<file_suffix>` and so on. The log cleaner
        writes a segment as `.cleaned` files and renames them into place; the open file
        handle follows a rename, only the names kept here change."""
        directory, base_offset = self.directory, self.base_offset
        self.log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + file_suffix)
        self.index_path = directory / (segment_file_name(base_offset, INDEX_SUFFIX) + file_suffix)
        self.time_index_path = directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix)

    def _reset_indexes(self) -> None:
        self._offset_index = OffsetIndex()
        self._time_index = TimeIndex()
        self._bytes_since_index_entry = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, fresh: bool = False) -> LogSegment:
        """A new, empty segment; fails if a log file with this base offset exists. Index
        files left at this base offset go first, unless the directory is `fresh` (just
        made: there are none)."""
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        if not fresh:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (directory / segment_file_name(base_offset, suffix)).unlink(missing_ok=True)
        try:
            fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise _storage_error(log_path, "create segment", exc) from exc
        segment = cls(directory, base_offset, fd, 0)
        segment._indexes_dirty = True
        return segment

    @classmethod
    def open_read_only(cls, directory: Path, base_offset: int, size: int) -> LogSegment:
        """A second, read-only handle on the first `size` bytes of an existing segment,
        for `read_batches` on the log cleaner's thread: that thread never uses the log's
        own handle, which the event loop may close at any time."""
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        try:
            fd = os.open(log_path, os.O_RDONLY)
        except OSError as exc:
            raise _storage_error(log_path, "open segment", exc) from exc
        return cls(directory, base_offset, fd, size)

    @classmethod
    def open(cls, directory: Path, base_offset: int) -> LogSegment:
        """An existing segment file; call `load_indexes` or `recover` next."""
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        try:
            fd = os.open(log_path, os.O_RDWR)
            size = os.fstat(fd).st_size
        except OSError as exc:
            raise _storage_error(log_path, "open segment", exc) from exc
        return cls(directory, base_offset, fd, size)

    def load_indexes(self, index_interval_bytes: int, now_ms: int) -> bool:
        """Load both index files and scan the batches after the last entry.

        Returns False, leaving the caller to `recover`, when an index file is missing or
        fails its sanity checks, or the log's tail is not whole batches.
        """
        try:
            index_data = self.index_path.read_bytes()
            time_data = self.time_index_path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _storage_error(self.index_path, "read index", exc) from exc
        if len(index_data) % INDEX_ENTRY_SIZE or len(time_data) % TIME_INDEX_ENTRY_SIZE:
            return False
        self._reset_indexes()
        self._offset_index = OffsetIndex.from_bytes(index_data)
        self._time_index = TimeIndex.from_bytes(time_data)
        if not self._offset_index.is_sane(self.size) or not self._time_index.is_sane():
            return False
        last_time_entry = self._time_index.last()
        if last_time_entry is not None:
            self.max_timestamp = last_time_entry[0]
            self.offset_of_max_timestamp = self.base_offset + last_time_entry[1]
        # Re-index the tail from the last entry: finds next_offset and heals a short index.
        last_entry = self._offset_index.last()
        if last_entry is not None:
            position = last_entry[1]
            expected_first: int | None = self.base_offset + last_entry[0]
        else:
            position = 0
            expected_first = None
        self.next_offset = self.base_offset
        entry_counts = (len(self._offset_index), len(self._time_index))
        try:
            for batch_position, base, last, size, _attributes, _base_ts, max_ts, *_ in self._scan(position):
                if expected_first is not None:
                    if base != expected_first:
                        return False
                    expected_first = None
                self._index_batch(batch_position, base, size, max_ts, index_interval_bytes,
                                  at_index_entry=batch_position == position and position > 0)
                self.next_offset = last + 1
        except CorruptLogError:
            return False
        self._indexes_dirty = entry_counts != (len(self._offset_index), len(self._time_index))
        self._set_rolling_base(now_ms)
        return True

    def recover(self, index_interval_bytes: int, now_ms: int) -> int:
        """Rebuild the indexes by scanning every batch, checking framing, CRC and offsets.

        The file is truncated at the first torn, corrupt or out-of-order batch. Returns
        the number of bytes removed.
        """
        try:
            file_size = os.fstat(self._descriptor()).st_size
        except OSError as exc:
            raise _storage_error(self.log_path, "stat segment", exc) from exc
        self._reset_indexes()
        self._forget_reads()
        self.size = file_size
        expected_offset = self.base_offset
        position = 0
        needed = 0
        truncate_at: int | None = None
        reason = ""
        while position < file_size:
            want = min(max(_RECOVERY_CHUNK, needed), file_size - position)
            try:
                chunk = os.pread(self._descriptor(), want, position)
            except OSError as exc:
                raise _storage_error(self.log_path, "read segment", exc) from exc
            headers, valid_length = scan_valid_prefix(chunk)
            for header in headers:
                if header.base_offset < expected_offset:
                    truncate_at = position + header.position
                    reason = f"batch base offset {header.base_offset} is below the expected {expected_offset}"
                    break
                if header.last_offset - self.base_offset > INT32_MAX:
                    truncate_at = position + header.position
                    reason = f"batch last offset {header.last_offset} does not fit the segment's relative offsets"
                    break
                self._index_batch(position + header.position, header.base_offset, header.size,
                                  header.max_timestamp, index_interval_bytes)
                expected_offset = header.next_offset
            if truncate_at is not None:
                break
            if headers:
                position += valid_length
                needed = 0
                continue
            # No whole valid batch at `position`: a batch larger than the chunk, or damage.
            if needed == 0 and len(chunk) >= LOG_OVERHEAD and position + len(chunk) < file_size:
                declared = _LENGTH.unpack_from(chunk)[1] + LOG_OVERHEAD
                if declared > len(chunk) and declared >= HEADER_SIZE and position + declared <= file_size:
                    needed = declared
                    continue
            truncate_at = position
            reason = _describe_damage(chunk)
            break
        self.next_offset = expected_offset
        removed = 0
        if truncate_at is not None:
            removed = file_size - truncate_at
            logger.warning(
                "%s: truncating %d bytes at position %d (after offset %d): %s",
                self.log_path, removed, truncate_at, expected_offset - 1, reason,
            )
            try:
                os.ftruncate(self._descriptor(), truncate_at)
            except OSError as exc:
                raise _storage_error(self.log_path, "truncate segment", exc) from exc
            self._forget_reads()
            self.size = truncate_at
            self._log_dirty = True
            self._changes += 1
        self._indexes_dirty = True
        self._set_rolling_base(now_ms)
        return removed

    def _set_rolling_base(self, now_ms: int) -> None:
        # After a restart the first append's wall time is gone; the first batch's
        # timestamp stands in for it when plausible, else the time of opening.
        if self.size == 0:
            self.rolling_base_ms = None
            return
        first = self._read_scan_header(0)
        first_max_timestamp = first[6]
        self.rolling_base_ms = first_max_timestamp if 0 <= first_max_timestamp <= now_ms else now_ms

    # -- appending -----------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, batches: Sequence[BatchHeader], *,
               now_ms: int, index_interval_bytes: int) -> None:
        """Write whole batches at the end with one write, then index them.

        `batches` give each batch's position in `records`, size and offset delta; the
        base offsets and max timestamps are read from `records`, where the log has
        already written their final values.
        """
        start = self.size
        self._write_at(records, start)
        self._log_dirty = True
        self._changes += 1
        self.size = start + len(records)
        last_base = self.next_offset
        for header in batches:
            last_base = _BASE_OFFSET.unpack_from(records, header.position)[0]
            max_timestamp = _MAX_TIMESTAMP.unpack_from(records, header.position + MAX_TIMESTAMP_POSITION)[0]
            self._index_batch(start + header.position, last_base, header.size, max_timestamp,
                              index_interval_bytes)
        if batches:
            self.next_offset = last_base + batches[-1].last_offset_delta + 1
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms

    def _write_at(self, data: bytes | bytearray | memoryview, position: int) -> None:
        try:
            written = os.pwrite(self._descriptor(), data, position)
            if written < len(data):  # rare: a signal or a nearly full disk
                view = memoryview(data)
                while written < len(data):
                    step = os.pwrite(self._descriptor(), view[written:], position + written)
                    if step == 0:
                        raise OSError(28, "no progress writing segment")
                    written += step
        except OSError as exc:
            # Leave no partial batch behind: the log must stay whole batches.
            try:
                os.ftruncate(self._descriptor(), position)
            except OSError:
                pass
            raise _storage_error(self.log_path, f"append {len(data)} bytes at position {position}", exc) from exc

    def _index_batch(self, position: int, base_offset: int, size: int, max_timestamp: int,
                     index_interval_bytes: int, *, at_index_entry: bool = False) -> None:
        """Account one appended (or rescanned) batch in the in-memory indexes."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if at_index_entry:
            # Rescanning the batch an existing entry points at: restart the interval there.
            self._bytes_since_index_entry = 0
        elif self._bytes_since_index_entry > index_interval_bytes:
            self._offset_index.append(base_offset - self.base_offset, position)
            self._maybe_append_time_entry()
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self._indexes_dirty = True

    def _maybe_append_time_entry(self) -> None:
        if self._time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset):
            self._indexes_dirty = True

    def index_is_full(self, segment_index_bytes: int) -> bool:
        return self._offset_index.is_full(segment_index_bytes) or self._time_index.is_full(segment_index_bytes)

    @property
    def index_entry_count(self) -> int:
        return len(self._offset_index)

    @property
    def time_index_entry_count(self) -> int:
        return len(self._time_index)

    # -- reading -------------------------------------------------------------------------

    def _read_scan_header(self, position: int) -> tuple:
        try:
            data = os.pread(self._descriptor(), _SCAN.size, position)
        except OSError as exc:
            raise _storage_error(self.log_path, "read segment", exc) from exc
        if len(data) < _SCAN.size:
            raise CorruptLogError(str(self.log_path), f"short batch header at position {position}")
        base, length, attributes, delta, base_ts, max_ts, producer_id, epoch, sequence = _SCAN.unpack(data)
        return (position, base, base + delta, length + LOG_OVERHEAD, attributes, base_ts, max_ts,
                producer_id, epoch, sequence)

    def _scan(self, position: int) -> Iterator[tuple[int, ...]]:
        """(position, base offset, last offset, size, attributes, base ts, max ts,
        producer id, producer epoch, base sequence) per batch.

        Reads headers only, a chunk at a time, from a batch boundary to the end.
        """
        end = self.size
        chunk = b""
        chunk_start = position
        unpack_from = _SCAN.unpack_from
        header_size = _SCAN.size
        while position < end:
            relative = position - chunk_start
            if relative + header_size > len(chunk):
                try:  # the descriptor fetched for each read: this generator waits between yields
                    chunk = os.pread(self._descriptor(), min(_SCAN_CHUNK, end - position), position)
                except OSError as exc:
                    raise _storage_error(self.log_path, "read segment", exc) from exc
                chunk_start = position
                relative = 0
                if len(chunk) < header_size:
                    raise CorruptLogError(
                        str(self.log_path), f"{len(chunk)} bytes at position {position} are not a batch header"
                    )
            (base, length, attributes, delta, base_ts, max_ts,
             producer_id, epoch, sequence) = unpack_from(chunk, relative)
            size = length + LOG_OVERHEAD
            if size < HEADER_SIZE or position + size > end:
                raise CorruptLogError(
                    str(self.log_path), f"batch at position {position} declares {size} bytes, {end - position} remain"
                )
            yield position, base, base + delta, size, attributes, base_ts, max_ts, producer_id, epoch, sequence
            position += size

    def read_batches(self, chunk_bytes: int = _RECOVERY_CHUNK) -> Iterator[tuple[bytes, list[BatchHeader]]]:
        """Every batch from the start, a chunk of whole batches at a time: (buffer, the
        headers in it). The log cleaner's reader; a batch larger than a chunk is read whole."""
        position = 0
        while position < self.size:
            try:
                chunk = os.pread(self._descriptor(), min(chunk_bytes, self.size - position), position)
            except OSError as exc:
                raise _storage_error(self.log_path, "read segment", exc) from exc
            headers = []
            used = 0
            while used + LOG_OVERHEAD <= len(chunk):
                declared = _LENGTH.unpack_from(chunk, used)[1] + LOG_OVERHEAD
                if used + declared > len(chunk):
                    break
                try:
                    headers.append(read_header(chunk, used))
                except CorruptRecordError as exc:
                    raise CorruptLogError(str(self.log_path), f"at position {position + used}: {exc}") from exc
                used += declared
            if not headers:
                if len(chunk) >= LOG_OVERHEAD and position + _LENGTH.unpack_from(chunk)[1] + LOG_OVERHEAD <= self.size:
                    chunk_bytes = _LENGTH.unpack_from(chunk)[1] + LOG_OVERHEAD
                    continue
                raise CorruptLogError(str(self.log_path), f"no whole batch at position {position}")
            yield chunk, headers
            position += used

    def locate(self, offset: int) -> tuple[int, int, int, int] | None:
        """(position, base offset, last offset, size) of the first batch whose last
        offset is >= `offset` (the batch holding it), or None past the end."""
        if offset >= self.next_offset:
            return None
        position = self._offset_index.position_at_or_before(offset - self.base_offset)
        for batch_position, base, last, size, *_ in self._scan(position):
            if last >= offset:
                return batch_position, base, last, size
        return None

    def producer_batches(self, from_offset: int) -> Iterator[ProducerBatch]:
        """The producer-state view of each batch holding offsets >= `from_offset` and
        written by a producer (producer id >= 0), for rebuilding producer state."""
        located = self.locate(max(from_offset, self.base_offset))
        if located is None:
            return
        for _position, base, last, _size, attributes, _base_ts, max_ts, producer_id, epoch, sequence in self._scan(
            located[0]
        ):
            if producer_id < 0:
                continue
            last_sequence = (sequence + last - base) % (INT32_MAX + 1) if sequence >= 0 else sequence
            is_control = bool(attributes & CONTROL_BIT)
            control_type, coordinator_epoch = None, -1
            if is_control:
                if _size <= HEADER_SIZE:
                    # A marker the log cleaner emptied: its whole transaction is gone from
                    # the log, so it changes nothing (as in Kafka's ProducerAppendInfo).
                    continue
                control_type, coordinator_epoch = self._control_record_at(_position, _size)
            yield ProducerBatch(
                producer_id, epoch, sequence, last_sequence, base, last, max_ts,
                is_transactional=bool(attributes & TRANSACTIONAL_BIT),
                is_control=is_control, control_type=control_type, coordinator_epoch=coordinator_epoch,
            )

    def leader_epoch_starts(self) -> list[tuple[int, int]]:
        """(partition leader epoch, base offset) of each batch whose epoch differs from
        the previous batch's, in log order: what the leader epoch cache is rebuilt from."""
        starts: list[tuple[int, int]] = []
        fd, end = self._descriptor(), self.size
        header_size = _EPOCH_SCAN.size
        unpack_from = _EPOCH_SCAN.unpack_from
        position = chunk_start = 0
        chunk = b""
        while position < end:
            relative = position - chunk_start
            if relative + header_size > len(chunk):
                try:
                    chunk = os.pread(fd, min(_SCAN_CHUNK, end - position), position)
                except OSError as exc:
                    raise _storage_error(self.log_path, "read segment", exc) from exc
                chunk_start, relative = position, 0
                if len(chunk) < header_size:
                    raise CorruptLogError(
                        str(self.log_path), f"{len(chunk)} bytes at position {position} are not a batch header"
                    )
            base, length, epoch = unpack_from(chunk, relative)
            size = length + LOG_OVERHEAD
            if size < HEADER_SIZE or position + size > end:
                raise CorruptLogError(
                    str(self.log_path), f"batch at position {position} declares {size} bytes, {end - position} remain"
                )
            if not starts or starts[-1][0] != epoch:
                starts.append((epoch, base))
            position += size
        return starts

    def _control_record_at(self, position: int, size: int) -> tuple[int, int]:
        """(marker type, coordinator epoch) of the control batch at `position`."""
        try:
            data = os.pread(self._descriptor(), min(size - HEADER_SIZE, 64), position + HEADER_SIZE)
        except OSError as exc:
            raise _storage_error(self.log_path, "read control record", exc) from exc
        try:
            kind, coordinator_epoch = read_control_record(data)
        except CorruptRecordError as exc:
            raise CorruptLogError(str(self.log_path), f"control batch at position {position}: {exc}") from exc
        return int(kind), coordinator_epoch

    def _last_boundary_at_or_before(self, start: int, limit: int) -> int:
        """The largest batch boundary in [start, limit], scanning from the nearest entry."""
        position = max(self._offset_index.indexed_position_at_or_below(limit), start)
        for batch_position, _base, _last, size, *_ in self._scan(position):
            if batch_position + size > limit:
                return batch_position
        return self.size

    def read(self, start_offset: int, max_bytes: int, max_offset: int, *, min_one_batch: bool) -> tuple[bytes, bool]:
        """Whole batches from the one holding `start_offset`, in one pread.

        Stops before a batch whose base offset is >= `max_offset` and before `max_bytes`
        would be exceeded (unless `min_one_batch` and nothing fits). Returns the bytes and
        whether the read ran to the end of the segment (so the next one may continue it).
        """
        first = self.locate(start_offset)
        if first is None:
            return b"", True
        start, first_base, _first_last, first_size = first
        if first_base >= max_offset:
            return b"", False
        if max_offset >= self.next_offset:
            stop = self.size
        else:
            bound = self.locate(max_offset)
            assert bound is not None  # max_offset < next_offset
            stop = bound[0] if bound[1] >= max_offset else bound[0] + bound[3]
        end = stop
        if stop - start > max_bytes:
            end = self._last_boundary_at_or_before(start, start + max(max_bytes, 0))
            if end == start:
                if not min_one_batch:
                    return b"", False
                end = start + first_size
        key = (self._reads_key, start, end)
        data = RECENT_READS.get(key)
        if data is None:
            try:
                data = os.pread(self._descriptor(), end - start, start)
            except OSError as exc:
                raise _storage_error(self.log_path, "read segment", exc) from exc
            if len(data) != end - start:
                raise CorruptLogError(str(self.log_path),
                                      f"read {len(data)} of {end - start} bytes at position {start}")
            RECENT_READS.put(key, data)
        return data, end == self.size

    def _forget_reads(self) -> None:
        """Bytes already read may change (the segment is cut back): none of its reads may
        be answered from RECENT_READS any more."""
        self._reads_key = object()

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start_offset` whose
        timestamp is >= `timestamp`, or None (Kafka's FileRecords.searchForTimestamp).

        The time index and batch headers skip every batch whose max timestamp is older;
        the records of a batch that may hold the answer are decoded (decompressed if
        need be). LogAppendTime batches need no decoding: all their records carry the
        batch's max timestamp.
        """
        if self.max_timestamp < timestamp or self.next_offset <= start_offset:
            return None
        # Every batch up to the entry before the first entry >= timestamp is older.
        scan_from = self.base_offset + self._time_index.offset_before(timestamp)
        first = self.locate(max(scan_from, start_offset))
        if first is None:
            return None
        for position, base, last, size, attributes, _base_ts, max_ts, *_ in self._scan(first[0]):
            if last < start_offset or max_ts < timestamp:
                continue
            if attributes & TIMESTAMP_TYPE_BIT:
                return max(base, start_offset), max_ts
            for offset, record_timestamp in self._record_timestamps(position, size):
                if record_timestamp >= timestamp and offset >= start_offset:
                    return offset, record_timestamp
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the segment's largest
        timestamp (ListOffsets MAX_TIMESTAMP), or None when no batch has a timestamp."""
        if self.max_timestamp == NO_TIMESTAMP or self.offset_of_max_timestamp < 0:
            return None
        located = self.locate(self.offset_of_max_timestamp)
        if located is None:
            return None
        for position, base, _last, size, attributes, _base_ts, max_ts, *_ in self._scan(located[0]):
            if max_ts != self.max_timestamp:
                continue
            if attributes & TIMESTAMP_TYPE_BIT:
                return base, max_ts
            # Kafka looks in the first batch with that max timestamp only.
            return next(((o, t) for o, t in self._record_timestamps(position, size) if t == max_ts), None)
        return None

    def _record_timestamps(self, position: int, size: int) -> list[tuple[int, int]]:
        """(offset, timestamp) of every record of the batch at `position`."""
        try:
            data = os.pread(self._descriptor(), size, position)
        except OSError as exc:
            raise _storage_error(self.log_path, "read segment", exc) from exc
        try:
            header = read_header(data)
            records = decode_records(data, header)
        except CorruptRecordError as exc:
            raise CorruptLogError(str(self.log_path), f"batch at position {position}: {exc}") from exc
        return [
            (header.base_offset + record.offset_delta, header.base_timestamp + record.timestamp_delta)
            for record in records
        ]

    def largest_timestamp(self) -> int:
        """The segment's largest timestamp, or its file's mtime when no batch has one
        (what time-based retention compares, as in Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.fstat(self._descriptor()).st_mtime * 1000)
        except OSError as exc:
            raise _storage_error(self.log_path, "stat segment", exc) from exc

    # -- changing and persisting ---------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and everything after it; returns bytes removed."""
        found = self.locate(offset)
        if found is None:
            return 0
        position, base = found[0], found[1]
        removed = self.size - position
        try:
            os.ftruncate(self._descriptor(), position)
        except OSError as exc:
            raise _storage_error(self.log_path, f"truncate to position {position}", exc) from exc
        self._forget_reads()
        self.size = position
        self.next_offset = base
        self._log_dirty = True
        self._changes += 1
        self._offset_index.truncate_to_position(position)
        self._time_index.truncate_to_offset(base - self.base_offset)
        # Batches before the last offset-index entry are covered by the time index;
        # the ones after it are rescanned to restore the largest timestamp.
        last_time_entry = self._time_index.last()
        if last_time_entry is not None:
            self.max_timestamp = last_time_entry[0]
            self.offset_of_max_timestamp = self.base_offset + last_time_entry[1]
        else:
            self.max_timestamp = NO_TIMESTAMP
            self.offset_of_max_timestamp = -1
        last_entry = self._offset_index.last()
        tail_start = last_entry[1] if last_entry is not None else 0
        for _position, batch_base, _last, _size, _attributes, _base_ts, max_ts, *_ in self._scan(tail_start):
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = batch_base
        self._bytes_since_index_entry = self.size - tail_start
        if self.size == 0:
            self.rolling_base_ms = None
        self._indexes_dirty = True
        return removed

    def on_become_inactive(self) -> None:
        """Record the final largest timestamp in the time index (called at roll)."""
        self._maybe_append_time_entry()
        self._changes += 1

    def write_indexes(self, open_file: Callable[[Path], int]) -> None:
        """Write and fsync both index files whole, straight into the descriptor `open_file`
        opens for each index path (the log cleaner's `.cleaned` files, which nothing reads
        before its swap renames them). A live segment's index files are written by its
        flush (`take_flush`), through temporary files renamed into place."""
        for path, data in ((self.index_path, self._offset_index.to_bytes()),
                           (self.time_index_path, self._time_index.to_bytes())):
            try:
                fd = open_file(path)
                try:
                    write_fully(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise _storage_error(path, "write index", exc) from exc
        self._indexes_dirty = False

    def mark_unsynced(self) -> None:
        """The file's contents are not known to be on disk (a recovered segment after a
        crash): the next flush fsyncs it."""
        self._log_dirty = True

    @property
    def needs_flush(self) -> bool:
        return self._log_dirty

    def flush(self, *, write_indexes: bool) -> None:
        """fsync the log file; with `write_indexes`, also write and fsync changed indexes:
        `take_flush`'s work, all in the calling thread."""
        flush = self.take_flush(write_indexes=write_indexes)
        if flush is None:
            return
        try:
            flush.sync()
        except StorageError:
            flush.discard()
            raise
        flush.finish()

    def take_flush(self, *, write_indexes: bool) -> SegmentFlush | None:
        """What `flush` would do, as a `SegmentFlush` whose `sync` may run on another
        thread while this one goes on writing (None: nothing to flush)."""
        indexes = write_indexes and self._indexes_dirty
        if not (self._log_dirty or indexes) or self._closed:
            return None
        # A descriptor of its own, not a dup: Linux reports a writeback error to each open
        # file once, so a flush sharing the log's (or another flush's) could miss it.
        try:
            log_fd = os.open(self.log_path, os.O_RDONLY) if self._log_dirty else -1
        except OSError as exc:
            raise _storage_error(self.log_path, "open to fsync", exc) from exc
        contents = ((self.index_path, self._offset_index.to_bytes()),
                    (self.time_index_path, self._time_index.to_bytes())) if indexes else ()
        return SegmentFlush(self, self._changes, log_fd, contents)

    def flush_is_current(self, flush: SegmentFlush) -> bool:
        """Whether `flush` still describes this segment: not closed or changed since."""
        return not self._closed and self._changes == flush.changes

    def flush_finished(self, flush: SegmentFlush) -> None:
        """Record a synced, current `flush` whose index files are in place."""
        if flush.log_fd_taken:
            self._log_dirty = False
        if flush.index_contents:
            self._indexes_dirty = False

    def close(self) -> None:
        """Write the indexes (with a final time entry), fsync and close."""
        if self._closed:
            return
        self._maybe_append_time_entry()
        self.flush(write_indexes=True)
        self.close_without_flush()

    def close_without_flush(self) -> None:
        self._closed = True
        if self._files is not None:
            self._files.discard(self)
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.close_without_flush()
        for path in (self.log_path, self.index_path, self.time_index_path):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise _storage_error(path, "delete segment file", exc) from exc

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size}, path={str(self.log_path)!r})"
        )


def _describe_damage(chunk: bytes) -> str:
    """Why the bytes at the start of `chunk` are not a whole valid batch."""
    try:
        header = read_header(chunk, 0)
    except CorruptRecordError as exc:
        return str(exc)
    return f"batch at offset {header.base_offset} fails its CRC32C check (stored {header.crc:#010x})"


_flush_numbers = itertools.count()


def close_quietly(fd: int) -> None:
    """Close a descriptor that was only read, written to a temporary file or fsynced
    through: a failure to close it loses nothing."""
    try:
        os.close(fd)
    except OSError as exc:
        logger.warning("cannot close descriptor %d: %s", fd, exc.strerror)


class SegmentFlush:
    """One segment's flush, taken on the event loop by `LogSegment.take_flush`, which
    opens everything it writes: `sync` (on any thread) fsyncs the log file through a
    descriptor of its own and writes the index files' contents, as they were when
    taken, to fsynced temporary files; `finish` (back on the loop) renames those into
    place, unless the segment changed, was closed or deleted meanwhile: then they are
    discarded. The thread never opens a path, so it creates nothing in a directory the
    loop may be removing. Temporary names are unique, so a flush on the loop may run
    beside one on a thread; left behind by a crash, they end in `.tmp` and go when the
    log is next opened."""

    __slots__ = ("_descriptors", "_temp_paths", "changes", "index_contents", "log_fd_taken", "segment")

    def __init__(self, segment: LogSegment, changes: int, log_fd: int,
                 index_contents: tuple[tuple[Path, bytes], ...]) -> None:
        self.segment = segment
        self.changes = changes
        self.log_fd_taken = log_fd >= 0
        self.index_contents = index_contents
        number = next(_flush_numbers)
        self._temp_paths = [path.with_name(f"{path.name}.{number}.flush.tmp") for path, _ in index_contents]
        self._descriptors = [log_fd]
        try:
            for temp in self._temp_paths:
                self._descriptors.append(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        except OSError as exc:
            self.discard()
            raise _storage_error(index_contents[0][0], "write index", exc) from exc

    def sync(self) -> None:
        """fsync the log file, write and fsync the index files' temporary copies. Raises
        StorageError. Closes the descriptors either way."""
        try:
            log_fd, *index_fds = self._descriptors
            if log_fd >= 0:
                try:
                    _fdatasync(log_fd)
                except OSError as exc:
                    raise _storage_error(self.segment.log_path, "fsync segment", exc) from exc
            for (path, data), fd in zip(self.index_contents, index_fds, strict=True):
                try:
                    write_fully(fd, data)
                    os.fsync(fd)
                except OSError as exc:
                    raise _storage_error(path, "write index", exc) from exc
        finally:
            self.close_descriptors()

    def close_descriptors(self) -> None:
        descriptors, self._descriptors = self._descriptors, []
        for fd in descriptors:
            if fd >= 0:
                close_quietly(fd)

    def finish(self) -> bool:
        """Put the synced index files in place (on the loop) and mark the segment
        flushed; or, when it changed or went away since this flush was taken, discard
        them and return False."""
        if not self.segment.flush_is_current(self):
            self.discard()
            return False
        for (path, _), temp in zip(self.index_contents, self._temp_paths, strict=True):
            try:
                os.replace(temp, path)
            except OSError as exc:
                raise _storage_error(path, "write index", exc) from exc
        self.segment.flush_finished(self)
        return True

    def discard(self) -> None:
        """Close what is open and remove the temporary files (on the loop)."""
        self.close_descriptors()
        for temp in self._temp_paths:
            try:
                temp.unlink(missing_ok=True)
            except OSError as exc:
                logger.warning("cannot remove %s: %s", temp, exc.strerror)
