"""ListGroups (key 16), v0-v5.

- Every group this broker coordinates, with its protocol type ("consumer" for consumer
  groups, "" for groups that only store offsets). In cluster mode only the groups of the
  `__consumer_offsets` partitions this broker leads, as in Kafka: admin clients ask
  every broker and merge the answers.
- v4+: states_filter (case-insensitive; empty = all) and each group's state.
- v5+: types_filter ("classic", "consumer", "share"; case-insensitive) and each group's
  type. Classic and consumer (KIP-848) groups are listed together: a consumer group with
  protocol type "consumer" and its state (Empty, Assigning, Reconciling, Stable). Share
  groups (KIP-932) have protocol type "share" and state Stable or Empty (no members, but
  share partitions persisted).
- Authorization, as Kafka's KafkaApis: with Cluster DESCRIBE every group is listed,
  else only those the principal may DESCRIBE (never an error).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.coordinator.group.api import ListedGroup
from oncelog.coordinator.group.coordinator import filter_value
from oncelog.coordinator.share.groups import EMPTY, SHARE
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(16, "ListGroups", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    states = {filter_value(state) async for state in ctx.paced(getattr(request, "states_filter", ()))}
    types = {filter_value(kind) async for kind in ctx.paced(getattr(request, "types_filter", ()))}
    listed = coordinator.list_groups_matching(states, types) + _share_groups(ctx, states, types)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        listed = [g async for g in ctx.paced(listed)
                  if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    groups = tuple([
        make("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
             group_type=g.group_type)
        async for g in ctx.paced(listed)
    ])
    return make("ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)


def _share_groups(ctx: RequestContext, states: set[str], types: set[str]) -> list[ListedGroup]:
    """The share groups coordinated here: those with members, and those whose share
    partitions are persisted (Empty)."""
    if types and SHARE not in types:
        return []
    share_groups = ctx.broker.share_groups
    found = {group.group_id: group.state for group in share_groups.groups()}
    owner = ctx.broker.group_coordinator.owner_error
    for group_id in ctx.broker.share_partitions.persisted_groups():
        if group_id not in found and owner(group_id) is ErrorCode.none:
            found[group_id] = EMPTY
    return [ListedGroup(group_id, SHARE, state, SHARE) for group_id, state in sorted(found.items())
            if not states or state.lower() in states]
