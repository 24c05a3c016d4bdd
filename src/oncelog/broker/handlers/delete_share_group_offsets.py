"""DeleteShareGroupOffsets (key 92), v0: forget an empty share group's share partitions
of the topics named (`kafka-share-groups.sh --delete-offsets`); the next fetch starts
them again where share.auto.offset.reset says.

- Each share partition starts again where share.auto.offset.reset says, at a new state
  epoch in `__share_group_state`; answered once that is on its ISR.
- Errors: NON_EMPTY_GROUP while the group has members, GROUP_ID_NOT_FOUND for a classic
  or consumer group's id, NOT_COORDINATOR for a group coordinated by another broker;
  per topic UNKNOWN_TOPIC_OR_PARTITION.
- Authorization, as Kafka's KafkaApis: Group DELETE, else GROUP_AUTHORIZATION_FAILED; Topic
  READ, else TOPIC_AUTHORIZATION_FAILED for the topic.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_admin import share_group_error
from oncelog.coordinator.share.partition import UNINITIALIZED
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(92, "DeleteShareGroupOffsets", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return _response(ctx, ErrorCode.group_authorization_failed, None, ())
    code, message = share_group_error(ctx, request.group_id, must_be_empty=True)
    if code is not ErrorCode.none:
        return _response(ctx, code, message, ())
    manager = ctx.broker.share_partitions
    topics = []
    async for topic in ctx.paced(request.topics):
        name = topic.topic_name
        info = ctx.broker.logs.topic(name)
        error = ErrorCode.none
        if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name):
            error = ErrorCode.topic_authorization_failed
        elif info is None:
            error = ErrorCode.unknown_topic_or_partition
        else:
            for partition in range(info.num_partitions):  # wherever each one's state is kept
                if error is ErrorCode.none:
                    error = await manager.reset(request.group_id, (name, partition), UNINITIALIZED)
        topics.append(make("DeleteShareGroupOffsetsResponseTopic", topic_name=name,
                           topic_id=info.topic_id if info is not None and error is not
                           ErrorCode.topic_authorization_failed else None,
                           error_code=error, error_message=None))
    return _response(ctx, ErrorCode.none, None, tuple(topics))


def _response(ctx: RequestContext, code: ErrorCode, message: str | None, topics: tuple) -> object:
    return ctx.response.make("DeleteShareGroupOffsetsResponse", throttle_time=NO_THROTTLE, error_code=code,
                             error_message=message, responses=topics)
