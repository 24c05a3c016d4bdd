"""DescribeGroups (key 15), v0-v6.

- Per group: state, protocol type, and (when Stable) the selected protocol and each
  member's metadata and assignment; in other states members are listed without them.
- v0-v5: an unknown group is described as Dead with no error, as Kafka does; v6 answers
  GROUP_ID_NOT_FOUND (KIP-1043). A consumer group (KIP-848) is described as Kafka 4
  does: as Dead below v6, GROUP_ID_NOT_FOUND "Group <id> is not a classic group." at v6
  (ConsumerGroupDescribe describes it).
- Each group needs Group DESCRIBE: else GROUP_AUTHORIZATION_FAILED, with no state.
- v3+: with `include_authorized_operations`, each group described without error carries
  the principal's operations on it (every group operation, READ, DELETE and DESCRIBE,
  without an authorizer); the others AUTHORIZED_OPERATIONS_OMITTED, as in Kafka.
- v4+: group.instance.id of members.
- In cluster mode a group coordinated by another broker gets NOT_COORDINATOR (with no
  state, as Kafka answers it).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType


@api(15, "DescribeGroups", range(0, 7))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    requested = getattr(request, "include_authorized_operations", False)

    def operations(group_id: str) -> int:
        return ctx.authorized_operations(ResourceType.GROUP, group_id) if requested else AUTHORIZED_OPERATIONS_OMITTED

    groups = []
    for group_id in request.groups:
        await ctx.pace()
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            error, summary = ErrorCode.group_authorization_failed, None
        else:
            error, summary = coordinator.describe_group(group_id)
        if error != ErrorCode.none:
            groups.append(make(
                "DescribedGroup", error_code=error, error_message=None, group_id=group_id, group_state="",
                protocol_type="", protocol_data="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
            ))
            continue
        if summary is None:
            error = ErrorCode.group_id_not_found if ctx.version >= 6 else ErrorCode.none
            described = error == ErrorCode.none  # v0-v5: an unknown group is described, as Dead
            kind = "is not a classic group" if coordinator.is_consumer_group(group_id) \
                else "not found"
            groups.append(make(
                "DescribedGroup", error_code=error,
                error_message=f"Group {group_id} {kind}." if error == ErrorCode.group_id_not_found else None,
                group_id=group_id, group_state="Dead", protocol_type="", protocol_data="", members=(),
                authorized_operations=operations(group_id) if described else AUTHORIZED_OPERATIONS_OMITTED,
            ))
            continue
        members = tuple(
            make("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                 client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                 member_assignment=m.assignment)
            for m in summary.members
        )
        groups.append(make(
            "DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
            group_state=summary.state, protocol_type=summary.protocol_type, protocol_data=summary.protocol_name,
            members=members, authorized_operations=operations(group_id),
        ))
    return make("DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(groups))
