"""Reconciliation of a consumer group member with its target assignment (KIP-848), as
Kafka's CurrentAssignmentBuilder.

Given a member, the group's target assignment for it at `target_epoch`, who owns each
partition now (`partition_epoch`: the epoch of its current owner, -1 when free) and the
partitions the member says it owns, `reconcile` returns the member's next state:

    STABLE                 reconciled; a newer target epoch starts the next step
    UNREVOKED_PARTITIONS   it keeps its epoch and must revoke `partitions_pending_revocation`
                           (they are no longer in its target); once its heartbeat no longer
                           reports them it moves to epoch + 1 and on
    UNRELEASED_PARTITIONS  it is at the target epoch but waits for partitions another member
                           has not revoked yet; they are added as they become free

A partition is never handed to a member while another still owns it: revocation comes
before assignment. Partitions the member may keep go into `assigned_partitions` at once;
a response hands the member `assigned_partitions`, never those pending revocation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from oncelog.coordinator.group.assignment import EMPTY, Assignment, intersects
from oncelog.coordinator.group.consumer_member import ConsumerGroupMember, MemberState

PartitionEpoch = Callable[[uuid.UUID, int], int]


class FencedMemberEpoch(Exception):
    """The member must give up its partitions and join again (FENCED_MEMBER_EPOCH)."""


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, partition_epoch: PartitionEpoch,
              owned: Assignment | None) -> ConsumerGroupMember:
    """The member's next state towards (`target_epoch`, `target`). `owned` is what its
    heartbeat reported, None when the heartbeat did not say (it then still owns all)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # UNKNOWN: written by a newer coordinator. Start over from nothing.
    if owned is None or owned:
        raise FencedMemberEpoch(f"member {member.member_id} is in an unknown state; it must give up its "
                                "partitions and join again")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _still_owns(owned: Assignment | None, pending_revocation: Assignment) -> bool:
    """Whether the member still reports one of the partitions it must revoke (or did not
    report what it owns at all)."""
    return owned is None or intersects(owned, pending_revocation)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
                     partition_epoch: PartitionEpoch, owned: Assignment | None) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    pending_revocation: dict[uuid.UUID, frozenset[int]] = {}
    pending_assignment: dict[uuid.UUID, frozenset[int]] = {}
    has_unreleased = False
    current = member.assigned_partitions
    for topic_id in {*target, *current}:
        wanted = target.get(topic_id, frozenset())
        had = current.get(topic_id, frozenset())
        kept = had & wanted
        revoke = had - kept
        to_assign = wanted - kept
        free = frozenset(p for p in to_assign if partition_epoch(topic_id, p) == -1)
        has_unreleased = has_unreleased or free != to_assign
        if kept:
            assigned[topic_id] = kept
        if revoke:
            pending_revocation[topic_id] = revoke
        if free:
            pending_assignment[topic_id] = free

    if pending_revocation and _still_owns(owned, pending_revocation):
        # Revoke first, at the current epoch; nothing new until the member confirms.
        return replace(member.with_epoch(member_epoch), state=MemberState.UNREVOKED_PARTITIONS,
                       assigned_partitions=assigned, partitions_pending_revocation=pending_revocation)
    for topic_id, partitions in pending_assignment.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return replace(member.with_epoch(target_epoch), state=state, assigned_partitions=assigned,
                   partitions_pending_revocation=EMPTY)
