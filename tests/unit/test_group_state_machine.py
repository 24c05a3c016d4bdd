"""The classic group state machine, one test per transition, driven through the group
coordinator's protocol operations on real storage with a hand-moved clock.

Valid transitions (Kafka's table): Empty -> PreparingRebalance -> CompletingRebalance ->
Stable, Stable/CompletingRebalance -> PreparingRebalance, PreparingRebalance -> Empty,
any -> Dead. Every other (state, target) pair is refused.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    VALID_PREVIOUS_STATES,
    Group,
    GroupState,
    IllegalGroupTransition,
)
from tests.support.group_harness import (
    INITIAL_DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
    on_loop,
    subscription,
)


@pytest.fixture
def harness(tmp_path):
    running = Harness(tmp_path / "data")
    yield running
    running.close()


# ---- the transition table ---------------------------------------------------------------


@pytest.mark.parametrize("current", list(GroupState), ids=lambda s: s.value)
@pytest.mark.parametrize("target", list(GroupState), ids=lambda s: s.value)
def test_transition_table_allows_exactly_kafkas_transitions(current, target):
    group = Group("g", state=current)
    if current in VALID_PREVIOUS_STATES[target]:
        group.transition_to(target, now_ms=5)
        assert group.state is target and group.current_state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalGroupTransition, match=f"from {current.value} to {target.value}"):
            group.transition_to(target, now_ms=5)
        assert group.state is current


# ---- transitions driven by the protocol -------------------------------------------------


@on_loop
def test_first_join_moves_empty_group_to_preparing_rebalance(harness):
    first = harness.join()
    assert first.result().error == ErrorCode.member_id_required  # KIP-394: no group state change yet
    assert harness.state() is EMPTY
    join = harness.join(first.result().member_id)
    assert harness.state() is PREPARING_REBALANCE
    assert not join.done()  # waits for the initial rebalance delay


@on_loop
def test_initial_delay_expiry_moves_preparing_to_completing_rebalance(harness):
    first = harness.join_new(client_id="one")
    harness.advance(INITIAL_DELAY_MS - 1)
    second = harness.join_new(client_id="two")  # arrives in the delay: the delay is extended once
    harness.advance(1)
    assert not first.done() and harness.state() is PREPARING_REBALANCE
    harness.advance(INITIAL_DELAY_MS)
    assert harness.state() is COMPLETING_REBALANCE
    one, two = first.result(), second.result()
    assert one.error == two.error == ErrorCode.none
    assert one.generation_id == two.generation_id == 1
    assert one.protocol_name == "range" and one.leader_id == one.member_id
    assert [m.member_id for m in one.members] == [one.member_id, two.member_id]
    assert two.members == ()  # only the leader gets the members' metadata


@on_loop
def test_leader_sync_moves_completing_rebalance_to_stable(harness):
    joins = [harness.join_new(), harness.join_new()]
    harness.finish_initial_delay()
    leader, follower = (j.result() for j in joins)
    waiting = harness.sync(follower.member_id, 1)
    assert not waiting.done()
    leader_sync = harness.sync(leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    assert harness.state() is STABLE
    assert leader_sync.result().assignment == b"L"
    assert waiting.result().assignment == b"F" and waiting.result().protocol_name == "range"
    # A later SyncGroup in Stable returns the stored assignment at once.
    assert harness.sync(follower.member_id, 1).result().assignment == b"F"


@on_loop
def test_new_member_moves_stable_group_to_preparing_rebalance(harness):
    (only,) = harness.stable_group(1)
    newcomer = harness.join_new()
    assert harness.state() is PREPARING_REBALANCE
    assert harness.heartbeat(only.member_id, 1) == ErrorCode.rebalance_in_progress
    rejoin = harness.join(only.member_id)
    assert rejoin.result().generation_id == newcomer.result().generation_id == 2
    assert harness.state() is COMPLETING_REBALANCE


@on_loop
def test_join_during_completing_rebalance_starts_over(harness):
    joins = [harness.join_new(), harness.join_new()]
    harness.finish_initial_delay()
    leader, follower = (j.result() for j in joins)
    waiting = harness.sync(follower.member_id, 1)
    harness.join_new()  # a third member before the leader sent the assignment
    assert harness.state() is PREPARING_REBALANCE
    assert waiting.result().error == ErrorCode.rebalance_in_progress
    # The leader's late assignment is for a generation that no longer completes.
    assert harness.sync(leader.member_id, 1, {leader.member_id: b"x"}).result().error == ErrorCode.rebalance_in_progress


@on_loop
def test_last_member_leaving_moves_group_to_empty_and_persists_it(harness):
    (only,) = harness.stable_group(1)
    error, members = harness.coordinator.leave_group("g", [(only.member_id, None)])
    assert (error, members) == (ErrorCode.none, [ErrorCode.none])
    assert harness.state() is EMPTY and harness.group().generation_id == 2
    harness.restart()
    assert harness.state() is EMPTY and harness.group().generation_id == 2


@on_loop
def test_delete_moves_empty_group_to_dead_and_forgets_it(harness):
    (only,) = harness.stable_group(1)
    assert harness.coordinator.delete_groups(["g"]) == {"g": ErrorCode.non_empty_group}
    harness.coordinator.leave_group("g", [(only.member_id, None)])
    group = harness.group()
    assert harness.coordinator.delete_groups(["g", "nope"]) == {
        "g": ErrorCode.none, "nope": ErrorCode.group_id_not_found,
    }
    assert group.state is DEAD and harness.group() is None
    harness.restart()
    assert harness.group() is None


# ---- timers -----------------------------------------------------------------------------


@on_loop
def test_session_expiry_removes_member_and_rebalances_the_rest(harness):
    survivor, silent = harness.stable_group(2)
    harness.advance(SESSION_MS // 2)
    assert harness.heartbeat(survivor.member_id, 1) == ErrorCode.none
    harness.advance(SESSION_MS // 2)  # silent's session ends
    assert silent.member_id not in harness.group().members
    assert harness.state() is PREPARING_REBALANCE
    rejoin = harness.join(survivor.member_id)
    assert rejoin.result().generation_id == 2 and rejoin.result().members[0].member_id == survivor.member_id
    assert harness.heartbeat(silent.member_id, 1) == ErrorCode.unknown_member_id


@on_loop
def test_rebalance_timeout_drops_members_that_did_not_rejoin(harness):
    first, second = harness.stable_group(2)
    rejoin = harness.join(first.member_id)  # the leader rejoins: rebalance
    assert harness.state() is PREPARING_REBALANCE
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):
        # second keeps its session alive but ignores REBALANCE_IN_PROGRESS and never rejoins
        assert harness.heartbeat(second.member_id, 1) == ErrorCode.rebalance_in_progress
        assert not rejoin.done()
        harness.advance(SESSION_MS // 2)
    assert rejoin.result().error == ErrorCode.none and rejoin.result().generation_id == 2
    assert list(harness.group().members) == [first.member_id]


@on_loop
def test_members_that_never_sync_are_removed_after_the_rebalance_timeout(harness):
    joins = [harness.join_new(), harness.join_new()]
    harness.finish_initial_delay()
    leader, follower = (j.result() for j in joins)
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):
        harness.advance(SESSION_MS // 2)
        harness.heartbeat(follower.member_id, 1)
        harness.heartbeat(leader.member_id, 1)
    # Nobody sent SyncGroup: both are dropped and the group empties.
    assert harness.group().members == {}
    assert harness.state() is EMPTY


@on_loop
def test_pending_member_that_never_joins_expires(harness):
    first = harness.join().result()
    assert first.member_id in harness.group().pending_members
    harness.advance(SESSION_MS)
    assert first.member_id not in harness.group().pending_members
    assert harness.join(first.member_id).result().error == ErrorCode.unknown_member_id


# ---- protocol errors that change nothing ------------------------------------------------


@on_loop
def test_heartbeat_errors_leave_the_group_as_it_was(harness):
    member, _ = harness.stable_group(2)
    assert harness.heartbeat(member.member_id, 0) == ErrorCode.illegal_generation
    assert harness.heartbeat("stranger", 1) == ErrorCode.unknown_member_id
    assert harness.coordinator.heartbeat("other-group", 1, member.member_id, None) == ErrorCode.unknown_member_id
    assert harness.heartbeat(member.member_id, 1) == ErrorCode.none
    assert harness.state() is STABLE


@on_loop
def test_sync_from_an_older_generation_is_illegal(harness):
    (member,) = harness.stable_group(1)
    assert harness.sync(member.member_id, 0).result().error == ErrorCode.illegal_generation
    assert harness.sync("stranger", 1).result().error == ErrorCode.unknown_member_id
    assert harness.state() is STABLE


@on_loop
def test_sync_during_preparing_rebalance_is_told_to_rejoin(harness):
    first, second = harness.stable_group(2)
    harness.join(first.member_id)
    assert harness.sync(second.member_id, 1).result().error == ErrorCode.rebalance_in_progress


@on_loop
def test_join_with_session_timeout_outside_bounds_is_refused(harness):
    assert harness.join(session_ms=999).result().error == ErrorCode.invalid_session_timeout
    assert harness.join(session_ms=1_800_001).result().error == ErrorCode.invalid_session_timeout
    assert harness.group() is None


@on_loop
def test_join_with_unknown_member_id_of_unknown_group_is_refused(harness):
    assert harness.join("made-up").result().error == ErrorCode.unknown_member_id
    assert harness.group() is None


@on_loop
def test_member_with_no_protocol_in_common_is_refused(harness):
    harness.stable_group(1)
    refused = harness.join(protocols=(("roundrobin", subscription("t")),), require_known=False)
    assert refused.result().error == ErrorCode.inconsistent_group_protocol
    assert harness.state() is STABLE


@on_loop
def test_protocol_with_most_votes_among_common_ones_wins(harness):
    rr, rng, sticky = (("roundrobin", b"r"), ("range", b"g"), ("sticky", b"s"))
    joins = [
        harness.join_new(protocols=(sticky, rr, rng)),  # sticky is not supported by all
        harness.join_new(protocols=(rr, rng)),
        harness.join_new(protocols=(rr, rng)),
        harness.join_new(protocols=(rng, rr, sticky)),
    ]
    harness.finish_initial_delay()
    results = [j.result() for j in joins]
    assert {r.protocol_name for r in results} == {"roundrobin"}
    leader = next(r for r in results if r.members)
    assert [m.metadata for m in leader.members] == [b"r", b"r", b"r", b"r"]


@on_loop
def test_group_max_size_refuses_extra_members(tmp_path):
    harness = Harness(tmp_path / "data", max_size=2)
    try:
        harness.stable_group(2)
        assert harness.join(require_known=False).result().error == ErrorCode.group_max_size_reached
        assert harness.state() is STABLE
    finally:
        harness.close()


@on_loop
def test_full_group_still_takes_back_a_restarted_static_member(tmp_path):
    harness = Harness(tmp_path / "data", max_size=2)
    try:
        harness.stable_group(2, instances=["i-0", "i-1"])
        assert harness.join(instance="i-2").result().error == ErrorCode.group_max_size_reached
        assert harness.join(instance="i-1").result().error == ErrorCode.none
        assert harness.state() is STABLE
    finally:
        harness.close()


@on_loop
def test_follower_rejoining_stable_group_with_same_metadata_does_not_rebalance(harness):
    _, follower = harness.stable_group(2)
    again = harness.join(follower.member_id).result()
    assert again.error == ErrorCode.none and again.generation_id == 1 and again.members == ()
    assert harness.state() is STABLE


# ---- static membership ------------------------------------------------------------------


@on_loop
def test_static_member_rejoin_keeps_its_assignment_without_rebalance(harness):
    leader, follower = harness.stable_group(2, instances=["i-0", "i-1"])
    rejoin = harness.join(instance="i-1").result()  # restarted: no member id
    assert rejoin.error == ErrorCode.none
    assert rejoin.member_id != follower.member_id and rejoin.member_id.startswith("i-1-")
    assert rejoin.generation_id == 1 and rejoin.leader_id == leader.member_id
    assert harness.state() is STABLE
    assert harness.sync(rejoin.member_id, 1, instance="i-1").result().assignment == b"a-1"
    # The previous incarnation is fenced everywhere.
    assert harness.heartbeat(follower.member_id, 1, instance="i-1") == ErrorCode.fenced_instance_id
    assert harness.sync(follower.member_id, 1, instance="i-1").result().error == ErrorCode.fenced_instance_id
    # The new member id survives a restart of the coordinator.
    harness.restart()
    assert harness.group().static_members["i-1"] == rejoin.member_id
    assert harness.heartbeat(rejoin.member_id, 1, instance="i-1") == ErrorCode.none


@on_loop
def test_static_leader_rejoin_learns_members_but_skips_assignment(harness):
    _leader, _ = harness.stable_group(2, instances=["i-0", "i-1"])
    new = harness.join(instance="i-0").result()
    assert new.skip_assignment and new.leader_id == new.member_id and len(new.members) == 2
    old_client = harness.join(instance="i-0", skip_assignment=False).result()  # a pre-v9 client
    assert not old_client.skip_assignment and old_client.leader_id != old_client.member_id
    assert harness.state() is STABLE


@on_loop
def test_static_member_rejoin_with_changed_subscription_rebalances(harness):
    harness.stable_group(2, instances=["i-0", "i-1"])
    changed = harness.join(instance="i-1", protocols=(("range", subscription("t", "u")),))
    assert harness.state() is PREPARING_REBALANCE and not changed.done()


@on_loop
def test_static_member_is_not_dropped_by_rebalance_timeout(harness):
    dynamic = harness.join_new()
    static = harness.join(instance="i-s", session_ms=3 * REBALANCE_MS)
    harness.finish_initial_delay()
    leader = dynamic.result()
    harness.sync(leader.member_id, 1, {leader.member_id: b"d", static.result().member_id: b"s"})
    rejoin = harness.join(leader.member_id)  # rebalance; the static member stays silent
    harness.advance(REBALANCE_MS)
    assert rejoin.result().generation_id == 2 and len(rejoin.result().members) == 2
    assert harness.state() is COMPLETING_REBALANCE
    assert set(harness.group().static_members) == {"i-s"}
    harness.advance(3 * REBALANCE_MS)  # its session ends: then it is gone
    assert harness.group().static_members == {} and harness.state() is EMPTY


@on_loop
def test_leave_group_by_instance_id_checks_member_id(harness):
    _, member = harness.stable_group(2, instances=["i-0", "i-1"])
    error, results = harness.coordinator.leave_group(
        "g", [("wrong-id", "i-1"), ("", "i-9"), (member.member_id, "i-1")]
    )
    assert error == ErrorCode.none
    assert results == [ErrorCode.fenced_instance_id, ErrorCode.unknown_member_id, ErrorCode.none]
    assert harness.state() is PREPARING_REBALANCE
