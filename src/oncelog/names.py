"""Names every layer shares, defined once: a partition's (topic, partition) pair and
Kafka's internal topics, where the coordinators keep their state (see
coordinator/internal_topics.py for how keys map to their partitions)."""

from __future__ import annotations

TopicPartition = tuple[str, int]

CONSUMER_OFFSETS = "__consumer_offsets"  # the group coordinator's offsets and groups
TRANSACTION_STATE = "__transaction_state"  # the transaction coordinator's transactions
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})
