"""The internal topics coordinators keep their state in, and how keys map to partitions.

`__consumer_offsets` (group coordinator), `__transaction_state` (transaction
coordinator) and `__share_group_state` (share coordinator) are compacted topics
created on first use (the first FindCoordinator, the first share fetch), like Kafka
does, through the broker's `TopicAdmin.ensure_internal`. A group id or
transactional id belongs to partition `abs(java_hash(key)) % partitions`, Kafka's
mapping, so the coordinator of a key is the leader of that partition.

In cluster mode they are created through the metadata quorum with
`offsets.topic.replication.factor` / `transaction.state.log.replication.factor`
(`share.coordinator.state.topic.replication.factor`) replicas, and
`__transaction_state` gets `min.insync.replicas` = `transaction.state.log.min.isr`
(`__share_group_state`: `share.coordinator.state.topic.min.isr`). While fewer brokers are up than the replication
factor asks, creation fails and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as
Kafka's does.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from oncelog.names import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE

if TYPE_CHECKING:
    from oncelog.config.broker import BrokerConfig

REPLICATION_FACTOR_KEY = {
    CONSUMER_OFFSETS: "offsets.topic.replication.factor",
    TRANSACTION_STATE: "transaction.state.log.replication.factor",
    SHARE_GROUP_STATE: "share.coordinator.state.topic.replication.factor",
}


# Memoized: every request naming a group or transactional id maps it to its partition,
# several times per transaction, and the loop below costs ~2 us per id in Python.
@functools.lru_cache(maxsize=1 << 16)
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


def internal_topic_spec(config: BrokerConfig, name: str, *, replicated: bool) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, topic configs) of an internal topic, as Kafka sets
    them; a standalone broker's copy is one replica with no ISR bound."""
    if name == CONSUMER_OFFSETS:
        partitions = config["offsets.topic.num.partitions"]
        configs = {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"])}
        if replicated:
            configs["compression.type"] = "producer"
    elif name == SHARE_GROUP_STATE:
        partitions = config["share.coordinator.state.topic.num.partitions"]
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": str(config["share.coordinator.state.topic.segment.bytes"])}
        if replicated:
            configs["min.insync.replicas"] = str(config["share.coordinator.state.topic.min.isr"])
    else:
        partitions = config["transaction.state.log.num.partitions"]
        configs = {"cleanup.policy": "compact", "segment.bytes": str(config["transaction.state.log.segment.bytes"])}
        if replicated:
            configs["min.insync.replicas"] = str(config["transaction.state.log.min.isr"])
    return partitions, config[REPLICATION_FACTOR_KEY[name]] if replicated else 1, configs
