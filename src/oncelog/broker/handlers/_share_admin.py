"""Shared by the share group offset APIs (DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets) and the group APIs that must refuse a
share group's id: whether a group id is a share group's, and may be named here."""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext
from oncelog.protocol.messages import ErrorCode


def share_group_error(ctx: RequestContext, group_id: str, *, must_be_empty: bool) -> tuple[ErrorCode, str | None]:
    """NOT_COORDINATOR for a group coordinated elsewhere, GROUP_ID_NOT_FOUND for a classic
    or consumer group's id, NON_EMPTY_GROUP (when `must_be_empty`) while it has members."""
    owner = ctx.broker.group_coordinator.owner_error(group_id)
    if owner is not ErrorCode.none:
        return owner, None
    group = ctx.broker.share_groups.group(group_id)
    if not is_share_group(ctx, group_id) and ctx.broker.group_coordinator.group(group_id) is not None:
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
    if must_be_empty and group is not None and group.members:
        return ErrorCode.non_empty_group, "The group has active members."
    return ErrorCode.none, None


def is_share_group(ctx: RequestContext, group_id: str) -> bool:
    """Whether `group_id` is a share group's: one with members, or an empty one whose
    share partitions are persisted here (until DeleteGroups)."""
    return ctx.broker.share_groups.is_share_group(group_id) or ctx.broker.share_partitions.has_persisted(group_id)
