"""AlterShareGroupOffsets (key 91), v0: set where an empty share group starts on each
partition named (`kafka-share-groups.sh --reset-offsets`, Admin.alterShareGroupOffsets).

- The share partition restarts at the offset given, with nothing in flight; the state
  epoch moves on. Answered once the new state is on the ISR of `__share_group_state`.
- Errors: NON_EMPTY_GROUP while the group has members, GROUP_ID_NOT_FOUND for a classic
  or consumer group's id, NOT_COORDINATOR for a group coordinated by another broker;
  per partition UNKNOWN_TOPIC_OR_PARTITION, and INVALID_REQUEST for a negative offset.
- Authorization, as Kafka's KafkaApis: Group READ, else GROUP_AUTHORIZATION_FAILED; Topic
  READ, else TOPIC_AUTHORIZATION_FAILED for the topic's partitions.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_admin import share_group_error
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(91, "AlterShareGroupOffsets", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, ErrorCode.group_authorization_failed, None, ())
    code, message = share_group_error(ctx, request.group_id, must_be_empty=True)
    if code is not ErrorCode.none:
        return _response(ctx, code, message, ())
    topics = []
    async for topic in ctx.paced(request.topics):
        info = ctx.broker.logs.topic(topic.topic_name)
        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.topic_name)
        partitions = []
        async for partition in ctx.paced(topic.partitions):
            if not allowed:
                error = ErrorCode.topic_authorization_failed
            elif partition.start_offset < 0:
                error = ErrorCode.invalid_request
            else:
                error = await ctx.broker.share_partitions.reset(
                    request.group_id, (topic.topic_name, partition.partition_index), partition.start_offset)
            partitions.append(make("AlterShareGroupOffsetsResponsePartition",
                                   partition_index=partition.partition_index, error_code=error, error_message=None))
        topics.append(make("AlterShareGroupOffsetsResponseTopic", topic_name=topic.topic_name,
                           topic_id=info.topic_id if info is not None and allowed else None,
                           partitions=tuple(partitions)))
    return _response(ctx, ErrorCode.none, None, tuple(topics))


def _response(ctx: RequestContext, code: ErrorCode, message: str | None, topics: tuple) -> object:
    return ctx.response.make("AlterShareGroupOffsetsResponse", throttle_time=NO_THROTTLE, error_code=code,
                             error_message=message, responses=topics)
