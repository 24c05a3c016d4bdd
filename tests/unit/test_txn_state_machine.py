"""The transaction state machine: every valid transition is allowed, every other refused,
and an entry's prepare/complete steps follow the table and Kafka's rules."""

import itertools
from dataclasses import replace

import pytest

from oncelog.coordinator.txn.metadata import TransactionMetadata, TxnEntry, validate_transition
from oncelog.coordinator.txn.state import (
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    TransactionState,
    check_transition,
)
from oncelog.protocol.messages import ErrorCode

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


def record(state=S.EMPTY, epoch=0, partitions=(), *, start=50, **fields):
    return TransactionMetadata(transactional_id="tx", producer_id=7, producer_epoch=epoch, state=state,
                               partitions=frozenset(partitions), txn_start_timestamp=start, **fields)


def entry(state=S.EMPTY, epoch=0, partitions=(), **fields):
    return TxnEntry(record(state, epoch, partitions, **fields))


def test_prepare_holds_the_whole_target_as_pending_and_complete_makes_it_current():
    e = entry()
    before = e.current
    target = e.prepare_add_partitions({("a", 0)}, now=100)
    assert e.pending is target and e.current is before, "nothing is applied before the log has it"
    e.complete(target)
    assert e.current is target and e.pending is None
    assert (target.state, target.partitions, target.txn_start_timestamp) == (S.ONGOING, {("a", 0)}, 100)


def test_completion_applies_the_prepared_record_whole():
    e = entry(S.ONGOING, epoch=3, partitions={("a", 0)}, client_transaction_version=2)
    target = e.prepare_end(True, now=100, transaction_version=2, next_producer_id=99)
    e.complete(target)
    assert e.current is target, "every field of the prepared record, none copied by hand"
    assert (e.current.state, e.current.producer_epoch, e.current.last_producer_epoch, e.current.next_producer_id,
            e.current.txn_last_update_timestamp) == (S.PREPARE_COMMIT, 4, 3, 99, 100)


def test_completing_a_record_that_is_not_the_pending_one_is_a_bug_and_changes_nothing():
    e = entry()
    target = e.prepare_add_partitions({("a", 0)}, now=1)
    before = e.current
    with pytest.raises(RuntimeError, match="pending"):
        e.complete(replace(target, partitions=frozenset({("b", 0)})))
    assert e.current is before and e.pending is target


def test_an_abandoned_transition_leaves_the_record_as_it_was():
    e = entry()
    before = e.current
    e.prepare_add_partitions({("a", 0)}, now=1)
    e.abandon()
    assert e.current is before and e.pending is None


def test_a_second_prepare_while_pending_is_a_bug():
    e = entry()
    e.prepare_add_partitions({("a", 0)}, now=1)
    with pytest.raises(RuntimeError, match="pending"):
        e.prepare_add_partitions({("b", 0)}, now=2)


@pytest.mark.parametrize(("state", "prepare"), [
    (S.EMPTY, lambda e: e.prepare_end(commit=True, now=1)),
    (S.EMPTY, lambda e: e.prepare_end(commit=False, now=1)),
    (S.EMPTY, lambda e: e.prepare_fence_epoch()),
    (S.ONGOING, lambda e: e.prepare_dead()),
    (S.ONGOING, lambda e: e.prepare_increment_epoch(1000, None, now=1)),
    (S.PREPARE_COMMIT, lambda e: e.prepare_add_partitions({("a", 0)}, now=1)),
    (S.PREPARE_ABORT, lambda e: e.prepare_end(commit=True, now=1)),
    (S.COMPLETE_ABORT, lambda e: e.prepare_complete(now=1)),
    (S.COMPLETE_COMMIT, lambda e: e.prepare_end(commit=True, now=1, transaction_version=2)),
], ids=["commit-from-Empty", "classic-abort-from-Empty", "fence-from-Empty", "expire-while-Ongoing",
        "init-while-Ongoing", "add-while-PrepareCommit", "commit-while-PrepareAbort", "complete-twice",
        "tv2-commit-from-CompleteCommit"])
def test_a_transition_from_a_state_kafka_does_not_allow_is_refused_and_leaves_the_record_unchanged(state, prepare):
    e = entry(state, epoch=3)
    e.has_failed_epoch_fence = True
    before = e.current
    with pytest.raises(IllegalTransitionError, match="cannot go from"):
        prepare(e)
    assert e.current is before and e.pending is None and e.has_failed_epoch_fence


@pytest.mark.parametrize(("current", "target", "broken"), [
    (record(S.ONGOING, 3, {("a", 0)}), record(S.PREPARE_COMMIT, 4, {("a", 0)}), "producer epoch"),
    (record(S.ONGOING, 3, {("a", 0)}), record(S.PREPARE_COMMIT, 3), "partitions"),
    (record(S.ONGOING, 3, {("a", 0), ("a", 1)}), record(S.ONGOING, 3, {("a", 0)}), "dropped"),
    (record(S.ONGOING, 3), record(S.ONGOING, 3, txn_timeout_ms=1), "timeout"),
    (record(S.COMPLETE_COMMIT, 3), record(S.EMPTY, 5, start=-1), "neither bumped"),
    (record(S.COMPLETE_COMMIT, 3), record(S.EMPTY, 4, {("a", 0)}, start=-1), "left open"),
    (record(S.PREPARE_ABORT, 3, {("a", 0)}), record(S.COMPLETE_ABORT, 2), "not the one that prepared it"),
    (record(S.PREPARE_ABORT, 3, {("a", 0)}), record(S.COMPLETE_ABORT, 3, {("a", 0)}), "partitions are left"),
    (record(S.PREPARE_COMMIT, 3, start=-1), record(S.COMPLETE_COMMIT, 3, start=-1), "never started"),
    (record(S.ONGOING, 3), record(S.PREPARE_EPOCH_FENCE, 5), "fence"),
    (record(S.ONGOING, 3), replace(record(S.ONGOING, 3), transactional_id="other"), "another transactional id"),
], ids=["end-changes-the-classic-epoch", "end-drops-partitions", "add-drops-partitions", "add-changes-the-timeout",
        "init-skips-an-epoch", "init-leaves-partitions", "complete-by-another-epoch", "complete-keeps-partitions",
        "complete-of-a-transaction-never-started", "fence-skips-an-epoch", "another-id"])
def test_a_target_that_breaks_a_rule_of_kafkas_complete_transition_is_refused(current, target, broken):
    with pytest.raises(IllegalTransitionError, match=broken):
        validate_transition(current, target)


def test_commit_path_goes_through_prepare_then_complete():
    e = entry(S.ONGOING, partitions={("a", 0)})
    e.complete(e.prepare_end(commit=True, now=5))
    assert e.current.state is S.PREPARE_COMMIT and e.current.partitions == {("a", 0)}
    e.complete(e.prepare_complete(now=6))
    assert e.current.state is S.COMPLETE_COMMIT and e.current.partitions == frozenset()


def test_abort_path():
    e = entry(S.ONGOING)
    e.complete(e.prepare_end(commit=False, now=5))
    e.complete(e.prepare_complete(now=6))
    assert e.current.state is S.COMPLETE_ABORT


def test_epoch_fence_bumps_the_epoch_and_becomes_the_abort():
    e = entry(S.ONGOING, epoch=3)
    e.prepare_fence_epoch()
    assert e.current.producer_epoch == 4 and e.fencing and e.current.state is S.ONGOING
    target = e.prepare_end(commit=False, now=9)
    assert target.state is S.PREPARE_ABORT and target.producer_epoch == 4
    assert e.pending is target and not e.fencing


def test_increment_epoch_without_expected_epoch_bumps():
    target = entry(S.COMPLETE_COMMIT, epoch=5).prepare_increment_epoch(1000, None, now=1)
    assert isinstance(target, TransactionMetadata)
    assert (target.producer_epoch, target.last_producer_epoch, target.state) == (6, -1, S.EMPTY)


def test_kip360_retry_of_a_lost_init_response_gets_the_same_epoch():
    e = entry(S.COMPLETE_COMMIT, epoch=5)
    target = e.prepare_increment_epoch(1000, 5, now=1)
    assert isinstance(target, TransactionMetadata)
    e.complete(target)
    assert (e.current.producer_epoch, e.current.last_producer_epoch) == (6, 5)
    retry = e.prepare_increment_epoch(1000, 5, now=2)
    assert isinstance(retry, TransactionMetadata)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (6, 5)


def test_increment_epoch_with_a_wrong_expected_epoch_is_producer_fenced_as_an_error_code():
    e = entry(S.COMPLETE_COMMIT, epoch=5)
    before = e.current
    assert e.prepare_increment_epoch(1000, 2, now=1) is ErrorCode.producer_fenced
    assert e.current is before and e.pending is None


def test_exhausted_epoch_rotates_the_producer_id():
    e = entry(S.COMPLETE_COMMIT, epoch=32766)
    assert e.current.epoch_exhausted
    target = e.prepare_producer_id_rotation(99, 1000, now=1, recorded_previous=True)
    assert (target.producer_id, target.producer_epoch, target.previous_producer_id) == (99, 0, 7)


def test_exhausted_epoch_rotation_remembers_the_old_id_even_without_an_expected_epoch():
    target = entry(S.COMPLETE_ABORT, epoch=32766).prepare_producer_id_rotation(99, 1000, now=1,
                                                                               recorded_previous=False)
    assert (target.previous_producer_id, target.last_producer_epoch) == (7, -1)


def test_epoch_bump_records_the_current_id_as_previous_as_kafka_does():
    target = entry(S.COMPLETE_COMMIT, epoch=5, previous_producer_id=3).prepare_increment_epoch(1000, None, now=1)
    assert isinstance(target, TransactionMetadata) and target.previous_producer_id == 7


def test_kip360_a_fresh_id_accepts_any_expected_producer():
    fresh = TxnEntry(TransactionMetadata(transactional_id="tx", producer_id=50))  # just created: no epoch yet
    assert fresh.current.accepts_expected_producer(12, 4)
    target = fresh.prepare_increment_epoch(1000, 4, now=1)
    assert isinstance(target, TransactionMetadata)
    assert (target.producer_id, target.producer_epoch, target.last_producer_epoch) == (50, 0, -1)


def test_kip360_the_current_producer_id_is_accepted_whatever_the_epoch():
    m = record(S.COMPLETE_COMMIT, epoch=5)
    assert m.accepts_expected_producer(7, 5) and m.accepts_expected_producer(7, 1)


def test_kip360_the_previous_producer_id_is_accepted_only_with_an_exhausted_epoch():
    m = record(S.EMPTY, epoch=0, previous_producer_id=6)
    assert m.accepts_expected_producer(6, 32766)
    assert not m.accepts_expected_producer(6, 32765)
    assert not m.accepts_expected_producer(8, 32766)


def test_a_failed_epoch_fence_is_not_bumped_again_by_the_next_fence():
    e = entry(S.ONGOING, epoch=3)
    e.prepare_fence_epoch()
    e.prepare_end(commit=False, now=1)
    e.abandon()  # the PrepareAbort did not reach the log
    e.has_failed_epoch_fence = True  # what the coordinator records then
    e.prepare_fence_epoch()
    assert e.current.producer_epoch == 4


def test_completing_the_abort_clears_the_failed_fence():
    e = entry(S.ONGOING, epoch=3)
    e.has_failed_epoch_fence = True
    e.prepare_fence_epoch()
    e.complete(e.prepare_end(commit=False, now=1))
    e.complete(e.prepare_complete(now=2))
    assert not e.has_failed_epoch_fence and (e.current.state, e.current.producer_epoch) == (S.COMPLETE_ABORT, 3)


def test_the_fence_never_bumps_past_the_last_epoch():
    e = entry(S.ONGOING, epoch=32767)
    e.prepare_fence_epoch()
    assert e.current.producer_epoch == 32767
