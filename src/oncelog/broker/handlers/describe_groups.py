"""DescribeGroups (key 15), v0-v6.

- Per group: state, protocol type, and (when Stable) the selected protocol and each
  member's metadata and assignment; in other states members are listed without them.
- v0-v5: an unknown group is described as Dead with no error, as Kafka does; v6 answers
  GROUP_ID_NOT_FOUND (KIP-1043).
- v3+: authorized operations when asked for: with no ACLs, every group operation
  (READ, DELETE, DESCRIBE).
- v4+: group.instance.id of members.
- In cluster mode a group coordinated by another broker gets NOT_COORDINATOR (with no
  state, as Kafka answers it).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode

# Kafka's AclOperation codes READ(3), DELETE(6), DESCRIBE(8) as a bit field.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
OPERATIONS_NOT_REQUESTED = -(2**31)


@api(15, "DescribeGroups", range(0, 7))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    requested = getattr(request, "include_authorized_operations", False)
    operations = GROUP_OPERATIONS if requested else OPERATIONS_NOT_REQUESTED
    groups = []
    for group_id in request.groups:
        error, summary = coordinator.describe_group(group_id) if coordinator is not None else (ErrorCode.none, None)
        if error != ErrorCode.none:
            groups.append(make(
                "DescribedGroup", error_code=error, error_message=None, group_id=group_id, group_state="",
                protocol_type="", protocol_data="", members=(), authorized_operations=operations,
            ))
            continue
        if summary is None:
            error = ErrorCode.coordinator_not_available if coordinator is None else (
                ErrorCode.group_id_not_found if ctx.version >= 6 else ErrorCode.none
            )
            groups.append(make(
                "DescribedGroup", error_code=error,
                error_message=f"Group {group_id} not found." if error == ErrorCode.group_id_not_found else None,
                group_id=group_id, group_state="Dead", protocol_type="", protocol_data="", members=(),
                authorized_operations=operations,
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
            members=members, authorized_operations=operations,
        ))
    return make("DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(groups))
