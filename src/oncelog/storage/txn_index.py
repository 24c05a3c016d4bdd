"""The aborted-transaction index of one partition (`aborted-transactions.txnindex`).

read_committed fetches must tell consumers which producers' data in the fetched range
belongs to aborted transactions; this index answers that without reading the log. One
entry per aborted transaction that wrote to the partition, appended when its ABORT
marker is written, in marker-offset order. Entry layout (big-endian, 34 bytes, like
Kafka's AbortedTxn):

    version int16 = 0, producerId int64, firstOffset int64, lastOffset int64 (the marker),
    lastStableOffset int64

A torn trailing entry is ignored on load; entries lost in a crash are re-added when the
producer state is replayed from its snapshot (see PartitionLog._rebuild_producer_state).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.errors import StorageError
from oncelog.storage.framed_file import fsync_file

FILE_NAME = "aborted-transactions.txnindex"
_ENTRY = struct.Struct(">hqqqq")
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, directory: Path, *, new: bool = False) -> None:
        """The index of the log in `directory`, read from its file (none when `new`: the
        directory was just made)."""
        self.path = directory / FILE_NAME
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []  # parallel to entries, for bisection
        self._changes = 0  # writes to the file so far
        self._synced_changes = 0  # how many of them an fsync covered
        if new:
            return
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        usable = len(data) - len(data) % _ENTRY.size
        for position in range(0, usable, _ENTRY.size):
            version, producer_id, first, last, stable = _ENTRY.unpack_from(data, position)
            if version != VERSION:
                break
            self._add(AbortedTxn(producer_id, first, last, stable))
        if usable != len(data):
            self._rewrite()

    def _add(self, entry: AbortedTxn) -> None:
        self.entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def contains(self, last_offset: int) -> bool:
        position = bisect_left(self._last_offsets, last_offset)
        return position < len(self._last_offsets) and self._last_offsets[position] == last_offset

    def append(self, entry: AbortedTxn) -> None:
        if self._last_offsets and entry.last_offset <= self._last_offsets[-1]:
            if self.contains(entry.last_offset):
                return
            raise ValueError(f"aborted transaction at {entry.last_offset} is out of order in {self.path}")
        self._add(entry)
        self._write_at_end(_ENTRY.pack(VERSION, entry.producer_id, entry.first_offset, entry.last_offset,
                                       entry.last_stable_offset))

    def collect(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end)."""
        return [(entry.producer_id, entry.first_offset) for entry in self.overlapping(start_offset, end_offset)]

    def overlapping(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, end), in marker order."""
        return [entry for entry in self.entries[bisect_left(self._last_offsets, start_offset):]
                if entry.first_offset < end_offset]

    def truncate_to(self, end_offset: int) -> None:
        """Forget aborts whose marker is at or after `end_offset` (log truncation)."""
        keep = bisect_left(self._last_offsets, end_offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            del self._last_offsets[keep:]
            self._rewrite()

    def drop_below(self, log_start_offset: int) -> None:
        """Forget aborts whose marker is below the log start offset (retention)."""
        drop = bisect_left(self._last_offsets, log_start_offset)
        if drop:
            del self.entries[:drop]
            del self._last_offsets[:drop]
            self._rewrite()

    def remove(self, last_offsets: set[int]) -> None:
        """Forget the aborts whose marker offsets are given (the log cleaner dropped
        their markers, or found no data of theirs left)."""
        kept = [entry for entry in self.entries if entry.last_offset not in last_offsets]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._last_offsets = [entry.last_offset for entry in kept]
            self._rewrite()

    def clear(self) -> None:
        self.entries.clear()
        self._last_offsets.clear()
        self._rewrite()

    @property
    def unsynced_changes(self) -> int | None:
        """The change count to hand to `synced` after an fsync of `path`, or None when
        the file has nothing unsynced."""
        return self._changes if self._changes != self._synced_changes else None

    def synced(self, changes: int) -> None:
        """An fsync of `path`, begun when the change count was `changes`, completed."""
        self._synced_changes = max(self._synced_changes, changes)

    def flush(self) -> None:
        changes = self.unsynced_changes
        if changes is not None:
            fsync_file(self.path)
            self.synced(changes)

    def _write_at_end(self, data: bytes) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(str(self.path), f"cannot append: {exc.strerror}", exc.errno) from exc
        self._changes += 1

    def _rewrite(self) -> None:
        data = b"".join(
            _ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
            for e in self.entries
        )
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            temporary.write_bytes(data)
            os.replace(temporary, self.path)
        except OSError as exc:
            raise StorageError(str(self.path), f"cannot rewrite: {exc.strerror}", exc.errno) from exc
        self._changes += 1
