"""Shared by the group handlers: the coordinator of the broker, the client's host, and
answering only once the coordinator's write is replicated."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from oncelog.broker.dispatch import RequestContext
from oncelog.coordinator.group.api import CommitOffset
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.protocol.messages import ErrorCode

Key = TypeVar("Key", bound=Hashable)

def group_coordinator(ctx: RequestContext) -> GroupCoordinator:
    """The broker's GroupCoordinator."""
    return ctx.broker.group_coordinator


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka reports it (InetAddress.toString: "/127.0.0.1")."""
    return f"/{ctx.client_host}"


def duration_ms(value, default_ms: int = -1) -> int:
    """kio gives *_ms fields as timedeltas; the coordinator works in milliseconds."""
    if value is None:
        return default_ms
    return round(value.total_seconds() * 1000)


def partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    count = ctx.broker.logs.partition_count(topic)
    return count is not None and 0 <= partition < count


async def split_offsets(ctx: RequestContext, request, coordinator, *, group_id_required: bool = False):
    """The partitions of an OffsetCommit/TxnOffsetCommit split into the offsets to hand to
    the coordinator and the per-partition errors answered without it. Only partitions that
    exist reach the coordinator, each once (a partition named twice: its last offset), so
    its work is bounded by the cluster's partitions, whatever the request lists."""
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], CommitOffset] = {}
    async for topic in ctx.paced(request.topics):
        async for partition in ctx.paced(topic.partitions):
            key = (topic.name, partition.partition_index)
            if group_id_required and not request.group_id:
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


async def once_replicated(coordinator, group_id: str, results: dict[Key, ErrorCode]) -> dict[Key, ErrorCode]:
    """`results` (an error per partition or group), answered once the coordinator's
    writes to the group's `__consumer_offsets` partition are on the ISR, as Kafka
    answers after its acks=all append: when they are not, the accepted entries get the
    coordinator error (NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE) instead."""
    if all(code != ErrorCode.none for code in results.values()):
        return results
    error = await coordinator.replicated(group_id)
    if error == ErrorCode.none:
        return results
    return {key: error if code == ErrorCode.none else code for key, code in results.items()}
