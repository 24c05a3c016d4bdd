"""The leader epoch cache of one partition: which leader epoch started at which offset.

Kafka's LeaderEpochFileCache (KIP-101, KIP-279). Each entry (epoch, start offset) says
that the leader of `epoch` wrote its first batch at `start offset`; both columns strictly
increase. A follower asks the leader for the end offset of its latest epoch
(OffsetForLeaderEpoch, answered by `end_offset_for`) and truncates there, so replicas that
diverged after a failover converge on the new leader's log. ListOffsets and KIP-320
clients use `epoch_for_offset`.

Persisted in the partition directory as `leader-epoch-checkpoint`, Kafka's text format
(checkpoint_file.py: version 0, count, then "epoch startOffset" lines), written whole
(tmp, fsync, rename). A leader's new epoch, assigned by an append, is written by the
log's next flush or its close (`persist`), as Kafka does since KAFKA-15046: writing it
on the append cost a file creation on the produce path, a millisecond per partition's
first write. Nothing is lost by the wait: the entry starts past the recovery point, and
a log opened after a crash rescans those batches and assigns their epochs again (or,
with no file at all, every segment's). Truncations and log-start moves are written at
once (Kafka writes them asynchronously too and relies on the log's load to truncate
again; at once is simpler and costs one small write each).

A file that does not parse, or holds a negative epoch or offset, is a CorruptLogError at
load, as in Kafka (whose checkpoint read fails the log directory): the log does not
guess. The owner (PartitionLog) rebuilds the cache from the batch headers only when the
file is missing (data directories written before the cache existed) or empty (what a
crash leaves on file systems that make the rename of a file written without fsync
durable before its data).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

from oncelog.storage.checkpoint_file import read_checkpoint, write_checkpoint
from oncelog.storage.errors import CorruptLogError

logger = logging.getLogger("oncelog.storage")

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1  # OffsetForLeaderEpoch's "no such epoch"
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def _parse_entry(fields: list[str]) -> EpochEntry:
    epoch, start_offset = fields  # ValueError unless exactly two fields
    return EpochEntry(int(epoch), int(start_offset))


class LeaderEpochCache:
    """Entries ordered by epoch (and so by start offset). Single owner: the partition's log."""

    def __init__(self, path: Path, *, new: bool = False) -> None:
        """The cache in the checkpoint file at `path` (none when `new`: its partition's
        directory was just made)."""
        self.path = path
        self._entries: list[EpochEntry] = []
        self._unsaved = False
        if new:
            return
        try:
            stored = read_checkpoint(path, _parse_entry)
        except FileNotFoundError:
            stored = []
        for entry in stored:
            if entry.epoch < 0 or entry.start_offset < 0:
                raise CorruptLogError(str(path), f"invalid leader epoch entry {tuple(entry)}")
            self._assign(entry)  # drops entries that break monotonicity, as Kafka's load does

    @classmethod
    def load(cls, path: Path) -> tuple[LeaderEpochCache, bool]:
        """The cache in `path`, and whether its owner must rebuild it from the batch
        headers: the file is missing, or empty (a crash between the rename of a file
        written without fsync and its fsync, on file systems that make the rename
        durable first)."""
        try:
            empty = path.stat().st_size == 0
        except FileNotFoundError:
            return cls(path, new=True), True
        if empty:
            logger.warning("%s: empty leader epoch checkpoint; rebuilding it from the batch headers", path)
            return cls(path, new=True), True
        return cls(path), False

    # -- reading -------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        """(epoch, start offset) pairs, oldest first (a copy; EpochEntry is a tuple)."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int:
        """The epoch of the latest entry, -1 when the cache is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds `offset` (the latest epoch starting at or below
        it), -1 when `offset` is below the first entry or the cache is empty."""
        epoch = UNDEFINED_EPOCH
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            epoch = entry.epoch
        return epoch

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka's endOffsetFor:

        - the latest epoch: (it, the log end offset), its range is still being written;
        - an epoch with a later one after it: (the largest known epoch <= requested, the
          start offset of the first epoch above requested);
        - below every known epoch: (requested, the first entry's start offset), the data
          before it is gone from the log;
        - undefined (-1) requested, or above every known epoch: (-1, -1).
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        floor: EpochEntry | None = None
        for entry in entries:
            if entry.epoch > requested_epoch:
                if floor is None:
                    return requested_epoch, entry.start_offset
                return floor.epoch, entry.start_offset
            floor = entry
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    # -- changing ------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset` and persist (without `persist`:
        at the next `persist`, see the module's docstring); returns whether the cache
        changed. Nothing changes for the latest epoch at the same or a later offset.
        Otherwise every entry whose epoch is >= `epoch` or whose start offset is >=
        `start_offset` goes first, so both columns keep increasing."""
        if self._assign(EpochEntry(epoch, start_offset)):
            if persist:
                self._write()
            else:
                self._unsaved = True
            return True
        return False

    @property
    def unsaved(self) -> bool:
        """Whether an assignment waits for `persist`."""
        return self._unsaved

    def persist(self, *, sync: bool = True) -> bool:
        """Write the entries if an assignment is not in the file yet; whether it wrote.
        Without `sync` the file is not fsynced: the caller's flush does it."""
        if not self._unsaved:
            return False
        write_checkpoint(self.path, self._entries, sync=sync)
        self._unsaved = False
        return True

    def assign_all(self, entries: list[tuple[int, int]], *, persist: bool = True) -> bool:
        """`assign` each (epoch, start offset) in turn, persisting once (or, without
        `persist`, at the next `persist`)."""
        changed = False
        for epoch, start_offset in entries:
            changed = self._assign(EpochEntry(epoch, start_offset)) or changed
        if changed:
            if persist:
                self._write()
            else:
                self._unsaved = True
        return changed

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"{self.path}: invalid leader epoch entry {tuple(entry)}")
        latest = self.latest_entry
        if latest is not None and latest.epoch == entry.epoch and entry.start_offset >= latest.start_offset:
            return False
        removed = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        self._entries.append(entry)
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # An entry at the same start offset only means the epoch wrote nothing there.
            logger.warning("%s: new epoch entry %s replaced conflicting entries %s",
                           self.path.parent.name, tuple(entry), [tuple(e) for e in reversed(removed)])
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after `end_offset` (the log was truncated there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop the entries wholly below `start_offset` (the log start moved there). The
        entry whose range holds `start_offset` stays, moved to start there."""
        covered = 0
        while covered < len(self._entries) and self._entries[covered].start_offset <= start_offset:
            covered += 1
        if covered == 0:
            return
        covering = self._entries[covered - 1]
        if covered == 1 and covering.start_offset == start_offset:
            return  # already starts there
        self._entries[:covered] = [EpochEntry(covering.epoch, start_offset)]
        self._write()

    def clear(self) -> None:
        """Forget every entry and persist (the log was emptied)."""
        self._entries.clear()
        self._write()

    def _write(self) -> None:
        write_checkpoint(self.path, self._entries)
        self._unsaved = False

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {[tuple(e) for e in self._entries]})"
