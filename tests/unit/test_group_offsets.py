"""Committed and transactional offsets of the group coordinator, on real storage: who
may commit, what OffsetFetch sees, and what a restart rebuilds from __consumer_offsets."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.api import NO_OFFSET, CommitOffset, FetchedOffset
from oncelog.coordinator.group.state import EMPTY
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS
from oncelog.kernel.partitions import append_internal
from oncelog.protocol.record_batch import ControlType, build_control_batch
from tests.support.group_harness import INITIAL_DELAY_MS, Harness, on_loop

T0, T1 = ("t", 0), ("t", 1)
PRODUCER_ID, EPOCH = 4000, 0


@pytest.fixture
def harness(tmp_path):
    running = Harness(tmp_path / "data")
    yield running
    running.close()


def fetched(harness, *partitions, group_id="g", require_stable=False):
    error, offsets = harness.coordinator.fetch_offsets(group_id, set(partitions) or None, require_stable)
    assert error == ErrorCode.none
    # A partition asked for is left out of the answer when it has no offset (NO_OFFSET).
    answered = {tp: offsets.get(tp, NO_OFFSET) for tp in partitions} if partitions else offsets
    return {tp: (o.offset, o.error) for tp, o in answered.items()}


def commit(harness, offsets, *, member_id="", generation=-1, instance=None, group_id="g"):
    return harness.coordinator.commit_offsets(
        group_id, member_id, instance, generation, {tp: CommitOffset(o, metadata=f"m{o}") for tp, o in offsets.items()}
    )


def txn_commit(harness, offsets, *, producer_id=PRODUCER_ID, epoch=EPOCH, member_id="", generation=-1,
               instance=None, group_id="g"):
    return harness.coordinator.txn_offset_commit(
        group_id, producer_id, epoch, member_id, generation, instance,
        {tp: CommitOffset(o) for tp, o in offsets.items()},
    )


def write_marker(harness, committed: bool, *, producer_id=PRODUCER_ID, group_id="g"):
    """What the transaction coordinator's marker writer does for __consumer_offsets."""
    partition = harness.coordinator.partition_for_group(group_id)
    marker = build_control_batch(
        ControlType.COMMIT if committed else ControlType.ABORT, producer_id=producer_id, producer_epoch=EPOCH,
        coordinator_epoch=0, timestamp_ms=harness.clock.now_ms(),
    )
    append_internal(harness.broker, CONSUMER_OFFSETS, partition, marker, now_ms=harness.clock.now_ms())
    harness.coordinator.complete_transaction(partition, producer_id, committed)


# ---- OffsetCommit / OffsetFetch -----------------------------------------------------------


@on_loop
def test_simple_consumer_commits_to_a_group_without_members(harness):
    assert commit(harness, {T0: 10, T1: 20}) == {T0: ErrorCode.none, T1: ErrorCode.none}
    assert harness.state() is EMPTY
    assert fetched(harness, T0, T1, ("t", 2)) == {T0: (10, ErrorCode.none), T1: (20, ErrorCode.none),
                                                   ("t", 2): (-1, ErrorCode.none)}
    _, offsets = harness.coordinator.fetch_offsets("g", [T0], False)
    assert offsets[T0] == FetchedOffset(10, -1, "m10", ErrorCode.none)


@on_loop
def test_fetch_of_an_unknown_group_gives_no_offsets(harness):
    assert fetched(harness, T0, group_id="nobody") == {T0: (-1, ErrorCode.none)}
    assert fetched(harness, group_id="nobody") == {}


@on_loop
def test_members_commit_with_their_generation(harness):
    member, _ = harness.stable_group(2)
    assert commit(harness, {T0: 5}, member_id=member.member_id, generation=1) == {T0: ErrorCode.none}
    assert commit(harness, {T0: 6}, member_id=member.member_id, generation=0) == {T0: ErrorCode.illegal_generation}
    assert commit(harness, {T0: 7}, member_id="stranger", generation=1) == {T0: ErrorCode.unknown_member_id}
    # Without member id and generation only a group with no members accepts commits.
    assert commit(harness, {T0: 8}) == {T0: ErrorCode.unknown_member_id}
    assert fetched(harness, T0) == {T0: (5, ErrorCode.none)}


@on_loop
def test_commit_to_unknown_group_with_a_generation_finds_no_group(harness):
    # GROUP_ID_NOT_FOUND; the OffsetCommit handler answers ILLEGAL_GENERATION below v9.
    assert commit(harness, {T0: 1}, member_id="m", generation=3) == {T0: ErrorCode.group_id_not_found}
    assert harness.group() is None


@on_loop
def test_commits_wait_for_the_assignment_but_not_for_a_pending_rebalance(harness):
    first, second = harness.stable_group(2)
    harness.join(first.member_id)  # PreparingRebalance: members may still commit what they processed
    assert commit(harness, {T0: 1}, member_id=second.member_id, generation=1) == {T0: ErrorCode.none}
    harness.join(second.member_id)  # everyone rejoined: CompletingRebalance, generation 2
    assert commit(harness, {T0: 2}, member_id=second.member_id, generation=2) == {T0: ErrorCode.rebalance_in_progress}


@on_loop
def test_static_member_commit_checks_instance_id(harness):
    (member,) = harness.stable_group(1, instances=["i-0"])
    assert commit(harness, {T0: 1}, member_id="old-id", generation=1, instance="i-0") == {
        T0: ErrorCode.fenced_instance_id
    }
    assert commit(harness, {T0: 1}, member_id=member.member_id, generation=1, instance="i-0") == {T0: ErrorCode.none}


@on_loop
def test_metadata_larger_than_the_limit_is_refused_per_partition(harness):
    big = "x" * (harness.settings.offset_metadata_max_bytes + 1)
    result = harness.coordinator.commit_offsets("g", "", None, -1, {T0: CommitOffset(1, -1, big), T1: CommitOffset(2)})
    assert result == {T0: ErrorCode.offset_metadata_too_large, T1: ErrorCode.none}
    assert fetched(harness, T0, T1) == {T0: (-1, ErrorCode.none), T1: (2, ErrorCode.none)}


@on_loop
def test_committed_offsets_and_group_survive_a_restart(harness):
    (member,) = harness.stable_group(1)
    commit(harness, {T0: 11}, member_id=member.member_id, generation=1)
    commit(harness, {T0: 12}, member_id=member.member_id, generation=1)
    commit(harness, {("other", 0): 3}, group_id="simple")
    harness.restart()
    assert fetched(harness, T0) == {T0: (12, ErrorCode.none)}
    assert fetched(harness, group_id="simple") == {("other", 0): (3, ErrorCode.none)}
    group = harness.group()
    assert group.generation_id == 1 and list(group.members) == [member.member_id]
    assert group.members[member.member_id].assignment == b"a-0"
    # The restored member keeps its session by heartbeating with its generation ...
    assert harness.heartbeat(member.member_id, 1) == ErrorCode.none
    # ... and is removed if it does not.
    harness.advance(10_000)
    assert harness.group().members == {}


# ---- OffsetDelete -----------------------------------------------------------------------


@on_loop
def test_offset_delete_keeps_offsets_of_subscribed_topics(harness):
    (member,) = harness.stable_group(1)  # subscribed to topic "t"
    commit(harness, {T0: 1, ("gone", 0): 2}, member_id=member.member_id, generation=1)
    error, results = harness.coordinator.delete_offsets("g", [T0, ("gone", 0)])
    assert error == ErrorCode.none
    assert results == {T0: ErrorCode.group_subscribed_to_topic, ("gone", 0): ErrorCode.none}
    harness.restart()
    assert fetched(harness, T0, ("gone", 0)) == {T0: (1, ErrorCode.none), ("gone", 0): (-1, ErrorCode.none)}


@on_loop
def test_offset_delete_of_an_empty_group_and_of_an_unknown_group(harness):
    commit(harness, {T0: 1})
    assert harness.coordinator.delete_offsets("g", [T0]) == (ErrorCode.none, {T0: ErrorCode.none})
    assert fetched(harness, T0) == {T0: (-1, ErrorCode.none)}
    assert harness.coordinator.delete_offsets("nobody", [T0]) == (ErrorCode.group_id_not_found, {})


# ---- transactional offsets ----------------------------------------------------------------


@on_loop
def test_transactional_offsets_stay_pending_until_the_commit_marker(harness):
    commit(harness, {T0: 1})
    assert txn_commit(harness, {T0: 50, T1: 60}) == {T0: ErrorCode.none, T1: ErrorCode.none}
    assert fetched(harness, T0, T1) == {T0: (1, ErrorCode.none), T1: (-1, ErrorCode.none)}
    assert fetched(harness, T0, T1, require_stable=True) == {
        T0: (-1, ErrorCode.unstable_offset_commit), T1: (-1, ErrorCode.unstable_offset_commit),
    }
    write_marker(harness, committed=True)
    assert fetched(harness, T0, T1, require_stable=True) == {T0: (50, ErrorCode.none), T1: (60, ErrorCode.none)}


@on_loop
def test_aborted_transactional_offsets_are_dropped(harness):
    commit(harness, {T0: 1})
    txn_commit(harness, {T0: 50})
    write_marker(harness, committed=False)
    assert fetched(harness, T0, require_stable=True) == {T0: (1, ErrorCode.none)}


@on_loop
def test_a_commit_written_after_the_transactional_one_wins(harness):
    txn_commit(harness, {T0: 50})
    commit(harness, {T0: 70})  # written later in the log than the transactional offset
    write_marker(harness, committed=True)
    assert fetched(harness, T0) == {T0: (70, ErrorCode.none)}
    harness.restart()
    assert fetched(harness, T0) == {T0: (70, ErrorCode.none)}


@on_loop
def test_transactional_commit_checks_generation_when_given(harness):
    member, _ = harness.stable_group(2)
    assert txn_commit(harness, {T0: 5}, member_id=member.member_id, generation=0) == {T0: ErrorCode.illegal_generation}
    assert txn_commit(harness, {T0: 5}, member_id="zombie", generation=1) == {T0: ErrorCode.unknown_member_id}
    assert txn_commit(harness, {T0: 5}, member_id=member.member_id, generation=1) == {T0: ErrorCode.none}
    # TxnOffsetCommit v0-v2 carry no member: accepted even though the group has members.
    assert txn_commit(harness, {T1: 6}, producer_id=PRODUCER_ID + 1) == {T1: ErrorCode.none}


@on_loop
def test_transactional_commit_from_a_replaced_static_member_is_fenced(harness):
    leader, zombie = harness.stable_group(2, instances=["i-0", "i-1"])
    replacement = harness.join(instance="i-1").result()  # i-1 restarted: new member id, same generation
    assert replacement.error == ErrorCode.none and replacement.member_id != zombie.member_id
    assert txn_commit(harness, {T0: 5}, member_id=zombie.member_id, generation=1, instance="i-1") == {
        T0: ErrorCode.fenced_instance_id,
    }
    assert txn_commit(harness, {T0: 5}, member_id=replacement.member_id, generation=1, instance="i-1") == {
        T0: ErrorCode.none,
    }
    assert txn_commit(harness, {T1: 5}, member_id=leader.member_id, generation=1, instance="i-9") == {
        T1: ErrorCode.unknown_member_id,  # an instance id the group does not know
    }


@on_loop
def test_transactional_commit_to_unknown_group_with_a_generation_is_illegal(harness):
    # Kafka 4's coordinator: the consumer's generation is gone; no group is created.
    assert txn_commit(harness, {T0: 5}, member_id="m", generation=2) == {T0: ErrorCode.illegal_generation}
    assert harness.group() is None
    # Without a generation it is a simple group's commit: created and accepted.
    assert txn_commit(harness, {T0: 5}, member_id="m") == {T0: ErrorCode.none}
    assert harness.state() is EMPTY


@on_loop
def test_transactional_commit_with_a_member_id_but_no_generation(harness):
    # Empty group: generation -1 is accepted whatever the member id (Kafka's rule).
    commit(harness, {T0: 1}, group_id="simple")
    assert txn_commit(harness, {T0: 5}, member_id="anyone", group_id="simple") == {T0: ErrorCode.none}
    # Group with members: a member id makes the generation count, and -1 is not it.
    member, _ = harness.stable_group(2)
    assert txn_commit(harness, {T0: 6}, member_id=member.member_id) == {T0: ErrorCode.illegal_generation}
    assert txn_commit(harness, {T0: 6}, member_id="stranger") == {T0: ErrorCode.unknown_member_id}


@on_loop
def test_transactional_commit_with_an_older_producer_epoch_is_refused(harness):
    txn_commit(harness, {T0: 5}, epoch=3)
    assert txn_commit(harness, {T0: 6}, epoch=2) == {T0: ErrorCode.invalid_producer_epoch}


@on_loop
def test_marker_completes_only_the_groups_of_its_partition(harness):
    # Two groups in different __consumer_offsets partitions, same producer.
    other = next(g for g in (f"g{i}" for i in range(50))
                 if harness.coordinator.partition_for_group(g) != harness.coordinator.partition_for_group("g"))
    txn_commit(harness, {T0: 5})
    txn_commit(harness, {T0: 6}, group_id=other)
    write_marker(harness, committed=True)
    assert fetched(harness, T0) == {T0: (5, ErrorCode.none)}
    assert fetched(harness, T0, group_id=other, require_stable=True) == {T0: (-1, ErrorCode.unstable_offset_commit)}


@on_loop
def test_restart_reloads_pending_committed_and_aborted_transactional_offsets(harness):
    txn_commit(harness, {T0: 10}, producer_id=1)
    write_marker(harness, committed=True, producer_id=1)
    txn_commit(harness, {T1: 20}, producer_id=2)
    write_marker(harness, committed=False, producer_id=2)
    txn_commit(harness, {T1: 30}, producer_id=3)  # still open at the restart
    harness.restart()
    assert fetched(harness, T0, T1) == {T0: (10, ErrorCode.none), T1: (-1, ErrorCode.none)}
    assert fetched(harness, T1, require_stable=True) == {T1: (-1, ErrorCode.unstable_offset_commit)}
    write_marker(harness, committed=True, producer_id=3)
    assert fetched(harness, T1, require_stable=True) == {T1: (30, ErrorCode.none)}


# ---- expiration -------------------------------------------------------------------------


@on_loop
def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_goes(tmp_path):
    harness = Harness(tmp_path / "data", offsets_retention_ms=60_000)
    try:
        commit(harness, {T0: 1})
        harness.advance(59_000)
        assert harness.coordinator.expire_offsets() == 0
        harness.advance(1_000)
        assert harness.coordinator.expire_offsets() == 1
        assert harness.group() is None
        harness.restart()
        assert harness.group() is None
    finally:
        harness.close()


@on_loop
def test_a_consumer_group_keeps_offsets_of_subscribed_topics_past_the_retention(tmp_path):
    harness = Harness(tmp_path / "data", offsets_retention_ms=60_000, min_session_timeout_ms=1000)
    try:
        (member,) = harness.stable_group(1, session_ms=120_000)
        commit(harness, {T0: 1, ("old-topic", 0): 2}, member_id=member.member_id, generation=1)
        harness.advance(60_000 + INITIAL_DELAY_MS)
        assert harness.coordinator.expire_offsets() == 1
        assert fetched(harness, T0, ("old-topic", 0)) == {
            T0: (1, ErrorCode.none), ("old-topic", 0): (-1, ErrorCode.none)
        }
    finally:
        harness.close()


@on_loop
def test_explicit_retention_time_sets_when_offsets_expire(tmp_path):
    # OffsetCommit v2-v4 retention_time: the offset expires that long after the commit,
    # whatever offsets.retention.minutes says, also after a restart.
    harness = Harness(tmp_path / "data", offsets_retention_ms=7 * 24 * 3_600_000)
    try:
        results = harness.coordinator.commit_offsets("g", "", None, -1, {T0: CommitOffset(5)}, retention_ms=30_000)
        assert results == {T0: ErrorCode.none}
        commit(harness, {T1: 6})  # default retention
        assert harness.group().offsets[T0].value.expire_timestamp_ms == harness.clock.now_ms() + 30_000
        harness.restart()
        harness.advance(29_999)
        assert harness.coordinator.expire_offsets() == 0
        harness.advance(1)
        assert harness.coordinator.expire_offsets() == 1
        assert fetched(harness, T0, T1) == {T0: (-1, ErrorCode.none), T1: (6, ErrorCode.none)}
    finally:
        harness.close()
