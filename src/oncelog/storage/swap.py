"""The files of a compaction swap, and finishing one a crash interrupted.

A cleaning round (cleaner.py) writes each cleaned segment as `<base>.log.cleaned` (with
`.index.cleaned` and `.timeindex.cleaned`), fsyncs it, and renames the log file to
`<base>.log.swap`: from that rename on, the swap is decided. This module owns those
names and what a log does with them when it opens (Kafka's LogLoader): `.cleaned` files
are discarded, and a `.swap` file replaces the segments it covers. It knows files only,
never a PartitionLog, so the log can call it as it opens.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from oncelog.protocol.record_batch import (
    BATCH_LENGTH_POSITION,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POSITION,
    LOG_OVERHEAD,
)
from oncelog.storage.errors import StorageError
from oncelog.storage.framed_file import fsync_directory
from oncelog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_segment_base_offset,
    segment_file_name,
)

logger = logging.getLogger("oncelog.storage.cleaner")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_HEADER_PREFIX = LAST_OFFSET_DELTA_POSITION + 4  # up to lastOffsetDelta: enough to walk a swap file


def unlink_cleaned_files(directory: Path, base: int) -> None:
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (directory / (segment_file_name(base, suffix) + CLEANED_SUFFIX)).unlink(missing_ok=True)


def rename(source: Path, target: Path) -> None:
    try:
        os.replace(source, target)
    except OSError as exc:
        raise StorageError(str(source), f"cannot rename to {target.name}: {exc.strerror}", exc.errno) from exc


def unlink_segment_files(directory: Path, base: int) -> None:
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (directory / segment_file_name(base, suffix)).unlink(missing_ok=True)


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
                base = int.from_bytes(prefix[:BATCH_LENGTH_POSITION], "big", signed=True)
                length = int.from_bytes(prefix[BATCH_LENGTH_POSITION:BATCH_LENGTH_POSITION + 4], "big", signed=True)
                last_delta = int.from_bytes(prefix[LAST_OFFSET_DELTA_POSITION:_HEADER_PREFIX], "big", signed=True)
                if length < HEADER_SIZE - LOG_OVERHEAD or position + length + LOG_OVERHEAD > size:
                    break
                next_offset = base + last_delta + 1
                position += length + LOG_OVERHEAD
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
            unlink_segment_files(directory, other_base)
        unlink_segment_files(directory, base)
        rename(swap_path, directory / segment_file_name(base, LOG_SUFFIX))
        completed = True
    if completed:
        fsync_directory(directory)
    return completed
