"""DeleteGroups (key 42), v0-v2.

- Deletes groups with no members: their offsets and metadata get tombstones in
  `__consumer_offsets` and the group is gone (Dead).
- Per group: NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND for an unknown group.
- Each deleted group is answered once its tombstones are on the ISR of its
  `__consumer_offsets` partition (acks=all, as Kafka's); in cluster mode, when they are
  not, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, and a group coordinated by another
  broker NOT_COORDINATOR.
- Each group needs Group DELETE, checked first: else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(42, "DeleteGroups", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    names = list(dict.fromkeys(request.groups_names))
    allowed = [group_id for group_id in names if ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, group_id)]
    results = dict.fromkeys(names, ErrorCode.group_authorization_failed)
    if coordinator is None:
        results.update(dict.fromkeys(allowed, ErrorCode.coordinator_not_available))
    elif allowed:
        deletions = coordinator.delete_groups(allowed)
        deleted = [group_id for group_id, error in deletions.items() if error == ErrorCode.none]
        replicated = await asyncio.gather(*(coordinator.replicated(group_id) for group_id in deleted))
        deletions.update(zip(deleted, replicated, strict=True))
        results.update(deletions)
    return make(
        "DeleteGroupsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple(
            make("DeletableGroupResult", group_id=group_id, error_code=results[group_id])
            for group_id in request.groups_names
        ),
    )
