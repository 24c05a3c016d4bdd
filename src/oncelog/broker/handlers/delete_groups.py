"""DeleteGroups (key 42), v0-v2.

- Deletes groups with no members: their offsets and metadata get tombstones in
  `__consumer_offsets` and the group is gone (Dead). A share group's share partitions
  are reset in `__share_group_state` instead (KIP-932).
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
from oncelog.broker.handlers._share_admin import is_share_group, share_group_error
from oncelog.coordinator.share.partition import UNINITIALIZED
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(42, "DeleteGroups", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    names = {group_id: None async for group_id in ctx.paced(request.groups_names)}  # each once
    results: dict[str, ErrorCode] = {}
    deleted = []
    async for group_id in ctx.paced(names):
        if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, group_id):
            results[group_id] = ErrorCode.group_authorization_failed
        elif is_share_group(ctx, group_id):
            results[group_id] = await _delete_share_group(ctx, group_id)
        else:
            # Each group is deleted on its own, as Kafka's coordinator deletes them.
            results.update(coordinator.delete_groups((group_id,)))
            if results[group_id] == ErrorCode.none:
                deleted.append(group_id)
    # Answered once every deleted group's tombstones are on the ISR: one wait per
    # `__consumer_offsets` partition, all at once.
    by_partition: dict[int, list[str]] = {}
    async for group_id in ctx.paced(deleted):
        by_partition.setdefault(coordinator.partition_for_group(group_id), []).append(group_id)
    replicated = await asyncio.gather(*(coordinator.replicated(groups[0]) for groups in by_partition.values()))
    for groups, error in zip(by_partition.values(), replicated, strict=True):
        async for group_id in ctx.paced(groups):
            results[group_id] = error
    return make(
        "DeleteGroupsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple([
            make("DeletableGroupResult", group_id=group_id, error_code=results[group_id])
            async for group_id in ctx.paced(request.groups_names)
        ]),
    )


async def _delete_share_group(ctx: RequestContext, group_id: str) -> ErrorCode:
    """A share group: NON_EMPTY_GROUP while it has members, else its share partitions
    are reset (to start again where share.auto.offset.reset says, should the group come
    back) and the group is gone."""
    code, _message = share_group_error(ctx, group_id, must_be_empty=True)
    if code is not ErrorCode.none:
        return code
    manager = ctx.broker.share_partitions
    for tp in await manager.group_partitions(group_id):
        code = await manager.reset(group_id, tp, UNINITIALIZED)
        if code is not ErrorCode.none:
            return code
    ctx.broker.share_groups.delete(group_id)
    manager.forget_group(group_id)
    return ErrorCode.none
