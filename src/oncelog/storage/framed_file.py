"""Small persisted files (topic metadata, checkpoints): versioned, CRC32C-framed, atomic.

Layout (big-endian):

    offset  size  field
         0     4  magic          identifies the kind of file
         4     2  version        of the payload format
         6     4  payload length
        10     4  crc32c         of bytes [0, 10) followed by the payload
        14     …  payload        JSON, UTF-8

Writes go to `<name>.tmp`, are fsynced, renamed over the old file, and the directory is
fsynced, so a reader sees either the old or the new file, never a torn one.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from crc32c import crc32c

from oncelog.storage.errors import CorruptLogError, StorageError

_PREFIX = struct.Struct(">4sHI")
_CRC = struct.Struct(">I")
HEADER_SIZE = _PREFIX.size + _CRC.size
TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    """Make created, renamed and removed entries of `directory` durable."""
    _fsync_path(directory, os.O_RDONLY | os.O_DIRECTORY, "cannot fsync directory")


def fsync_file(path: Path) -> None:
    """Make the written contents of the file at `path` durable."""
    _fsync_path(path, os.O_WRONLY | os.O_CREAT, "cannot fsync")


def _fsync_path(path: Path, flags: int, failure: str) -> None:
    fd = open_for_fsync(path, flags, failure)
    try:
        try:
            fsync_descriptor(fd, path, failure)
        finally:
            os.close(fd)
    except OSError as exc:  # the close's
        raise StorageError(str(path), f"{failure}: {exc.strerror}", exc.errno) from exc


def open_for_fsync(path: Path, flags: int, failure: str = "cannot open to fsync") -> int:
    """A descriptor of `path` to fsync through (`fsync_descriptor`). Raises StorageError."""
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        raise StorageError(str(path), f"{failure}: {exc.strerror}", exc.errno) from exc


def fsync_descriptor(fd: int, path: Path, failure: str = "cannot fsync") -> None:
    """fsync `fd`, a descriptor of `path`. Raises StorageError."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StorageError(str(path), f"{failure}: {exc.strerror}", exc.errno) from exc


def write_fully(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (os.write may take part of it). Raises OSError."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_framed_file(path: Path, magic: bytes, version: int, payload: bytes) -> None:
    prefix = _PREFIX.pack(magic, version, len(payload))
    replace_file(path, prefix + _CRC.pack(crc32c(payload, crc32c(prefix))) + payload)


def replace_file(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data` crash-safely: temporary file, fsync, rename, fsync of
    the directory (without `sync`, no fsyncs: the caller has them done later, before it
    relies on the file). Raises StorageError."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_fully(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        if sync:
            fsync_directory(path.parent)
    except OSError as exc:
        raise StorageError(str(path), f"cannot write: {exc.strerror}", exc.errno) from exc


def read_framed_file(path: Path, magic: bytes, versions: range | tuple[int, ...]) -> tuple[int, bytes]:
    """(version, payload) of the file; raises CorruptLogError on any framing problem."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StorageError(str(path), f"cannot read: {exc.strerror}", exc.errno) from exc
    if len(data) < HEADER_SIZE:
        raise CorruptLogError(str(path), f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    found_magic, version, length = _PREFIX.unpack_from(data)
    if found_magic != magic:
        raise CorruptLogError(str(path), f"magic {found_magic!r}, expected {magic!r}")
    if version not in versions:
        raise CorruptLogError(str(path), f"unsupported version {version}")
    payload = data[HEADER_SIZE:]
    if len(payload) != length:
        raise CorruptLogError(str(path), f"payload of {len(payload)} bytes, header declares {length}")
    (stored_crc,) = _CRC.unpack_from(data, _PREFIX.size)
    actual_crc = crc32c(payload, crc32c(data[: _PREFIX.size]))
    if stored_crc != actual_crc:
        raise CorruptLogError(str(path), f"CRC32C {actual_crc:#010x} does not match stored {stored_crc:#010x}")
    return version, payload


def write_json_file(path: Path, magic: bytes, version: int, document: Any) -> None:
    payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    write_framed_file(path, magic, version, payload)


def read_json_file(path: Path, magic: bytes, versions: range | tuple[int, ...]) -> tuple[int, Any]:
    version, payload = read_framed_file(path, magic, versions)
    try:
        return version, json.loads(payload)
    except ValueError as exc:
        raise CorruptLogError(str(path), f"payload is not JSON: {exc}") from None


def read_partition_offsets(path: Path, magic: bytes, version: int) -> dict[tuple[str, int], int]:
    """A checkpoint of one offset per partition (`{"offsets": [[topic, partition,
    offset], ...]}`), or {} when the file is absent. Raises CorruptLogError when it
    cannot be read: the callers decide what losing it costs."""
    if not path.exists():
        return {}
    _version, document = read_json_file(path, magic, (version,))
    try:
        return {(str(topic), int(partition)): int(offset) for topic, partition, offset in document["offsets"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLogError(str(path), f"not a partition offset checkpoint: {exc}") from None
