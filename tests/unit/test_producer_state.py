"""Each validation rule of the idempotent producer state, as Kafka's ProducerAppendInfo has it,
plus expiry and the per-partition entry cap."""

import sys

import pytest

from oncelog.storage.producer_snapshot import read_snapshot, snapshot_path, write_snapshot
from oncelog.storage.producer_state import (
    INT_MAX,
    NUM_BATCHES_TO_RETAIN,
    ProducerBatch,
    ProducerStateConfig,
    ProducerStateEntry,
    ProducerStateManager,
    Verdict,
)

DAY_MS = 86_400_000


def batch(pid, epoch, first_seq, count, first_offset, timestamp=1000, **flags):
    last_seq = (first_seq + count - 1) % (INT_MAX + 1)
    return ProducerBatch(pid, epoch, first_seq, last_seq, first_offset, first_offset + count - 1, timestamp, **flags)


def marker(pid, epoch, offset, *, commit=True, coordinator_epoch=0, timestamp=1000):
    return ProducerBatch(pid, epoch, -1, -1, offset, offset, timestamp, is_transactional=True, is_control=True,
                         control_type=1 if commit else 0, coordinator_epoch=coordinator_epoch)


def manager_with(*batches, config=None):
    manager = ProducerStateManager("orders-0", config)
    for b in batches:
        manager.record(b)
    return manager


# -- sequences -----------------------------------------------------------------------------


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
    original = check.duplicate_of
    assert (original.first_offset, original.last_offset, original.timestamp) == (100, 104, 111)


def test_only_the_last_five_batches_are_recognised_as_duplicates():
    batches = [batch(7, 0, i * 2, 2, i * 2) for i in range(NUM_BATCHES_TO_RETAIN + 1)]
    manager = manager_with(*batches)
    assert len(manager.producers[7].batches) == NUM_BATCHES_TO_RETAIN
    oldest = manager.check(7, 0, 0, 1)
    assert oldest.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert manager.check(7, 0, 2, 3).verdict is Verdict.DUPLICATE


def test_gap_is_out_of_order_and_names_producer_epoch_partition_and_both_sequences():
    manager = manager_with(batch(7, 0, 0, 5, 0))
    check = manager.check(7, 0, 8, 9, offset_hint=5)
    assert check.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert check.message == (
        "Out of order sequence number for producer 7 with epoch 0 at offset 5 in partition orders-0: "
        "8 (incoming seq. number), expected sequence 5 (current end sequence number 4)"
    )


def test_lower_epoch_is_invalid_producer_epoch():
    manager = manager_with(batch(7, 3, 0, 1, 0))
    check = manager.check(7, 2, 1, 1, offset_hint=1)
    assert check.verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert check.message == (
        "Epoch of producer 7 at offset 1 in partition orders-0 is 2, which is smaller than the last seen epoch 3 "
        "(incoming sequence 1)"
    )


def test_new_epoch_must_start_at_sequence_zero():
    manager = manager_with(batch(7, 0, 0, 5, 0))
    bad = manager.check(7, 1, 5, 5, offset_hint=5)
    assert bad.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert bad.message == (
        "Invalid sequence number for new epoch 1 of producer 7 at offset 5 in partition orders-0: "
        "5 (incoming seq. number), expected sequence 0 (current producer epoch 0)"
    )
    assert manager.check(7, 1, 0, 0).verdict is Verdict.APPEND


def test_new_epoch_forgets_the_old_batches():
    manager = manager_with(batch(7, 0, 0, 5, 0), batch(7, 1, 0, 2, 5))
    assert manager.check(7, 1, 0, 1).verdict is Verdict.DUPLICATE
    assert manager.check(7, 0, 0, 4).verdict is Verdict.INVALID_PRODUCER_EPOCH


def test_same_epoch_with_no_batch_kept_accepts_only_sequence_zero():
    # The entry comes from a marker: epoch 4 is known, no data batch of it is kept, so the
    # current end sequence is NO_SEQUENCE (-1) and only 0 follows it (Kafka's checkSequence).
    manager = manager_with(marker(7, 4, 0))
    assert manager.producers[7].batches == []
    gap = manager.check(7, 4, 5, 5, offset_hint=1)
    assert gap.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert gap.message == (
        "Out of order sequence number for producer 7 with epoch 4 at offset 1 in partition orders-0: "
        "5 (incoming seq. number), expected sequence 0 (current end sequence number -1)"
    )
    assert manager.check(7, 4, 0, 2).verdict is Verdict.APPEND


def test_same_epoch_restored_without_batches_accepts_only_sequence_zero(tmp_path):
    entry = ProducerStateEntry(7, producer_epoch=2, last_timestamp=1000)
    manager = ProducerStateManager("orders-0")
    manager.load({7: entry})
    assert manager.check(7, 2, 3, 3).verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert manager.check(7, 2, 0, 0).verdict is Verdict.APPEND
    # A higher epoch over such an entry also starts at 0.
    assert manager.check(7, 3, 3, 3).verdict is Verdict.OUT_OF_ORDER_SEQUENCE


def test_entry_without_an_epoch_accepts_any_sequence():
    # Kafka: with no current producer epoch every sequence is accepted, at any epoch.
    manager = ProducerStateManager("orders-0")
    manager.load({7: ProducerStateEntry(7)})
    assert manager.check(7, -1, 42, 42).verdict is Verdict.APPEND
    assert manager.check(7, 0, 42, 42).verdict is Verdict.APPEND


def test_producers_are_independent():
    manager = manager_with(batch(7, 0, 0, 5, 0), batch(8, 0, 0, 1, 5))
    assert manager.check(8, 0, 1, 1).verdict is Verdict.APPEND
    assert manager.check(7, 0, 5, 5).verdict is Verdict.APPEND


# -- transactions ---------------------------------------------------------------------------


def test_transactional_batch_opens_a_transaction_and_sets_the_first_unstable_offset():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True), batch(8, 0, 0, 1, 13, is_transactional=True))
    assert manager.producers[7].current_txn_first_offset == 10
    assert manager.first_unstable_offset(high_watermark=14) == 10


def test_marker_completes_the_transaction_and_reports_aborts():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    completed = manager.record(marker(7, 0, 13, commit=False, coordinator_epoch=4, timestamp=2000))
    assert (completed.first_offset, completed.last_offset, completed.is_aborted) == (10, 13, True)
    assert manager.first_unstable_offset(high_watermark=13) == 10  # the marker is not replicated yet
    assert manager.first_unstable_offset(high_watermark=14) is None
    manager.on_high_watermark_updated(14)
    assert manager.first_unstable_offset(high_watermark=13) is None  # forgotten once passed
    assert manager.producers[7].coordinator_epoch == 4


def test_retry_of_a_batch_in_the_open_transaction_is_a_duplicate():
    manager = manager_with(batch(7, 0, 20, 3, 31, is_transactional=True))
    check = manager.check(7, 0, 20, 22, transactional=True)
    assert check.verdict is Verdict.DUPLICATE
    assert check.duplicate_of.first_offset == 31


def test_transactional_batch_repeating_an_aborted_transactions_sequences_is_out_of_order():
    # The chaos run's torn transaction: records 31-33 (sequences 20-22) were aborted by
    # the marker at 34; the next transaction's new records came with the same sequences
    # and would have been "acknowledged" at 31-33, aborted, and lost from its commit.
    manager = manager_with(batch(7, 0, 20, 3, 31, is_transactional=True), marker(7, 0, 34, commit=False))
    check = manager.check(7, 0, 20, 22, transactional=True, offset_hint=35)
    assert check.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert check.message == (
        "Transactional batch of producer 7 with epoch 0 at offset 35 in partition orders-0 repeats sequence "
        "numbers 20-22 of the batch at offset 31, which belongs to a transaction that has ended: a retry of an "
        "ended transaction's batch, or sequence numbers reused in the same epoch (expected sequence 23)"
    )
    # Once the next transaction is open here, a batch of the ended one is still refused.
    manager.record(batch(7, 0, 23, 2, 35, is_transactional=True))
    assert manager.check(7, 0, 20, 22, transactional=True).verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert manager.check(7, 0, 23, 24, transactional=True).verdict is Verdict.DUPLICATE


def test_marker_without_data_on_the_partition_completes_nothing():
    manager = ProducerStateManager("orders-0")
    assert manager.record(marker(7, 0, 0)) is None


def test_non_transactional_write_during_an_open_transaction_is_invalid_txn_state():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    check = manager.check(7, 0, 3, 3, transactional=False, offset_hint=13)
    assert check.verdict is Verdict.INVALID_TXN_STATE
    assert check.message == (
        "Expected transactional write from producer 7 with epoch 0 at offset 13 in partition orders-0 "
        "(incoming sequence 3): it has a transaction open since offset 10"
    )


def test_non_transactional_write_at_a_new_epoch_during_an_open_transaction_is_invalid_txn_state():
    # Kafka checks the open transaction at any epoch, after the epoch and sequence checks.
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    check = manager.check(7, 1, 0, 0, transactional=False, offset_hint=13)
    assert check.verdict is Verdict.INVALID_TXN_STATE
    assert "producer 7 with epoch 1 at offset 13 in partition orders-0" in check.message


def test_epoch_is_checked_before_the_open_transaction():
    manager = manager_with(batch(7, 2, 0, 3, 10, is_transactional=True))
    check = manager.check(7, 1, 3, 3, transactional=False)
    assert check.verdict is Verdict.INVALID_PRODUCER_EPOCH


def test_sequence_is_checked_before_the_open_transaction():
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    assert manager.check(7, 0, 9, 9, transactional=False).verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert manager.check(7, 1, 9, 9, transactional=False).verdict is Verdict.OUT_OF_ORDER_SEQUENCE


def test_markers_with_old_producer_or_coordinator_epochs_are_refused():
    manager = manager_with(batch(7, 2, 0, 1, 0, is_transactional=True))
    manager.producers[7].coordinator_epoch = 5
    old_epoch = manager.check_marker(7, 1, 5, offset_hint=1)
    assert old_epoch.verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert old_epoch.message == (
        "Transaction marker of producer 7 at offset 1 in partition orders-0 has epoch 1, "
        "which is smaller than the last seen epoch 2"
    )
    fenced = manager.check_marker(7, 2, 4, offset_hint=1)
    assert fenced.verdict is Verdict.COORDINATOR_FENCED
    assert fenced.message == (
        "Transaction marker of producer 7 with epoch 2 at offset 1 in partition orders-0 comes from "
        "coordinator epoch 4, older than the last seen 5"
    )
    assert manager.check_marker(7, 3, 5).verdict is Verdict.APPEND


# -- expiry ---------------------------------------------------------------------------------


def test_expired_producers_are_forgotten_unless_in_a_transaction():
    manager = manager_with(batch(7, 0, 0, 1, 0, timestamp=1000), batch(8, 0, 0, 1, 1, timestamp=1000))
    manager.producers[8].current_txn_first_offset = 1
    assert manager.remove_expired(now_ms=1000 + DAY_MS) == [7]
    assert list(manager.producers) == [8]


def test_expiry_follows_the_configured_producer_id_expiration_ms():
    manager = manager_with(batch(7, 0, 0, 1, 0, timestamp=1000),
                           config=ProducerStateConfig(producer_id_expiration_ms=50))
    assert manager.remove_expired(now_ms=1049) == []
    assert manager.remove_expired(now_ms=1050) == [7]


def test_loading_leaves_out_expired_producers_but_keeps_open_transactions(tmp_path):
    old = manager_with(batch(7, 0, 0, 1, 0, timestamp=1000),
                       batch(8, 0, 0, 1, 1, timestamp=1000, is_transactional=True),
                       batch(9, 0, 0, 1, 2, timestamp=5000))
    write_snapshot(tmp_path, 3, old.producers)
    restored = ProducerStateManager("orders-0", ProducerStateConfig(producer_id_expiration_ms=4000))
    restored.load(read_snapshot(snapshot_path(tmp_path, 3)), now_ms=5000)
    assert sorted(restored.producers) == [8, 9]
    assert restored.first_unstable_offset(high_watermark=3) == 1
    # The expired producer is unknown again: its retry is accepted (KIP-360).
    assert restored.check(7, 0, 0, 0).verdict is Verdict.APPEND


# -- the per-partition cap --------------------------------------------------------------------


def test_cap_holds_with_many_producer_ids():
    manager = ProducerStateManager("orders-0", ProducerStateConfig(max_entries=100))
    for pid in range(10_000):
        manager.record(batch(pid, 0, 0, 1, pid))
        assert len(manager.producers) <= 100
    assert sorted(manager.producers) == list(range(9_900, 10_000))


def test_cap_evicts_the_least_recently_written_producer():
    manager = manager_with(batch(1, 0, 0, 1, 0), batch(2, 0, 0, 1, 1), batch(3, 0, 0, 1, 2),
                           config=ProducerStateConfig(max_entries=3))
    manager.record(batch(1, 0, 1, 1, 3))  # producer 1 writes again: producer 2 is now the oldest
    manager.record(batch(4, 0, 0, 1, 4))
    assert sorted(manager.producers) == [1, 3, 4]
    # An evicted producer is unknown, like an expired one: any sequence is accepted (KIP-360).
    assert manager.check(2, 0, 7, 7).verdict is Verdict.APPEND
    # The ones kept still deduplicate.
    assert manager.check(1, 0, 1, 1).verdict is Verdict.DUPLICATE


def test_cap_never_evicts_a_producer_with_an_open_transaction():
    manager = ProducerStateManager("orders-0", ProducerStateConfig(max_entries=10))
    manager.record(batch(1, 0, 0, 1, 0, is_transactional=True))  # the oldest entry, transaction open
    for pid in range(2, 1_000):
        manager.record(batch(pid, 0, 0, 1, pid))
    assert len(manager.producers) == 10
    assert 1 in manager.producers and manager.first_unstable_offset(high_watermark=1_000) == 0
    assert manager.check(1, 0, 0, 0, transactional=True).verdict is Verdict.DUPLICATE


def test_cap_is_exceeded_only_while_more_transactions_than_it_are_open():
    manager = ProducerStateManager("orders-0", ProducerStateConfig(max_entries=2))
    for pid in range(3):
        manager.record(batch(pid, 0, 0, 1, pid, is_transactional=True))
    assert sorted(manager.producers) == [0, 1, 2]  # nothing may go: all three are open
    manager.record(batch(9, 0, 0, 1, 3))  # not evicted itself although it is the only candidate
    assert sorted(manager.producers) == [0, 1, 2, 9]
    for pid in range(3):
        manager.record(marker(pid, 0, 4 + pid))
    manager.record(batch(10, 0, 0, 1, 7))
    assert sorted(manager.producers) == [2, 10]


def test_loading_applies_the_cap_in_least_recently_written_order(tmp_path):
    many = manager_with(*(batch(pid, 0, 0, 1, pid) for pid in (5, 3, 9, 1)))
    many.record(batch(5, 0, 1, 1, 4))  # order is now 3, 9, 1, 5
    write_snapshot(tmp_path, 5, many.producers)
    restored = ProducerStateManager("orders-0", ProducerStateConfig(max_entries=2))
    restored.load(read_snapshot(snapshot_path(tmp_path, 5)))
    assert list(restored.producers) == [1, 5]


def test_cap_must_be_positive():
    with pytest.raises(ValueError):
        ProducerStateConfig(max_entries=0)


def test_entries_are_slotted_and_their_batch_list_is_small():
    manager = manager_with(*(batch(7, 0, i, 1, i) for i in range(NUM_BATCHES_TO_RETAIN)))
    entry = manager.producers[7]
    assert not hasattr(entry, "__dict__") and not hasattr(entry.batches[0], "__dict__")
    assert sys.getsizeof(entry.batches) < 200  # a deque would be ~600 bytes even when empty


# -- snapshots --------------------------------------------------------------------------------


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


def test_loading_a_snapshot_restores_open_transactions(tmp_path):
    manager = manager_with(batch(7, 0, 0, 3, 10, is_transactional=True))
    write_snapshot(tmp_path, 13, manager.producers)
    restored = ProducerStateManager("orders-0")
    restored.load(read_snapshot(snapshot_path(tmp_path, 13)))
    assert restored.first_unstable_offset(high_watermark=13) == 10
