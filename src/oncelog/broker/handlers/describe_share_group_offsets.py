"""DescribeShareGroupOffsets (key 90), v0-v1: each share partition's start offset and,
at v1, its lag (`kafka-share-groups.sh --describe`, Admin.listShareGroupOffsets).

- Per group, the topics asked (null: every share partition the group has, wherever its
  share coordinator is): the share-partition start offset, or -1 for a partition the
  group never read; the lag counts the records from the start offset to the high
  watermark (the LSO under share.isolation.level=read_committed) not yet acknowledged or
  archived, -1 where this broker does not lead the partition.
- Deviation: in cluster mode a partition whose state another broker keeps is asked of it
  with ReadShareGroupState (no fencing), one request per partition, and with null topics
  every partition of every topic is (Kafka asks with ReadShareGroupStateSummary the
  partitions its group coordinator remembers initializing).
- Errors: GROUP_ID_NOT_FOUND for a classic or consumer group's id, NOT_COORDINATOR for a
  group coordinated by another broker, UNKNOWN_TOPIC_OR_PARTITION per partition.
- Authorization, as Kafka's KafkaApis: Group DESCRIBE, else GROUP_AUTHORIZATION_FAILED for
  the group; Topic DESCRIBE, else TOPIC_AUTHORIZATION_FAILED for the topic's partitions.
"""

from __future__ import annotations

from collections import defaultdict

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_admin import share_group_error
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(90, "DescribeShareGroupOffsets", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    groups = []
    async for group in ctx.paced(request.groups):
        code, message = ErrorCode.none, None
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
            code = ErrorCode.group_authorization_failed
        else:
            code, message = share_group_error(ctx, group.group_id, must_be_empty=False)
        if code is not ErrorCode.none:
            groups.append(make("DescribeShareGroupOffsetsResponseGroup", group_id=group.group_id, topics=(),
                               error_code=code, error_message=message))
            continue
        wanted: dict[str, list[int]] = defaultdict(list)
        if group.topics is None:
            for topic, partition in await ctx.broker.share_partitions.group_partitions(group.group_id):
                wanted[topic].append(partition)
        else:
            async for topic in ctx.paced(group.topics):
                wanted[topic.topic_name].extend(topic.partitions)
        topics = []
        async for name in ctx.paced(sorted(wanted)):
            topics.append(await _topic(ctx, group.group_id, name, wanted[name]))
        groups.append(make("DescribeShareGroupOffsetsResponseGroup", group_id=group.group_id, topics=tuple(topics),
                           error_code=ErrorCode.none, error_message=None))
    return make("DescribeShareGroupOffsetsResponse", throttle_time=NO_THROTTLE, groups=tuple(groups))


async def _topic(ctx: RequestContext, group_id: str, name: str, partitions: list[int]) -> object:
    make = ctx.response.make
    info = ctx.broker.logs.topic(name)
    allowed = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
    entries = []
    for partition in dict.fromkeys(partitions):
        code, start, lag = ErrorCode.none, -1, -1
        if not allowed:
            code = ErrorCode.topic_authorization_failed
        elif info is None or ctx.broker.logs.partition(name, partition) is None:
            code = ErrorCode.unknown_topic_or_partition
        else:
            found = await ctx.broker.share_partitions.start_and_lag(group_id, (name, partition))
            if found is not None:
                start, lag = found
        _code, epoch = ctx.broker.leadership.leader_epoch(name, partition)
        entries.append(make("DescribeShareGroupOffsetsResponsePartition", partition_index=partition,
                            start_offset=start, leader_epoch=epoch, lag=lag, error_code=code, error_message=None))
    return make("DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                topic_id=info.topic_id if info is not None and allowed else None, partitions=tuple(entries))
