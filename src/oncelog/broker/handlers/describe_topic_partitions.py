"""DescribeTopicPartitions (key 75), v0.

- The topics asked for (every topic when the list is empty), in name order, with
  their partitions as Metadata describes them (leader, leader epoch, replicas, ISR and
  offline replicas; no eligible leader replicas), at most `response_partition_limit`
  partitions (clamped to 1..2000, Kafka's max.request.partition.size.limit) per answer.
  When the limit cuts the list, `next_cursor` names the topic and partition to ask
  from next, as Kafka's KRaftMetadataCache does.
- A named topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION (with the listing
  of every topic there are none). A cursor whose topic is not among those named, or
  whose partition is negative, is INVALID_REQUEST for every topic asked for.
- Authorization, as Kafka's DescribeTopicPartitionsRequestHandler: a topic needs Topic
  DESCRIBE. Listing every topic leaves the others out; a named one gets
  TOPIC_AUTHORIZATION_FAILED (after the described topics, with a zero id), whether it
  exists or not. Refused topics take no room under the partition limit, and the cursor
  never points at one. Every described topic (an unknown one too) carries the
  principal's authorized operations (all topic operations without an authorizer); the
  refused ones AUTHORIZED_OPERATIONS_OMITTED.
"""

from __future__ import annotations

import uuid

from oncelog.broker.dispatch import RequestContext, api
from oncelog.names import INTERNAL_TOPICS
from oncelog.pacing import sorted_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
ZERO_UUID = uuid.UUID(int=0)


@api(75, "DescribeTopicPartitions", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    known = ctx.broker.logs.topics()
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    list_all = not request.topics
    if list_all:
        names = await sorted_paced((name for name in known if name >= cursor_topic), ctx.pace)
    else:
        asked = {topic.name async for topic in ctx.paced(request.topics) if topic.name >= cursor_topic}
        names = await sorted_paced(asked, ctx.pace)
        if cursor is not None and cursor.topic_name not in asked:
            return await _refuse(ctx, request)
    if cursor is not None and cursor.partition_index < 0:
        return await _refuse(ctx, request)

    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit), 1)
    leadership = ctx.broker.leadership
    topics, refused, next_cursor = [], [], None
    for name in names:
        await ctx.pace()
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if not list_all:
                refused.append(_topic(make, ErrorCode.topic_authorization_failed, name, ZERO_UUID, False, ()))
            continue
        info = known.get(name)
        if remaining == 0:  # the limit fell on a topic boundary: go on from the next one
            next_cursor = make("Cursor", topic_name=name, partition_index=0)
            break
        if info is None:
            if not list_all:
                topics.append(_topic(make, ErrorCode.unknown_topic_or_partition, name, ZERO_UUID, False, (),
                                     ctx.authorized_operations(ResourceType.TOPIC, name)))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        last = min(info.num_partitions, first + remaining)
        partitions = tuple([
            _partition(make, index, leadership.describe_partition(name, index))
            async for index in ctx.paced(range(first, last))
        ])
        remaining -= len(partitions)
        if last < info.num_partitions:
            next_cursor = make("Cursor", topic_name=name, partition_index=last)
        topics.append(_topic(make, ErrorCode.none, name, info.topic_id, name in INTERNAL_TOPICS, partitions,
                             ctx.authorized_operations(ResourceType.TOPIC, name)))
        if next_cursor is not None:
            break
    return make("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE, topics=(*topics, *refused),
                next_cursor=next_cursor)


def _partition(make, index: int, view) -> object:
    code = ErrorCode.none if view.leader >= 0 else ErrorCode.leader_not_available
    return make("DescribeTopicPartitionsResponsePartition", error_code=code, partition_index=index,
                leader_id=view.leader, leader_epoch=view.leader_epoch, replica_nodes=view.replicas,
                isr_nodes=view.isr, eligible_leader_replicas=(), last_known_elr=(), offline_replicas=view.offline)


def _topic(make, code: ErrorCode, name: str, topic_id, internal: bool, partitions: tuple,
           operations: int = AUTHORIZED_OPERATIONS_OMITTED) -> object:
    return make("DescribeTopicPartitionsResponseTopic", error_code=code, name=name, topic_id=topic_id,
                is_internal=internal, partitions=partitions, topic_authorized_operations=operations)


async def _refuse(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    topics = tuple([
        _topic(make, ErrorCode.invalid_request, topic.name, ZERO_UUID, False, ())
        async for topic in ctx.paced(request.topics)
    ])
    return make("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE, topics=topics, next_cursor=None)
