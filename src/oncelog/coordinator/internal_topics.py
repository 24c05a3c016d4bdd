"""The internal topics coordinators keep their state in, and how keys map to partitions.

`__consumer_offsets` (group coordinator) and `__transaction_state` (transaction
coordinator) are compacted topics created on first use, like Kafka does. A group id or
transactional id belongs to partition `abs(java_hash(key)) % partitions`, Kafka's
mapping, so the coordinator of a key is the leader of that partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.storage.errors import TopicExistsError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.storage.manager import TopicInfo

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's Utils.abs(key.hashCode) % partitions. Utils.abs is Math.abs with
    Integer.MIN_VALUE mapped to 0, not the sign-bit mask of Utils.toPositive."""
    hash_code = java_string_hash(key)
    return 0 if hash_code == -(1 << 31) else abs(hash_code) % partitions


def ensure_internal_topic(broker: Broker, name: str, partitions: int, segment_bytes: int) -> TopicInfo:
    """The internal topic, created compacted with `partitions` partitions if missing."""
    existing = broker.logs.topic(name)
    if existing is not None:
        return existing
    try:
        return broker.logs.create_topic(
            name, partitions, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        )
    except TopicExistsError:
        return broker.logs.topic(name)
