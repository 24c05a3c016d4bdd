"""Replica placement, explicit assignment checks and leader election from the ISR."""

import random
from collections import Counter

import pytest

from oncelog.cluster.image import PartitionRecord
from oncelog.cluster.placement import (
    InvalidReplicationFactor,
    alter_isr,
    check_assignment,
    elect_leader,
    elect_on_return,
    elect_preferred,
    election_order,
    imbalanced_partitions,
    place_replicas,
)

# --- placement ----------------------------------------------------------------------------


def test_placement_matches_kafkas_rack_unaware_table():
    # The example in Kafka's AdminUtils: 5 brokers, 10 partitions, RF 3, start index 0.
    assignment = place_replicas([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0)
    assert assignment == [
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
        [3, 4, 0],
        [4, 0, 1],
        [0, 2, 3],  # second round: the followers shift by one more
        [1, 3, 4],
        [2, 4, 0],
        [3, 0, 1],
        [4, 1, 2],
    ]


def test_placement_spreads_leaders_over_brokers():
    assignment = place_replicas([1, 2, 3], 12, 3, rng=random.Random(7))
    assert Counter(replicas[0] for replicas in assignment) == {1: 4, 2: 4, 3: 4}
    assert Counter(b for replicas in assignment for b in replicas) == {1: 12, 2: 12, 3: 12}


def test_placement_never_puts_two_replicas_of_a_partition_on_one_broker():
    for seed in range(20):
        for replicas in place_replicas([1, 2, 3, 4, 5], 17, 3, rng=random.Random(seed)):
            assert len(set(replicas)) == 3


def test_placement_spreads_a_brokers_followers_over_the_other_brokers():
    # Partitions led by broker 1 do not all pick the same follower.
    assignment = place_replicas([1, 2, 3, 4], 16, 2, rng=random.Random(3))
    followers_of_1 = {replicas[1] for replicas in assignment if replicas[0] == 1}
    assert followers_of_1 == {2, 3, 4}


def test_placement_is_deterministic_given_the_rng_and_independent_of_broker_order():
    first = place_replicas([3, 1, 2], 6, 2, rng=random.Random(42))
    second = place_replicas([1, 2, 3], 6, 2, rng=random.Random(42))
    assert first == second


def test_placement_draws_its_start_from_the_rng():
    starts = {
        place_replicas([1, 2, 3, 4, 5], 1, 1, rng=random.Random(seed))[0][0] for seed in range(40)
    }
    assert len(starts) > 1


def test_added_partitions_continue_the_leader_round_robin():
    whole = place_replicas([1, 2, 3], 8, 2, fixed_start_index=1)
    added = place_replicas([1, 2, 3], 3, 2, start_partition=5, fixed_start_index=1)
    assert [replicas[0] for replicas in added] == [replicas[0] for replicas in whole[5:]]


def test_replication_factor_above_brokers_is_refused_with_kafkas_message():
    with pytest.raises(InvalidReplicationFactor) as refused:
        place_replicas([1, 2, 3], 1, 4)
    assert str(refused.value) == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 cannot be "
        "reached because only 3 broker(s) are registered."
    )


def test_replication_factor_below_one_is_refused_with_kafkas_message():
    with pytest.raises(InvalidReplicationFactor) as refused:
        place_replicas([1, 2, 3], 1, 0)
    assert str(refused.value) == (
        "Unable to replicate the partition 0 time(s): Invalid replication factor 0: the replication "
        "factor must be positive."
    )


def test_no_registered_broker_refuses_any_replication_factor():
    with pytest.raises(InvalidReplicationFactor, match="only 0 broker"):
        place_replicas([], 1, 1)


# --- explicit assignments -----------------------------------------------------------------


def test_valid_explicit_assignment_has_no_error():
    assert check_assignment({0: [1, 2], 1: [2, 3], 2: [3, 1]}, {1, 2, 3}) is None


def test_explicit_assignment_naming_an_unregistered_broker_is_refused():
    assert check_assignment({0: [1, 7]}, {1, 2, 3}) == (
        "The manual partition assignment includes broker 7, but no such broker is registered."
    )


def test_explicit_assignment_repeating_a_broker_is_refused():
    assert check_assignment({0: [2, 1, 2]}, {1, 2, 3}) == (
        "The manual partition assignment includes the broker 2 more than once."
    )


def test_explicit_assignment_with_inconsistent_replication_factor_is_refused():
    assert check_assignment({0: [1, 2], 1: [3]}, {1, 2, 3}) == (
        "The manual partition assignment includes a partition with 1 replica(s), but this is not "
        "consistent with previous partitions, which have 2 replica(s)."
    )


def test_added_partitions_must_match_the_existing_replication_factor():
    assert "which have 3 replica(s)" in check_assignment(
        {4: [1, 2]}, {1, 2, 3}, replication_factor=3, first_partition=4
    )
    assert (
        check_assignment({4: [1, 2, 3]}, {1, 2, 3}, replication_factor=3, first_partition=4) is None
    )


def test_explicit_assignment_with_an_empty_replica_list_is_refused():
    assert (
        check_assignment({0: []}, {1})
        == "The manual partition assignment includes an empty replica list."
    )


def test_explicit_assignment_with_a_gap_in_partition_numbers_is_refused():
    assert (
        check_assignment({0: [1], 2: [2]}, {1, 2})
        == "partitions should be a consecutive 0-based integer sequence"
    )


# --- election -----------------------------------------------------------------------------


def partition(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=5, partition_epoch=9):
    return PartitionRecord(
        "t", 0, tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch, mod_revision=40
    )


def test_nothing_changes_while_every_isr_member_is_live():
    assert elect_leader(partition(), live={1, 2, 3, 4}) is None


def test_dead_follower_leaves_the_isr_without_a_leader_epoch_bump():
    changed = elect_leader(partition(), live={1, 2})
    assert changed.isr == (1, 2) and changed.leader == 1
    assert changed.leader_epoch == 5 and changed.partition_epoch == 10


def test_leader_change_bumps_leader_and_partition_epochs():
    changed = elect_leader(partition(), live={2, 3})
    assert changed.leader == 2 and changed.isr == (2, 3)
    assert changed.leader_epoch == 6 and changed.partition_epoch == 10


def test_new_leader_is_the_first_live_isr_member_in_replica_order():
    changed = elect_leader(partition(replicas=(1, 2, 3), isr=(3, 1, 2)), live={2, 3})
    assert changed.leader == 2


def test_live_leader_in_the_isr_keeps_leading_even_if_not_the_preferred_replica():
    # Kafka's ONLINE election keeps a valid leader; moving back to the preferred replica
    # is a preferred election, not a reaction to a failure.
    changed = elect_leader(partition(isr=(1, 2, 3), leader=3), live={2, 3})
    assert changed.leader == 3 and changed.leader_epoch == 5


def test_replica_outside_the_isr_never_becomes_leader():
    changed = elect_leader(partition(isr=(1,), leader=1), live={2, 3})
    assert changed.leader == -1 and changed.isr == (1,)


def test_election_keeps_the_last_isr_member_when_every_replica_dies():
    changed = elect_leader(partition(isr=(1, 2), leader=2), live=set())
    assert changed.isr == (2,) and changed.leader == -1
    assert changed.leader_epoch == 6 and changed.partition_epoch == 10


def test_losing_the_sole_isr_member_keeps_it_in_the_isr_with_no_leader():
    changed = elect_leader(partition(isr=(3,), leader=3), live={1, 2})
    assert changed.isr == (3,) and changed.leader == -1


def test_leaderless_partition_stays_unchanged_while_its_isr_member_is_dead():
    leaderless = partition(isr=(3,), leader=-1)
    assert elect_leader(leaderless, live={1, 2}) is None
    assert elect_on_return(leaderless, live={1, 2}) is None


def test_returning_last_isr_member_becomes_leader_again():
    changed = elect_on_return(partition(isr=(3,), leader=-1, leader_epoch=6), live={1, 3})
    assert changed.leader == 3 and changed.isr == (3,)
    assert changed.leader_epoch == 7 and changed.partition_epoch == 10


def test_return_of_a_broker_does_not_touch_a_partition_that_has_a_leader():
    assert elect_on_return(partition(isr=(1,), leader=1), live={1, 2, 3}) is None


def test_election_result_keeps_the_mod_revision_the_cas_must_compare():
    assert elect_leader(partition(), live={2, 3}).mod_revision == 40


def test_dead_broker_leaves_the_isrs_of_live_leaders_before_any_leadership_moves():
    """A new transaction coordinator must not write markers to a partition whose ISR
    still counts the dead broker (the CI failure of 11-27: a stalled replica came back
    into such an ISR and made it look like min.insync.replicas)."""
    led_by_dead = partition(leader=1)
    led_by_live = PartitionRecord("t", 1, (2, 1, 3), (2, 1, 3), 2, 5, 9, mod_revision=41)
    untouched = PartitionRecord("t", 2, (3, 2), (3, 2), 3, 5, 9, mod_revision=42)
    leaderless = partition(isr=(3,), leader=-1)
    order = election_order([led_by_dead, untouched, leaderless, led_by_live], live={2, 3})
    assert order == [led_by_live, led_by_dead, leaderless]


def test_leader_writes_the_isr_it_asks_for_from_the_partition_epoch_it_knows():
    known = partition(isr=(1, 2))
    changed = alter_isr(known, known, 1, (1, 2, 3))
    assert changed.isr == (1, 2, 3) and changed.partition_epoch == 10 and changed.leader_epoch == 5


def test_leader_with_a_stale_view_does_not_write_a_fenced_broker_back_into_the_isr():
    """Leader 1 saw ISR (1, 3) and asks for (1, 3, 2) as broker 2 catches up; meanwhile the
    controller took fenced broker 3 out (partition epoch 10). The retry after the
    conflict must not write 3 back (the CI failure of 11-27 could still happen that way)."""
    known = partition(isr=(1, 3))
    stored = partition(isr=(1,), partition_epoch=10)
    assert alter_isr(stored, known, 1, (1, 3, 2)) is None


@pytest.mark.parametrize("stored", [
    partition(leader=2, leader_epoch=6, partition_epoch=10),  # another leader
    partition(leader_epoch=6, partition_epoch=10),  # this broker again, in a later epoch
    partition(isr=(1, 2, 3)),  # nothing to change
])
def test_isr_change_is_not_written_by_a_former_leader_or_when_it_changes_nothing(stored):
    assert alter_isr(stored, partition(isr=(1, 2)), 1, (1, 2, 3)) is None


# -- preferred leaders ---------------------------------------------------------------------


def test_a_preferred_election_moves_leadership_to_the_first_replica_when_live_and_in_the_isr():
    moved = elect_preferred(partition(leader=2), live={1, 2, 3})
    assert moved is not None
    assert (moved.leader, moved.isr, moved.leader_epoch, moved.partition_epoch) == (1, (1, 2, 3), 6, 10)


def test_a_preferred_election_is_not_made_when_the_first_replica_leads_is_dead_or_out_of_the_isr():
    assert elect_preferred(partition(leader=1), live={1, 2, 3}) is None
    assert elect_preferred(partition(leader=2), live={2, 3}) is None
    assert elect_preferred(partition(leader=2, isr=(2, 3)), live={1, 2, 3}) is None


def test_leaderships_go_home_only_for_brokers_above_the_imbalance_percentage():
    # Broker 1 is the preferred replica of 10 partitions and leads 9 of them: 10% off.
    mine = [partition(replicas=(1, 2, 3), leader=2 if number == 0 else 1) for number in range(10)]
    assert imbalanced_partitions(mine, {1, 2, 3}, 10) == []
    assert imbalanced_partitions(mine, {1, 2, 3}, 9) == [mine[0]]
    # A broker that leads none of its own (back after a failover) is 100% off.
    away = [partition(replicas=(3, 1, 2), leader=1)]
    assert imbalanced_partitions(mine + away, {1, 2, 3}, 10) == away
    # Not while it is dead or has not caught up into the ISR.
    assert imbalanced_partitions(away, {1, 2}, 10) == []
    assert imbalanced_partitions([partition(replicas=(3, 1, 2), isr=(1, 2), leader=1)], {1, 2, 3}, 10) == []
