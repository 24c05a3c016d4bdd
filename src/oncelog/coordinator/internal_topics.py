"""The internal topics coordinators keep their state in, and how keys map to partitions.

`__consumer_offsets` (group coordinator) and `__transaction_state` (transaction
coordinator) are compacted topics created on first use (the first FindCoordinator),
like Kafka does. A group id or transactional id belongs to partition
`abs(java_hash(key)) % partitions`, Kafka's mapping, so the coordinator of a key is the
leader of that partition.

In cluster mode they are created through the metadata quorum with
`offsets.topic.replication.factor` / `transaction.state.log.replication.factor`
replicas, and `__transaction_state` gets `min.insync.replicas` =
`transaction.state.log.min.isr`. While fewer brokers are up than the replication
factor asks, creation fails and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as
Kafka's does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oncelog.broker.topics import TopicRequestError
from oncelog.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.errors import TopicExistsError

if TYPE_CHECKING:
    from oncelog.broker.node import Node
    from oncelog.storage.manager import TopicInfo

log = logging.getLogger("oncelog.coordinator")

REPLICATION_FACTOR_KEY = {
    CONSUMER_OFFSETS: "offsets.topic.replication.factor",
    TRANSACTION_STATE: "transaction.state.log.replication.factor",
}


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


def ensure_internal_topic(broker: Node, name: str, partitions: int, segment_bytes: int) -> TopicInfo:
    """The internal topic, created compacted with `partitions` partitions if missing."""
    existing = broker.logs.topic(name)
    if existing is not None:
        return existing
    try:
        return broker.logs.create_topic(
            name, partitions, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        )
    except TopicExistsError:  # created meanwhile
        created = broker.logs.topic(name)
        assert created is not None
        return created


def _cluster_spec(broker: Node, name: str) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, topic configs) of an internal topic, as Kafka sets them."""
    config = broker.config
    if name == CONSUMER_OFFSETS:
        return (config["offsets.topic.num.partitions"], config["offsets.topic.replication.factor"],
                {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                 "compression.type": "producer"})
    return (config["transaction.state.log.num.partitions"], config["transaction.state.log.replication.factor"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
             "min.insync.replicas": str(config["transaction.state.log.min.isr"])})


async def ensure_cluster_internal_topic(broker: Node, name: str) -> tuple[ErrorCode, str | None]:
    """Cluster mode: create the internal topic through the metadata quorum if it is not
    in the image. NONE once it is there; COORDINATOR_NOT_AVAILABLE when it cannot be
    created yet (too few brokers, quorum unavailable), which clients retry, with the
    reason for FindCoordinator's error message (a command-line tool shows it)."""
    cluster = broker.cluster
    assert cluster is not None
    if name in cluster.image.topics:
        return ErrorCode.none, None
    partitions, replication_factor, configs = _cluster_spec(broker, name)
    try:
        await broker.topics.create(name, partitions, replication_factor, configs)
    except TopicRequestError as error:
        if error.code is not ErrorCode.topic_already_exists:
            log.warning("cannot create %s yet: %s", name, error)
            reason = f"cannot create {name} yet: {error}"
            if error.code is ErrorCode.invalid_replication_factor:
                key = REPLICATION_FACTOR_KEY[name]
                reason += f" ({key}={replication_factor}: start more brokers, or lower {key})"
            return ErrorCode.coordinator_not_available, reason
    if name in cluster.image.topics:
        return ErrorCode.none, None
    return ErrorCode.coordinator_not_available, f"{name} is being created"
