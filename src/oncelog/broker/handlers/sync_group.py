"""SyncGroup (key 14), v0-v5.

- After JoinGroup: the leader sends every member's assignment; it is stored in
  `__consumer_offsets` and handed to every member, and the group becomes Stable.
  Followers wait for it. In a Stable group a member gets its current assignment.
- Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (the group started
  another rebalance), FENCED_INSTANCE_ID (v3+ static members), INCONSISTENT_GROUP_PROTOCOL
  (v5+: protocol type/name differ from the group's).
- v5+: protocol type and name in the response.
- Answered once the stored assignment is on the ISR of the group's `__consumer_offsets`
  partition (acks=all, as Kafka's); in cluster mode, when it is not,
  NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, and for a group coordinated by another
  broker, or one whose partition moved away while its members waited, NOT_COORDINATOR.
- Needs Group READ, checked first: else GROUP_AUTHORIZATION_FAILED with no assignment.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(14, "SyncGroup", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, ErrorCode.group_authorization_failed, b"", None, None)
    coordinator = group_coordinator(ctx)
    assignments = {entry.member_id: entry.assignment async for entry in ctx.paced(request.assignments)}
    result = await coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        assignments,
    )
    if result.error == ErrorCode.none:
        replicated = await coordinator.replicated(request.group_id)
        if replicated != ErrorCode.none:
            return _response(ctx, replicated, b"", None, None)
    return _response(ctx, result.error, result.assignment, result.protocol_type, result.protocol_name)


def _response(ctx: RequestContext, error: ErrorCode, assignment: bytes, protocol_type, protocol_name) -> object:
    return ctx.response.make(
        "SyncGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=error,
        protocol_type=protocol_type if error == ErrorCode.none else None,
        protocol_name=protocol_name if error == ErrorCode.none else None,
        assignment=assignment,
    )
