"""The transaction coordinator's epoch, persisted so that it only ever grows.

Kafka's coordinator epoch is the leader epoch of the `__transaction_state` partition,
bumped by every election and so by every load of the partition; the coordinator writes
it into each COMMIT/ABORT marker, and a partition refuses a marker whose coordinator
epoch is older than the last one it saw for that producer (TRANSACTION_COORDINATOR_FENCED).
oncelog has one node and no partition leader epochs, so the epoch is a counter kept in
`transaction-coordinator-epoch` in the first log directory and increased each time the
coordinator loads its state (each broker start): markers written after a restart carry
a higher epoch than every marker written before it.

File: a framed file (see storage/framed_file.py), magic b"OLCE", version 1, JSON payload
{"coordinator_epoch": n}; written atomically and fsynced before the epoch is used.
"""

from __future__ import annotations

from pathlib import Path

from oncelog.storage.errors import CorruptLogError
from oncelog.storage.framed_file import read_json_file, write_json_file

FILE_NAME = "transaction-coordinator-epoch"
MAGIC = b"OLCE"
VERSION = 1
NO_COORDINATOR_EPOCH = -1


def read_coordinator_epoch(directory: Path) -> int:
    """The last epoch handed out, NO_COORDINATOR_EPOCH if none was."""
    path = directory / FILE_NAME
    if not path.exists():
        return NO_COORDINATOR_EPOCH
    _version, document = read_json_file(path, MAGIC, (VERSION,))
    epoch = document.get("coordinator_epoch") if isinstance(document, dict) else None
    if not isinstance(epoch, int) or epoch < 0:
        raise CorruptLogError(str(path), f"no valid coordinator epoch in {document!r}")
    return epoch


def next_coordinator_epoch(directory: Path) -> int:
    """The epoch for this load: one above the last, durable before it is returned."""
    epoch = read_coordinator_epoch(directory) + 1
    write_json_file(directory / FILE_NAME, MAGIC, VERSION, {"coordinator_epoch": epoch})
    return epoch
