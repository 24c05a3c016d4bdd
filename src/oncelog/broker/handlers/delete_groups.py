"""DeleteGroups (key 42), v0-v2.

- Deletes groups with no members: their offsets and metadata get tombstones in
  `__consumer_offsets` and the group is gone (Dead).
- Per group: NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND for an unknown group.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(42, "DeleteGroups", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    if coordinator is None:
        results = dict.fromkeys(request.groups_names, ErrorCode.coordinator_not_available)
    else:
        results = coordinator.delete_groups(request.groups_names)
    return make(
        "DeleteGroupsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple(
            make("DeletableGroupResult", group_id=group_id, error_code=results[group_id])
            for group_id in request.groups_names
        ),
    )
