"""The transaction state machine: every valid transition is allowed, every other refused,
and the metadata's prepare/complete steps follow the table."""

import itertools

import pytest

from oncelog.coordinator.txn.metadata import TransactionMetadata
from oncelog.coordinator.txn.state import (
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    TransactionState,
    check_transition,
)

S = TransactionState

VALID = sorted(
    ((previous, target) for target, previous_states in VALID_PREVIOUS_STATES.items() for previous in previous_states),
    key=lambda pair: (pair[0].id, pair[1].id),
)
INVALID = sorted(
    (pair for pair in itertools.product(S, S) if pair not in set(VALID)),
    key=lambda pair: (pair[0].id, pair[1].id),
)


@pytest.mark.parametrize(("current", "target"), VALID, ids=lambda s: s.display_name)
def test_valid_transition_is_allowed(current, target):
    check_transition("t", current, target)


@pytest.mark.parametrize(("current", "target"), INVALID, ids=lambda s: s.display_name)
def test_invalid_transition_is_refused(current, target):
    with pytest.raises(IllegalTransitionError, match=f"from {current.display_name} to {target.display_name}"):
        check_transition("t", current, target)


def test_the_table_matches_kafkas():
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_ABORT] == {S.PREPARE_ABORT}
    assert VALID_PREVIOUS_STATES[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert VALID_PREVIOUS_STATES[S.PREPARE_EPOCH_FENCE] == {S.ONGOING}
    assert [s.id for s in S] == list(range(8))


def metadata(state=S.EMPTY, epoch=0):
    return TransactionMetadata("tx", producer_id=7, producer_epoch=epoch, state=state)


def test_prepare_marks_pending_and_complete_applies():
    m = metadata()
    transit = m.prepare_add_partitions({("a", 0)}, now=100)
    assert m.pending_state is S.ONGOING and m.state is S.EMPTY and m.partitions == set()
    m.complete_transition(transit)
    assert m.state is S.ONGOING and m.partitions == {("a", 0)} and m.txn_start_timestamp == 100
    assert not m.pending


def test_a_second_prepare_while_pending_is_a_bug():
    m = metadata()
    m.prepare_add_partitions({("a", 0)}, now=1)
    with pytest.raises(RuntimeError, match="pending"):
        m.prepare_add_partitions({("b", 0)}, now=2)


def test_commit_path_goes_through_prepare_then_complete():
    m = metadata(S.ONGOING)
    m.partitions = {("a", 0)}
    m.complete_transition(m.prepare_end(commit=True, now=5))
    assert m.state is S.PREPARE_COMMIT and m.partitions == {("a", 0)}
    m.complete_transition(m.prepare_complete(now=6))
    assert m.state is S.COMPLETE_COMMIT and m.partitions == set()


def test_abort_path():
    m = metadata(S.ONGOING)
    m.complete_transition(m.prepare_end(commit=False, now=5))
    m.complete_transition(m.prepare_complete(now=6))
    assert m.state is S.COMPLETE_ABORT


def test_epoch_fence_bumps_the_epoch_and_becomes_the_abort():
    m = metadata(S.ONGOING, epoch=3)
    m.prepare_fence_epoch()
    assert m.producer_epoch == 4 and m.pending_state is S.PREPARE_EPOCH_FENCE
    transit = m.prepare_end(commit=False, now=9)
    assert transit.state is S.PREPARE_ABORT and transit.producer_epoch == 4


def test_commit_from_empty_is_refused_by_the_table():
    with pytest.raises(IllegalTransitionError):
        metadata(S.EMPTY).prepare_end(commit=True, now=1)


def test_increment_epoch_without_expected_epoch_bumps():
    m = metadata(S.COMPLETE_COMMIT, epoch=5)
    transit = m.prepare_increment_epoch(1000, None, now=1)
    assert (transit.producer_epoch, transit.last_producer_epoch, transit.state) == (6, -1, S.EMPTY)


def test_kip360_retry_of_a_lost_init_response_gets_the_same_epoch():
    m = metadata(S.COMPLETE_COMMIT, epoch=5)
    m.complete_transition(m.prepare_increment_epoch(1000, 5, now=1))
    assert (m.producer_epoch, m.last_producer_epoch) == (6, 5)
    retry = m.prepare_increment_epoch(1000, 5, now=2)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (6, 5)


def test_increment_epoch_with_a_wrong_expected_epoch_is_fenced():
    m = metadata(S.COMPLETE_COMMIT, epoch=5)
    assert m.prepare_increment_epoch(1000, 2, now=1) == "producer_fenced"


def test_exhausted_epoch_rotates_the_producer_id():
    m = metadata(S.COMPLETE_COMMIT, epoch=32766)
    assert m.epoch_exhausted
    transit = m.prepare_producer_id_rotation(99, 1000, now=1, recorded_previous=True)
    assert (transit.producer_id, transit.producer_epoch, transit.previous_producer_id) == (99, 0, 7)


def test_exhausted_epoch_rotation_remembers_the_old_id_even_without_an_expected_epoch():
    m = metadata(S.COMPLETE_ABORT, epoch=32766)
    transit = m.prepare_producer_id_rotation(99, 1000, now=1, recorded_previous=False)
    assert (transit.previous_producer_id, transit.last_producer_epoch) == (7, -1)


def test_epoch_bump_records_the_current_id_as_previous_as_kafka_does():
    m = metadata(S.COMPLETE_COMMIT, epoch=5)
    m.previous_producer_id = 3
    assert m.prepare_increment_epoch(1000, None, now=1).previous_producer_id == 7


def test_kip360_a_fresh_id_accepts_any_expected_producer():
    fresh = TransactionMetadata("tx", producer_id=50)  # just created: no epoch yet
    assert fresh.accepts_expected_producer(12, 4)
    transit = fresh.prepare_increment_epoch(1000, 4, now=1)
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (50, 0, -1)


def test_kip360_the_current_producer_id_is_accepted_whatever_the_epoch():
    m = metadata(S.COMPLETE_COMMIT, epoch=5)
    assert m.accepts_expected_producer(7, 5) and m.accepts_expected_producer(7, 1)


def test_kip360_the_previous_producer_id_is_accepted_only_with_an_exhausted_epoch():
    m = metadata(S.EMPTY, epoch=0)
    m.previous_producer_id = 6
    assert m.accepts_expected_producer(6, 32766)
    assert not m.accepts_expected_producer(6, 32765)
    assert not m.accepts_expected_producer(8, 32766)


def test_a_failed_epoch_fence_is_not_bumped_again_by_the_next_fence():
    m = metadata(S.ONGOING, epoch=3)
    m.prepare_fence_epoch()
    m.prepare_end(commit=False, now=1)
    m.abandon_transition()  # the PrepareAbort did not reach the log
    m.has_failed_epoch_fence = True  # what the coordinator records then
    m.prepare_fence_epoch()
    assert m.producer_epoch == 4


def test_completing_the_abort_clears_the_failed_fence():
    m = metadata(S.ONGOING, epoch=3)
    m.has_failed_epoch_fence = True
    m.prepare_fence_epoch()
    m.complete_transition(m.prepare_end(commit=False, now=1))
    m.complete_transition(m.prepare_complete(now=2))
    assert not m.has_failed_epoch_fence and (m.state, m.producer_epoch) == (S.COMPLETE_ABORT, 3)


def test_the_fence_never_bumps_past_the_last_epoch():
    m = metadata(S.ONGOING, epoch=32767)
    m.prepare_fence_epoch()
    assert m.producer_epoch == 32767
