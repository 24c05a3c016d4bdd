"""Shared by the group handlers: the coordinator of the broker and the client's host."""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext

GROUP_KEY_TYPE = 0


def group_coordinator(ctx: RequestContext):
    """The broker's GroupCoordinator (registered as FindCoordinator key type 0)."""
    return ctx.broker.coordinator_for(GROUP_KEY_TYPE)


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka reports it (InetAddress.toString: "/127.0.0.1")."""
    return f"/{ctx.client_host}"


def duration_ms(value, default_ms: int = -1) -> int:
    """kio gives *_ms fields as timedeltas; the coordinator works in milliseconds."""
    if value is None:
        return default_ms
    return round(value.total_seconds() * 1000)


def partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.broker.logs.topic(topic)
    return info is not None and 0 <= partition < info.num_partitions


def split_offsets(ctx: RequestContext, request, coordinator, *, group_id_required: bool = False):
    """The partitions of an OffsetCommit/TxnOffsetCommit split into the offsets to hand to
    the coordinator and the per-partition errors answered without it."""
    from oncelog.coordinator.group.coordinator import CommitOffset
    from oncelog.protocol.messages import ErrorCode

    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], CommitOffset] = {}
    for topic in request.topics:
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if coordinator is None:
                errors[key] = ErrorCode.coordinator_not_available
            elif group_id_required and not request.group_id:
                errors[key] = ErrorCode.invalid_group_id
            elif not partition_exists(ctx, topic.name, partition.partition_index):
                errors[key] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[key] = CommitOffset(
                    partition.committed_offset,
                    getattr(partition, "committed_leader_epoch", -1),
                    partition.committed_metadata,
                )
    return offsets, errors
