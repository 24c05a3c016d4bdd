"""The leader's view of its followers: caught-up times, ISR expansion and shrink, the
high watermark over the (maximal) ISR, and one ISR change at a time."""

import pytest

from oncelog.cluster.replica_state import FollowerState, LeaderReplicaState

LAG_MS = 30_000
T0 = 1_000_000


def leader(isr=(1, 2, 3), replicas=(1, 2, 3), epoch_start=100, now_ms=T0):
    return LeaderReplicaState(
        1,
        replicas,
        isr,
        leader_epoch=4,
        leader_epoch_start_offset=epoch_start,
        now_ms=now_ms,
        replica_lag_time_max_ms=LAG_MS,
    )


def test_a_new_leader_knows_no_follower_offsets_and_counts_isr_members_as_caught_up_now():
    state = leader(isr=(1, 2))
    assert state.followers[2] == FollowerState(
        2, log_end_offset=-1, last_caught_up_ms=T0, last_fetch_ms=0, last_fetch_leader_leo=-1
    )
    assert state.followers[3].last_caught_up_ms == 0
    assert set(state.followers) == {2, 3}


def test_leader_must_be_one_of_the_replicas():
    with pytest.raises(ValueError, match="exclude it"):
        LeaderReplicaState(9, (1, 2), (1, 2), 0, 0, now_ms=T0, replica_lag_time_max_ms=LAG_MS)


# --- caught-up time -------------------------------------------------------------------------


def test_fetch_at_the_leaders_log_end_marks_the_follower_caught_up_now():
    state = leader()
    assert state.update_follower_fetch(2, fetch_offset=150, leader_leo=150, now_ms=T0 + 10) is True
    follower = state.followers[2]
    assert follower.log_end_offset == 150 and follower.last_caught_up_ms == T0 + 10
    assert follower.last_fetch_ms == T0 + 10 and follower.last_fetch_leader_leo == 150


def test_fetch_reaching_the_leaders_previous_log_end_marks_caught_up_at_the_previous_fetch():
    # Small produces at a high rate: the follower never equals the current LEO, but each
    # fetch has what the leader had at the previous one.
    state = leader()
    state.update_follower_fetch(2, fetch_offset=140, leader_leo=150, now_ms=T0 + 10)
    state.update_follower_fetch(2, fetch_offset=150, leader_leo=160, now_ms=T0 + 20)
    assert state.followers[2].last_caught_up_ms == T0 + 10
    state.update_follower_fetch(2, fetch_offset=160, leader_leo=170, now_ms=T0 + 30)
    assert state.followers[2].last_caught_up_ms == T0 + 20


def test_fetch_behind_the_leaders_previous_log_end_does_not_move_the_caught_up_time():
    state = leader(isr=(1,))
    state.update_follower_fetch(2, fetch_offset=140, leader_leo=150, now_ms=T0 + 10)
    state.update_follower_fetch(2, fetch_offset=145, leader_leo=160, now_ms=T0 + 20)
    assert state.followers[2].last_caught_up_ms == 0


def test_caught_up_time_never_goes_back():
    state = leader()
    state.update_follower_fetch(2, fetch_offset=150, leader_leo=150, now_ms=T0 + 50)
    state.update_follower_fetch(
        2, fetch_offset=150, leader_leo=150, now_ms=T0 + 40
    )  # clock stepped back
    assert state.followers[2].last_caught_up_ms == T0 + 50


def test_fetch_reports_whether_the_follower_log_end_moved():
    state = leader()
    assert state.update_follower_fetch(2, 120, 150, T0 + 1) is True
    assert state.update_follower_fetch(2, 120, 150, T0 + 2) is False


def test_fetch_from_a_broker_that_is_not_a_replica_is_refused():
    with pytest.raises(ValueError, match="not a follower"):
        leader().update_follower_fetch(7, 0, 0, T0)


# --- high watermark -------------------------------------------------------------------------


def test_high_watermark_is_the_smallest_isr_log_end():
    state = leader()
    state.update_follower_fetch(2, 130, 150, T0 + 1)
    state.update_follower_fetch(3, 140, 150, T0 + 1)
    assert state.high_watermark_candidate(leader_leo=150) == 130


def test_high_watermark_includes_the_leaders_own_log_end():
    state = leader()
    state.update_follower_fetch(2, 150, 150, T0 + 1)
    state.update_follower_fetch(3, 150, 150, T0 + 1)
    assert state.high_watermark_candidate(leader_leo=120) == 120


def test_high_watermark_with_the_leader_alone_in_the_isr_is_its_log_end():
    state = leader(isr=(1,))
    state.update_follower_fetch(2, 10, 150, T0 + 1)
    assert state.high_watermark_candidate(leader_leo=150) == 150


def test_new_leader_high_watermark_candidate_is_unknown_until_followers_fetch():
    # The caller keeps the larger of this and its current high watermark: it never goes back.
    assert leader().high_watermark_candidate(leader_leo=150) == -1


def test_high_watermark_waits_for_a_caught_up_follower_outside_the_isr_when_given_the_time():
    state = leader(isr=(1,))
    state.update_follower_fetch(2, 150, 150, T0 + 1)  # caught up at T0 + 1
    assert state.high_watermark_candidate(leader_leo=160, now_ms=T0 + 2, isr_eligible={2}) == 150
    assert state.high_watermark_candidate(leader_leo=160) == 160
    assert state.high_watermark_candidate(leader_leo=160, now_ms=T0 + 1 + LAG_MS + 1, isr_eligible={2}) == 160


def test_a_fenced_follower_caught_up_a_moment_ago_does_not_hold_the_high_watermark():
    """Issue 45: a follower cut off from the cluster was fenced and left the ISR at +8.6 s,
    but had been caught up within replica.lag.time.max.ms: partitions it followed took no
    acks=all write until the heal. Kafka waits only for followers that may join the ISR."""
    state = leader(isr=(1, 3))  # the controller took 2 out of the ISR when it fenced it
    state.update_follower_fetch(2, 150, 150, T0 + 1)  # its last fetch, caught up
    state.update_follower_fetch(3, 160, 160, T0 + 2)
    assert state.high_watermark_candidate(leader_leo=160, now_ms=T0 + 3, isr_eligible={1, 3}) == 160
    assert state.high_watermark_candidate(leader_leo=160, now_ms=T0 + 3, isr_eligible={1, 2, 3}) == 150


def test_pending_isr_change_counts_the_maximal_isr():
    state = leader(isr=(1,))
    state.update_follower_fetch(2, 130, 150, T0 + 1)
    state.begin_isr_change({1, 2})
    assert state.maximal_isr == {1, 2} and state.isr == {1}
    assert state.high_watermark_candidate(leader_leo=150) == 130


def test_pending_shrink_still_counts_the_member_being_removed():
    state = leader(isr=(1, 2))
    state.update_follower_fetch(2, 130, 150, T0 + 1)
    state.begin_isr_change({1})
    assert state.maximal_isr == {1, 2}
    assert state.high_watermark_candidate(leader_leo=150) == 130
    state.complete_isr_change({1})
    assert state.high_watermark_candidate(leader_leo=150) == 150


# --- ISR expansion and shrink ---------------------------------------------------------------


def test_follower_that_catches_up_joins_the_isr():
    state = leader(isr=(1, 2))
    state.update_follower_fetch(3, 120, 150, T0 + 1)
    assert state.isr_expansion_candidates(high_watermark=130) == set()
    state.update_follower_fetch(3, 130, 150, T0 + 2)
    assert state.isr_expansion_candidates(high_watermark=130) == {3}


def test_follower_below_the_leader_epoch_start_does_not_join_the_isr():
    # It may still miss committed records of this epoch between the high watermark and the
    # epoch start: if it led next, they would be lost.
    state = leader(isr=(1, 2), epoch_start=200)
    state.update_follower_fetch(3, 150, 220, T0 + 1)
    assert state.isr_expansion_candidates(high_watermark=140) == set()
    state.update_follower_fetch(3, 200, 220, T0 + 2)
    assert state.isr_expansion_candidates(high_watermark=140) == {3}


def test_follower_lagging_past_replica_lag_time_max_leaves_the_isr():
    state = leader()
    state.update_follower_fetch(2, 150, 150, T0 + 1)
    state.update_follower_fetch(3, 150, 150, T0 + 1)
    # The leader appends; follower 3 keeps fetching but stays behind: last caught up at T0 + 1.
    state.update_follower_fetch(2, 200, 200, T0 + LAG_MS)
    state.update_follower_fetch(3, 151, 200, T0 + LAG_MS)
    assert state.out_of_sync_replicas(leader_leo=200, now_ms=T0 + LAG_MS + 1) == set()
    assert state.out_of_sync_replicas(leader_leo=200, now_ms=T0 + LAG_MS + 2) == {3}


def test_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time():
    state = leader(isr=(1, 2))
    assert state.out_of_sync_replicas(leader_leo=150, now_ms=T0 + LAG_MS) == set()
    assert state.out_of_sync_replicas(leader_leo=150, now_ms=T0 + LAG_MS + 1) == {2}


def test_follower_at_the_leaders_log_end_is_never_out_of_sync():
    # No appends for a long time: a follower with the whole log is in sync however old its
    # last fetch.
    state = leader(isr=(1, 2))
    state.update_follower_fetch(2, 150, 150, T0 + 1)
    assert state.out_of_sync_replicas(leader_leo=150, now_ms=T0 + 10 * LAG_MS) == set()


def test_leader_is_never_out_of_sync_with_itself():
    assert 1 not in leader().out_of_sync_replicas(leader_leo=150, now_ms=T0 + 10 * LAG_MS)


def test_no_isr_change_is_proposed_while_one_is_in_flight():
    state = leader(isr=(1, 2))
    state.update_follower_fetch(3, 150, 150, T0 + 1)
    state.begin_isr_change({1, 2, 3})
    assert state.isr_change_pending
    assert state.isr_expansion_candidates(high_watermark=150) == set()
    assert state.out_of_sync_replicas(leader_leo=150, now_ms=T0 + 10 * LAG_MS) == set()
    with pytest.raises(RuntimeError, match="in flight"):
        state.begin_isr_change({1})


def test_completed_isr_change_is_committed():
    state = leader(isr=(1, 2))
    state.begin_isr_change({1, 2, 3})
    state.complete_isr_change({1, 2, 3})
    assert (
        state.isr == {1, 2, 3} and not state.isr_change_pending and state.maximal_isr == {1, 2, 3}
    )


def test_aborted_isr_change_falls_back_to_the_committed_isr():
    state = leader(isr=(1, 2))
    state.begin_isr_change({1, 2, 3})
    state.abort_isr_change()
    assert state.isr == {1, 2} and state.maximal_isr == {1, 2} and not state.isr_change_pending


def test_isr_seen_in_the_image_without_a_pending_change_becomes_the_committed_isr():
    state = leader()
    state.complete_isr_change({1, 2})
    assert state.isr == {1, 2} and state.maximal_isr == {1, 2} and not state.isr_change_pending


def test_leader_never_proposes_an_isr_without_itself():
    with pytest.raises(ValueError, match="own ISR"):
        leader().begin_isr_change({2, 3})


def test_isr_written_by_the_controller_replaces_the_committed_one_and_drops_a_pending_change():
    state = leader()
    state.begin_isr_change({1, 2})
    state.complete_isr_change({1, 3})
    assert state.isr == {1, 3} and not state.isr_change_pending


def test_min_isr_counts_the_committed_isr_and_is_capped_by_the_replication_factor():
    state = leader(isr=(1, 2), replicas=(1, 2, 3))
    assert not state.is_under_min_isr(2)
    assert state.is_under_min_isr(3)
    state.begin_isr_change({1})
    assert not state.is_under_min_isr(2)  # the shrink is not committed yet
    single = LeaderReplicaState(1, (1,), (1,), 0, 0, now_ms=T0, replica_lag_time_max_ms=LAG_MS)
    assert single.effective_min_isr(2) == 1 and not single.is_under_min_isr(2)
