"""ConsumerGroupHeartbeat (key 68), v0-v1: the consumer group protocol (KIP-848).

- A member joins with epoch 0 (its subscription: topic names and/or a regex, an optional
  server assignor of group.consumer.assignors, its rebalance timeout), heartbeats every
  heartbeat interval (the group's consumer.heartbeat.interval.ms config, else the
  broker's group.consumer.heartbeat.interval.ms) with its epoch and owned partitions,
  and leaves with -1 (a static member, for now, with -2). The answer carries the
  member's epoch, the heartbeat interval and, when it changed (or the request was a full
  one), the partitions it may now consume, by topic id. The work is the coordinator's
  (coordinator/group/consumer_membership.py): group epoch, target assignment by the
  uniform or range assignor, reconciliation with revocation before reassignment.
- v0: a member joining without a member id gets one from the coordinator, and there is
  no SubscribedTopicRegex (None here); v1: the client makes the member id
  (INVALID_REQUEST without one) and may subscribe by regex.
- Errors as Kafka's: INVALID_GROUP_ID, INVALID_REQUEST (a malformed first heartbeat),
  UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, GROUP_MAX_SIZE_REACHED
  (group.consumer.max.size), UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, FENCED_INSTANCE_ID,
  UNRELEASED_INSTANCE_ID (a static member's instance id still held by a live member),
  GROUP_ID_NOT_FOUND (a classic group with members of that name, or a share group's
  id), each with Kafka's error message.
- Answered once the coordinator's records are on the ISR of the group's
  `__consumer_offsets` partition; NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE otherwise,
  and NOT_COORDINATOR for a group coordinated by another broker.
- Authorization, as Kafka's KafkaApis, before anything else: Group READ, else
  GROUP_AUTHORIZATION_FAILED; then Topic DESCRIBE on every subscribed topic name, else
  TOPIC_AUTHORIZATION_FAILED naming them. A regex resolves only to topics the principal
  may DESCRIBE.
"""

from __future__ import annotations

import datetime

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import client_host, duration_ms, group_coordinator
from oncelog.broker.handlers._share_admin import is_share_group
from oncelog.coordinator.group.api import HeartbeatRequest, HeartbeatResult
from oncelog.coordinator.group.assignment import to_wire
from oncelog.pacing import sorted_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

FIRST_REGEX_VERSION = 1  # SubscribedTopicRegex is a v1 field


@api(68, "ConsumerGroupHeartbeat", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, HeartbeatResult(ErrorCode.group_authorization_failed))
    names = request.subscribed_topic_names
    if names:
        refused = await sorted_paced({name async for name in ctx.paced(names)
                                      if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)}, ctx.pace)
        if refused:
            return _response(ctx, HeartbeatResult(ErrorCode.topic_authorization_failed,
                                                  f"The following topics are not authorized: {', '.join(refused)}"))
    if is_share_group(ctx, request.group_id):
        return _response(ctx, HeartbeatResult(ErrorCode.group_id_not_found,
                                              f"Group {request.group_id} is not a consumer group."))
    coordinator = group_coordinator(ctx)
    owned = request.topic_partitions
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=duration_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.version >= FIRST_REGEX_VERSION else None,
        server_assignor=request.server_assignor,
        owned_partitions=None if owned is None else tuple([
            (tp.topic_id, tuple(tp.partitions)) async for tp in ctx.paced(owned) if tp.topic_id is not None]),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        api_version=ctx.version,
    )
    result = coordinator.consumer_group_heartbeat(
        heartbeat, lambda topic: ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic))
    if result.error == ErrorCode.none:
        error = await coordinator.replicated(request.group_id)
        if error != ErrorCode.none:
            result = HeartbeatResult(error)
    return _response(ctx, result)


def _response(ctx: RequestContext, result: HeartbeatResult) -> object:
    make = ctx.response.make
    assignment = None
    if result.assignment is not None:
        assignment = make("Assignment", topic_partitions=tuple(
            make("TopicPartitions", topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in to_wire(result.assignment)
        ))
    return make(
        "ConsumerGroupHeartbeatResponse",
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )
