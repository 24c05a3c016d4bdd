"""ConsumerGroupDescribe (key 69), v0-v1: consumer groups (KIP-848) as Kafka 4 describes them.

- Per group: state (Empty, Assigning, Reconciling, Stable), group epoch, assignment
  epoch, the assignor (the one most members ask for, else the default), and each member:
  instance id, rack, member epoch, client id and host, subscribed topic names and regex,
  its current and its target assignment (topic ids and names).
- v1: each member's type (1: consumer protocol, 0: classic protocol).
- A classic group, or a group that does not exist: GROUP_ID_NOT_FOUND with Kafka's
  message; a group coordinated by another broker: NOT_COORDINATOR.
- Authorization, as Kafka's KafkaApis: Group DESCRIBE, else GROUP_AUTHORIZATION_FAILED;
  a group with a subscribed or assigned topic the principal may not DESCRIBE gets
  TOPIC_AUTHORIZATION_FAILED. With `include_authorized_operations`, each described group
  carries the principal's operations on it.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.coordinator.group.api import AssignedTopic, ConsumerGroupSummary
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

CONSUMER_MEMBER, CLASSIC_MEMBER = 1, 0


@api(69, "ConsumerGroupDescribe", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    groups = []
    for group_id in request.group_ids:
        await ctx.pace()
        message: str | None = None
        summary: ConsumerGroupSummary | None = None
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            error = ErrorCode.group_authorization_failed
        else:
            error, message, summary = coordinator.consumer_group_describe(group_id)
        if summary is not None and not _topics_describable(ctx, summary):
            error, summary = ErrorCode.topic_authorization_failed, None
            message = "The group has described topic(s) that the client is not authorized to describe."
        if summary is None:
            groups.append(make("DescribedGroup", error_code=error, error_message=message, group_id=group_id,
                               group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                               authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        operations = (ctx.authorized_operations(ResourceType.GROUP, group_id) if request.include_authorized_operations
                      else AUTHORIZED_OPERATIONS_OMITTED)
        groups.append(make(
            "DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
            group_state=summary.state, group_epoch=summary.group_epoch, assignment_epoch=summary.assignment_epoch,
            assignor_name=summary.assignor_name, authorized_operations=operations,
            members=tuple(
                make("Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                     member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                     subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
                     assignment=_assignment(ctx, m.assignment), target_assignment=_assignment(ctx, m.target_assignment),
                     member_type=CLASSIC_MEMBER if m.uses_classic_protocol else CONSUMER_MEMBER)
                for m in summary.members
            ),
        ))
    return make("ConsumerGroupDescribeResponse", throttle_time=NO_THROTTLE, groups=tuple(groups))


def _assignment(ctx: RequestContext, topics: tuple[AssignedTopic, ...]) -> object:
    make = ctx.response.make
    return make("Assignment", topic_partitions=tuple(
        make("TopicPartitions", topic_id=t.topic_id, topic_name=t.topic_name, partitions=t.partitions) for t in topics
    ))


def _topics_describable(ctx: RequestContext, summary: ConsumerGroupSummary) -> bool:
    topics: set[str] = set()
    for member in summary.members:
        topics.update(member.subscribed_topic_names)
        topics.update(t.topic_name for t in (*member.assignment, *member.target_assignment))
    return all(ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic) for topic in topics)
