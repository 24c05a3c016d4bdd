"""ListGroups (key 16), v0-v5.

- Every group this broker coordinates, with its protocol type ("consumer" for consumer
  groups, "" for groups that only store offsets). In cluster mode only the groups of the
  `__consumer_offsets` partitions this broker leads, as in Kafka: admin clients ask
  every broker and merge the answers.
- v4+: states_filter (case-insensitive; empty = all) and each group's state.
- v5+: types_filter ("classic", "consumer"; case-insensitive) and each group's type.
  Classic and consumer (KIP-848) groups are listed together: a consumer group with
  protocol type "consumer" and its state (Empty, Assigning, Reconciling, Stable).
- Authorization, as Kafka's KafkaApis: with Cluster DESCRIBE every group is listed,
  else only those the principal may DESCRIBE (never an error).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.coordinator.group.coordinator import filter_value
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(16, "ListGroups", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    states = {filter_value(state) async for state in ctx.paced(getattr(request, "states_filter", ()))}
    types = {filter_value(kind) async for kind in ctx.paced(getattr(request, "types_filter", ()))}
    listed = coordinator.list_groups_matching(states, types)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        listed = [g async for g in ctx.paced(listed)
                  if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    groups = tuple([
        make("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
             group_type=g.group_type)
        async for g in ctx.paced(listed)
    ])
    return make("ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)
