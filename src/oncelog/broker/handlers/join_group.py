"""JoinGroup (key 11), v0-v9.

- Classic group membership: the member joins (or rejoins) and waits for the rebalance to
  complete; the answer carries the new generation, the selected protocol and the leader;
  the leader also gets every member's protocol metadata to compute the assignment.
- v4+: a member joining without a member id gets MEMBER_ID_REQUIRED with its new id and
  must join again with it (KIP-394). v0-v3 join at once.
- v0 has no rebalance timeout: the session timeout is used for both.
- v5+: group.instance.id (static membership, KIP-345): a known instance that rejoins takes
  over its old place, fencing its old member id (FENCED_INSTANCE_ID).
- v7+: protocol type in the response; protocol name nullable.
- v9: skip_assignment (KIP-814): a static leader that rejoins a Stable group learns the
  members' metadata but must not reassign. Older versions are told the old leader id.
- Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT (outside group.min/max.session.timeout.ms),
  UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL, GROUP_MAX_SIZE_REACHED, REBALANCE_IN_PROGRESS.
- Cluster mode: NOT_COORDINATOR for a group coordinated by another broker, and for a
  join still waiting when the group's `__consumer_offsets` partition moves away. The
  answer waits until the coordinator's writes to the group's partition are replicated.
- Needs Group READ, checked first: else GROUP_AUTHORIZATION_FAILED with no member id,
  generation -1 and no leader, as Kafka's error response.
- Deviation: the `reason` (v8+) is only logged.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import client_host, duration_ms, group_coordinator
from oncelog.broker.handlers._share_admin import is_share_group
from oncelog.coordinator.group.api import JoinRequest, JoinResult
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(11, "JoinGroup", range(0, 10))
async def handle(ctx: RequestContext, request) -> object:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, JoinResult(ErrorCode.group_authorization_failed))
    if is_share_group(ctx, request.group_id):  # a share group's id (KIP-932)
        return _response(ctx, JoinResult(ErrorCode.inconsistent_group_protocol))
    coordinator = group_coordinator(ctx)
    session_timeout_ms = duration_ms(request.session_timeout)
    rebalance_timeout_ms = duration_ms(getattr(request, "rebalance_timeout", None), session_timeout_ms)
    if rebalance_timeout_ms < 0:
        rebalance_timeout_ms = session_timeout_ms
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=tuple([(protocol.name, protocol.metadata) async for protocol in ctx.paced(request.protocols)]),
        require_known_member_id=ctx.version >= 4,
        supports_skip_assignment=ctx.version >= 9,
        reason=getattr(request, "reason", None),
    )
    result = await coordinator.join_group(join)
    if result.error == ErrorCode.none:
        # A static member's rejoin of a Stable group rewrites the group's record: answered
        # once that is on the ISR, as Kafka answers it after its append.
        error = await coordinator.replicated(request.group_id)
        if error != ErrorCode.none:
            result = JoinResult(error, member_id=request.member_id)
    return _response(ctx, result)


def _response(ctx: RequestContext, result: JoinResult) -> object:
    make = ctx.response.make
    nullable_names = ctx.version >= 7
    members = tuple(
        make("JoinGroupResponseMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
             metadata=m.metadata)
        for m in result.members
    )
    return make(
        "JoinGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if nullable_names else (result.protocol_name or ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )
