"""KIP-890 part 2 (transaction version 2) in the domain code: the coordinator's metadata
transitions (epoch bump on every end, producer id rotation on overflow, abort from a
completed state), the TransactionLogValue v1 records that keep the new fields across a
restart, and the partition's stricter epoch rule for TV2 markers."""

from dataclasses import replace

import pytest

from oncelog.coordinator.txn import log as txn_log
from oncelog.coordinator.txn.metadata import MAX_EPOCH, NO_PRODUCER_ID, TransactionMetadata, TxnEntry
from oncelog.coordinator.txn.state import IllegalTransitionError, TransactionState, check_transition
from oncelog.storage.producer_state import ProducerBatch, ProducerStateManager, Verdict

S = TransactionState


def entry(state=S.EMPTY, epoch=3, partitions=()):
    return TxnEntry(TransactionMetadata(transactional_id="tx", producer_id=7, producer_epoch=epoch, state=state,
                                        partitions=frozenset(partitions), txn_start_timestamp=50))


def test_a_tv2_end_bumps_the_epoch_and_remembers_the_previous_one():
    e = entry(S.ONGOING, partitions={("a", 0)})
    prepared = e.prepare_end(True, now=100, transaction_version=2)
    assert (prepared.state, prepared.producer_epoch, prepared.last_producer_epoch) == (S.PREPARE_COMMIT, 4, 3)
    assert prepared.client_transaction_version == 2 and prepared.txn_start_timestamp == 50
    e.complete(prepared)
    done = e.prepare_complete(now=200)
    assert (done.state, done.producer_id, done.producer_epoch, done.partitions) == (
        S.COMPLETE_COMMIT, 7, 4, frozenset()
    )


def test_a_classic_end_keeps_the_epoch():
    prepared = entry(S.ONGOING, partitions={("a", 0)}).prepare_end(False, now=100)
    assert (prepared.state, prepared.producer_epoch, prepared.client_transaction_version) == (S.PREPARE_ABORT, 3, 0)


def test_a_tv2_end_at_the_exhausted_epoch_completes_under_the_next_producer_id():
    e = entry(S.ONGOING, epoch=MAX_EPOCH - 1, partitions={("a", 0)})
    e.complete(e.prepare_end(True, now=100, transaction_version=2, next_producer_id=99))
    m = e.current
    assert (m.producer_id, m.producer_epoch, m.next_producer_id) == (7, MAX_EPOCH, 99), "markers at MAX_EPOCH"
    e.complete(e.prepare_complete(now=200))
    m = e.current
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.last_producer_epoch, m.next_producer_id) == (
        99, 0, 7, MAX_EPOCH - 1, NO_PRODUCER_ID)


def test_a_tv2_abort_after_a_fence_at_the_last_epoch_is_not_bumped_past_it():
    e = entry(S.ONGOING, epoch=MAX_EPOCH - 1, partitions={("a", 0)})
    e.prepare_fence_epoch()
    prepared = e.prepare_end(False, now=100, transaction_version=2)
    assert (prepared.state, prepared.producer_epoch) == (S.PREPARE_ABORT, MAX_EPOCH)
    with pytest.raises(RuntimeError, match="committing at epoch"):
        entry(S.ONGOING, epoch=MAX_EPOCH).prepare_end(True, now=100, transaction_version=2)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT], ids=lambda s: s.display_name)
def test_tv2_may_abort_from_a_completed_state_and_the_classic_protocol_may_not(state):
    check_transition("t", state, S.PREPARE_ABORT, transaction_version=2)
    with pytest.raises(IllegalTransitionError):
        check_transition("t", state, S.PREPARE_ABORT)
    with pytest.raises(IllegalTransitionError):
        check_transition("t", state, S.PREPARE_COMMIT, transaction_version=2)
    prepared = entry(state).prepare_end(False, now=100, transaction_version=2, nothing_added=True)
    assert (prepared.producer_epoch, prepared.txn_start_timestamp) == (4, 100)


def test_implicit_adds_record_the_clients_transaction_version():
    assert entry().prepare_add_partitions({("a", 0)}, now=1, transaction_version=2).client_transaction_version == 2


def record(**changes):
    m = entry(S.PREPARE_COMMIT, partitions={("a", 0), ("a", 2), ("b", 1)}).current
    return replace(replace(m, previous_producer_id=5, next_producer_id=99, client_transaction_version=2), **changes)


def test_the_v1_log_value_keeps_previous_and_next_producer_ids_and_the_transaction_version():
    written = record()
    read = txn_log.decode_value("tx", txn_log.encode_value(written, txn_log.FLEXIBLE_VALUE_VERSION))
    assert read.last_producer_epoch == -1, "no version of the record holds the last epoch"
    assert read == record(last_producer_epoch=-1)


def test_the_v1_log_value_leaves_defaults_out():
    defaults = record(previous_producer_id=-1, next_producer_id=-1, client_transaction_version=0)
    value = txn_log.encode_value(defaults, txn_log.FLEXIBLE_VALUE_VERSION)
    assert value[-1] == 0, "no tagged fields"
    assert txn_log.decode_value("tx", value) == replace(defaults, last_producer_epoch=-1)


def test_the_v0_log_value_is_what_it_always_was():
    value = txn_log.encode_value(record())
    assert value[:2] == b"\x00\x00"
    read = txn_log.decode_value("tx", value)
    assert (read.previous_producer_id, read.next_producer_id, read.client_transaction_version) == (-1, -1, 0)


def test_a_truncated_v1_value_is_corrupt():
    value = txn_log.encode_value(record(), txn_log.FLEXIBLE_VALUE_VERSION)
    with pytest.raises(txn_log.CorruptTxnRecordError):
        txn_log.decode_value("tx", value[:-3])


def producer_state_with_open_transaction(epoch=4):
    manager = ProducerStateManager("orders-0")
    manager.record(ProducerBatch(7, epoch, 0, 0, 10, 10, 1000, is_transactional=True))
    return manager


def test_a_tv2_marker_at_the_epoch_of_the_open_transaction_is_refused():
    """A late marker of the previous transaction would end the one open now."""
    manager = producer_state_with_open_transaction(epoch=4)
    late = manager.check_marker(7, 4, 0, offset_hint=11, transaction_version=2)
    assert late.verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert "must be above it" in late.message
    assert manager.check_marker(7, 5, 0, transaction_version=2).verdict is Verdict.APPEND
    assert manager.check_marker(7, 4, 0).verdict is Verdict.APPEND, "the classic rule accepts the same epoch"


def test_a_retried_tv2_marker_with_no_transaction_open_is_accepted():
    manager = producer_state_with_open_transaction(epoch=4)
    manager.record(ProducerBatch(7, 5, -1, -1, 11, 11, 1000, is_control=True, control_type=1))
    assert manager.check_marker(7, 5, 0, transaction_version=2).verdict is Verdict.APPEND
    assert manager.check_marker(7, 4, 0, transaction_version=2).verdict is Verdict.INVALID_PRODUCER_EPOCH
