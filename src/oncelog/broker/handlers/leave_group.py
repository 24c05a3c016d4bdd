"""LeaveGroup (key 13), v0-v5.

- The member leaves at once instead of waiting for its session to expire; the group
  rebalances without it.
- v3+ batches members, each by member id and/or group.instance.id (static members are
  removed by instance id; a member id that does not own the instance id is
  FENCED_INSTANCE_ID); each gets its own error, the top-level error is the group's.
- v0-v2 name one member; its error is the top-level error.
- Cluster mode: NOT_COORDINATOR (top level) for a group coordinated by another broker.
- Needs Group READ, checked first: else the top-level error is GROUP_AUTHORIZATION_FAILED
  (v3+ with no member results), and no member leaves.
- Deviation: the `reason` (v5+) is only logged.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(13, "LeaveGroup", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    if ctx.version >= 3:
        leaving = [(m.member_id, m.group_instance_id) async for m in ctx.paced(request.members)]
    else:
        leaving = [(request.member_id, None)]
    member_errors: list[ErrorCode]
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error, member_errors = ErrorCode.group_authorization_failed, []
    else:
        error, member_errors = coordinator.leave_group(request.group_id, leaving)
    if ctx.version < 3:
        if error == ErrorCode.none and member_errors:
            error = member_errors[0]
        return make("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error)
    members = tuple([
        make("MemberResponse", member_id=member_id, group_instance_id=instance_id, error_code=member_error)
        # No member errors without a coordinator: then no members in the response either.
        async for (member_id, instance_id), member_error in ctx.paced(zip(leaving, member_errors, strict=False))
    ])
    return make("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error, members=members)
