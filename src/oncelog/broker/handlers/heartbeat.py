"""Heartbeat (key 12), v0-v4.

- Keeps a member's session alive (group.min/max.session.timeout.ms bound its length).
- REBALANCE_IN_PROGRESS while the group is preparing a rebalance: the member must rejoin.
- UNKNOWN_MEMBER_ID (not a member, or the group is empty), ILLEGAL_GENERATION (an older
  generation), FENCED_INSTANCE_ID (v3+: another incarnation owns the group.instance.id).
- Cluster mode: NOT_COORDINATOR for a group coordinated by another broker.
- Needs Group READ, checked first: else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(12, "Heartbeat", range(0, 5))
async def handle(ctx: RequestContext, request) -> object:
    coordinator = group_coordinator(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    else:
        error = coordinator.heartbeat(
            request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None)
        )
    return ctx.response.make("HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=error)
