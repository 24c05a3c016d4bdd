"""ShareGroupHeartbeat (key 76), v1: membership of share groups (KIP-932).

- A member joins with epoch 0 and the topic names it subscribes to (INVALID_REQUEST
  without them, or without a member id, which the client makes), heartbeats with the
  epoch it was given, and leaves with -1. The answer carries its epoch, the heartbeat
  interval (the group's share.heartbeat.interval.ms, else group.share.heartbeat.interval.ms)
  and, when it changed, its assignment by topic id. The work is the coordinator's
  (coordinator/share/groups.py).
- Errors as Kafka's: INVALID_GROUP_ID, INVALID_REQUEST, UNKNOWN_MEMBER_ID,
  FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED (group.share.max.size),
  GROUP_ID_NOT_FOUND for an id a classic or consumer group has, NOT_COORDINATOR for a
  group coordinated by another broker.
- Authorization, as Kafka's KafkaApis: Group READ, else GROUP_AUTHORIZATION_FAILED; then
  Topic DESCRIBE on every subscribed topic, else TOPIC_AUTHORIZATION_FAILED naming them.
"""

from __future__ import annotations

import datetime

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import client_host
from oncelog.coordinator.share.groups import ShareHeartbeat, ShareHeartbeatResult
from oncelog.pacing import sorted_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(76, "ShareGroupHeartbeat", range(1, 2))
async def handle(ctx: RequestContext, request) -> object:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, ShareHeartbeatResult(ErrorCode.group_authorization_failed))
    names = request.subscribed_topic_names
    if names:
        refused = await sorted_paced({name async for name in ctx.paced(names)
                                      if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)}, ctx.pace)
        if refused:
            return _response(ctx, ShareHeartbeatResult(
                ErrorCode.topic_authorization_failed, f"The following topics are not authorized: {', '.join(refused)}"))
    result = ctx.broker.share_groups.heartbeat(ShareHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
    ))
    return _response(ctx, result)


def _response(ctx: RequestContext, result: ShareHeartbeatResult) -> object:
    make = ctx.response.make
    assignment = None
    if result.assignment is not None:
        topics = []
        for topic, partitions in sorted(result.assignment.items()):
            info = ctx.broker.logs.topic(topic)
            if info is not None:
                topics.append(make("TopicPartitions", topic_id=info.topic_id, partitions=partitions))
        assignment = make("Assignment", topic_partitions=tuple(topics))
    return make(
        "ShareGroupHeartbeatResponse",
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )
