"""Names every layer shares, defined once: a partition's (topic, partition) pair, Kafka's
internal topics, where the coordinators keep their state (see
kernel/internal_topics.py for how keys map to their partitions), and the Spark
sink's marker groups, which the console and /metrics tell apart from consumers."""

from __future__ import annotations

import re
from collections.abc import Collection

TopicPartition = tuple[str, int]

CONSUMER_OFFSETS = "__consumer_offsets"  # the group coordinator's offsets and groups
TRANSACTION_STATE = "__transaction_state"  # the transaction coordinator's transactions
SHARE_GROUP_STATE = "__share_group_state"  # the share coordinator's share-partition states
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE})

# The sink's partition mode (oncelog.spark.sink.partition_mode): task p of query Q writes under the
# transactional id `<prefix>-<Q>-<p>` and, in the same transaction, commits the next
# micro-batch's id to an offsets-only group of that name, its *marker group*. Such a group
# is the sink's bookkeeping, not a consumer: its offset counts micro-batches, so its "lag"
# to the topic's high watermark means nothing. Q is Spark's query id, a UUID, the id the
# pipeline reports to the console under. As Kafka names its internal topics in one place
# (Topic.isInternal), this names the marker groups: the console shows them under their
# pipeline, /metrics leaves them out of the consumer groups' offsets and lags.
_SINK_MARKER_GROUP = re.compile(
    r".+-(?P<query>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-(?P<partition>[0-9]+)")


def sink_task_id(prefix: str, query_id: str, partition_id: int) -> str:
    """The transactional id of the sink's task `partition_id` in partition mode, which is
    also the id of its marker group."""
    return f"{prefix}-{query_id}-{partition_id}"


def sink_marker_query(group_id: str, protocol_type: str, committed: Collection[TopicPartition]) -> str | None:
    """The query id whose sink keeps `group_id` as a marker group, or None. A marker group
    has the name above, no consumer ever joined it (`protocol_type` is "" for an
    offsets-only group, as Kafka lists it) and it holds one committed offset, on partition 0
    of one topic (`committed`: its committed partitions). Any other group is a consumer
    group, also an offsets-only one of a similar name that commits offsets of several
    partitions (a consumer assigning itself partitions)."""
    if protocol_type or len(committed) != 1 or next(iter(committed))[1] != 0:
        return None
    match = _SINK_MARKER_GROUP.fullmatch(group_id)
    return match["query"] if match is not None else None
