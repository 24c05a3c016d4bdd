"""OffsetDelete (key 47), v0.

- Deletes a group's committed offsets of some partitions (tombstones in
  `__consumer_offsets`).
- An empty group loses any of them; a consumer group with members only those of topics
  no member subscribes to: the others get GROUP_SUBSCRIBED_TO_TOPIC. A non-consumer group
  with members: NON_EMPTY_GROUP. Unknown group: GROUP_ID_NOT_FOUND.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
- Answered once the tombstones are on the ISR of the group's `__consumer_offsets`
  partition (acks=all, as Kafka's); in cluster mode, when they are not, the deleted
  partitions get NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, and a group coordinated
  by another broker NOT_COORDINATOR.
- Authorization, as Kafka's KafkaApis, before anything else: Group DELETE, else the
  answer is GROUP_AUTHORIZATION_FAILED with no partitions; then Topic READ, else the
  topic's partitions get TOPIC_AUTHORIZATION_FAILED (whether they exist or not).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator, once_replicated, partition_exists
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(47, "OffsetDelete", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return make("OffsetDeleteResponse", error_code=ErrorCode.group_authorization_failed,
                    throttle_time=NO_THROTTLE, topics=())
    coordinator = group_coordinator(ctx)
    errors: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], None] = {}  # each once: the coordinator's work is bounded by the partitions
    async for topic in ctx.paced(request.topics):
        readable = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name)
        async for partition in ctx.paced(topic.partitions):
            key = (topic.name, partition.partition_index)
            if not readable:
                errors[key] = ErrorCode.topic_authorization_failed
            elif partition_exists(ctx, *key):
                wanted[key] = None
            else:
                errors[key] = ErrorCode.unknown_topic_or_partition
    error, results = coordinator.delete_offsets(request.group_id, list(wanted))
    if error != ErrorCode.none:
        return make("OffsetDeleteResponse", error_code=error, throttle_time=NO_THROTTLE, topics=())
    errors.update(await once_replicated(coordinator, request.group_id, results))
    topics = tuple([
        make(
            "OffsetDeleteResponseTopic",
            name=topic.name,
            partitions=tuple([
                make("OffsetDeleteResponsePartition", partition_index=p.partition_index,
                     error_code=errors[(topic.name, p.partition_index)])
                async for p in ctx.paced(topic.partitions)
            ]),
        )
        async for topic in ctx.paced(request.topics)
    ])
    return make("OffsetDeleteResponse", error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=topics)
