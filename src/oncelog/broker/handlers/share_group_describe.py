"""ShareGroupDescribe (key 77), v1: share groups as Kafka 4 describes them.

- Per group: state (Empty, Stable), group epoch, assignment epoch, the assignor
  ("simple"), and each member: rack, member epoch, client id and host, subscribed topic
  names and its assignment (topic ids and names).
- A group that is no share group, or does not exist: GROUP_ID_NOT_FOUND with Kafka's
  message; a group coordinated by another broker: NOT_COORDINATOR.
- Authorization, as Kafka's KafkaApis: Group DESCRIBE, else GROUP_AUTHORIZATION_FAILED;
  a group with a subscribed or assigned topic the principal may not DESCRIBE gets
  TOPIC_AUTHORIZATION_FAILED. With `include_authorized_operations`, each described group
  carries the principal's operations on it.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.coordinator.share.groups import SIMPLE_ASSIGNOR, ShareGroup
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType


@api(77, "ShareGroupDescribe", range(1, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    groups = []
    for group_id in request.group_ids:
        await ctx.pace()
        error, message, group = _find(ctx, group_id)
        if group is not None and not _topics_describable(ctx, group):
            error, group = ErrorCode.topic_authorization_failed, None
            message = "The group has described topic(s) that the client is not authorized to describe."
        if group is None:
            groups.append(make("DescribedGroup", error_code=error, error_message=message, group_id=group_id,
                               group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                               authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        operations = (ctx.authorized_operations(ResourceType.GROUP, group_id) if request.include_authorized_operations
                      else AUTHORIZED_OPERATIONS_OMITTED)
        groups.append(make(
            "DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
            group_state=group.state, group_epoch=group.epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=SIMPLE_ASSIGNOR, authorized_operations=operations,
            members=tuple(
                make("Member", member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch, client_id=m.client_id,
                     client_host=m.client_host, subscribed_topic_names=m.subscribed,
                     assignment=_assignment(ctx, m.assignment))
                for m in group.members.values()
            ),
        ))
    return make("ShareGroupDescribeResponse", throttle_time=NO_THROTTLE, groups=tuple(groups))


def _find(ctx: RequestContext, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None, None
    owner = ctx.broker.group_coordinator.owner_error(group_id)
    if owner is not ErrorCode.none:
        return owner, None, None
    group = ctx.broker.share_groups.group(group_id)
    if group is None:
        if ctx.broker.group_coordinator.group(group_id) is not None:
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.", None
        return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
    return ErrorCode.none, None, group


def _assignment(ctx: RequestContext, assignment) -> object:
    make = ctx.response.make
    topics = []
    for topic, partitions in sorted(assignment.items()):
        info = ctx.broker.logs.topic(topic)
        if info is not None:
            topics.append(make("TopicPartitions", topic_id=info.topic_id, topic_name=topic, partitions=partitions))
    return make("Assignment", topic_partitions=tuple(topics))


def _topics_describable(ctx: RequestContext, group: ShareGroup) -> bool:
    topics: set[str] = set()
    for member in group.members.values():
        topics.update(member.subscribed)
        topics.update(member.assignment)
    return all(ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic) for topic in topics)
