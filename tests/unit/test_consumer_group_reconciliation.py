"""The reconciliation of a consumer group member with its target (Kafka's
CurrentAssignmentBuilder): revocation before assignment, epochs, unreleased partitions."""

import uuid

import pytest

from oncelog.coordinator.group.consumer_member import ConsumerGroupMember, MemberState
from oncelog.coordinator.group.reconciliation import FencedMemberEpoch, reconcile

T = uuid.UUID(int=7)


def member(epoch, assigned=(), pending=(), state=MemberState.STABLE, previous=None):
    return ConsumerGroupMember(
        member_id="m", member_epoch=epoch, previous_member_epoch=epoch - 1 if previous is None else previous,
        state=state, assigned_partitions={T: frozenset(assigned)} if assigned else {},
        partitions_pending_revocation={T: frozenset(pending)} if pending else {},
    )


def free(_topic, _partition):
    return -1


def owned_by_other(*partitions):
    return lambda _topic, partition: 5 if partition in partitions else -1


def test_a_stable_member_at_the_target_epoch_is_left_alone():
    current = member(3, assigned={0, 1})
    assert reconcile(current, 3, {T: frozenset({0, 1, 2})}, free, None) is current


def test_a_member_must_revoke_before_it_moves_to_the_next_epoch():
    current = member(3, assigned={0, 1, 2})
    step = reconcile(current, 4, {T: frozenset({0})}, free, {T: frozenset({0, 1, 2})})
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert step.member_epoch == 3  # it stays in its epoch until it revoked
    assert step.assigned_partitions == {T: frozenset({0})}
    assert step.partitions_pending_revocation == {T: frozenset({1, 2})}


def test_a_member_still_reporting_a_revoked_partition_stays_unrevoked():
    current = member(3, assigned={0}, pending={1, 2}, state=MemberState.UNREVOKED_PARTITIONS)
    assert reconcile(current, 4, {T: frozenset({0})}, free, {T: frozenset({0, 2})}) is current
    assert reconcile(current, 4, {T: frozenset({0})}, free, None) is current  # it did not say: still owns


def test_once_revoked_the_member_moves_to_the_target_epoch():
    current = member(3, assigned={0}, pending={1, 2}, state=MemberState.UNREVOKED_PARTITIONS)
    step = reconcile(current, 4, {T: frozenset({0})}, free, {T: frozenset({0})})
    assert (step.state, step.member_epoch, step.previous_member_epoch) == (MemberState.STABLE, 4, 3)
    assert step.assigned_partitions == {T: frozenset({0})} and not step.partitions_pending_revocation


def test_partitions_another_member_still_owns_are_not_assigned_yet():
    current = member(3, assigned={0})
    step = reconcile(current, 4, {T: frozenset({0, 1, 2})}, owned_by_other(2), {T: frozenset({0})})
    assert step.state is MemberState.UNRELEASED_PARTITIONS
    assert step.member_epoch == 4
    assert step.assigned_partitions == {T: frozenset({0, 1})}
    released = reconcile(step, 4, {T: frozenset({0, 1, 2})}, free, {T: frozenset({0, 1})})
    assert released.state is MemberState.STABLE
    assert released.assigned_partitions == {T: frozenset({0, 1, 2})}


def test_a_new_member_gets_its_free_partitions_at_once():
    step = reconcile(member(0, previous=0), 1, {T: frozenset({0, 1})}, free, {})
    assert (step.state, step.member_epoch) == (MemberState.STABLE, 1)
    assert step.assigned_partitions == {T: frozenset({0, 1})}


def test_revocation_is_skipped_when_the_member_no_longer_owns_what_it_loses():
    # A member that joins again (epoch 0, owning nothing) is not asked to revoke.
    current = member(0, assigned={0, 1}, previous=0)
    step = reconcile(current, 5, {T: frozenset({0})}, free, {})
    assert (step.state, step.member_epoch) == (MemberState.STABLE, 5)
    assert step.assigned_partitions == {T: frozenset({0})}


def test_an_unknown_state_fences_a_member_that_still_owns_partitions():
    current = member(3, assigned={0}, state=MemberState.UNKNOWN)
    with pytest.raises(FencedMemberEpoch):
        reconcile(current, 4, {T: frozenset({0})}, free, {T: frozenset({0})})
    step = reconcile(current, 4, {T: frozenset({0})}, free, {})
    assert (step.state, step.member_epoch) == (MemberState.STABLE, 4)


def test_memberstate_values_are_kafkas_and_unknown_values_read_as_unknown():
    assert [int(s) for s in MemberState] == [0, 1, 2, 127]
    assert MemberState.from_value(9) is MemberState.UNKNOWN
