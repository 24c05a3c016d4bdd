"""What the metadata store holds, as the rest of the cluster code sees it.

Plain values with no I/O: the etcd client (`etcd.py`) produces them, the metadata image
(`image.py`) consumes them, and unit tests build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd stores it. Revisions are etcd's: `create_revision` is the
    revision that created this incarnation of the key, `mod_revision` the one that last
    wrote it; `lease` is 0 when the key is not attached to a lease."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int = 1
    lease: int = 0


class EventType(Enum):
    PUT = "PUT"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class Event:
    """One change seen by a watch. For DELETE, `kv.value` is empty and `kv.mod_revision`
    is the revision of the delete."""

    type: EventType
    kv: KeyValue
