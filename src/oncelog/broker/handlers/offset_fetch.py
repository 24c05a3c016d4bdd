"""OffsetFetch (key 9), v1-v9.

- A group's committed offsets for the partitions asked (v2+: null topics = every
  partition with an offset). A partition with none gets offset -1, no error.
- Pending transactional offsets are invisible. With require_stable (v7+) a partition with
  pending transactional offsets answers UNSTABLE_OFFSET_COMMIT, so the consumer retries
  once the transaction has ended (KIP-447).
- v8+ batches groups, each with its own error.
- v2+ has a top-level (v8+: per group) error; v1 only per partition. In cluster mode a
  group coordinated by another broker gets NOT_COORDINATOR there.
- Authorization, as Kafka's KafkaApis, per group: Group DESCRIBE, else the group's
  error is GROUP_AUTHORIZATION_FAILED (v1, which has no group error: each partition's).
  Offsets are shown only for topics the principal may DESCRIBE: partitions asked for of
  another topic get TOPIC_AUTHORIZATION_FAILED (offset -1, after the others); with
  every partition asked for, the other topics are left out.
- v9: a consumer group's member (KIP-848) fetches with its member id and epoch, checked
  as Kafka 4 does (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH as the group's error); an admin
  client sends neither. Classic groups ignore them, as Kafka's.
- Deviation: v10 (topic ids) is not offered, nor v0, which Kafka 4 removed.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.coordinator.group.api import NO_OFFSET
from oncelog.pacing import sorted_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(9, "OffsetFetch", range(1, 10))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    require_stable = getattr(request, "require_stable", False)
    if ctx.version >= 8:
        groups = tuple([
            await _fetch_group(ctx, group.group_id, group.topics, require_stable, "OffsetFetchResponseGroup",
                               "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions",
                               getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
            async for group in ctx.paced(request.groups)
        ])
        return make("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=groups)
    single = await _fetch_group(ctx, request.group_id, request.topics, require_stable, None,
                                "OffsetFetchResponseTopic", "OffsetFetchResponsePartition")
    error, topics = single
    return make("OffsetFetchResponse", throttle_time=NO_THROTTLE, topics=topics, error_code=error)


async def _fetch_group(ctx: RequestContext, group_id: str, requested_topics, require_stable: bool,
                       group_class: str | None, topic_class: str, partition_class: str, member_id: str | None = None,
                       member_epoch: int = -1):
    make = ctx.response.make
    coordinator = group_coordinator(ctx)

    def describable(topic: str) -> bool:
        return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)

    refused: list[tuple[str, int]] = []  # asked for, of topics the principal may not describe
    wanted: list[tuple[str, int]] | None
    if requested_topics is None:
        wanted = None
    else:
        wanted = []
        async for topic in ctx.paced(requested_topics):
            asked = wanted if describable(topic.name) else refused
            async for index in ctx.paced(topic.partition_indexes):
                asked.append((topic.name, index))
    offsets: dict[tuple[str, int], Any]
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error, offsets = ErrorCode.group_authorization_failed, {}
    else:
        asked_set = None if wanted is None else {tp async for tp in ctx.paced(wanted)}
        error, offsets = coordinator.fetch_offsets(group_id, asked_set, require_stable, member_id, member_epoch)
    # In the order asked for (a partition without an offset has none: -1); every committed
    # partition, sorted, when all were asked for.
    order: list[tuple[str, int]]
    if error != ErrorCode.none:
        order = []
    elif wanted is None:
        order = await sorted_paced([tp async for tp in ctx.paced(list(offsets)) if describable(tp[0])], ctx.pace)
    else:
        order = wanted
    by_topic: dict[str, list] = {}
    for topic, partition in order:
        await ctx.pace()
        fetched = offsets.get((topic, partition), NO_OFFSET)
        by_topic.setdefault(topic, []).append(make(
            partition_class,
            partition_index=partition,
            committed_offset=fetched.offset,
            committed_leader_epoch=fetched.leader_epoch,
            metadata=fetched.metadata,
            error_code=fetched.error,
        ))
    if error == ErrorCode.none:
        for topic, partition in refused:
            await ctx.pace()
            by_topic.setdefault(topic, []).append(make(
                partition_class, partition_index=partition, committed_offset=-1, committed_leader_epoch=-1,
                metadata="", error_code=ErrorCode.topic_authorization_failed,
            ))
    elif wanted is not None and ctx.version < 2:
        # v1 has no group-level error: every partition carries it.
        for topic, partition in (*wanted, *refused):
            await ctx.pace()
            by_topic.setdefault(topic, []).append(make(
                partition_class, partition_index=partition, committed_offset=-1, committed_leader_epoch=-1,
                metadata="", error_code=error,
            ))
    topics = tuple([make(topic_class, name=topic, partitions=tuple(parts))
                    async for topic, parts in ctx.paced(by_topic.items())])
    if group_class is None:
        return error, topics
    return make(group_class, group_id=group_id, topics=topics, error_code=error)
