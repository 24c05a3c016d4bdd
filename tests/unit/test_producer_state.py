"""Each validation rule of the idempotent producer state, as Kafka's ProducerAppendInfo has it."""

from oncelog.storage.producer_snapshot import read_snapshot, snapshot_path, write_snapshot
from oncelog.storage.producer_state import (
    INT_MAX,
    NUM_BATCHES_TO_RETAIN,
    ProducerBatch,
    ProducerStateManager,
    Verdict,
)


def batch(pid, epoch, first_seq, count, first_offset, timestamp=1000, **flags):
    last_seq = (first_seq + count - 1) % (INT_MAX + 1)
    return ProducerBatch(pid, epoch, first_seq, last_seq, first_offset, first_offset + count - 1, timestamp, **flags)


def manager_with(*batches):
    manager = ProducerStateManager("orders-0")
    for b in batches:
        manager.record(b)
    return manager


def test_unknown_producer_is_accepted_at_any_sequence():
    assert ProducerStateManager("orders-0").check(7, 0, 12345, 12349).verdict is Verdict.APPEND


def test_next_sequence_is_accepted():
    manager = manager_with(batch(7, 0, 0, 5, 0))
    assert manager.check(7, 0, 5, 9).verdict is Verdict.APPEND


def test_sequence_wraps_at_int_max():
    manager = manager_with(batch(7, 0, INT_MAX - 1, 2, 0))
    assert manager.producers[7].last_seq == INT_MAX
    assert manager.check(7, 0, 0, 3).verdict is Verdict.APPEND


def test_duplicate_of_a_recent_batch_returns_its_original_offsets():
    manager = manager_with(batch(7, 0, 0, 5, 100, timestamp=111), batch(7, 0, 5, 5, 105, timestamp=222))
    check = manager.check(7, 0, 0, 4)
    assert check.verdict is Verdict.DUPLICATE
    assert (check.duplicate_of.first_offset, check.duplicate_of.last_offset, check.duplicate_of.timestamp) == (100, 104, 111)


def test_only_the_last_five_batches_are_recognised_as_duplicates():
    batches = [batch(7, 0, i * 2, 2, i * 2) for i in range(NUM_BATCHES_TO_RETAIN + 1)]
    manager = manager_with(*batches)
    oldest = manager.check(7, 0, 0, 1)
    assert oldest.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert manager.check(7, 0, 2, 3).verdict is Verdict.DUPLICATE


def test_gap_is_out_of_order_and_names_producer_partition_and_sequences():
    manager = manager_with(batch(7, 0, 0, 5, 0))
    check = manager.check(7, 0, 8, 9)
    assert check.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert "producer 7" in check.message and "orders-0" in check.message
    assert "8 (incoming seq. number)" in check.message and "expected 5" in check.message


def test_lower_epoch_is_invalid_producer_epoch():
    manager = manager_with(batch(7, 3, 0, 1, 0))
    check = manager.check(7, 2, 1, 1)
    assert check.verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert "producer 7" in check.message and "is 2" in check.message and "last seen epoch 3" in check.message


def test_new_epoch_must_start_at_sequence_zero():
    manager = manager_with(batch(7, 0, 0, 5, 0))
    bad = manager.check(7, 1, 5, 5)
    assert bad.verdict is Verdict.OUT_OF_ORDER_SEQUENCE and "expected sequence 0" in bad.message
    assert manager.check(7, 1, 0, 0).verdict is Verdict.APPEND


def test_new_epoch_forgets_the_old_batches():
    manager = manager_with(batch(7, 0, 0, 5, 0), batch(7, 1, 0, 2, 5))
    assert manager.check(7, 1, 0, 1).verdict is Verdict.DUPLICATE
    assert manager.check(7, 0, 0, 4).verdict is Verdict.INVALID_PRODUCER_EPOCH


def test_producers_are_independent():
    manager = manager_with(batch(7, 0, 0, 5, 0), batch(8, 0, 0, 1, 5))
    assert manager.check(8, 0, 1, 1).verdict is Verdict.APPEND
    assert manager.check(7, 0, 5, 5).verdict is Verdict.APPEND


def test_expired_producers_are_forgotten_unless_in_a_transaction():
    manager = manager_with(batch(7, 0, 0, 1, 0, timestamp=1000), batch(8, 0, 0, 1, 1, timestamp=1000))
    manager.producers[8].current_txn_first_offset = 1
    assert manager.remove_expired(now_ms=1000 + 86_400_000, expiration_ms=86_400_000) == [7]
    assert list(manager.producers) == [8]


def test_snapshot_round_trip_and_corruption_is_detected(tmp_path):
    manager = manager_with(batch(7, 2, 10, 5, 100, timestamp=5), batch(9, 0, 0, 1, 105))
    manager.producers[9].current_txn_first_offset = 105
    path = write_snapshot(tmp_path, 106, manager.producers)
    assert path == snapshot_path(tmp_path, 106)
    restored = read_snapshot(path)
    assert restored[7].batches == manager.producers[7].batches
    assert restored[7].producer_epoch == 2 and restored[9].current_txn_first_offset == 105
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(data)
    assert read_snapshot(path) is None


def test_transactional_batch_opens_a_transaction_and_sets_the_first_unstable_offset():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True), batch(8, 0, 0, 1, 13, is_transactional=True))
    assert manager.producers[7].current_txn_first_offset == 10
    assert manager.first_unstable_offset == 10


def test_marker_completes_the_transaction_and_reports_aborts():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    marker = ProducerBatch(7, 0, -1, -1, 13, 13, 2000, is_transactional=True, is_control=True,
                           control_type=0, coordinator_epoch=4)
    completed = manager.record(marker)
    assert (completed.first_offset, completed.last_offset, completed.is_aborted) == (10, 13, True)
    assert manager.first_unstable_offset is None
    assert manager.producers[7].coordinator_epoch == 4


def test_marker_without_data_on_the_partition_completes_nothing():
    manager = ProducerStateManager("orders-0")
    marker = ProducerBatch(7, 0, -1, -1, 0, 0, 1, is_transactional=True, is_control=True, control_type=1)
    assert manager.record(marker) is None


def test_non_transactional_write_during_an_open_transaction_is_invalid_txn_state():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    check = manager.check(7, 0, 3, 3, transactional=False, offset_hint=13)
    assert check.verdict is Verdict.INVALID_TXN_STATE
    assert "producer 7" in check.message and "orders-0" in check.message


def test_markers_with_old_producer_or_coordinator_epochs_are_refused():
    manager = manager_with(batch(7, 2, 0, 1, 0, is_transactional=True))
    manager.producers[7].coordinator_epoch = 5
    assert manager.check_marker(7, 1, 5).verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert manager.check_marker(7, 2, 4).verdict is Verdict.COORDINATOR_FENCED
    assert manager.check_marker(7, 3, 5).verdict is Verdict.APPEND


def test_loading_a_snapshot_restores_open_transactions(tmp_path):
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    write_snapshot(tmp_path, 13, manager.producers)
    restored = ProducerStateManager("orders-0")
    restored.load(read_snapshot(snapshot_path(tmp_path, 13)))
    assert restored.first_unstable_offset == 10
