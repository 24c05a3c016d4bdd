"""A log segment's two sparse indexes: in memory as arrays, on disk as Kafka's files.

This module owns the indexes' entries, how they are searched, truncated and checked, and
their file format; the segment (segment.py) owns the files themselves and decides when
an entry is added (every `index.interval.bytes` of log, and its largest timestamp).

    <base>.index      offset index: (relative offset int32, position int32)
    <base>.timeindex  time index: (timestamp int64, relative offset int32)

All integers big-endian; offsets are relative to the segment's base offset. The first
batch of a segment never needs an entry: position 0 is implied.

- An offset-index entry is (base offset of a batch - segment base, batch position): the
  largest entry at or below a target offset gives a batch boundary at or before the batch
  holding the target; batch headers are scanned forward from there. (Kafka keys entries
  on the batch's last offset; keying on the base offset lands on the holding batch.)
- A time-index entry is (largest timestamp so far, base offset of the batch carrying it).
  Timestamps are strictly increasing.

Each index is two parallel `array`s (one per column), searched with bisect, and written
and read whole: columns are interleaved into rows and back with strided copies in C.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

INDEX_ENTRY_SIZE = 8
TIME_INDEX_ENTRY_SIZE = 12
NO_TIMESTAMP = -1

_BIG_ENDIAN_HOST = sys.byteorder == "big"


def _to_big_endian(values: array) -> bytes:
    if _BIG_ENDIAN_HOST:
        return values.tobytes()
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped.tobytes()


def _from_big_endian(typecode: str, data: bytes) -> array:
    values = array(typecode)
    values.frombytes(data)
    if not _BIG_ENDIAN_HOST:
        values.byteswap()
    return values


def _interleave(columns: Sequence[tuple[bytes, int]], count: int) -> bytes:
    """Fixed-width columns (data, width) joined into rows, with strided copies in C."""
    row = sum(width for _, width in columns)
    out = bytearray(row * count)
    column_start = 0
    for data, width in columns:
        for byte in range(width):
            out[column_start + byte :: row] = data[byte::width]
        column_start += width
    return bytes(out)


def _deinterleave(data: bytes, widths: Sequence[int]) -> list[bytes]:
    row = sum(widths)
    count = len(data) // row
    columns = []
    column_start = 0
    for width in widths:
        column = bytearray(width * count)
        for byte in range(width):
            column[byte::width] = data[column_start + byte :: row]
        columns.append(bytes(column))
        column_start += width
    return columns


class OffsetIndex:
    """(relative offset, position) entries, both ascending."""

    __slots__ = ("positions", "relative_offsets")

    def __init__(self, relative_offsets: array | None = None, positions: array | None = None) -> None:
        self.relative_offsets = array("i") if relative_offsets is None else relative_offsets
        self.positions = array("i") if positions is None else positions

    @classmethod
    def from_bytes(cls, data: bytes) -> OffsetIndex:
        """The index in an `.index` file's bytes (a whole number of entries)."""
        offsets_bytes, positions_bytes = _deinterleave(data, (4, 4))
        return cls(_from_big_endian("i", offsets_bytes), _from_big_endian("i", positions_bytes))

    def to_bytes(self) -> bytes:
        return _interleave(
            ((_to_big_endian(self.relative_offsets), 4), (_to_big_endian(self.positions), 4)),
            len(self.relative_offsets),
        )

    def is_sane(self, log_size: int) -> bool:
        """Sanity checks in the spirit of Kafka's: cheap, catching truncated or foreign files."""
        if self.relative_offsets:
            if self.relative_offsets[0] < 0 or self.positions[0] < 0:
                return False
            if self.positions[-1] >= log_size:
                return False
        return True

    def __len__(self) -> int:
        return len(self.relative_offsets)

    def is_full(self, index_bytes: int) -> bool:
        return len(self.relative_offsets) >= index_bytes // INDEX_ENTRY_SIZE

    def append(self, relative_offset: int, position: int) -> None:
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)

    def last(self) -> tuple[int, int] | None:
        """The last entry (relative offset, position), or None."""
        if not self.positions:
            return None
        return self.relative_offsets[-1], self.positions[-1]

    def position_at_or_before(self, relative_offset: int) -> int:
        """The position of the largest entry at or below `relative_offset` (0 when none)."""
        entry = bisect_right(self.relative_offsets, relative_offset) - 1
        return self.positions[entry] if entry >= 0 else 0

    def indexed_position_at_or_below(self, position: int) -> int:
        """The largest indexed position at or below `position` (0 when none)."""
        entry = bisect_right(self.positions, position) - 1
        return self.positions[entry] if entry >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Remove the entries at or after `position`."""
        kept = bisect_left(self.positions, position)
        del self.relative_offsets[kept:]
        del self.positions[kept:]


class TimeIndex:
    """(timestamp, relative offset) entries, both ascending."""

    __slots__ = ("relative_offsets", "timestamps")

    def __init__(self, timestamps: array | None = None, relative_offsets: array | None = None) -> None:
        self.timestamps = array("q") if timestamps is None else timestamps
        self.relative_offsets = array("i") if relative_offsets is None else relative_offsets

    @classmethod
    def from_bytes(cls, data: bytes) -> TimeIndex:
        """The index in a `.timeindex` file's bytes (a whole number of entries)."""
        timestamps_bytes, offsets_bytes = _deinterleave(data, (8, 4))
        return cls(_from_big_endian("q", timestamps_bytes), _from_big_endian("i", offsets_bytes))

    def to_bytes(self) -> bytes:
        return _interleave(
            ((_to_big_endian(self.timestamps), 8), (_to_big_endian(self.relative_offsets), 4)), len(self.timestamps)
        )

    def is_sane(self) -> bool:
        return not (self.relative_offsets and self.relative_offsets[0] < 0)

    def __len__(self) -> int:
        return len(self.timestamps)

    def is_full(self, index_bytes: int) -> bool:
        return len(self.timestamps) >= index_bytes // TIME_INDEX_ENTRY_SIZE

    def maybe_append(self, timestamp: int, relative_offset: int) -> bool:
        """Add an entry if `timestamp` is larger than the last one's; returns whether it did."""
        last = self.timestamps[-1] if self.timestamps else NO_TIMESTAMP
        if timestamp > last:
            self.timestamps.append(timestamp)
            self.relative_offsets.append(relative_offset)
            return True
        return False

    def last(self) -> tuple[int, int] | None:
        """The last entry (timestamp, relative offset), or None."""
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.relative_offsets[-1]

    def offset_before(self, timestamp: int) -> int:
        """The relative offset of the last entry older than `timestamp` (0 when none):
        every batch before it is older too."""
        entry = bisect_left(self.timestamps, timestamp) - 1
        return self.relative_offsets[entry] if entry >= 0 else 0

    def truncate_to_offset(self, relative_offset: int) -> None:
        """Remove the entries at or after `relative_offset`."""
        kept = bisect_left(self.relative_offsets, relative_offset)
        del self.timestamps[kept:]
        del self.relative_offsets[kept:]
