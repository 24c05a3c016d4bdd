"""Kafka's plain-text checkpoint files (`leader-epoch-checkpoint`, `replication-offset-checkpoint`).

Layout (Kafka's CheckpointFile): UTF-8 text, one item per line, fields separated by a
space:

    0                   version
    2                   number of entries
    0 0                 one line per entry: "epoch startOffset" (leader epochs) or
    3 1200                "topic partition offset" (offsets per partition)

Kept in Kafka's format, not framed like the other small files (framed_file.py), so that
Kafka's own tools and operators' habits apply to them. Written like every other small
file here: to `<name>.tmp`, fsynced, renamed over the old file, then the directory is
fsynced, so a reader sees either the old or the new file, never a torn one.

Reading a file that does not parse raises CorruptLogError naming the file and the line
(Kafka's "Malformed line in checkpoint file"); an empty file has no entries (Kafka
creates empty files and reads them so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from oncelog.storage.errors import CorruptLogError, StorageError
from oncelog.storage.framed_file import replace_file

VERSION = 0

Entry = TypeVar("Entry")


def write_checkpoint(path: Path, entries: Iterable[Sequence[object]], version: int = VERSION, *,
                     sync: bool = True) -> None:
    """Replace the file atomically with `entries`, each written as its fields joined by
    spaces; without `sync`, not fsynced (see `replace_file`)."""
    lines = [" ".join(str(field) for field in entry) for entry in entries]
    data = "\n".join([str(version), str(len(lines)), *lines, ""]).encode()
    replace_file(path, data, sync=sync)


def read_checkpoint(path: Path, parse_entry: Callable[[list[str]], Entry], version: int = VERSION) -> list[Entry]:
    """The entries of the file, each from `parse_entry(fields)` (which raises ValueError
    on a malformed line). Raises FileNotFoundError when the file is absent, and
    CorruptLogError when it does not parse."""
    try:
        text = path.read_bytes().decode()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(str(path), f"cannot read checkpoint: {exc.strerror}", exc.errno) from exc
    except UnicodeDecodeError as exc:
        raise CorruptLogError(str(path), f"checkpoint is not UTF-8 text: {exc}") from None
    lines = text.splitlines()
    if not lines:
        return []

    def malformed(line: str) -> CorruptLogError:
        return CorruptLogError(str(path), f"malformed line in checkpoint file: {line!r}")

    def integer(line: str) -> int:
        try:
            return int(line.strip())
        except ValueError:
            raise malformed(line) from None

    found_version = integer(lines[0])
    if found_version != version:
        raise CorruptLogError(str(path), f"unrecognized version {found_version} of the checkpoint file")
    if len(lines) < 2:
        raise malformed("")
    expected = integer(lines[1])
    entries = []
    for line in lines[2:]:
        try:
            entries.append(parse_entry(line.split()))
        except (ValueError, TypeError):
            raise malformed(line) from None
    if len(entries) != expected:
        raise CorruptLogError(str(path), f"expected {expected} entries in checkpoint file, found {len(entries)}")
    return entries
