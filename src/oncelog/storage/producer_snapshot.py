"""Producer state snapshots: `<offset, 20 digits>.snapshot` files in a partition directory.

A snapshot holds every producer entry as of a log offset, so recovery replays only the
batches after it. Layout (big-endian):

    magic   4 bytes  b"OLPS"
    version int16    1
    crc     uint32   CRC32C of the payload
    payload          UTF-8 JSON: {"offset": N, "producers": [entry, ...]}

Entries are kept in the manager's order (least recently written first), which is its
eviction order once `producer.id.max.entries.per.partition` is reached. Expired entries
are dropped by the loader (ProducerStateManager.load), not here.

Written to a temporary file, fsynced and renamed, so a crash leaves either the old
snapshot or the new one; a snapshot whose CRC fails is ignored (recovery then replays
from an older snapshot or from the log start).
"""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

from crc32c import crc32c

from oncelog.storage.producer_state import NUM_BATCHES_TO_RETAIN, BatchMetadata, ProducerStateEntry

log = logging.getLogger("oncelog.storage")

MAGIC = b"OLPS"
VERSION = 1
_HEADER = struct.Struct(">4shI")
SUFFIX = ".snapshot"


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    offsets = []
    for path in directory.glob(f"*{SUFFIX}"):
        try:
            offsets.append(int(path.name[: -len(SUFFIX)]))
        except ValueError:
            continue
    return sorted(offsets)


def write_snapshot(directory: Path, offset: int, producers: dict[int, ProducerStateEntry], *,
                   sync: bool = True) -> Path:
    """Write the snapshot at `offset` (a temporary file renamed into place). Without `sync`
    the file is not fsynced: its caller fsyncs it later (a torn one is ignored on load)."""
    payload = json.dumps(
        {
            "offset": offset,
            "producers": [
                {
                    "producer_id": e.producer_id,
                    "producer_epoch": e.producer_epoch,
                    "coordinator_epoch": e.coordinator_epoch,
                    "last_timestamp": e.last_timestamp,
                    "current_txn_first_offset": e.current_txn_first_offset,
                    "batches": [
                        [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in e.batches
                    ],
                }
                for e in producers.values()
            ],
        },
        separators=(",", ":"),
    ).encode()
    path = snapshot_path(directory, offset)
    temporary = path.with_suffix(".snapshot.tmp")
    with open(temporary, "wb") as file:
        file.write(_HEADER.pack(MAGIC, VERSION, crc32c(payload)) + payload)
        if sync:
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, path)
    return path


def read_snapshot(path: Path) -> dict[int, ProducerStateEntry] | None:
    """The entries in a snapshot, or None if it is torn, corrupt or of an unknown version."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, version, crc = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if magic != MAGIC or version != VERSION or crc32c(payload) != crc:
        log.warning("ignoring corrupt producer snapshot %s", path)
        return None
    entries = {}
    for raw in json.loads(payload)["producers"]:
        entry = ProducerStateEntry(
            raw["producer_id"],
            raw["producer_epoch"],
            batches=[BatchMetadata(*b) for b in raw["batches"][-NUM_BATCHES_TO_RETAIN:]],
            coordinator_epoch=raw["coordinator_epoch"],
            last_timestamp=raw["last_timestamp"],
            current_txn_first_offset=raw["current_txn_first_offset"],
        )
        entries[entry.producer_id] = entry
    return entries


def delete_snapshots(directory: Path, *, above: int | None = None, below: int | None = None) -> None:
    """Delete snapshots at offsets > above (after truncation) or < below (retention)."""
    for offset in snapshot_offsets(directory):
        if (above is not None and offset > above) or (below is not None and offset < below):
            snapshot_path(directory, offset).unlink(missing_ok=True)
