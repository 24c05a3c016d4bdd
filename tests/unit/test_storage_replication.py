"""The storage side of replication: follower appends, leader epochs in the log, high
watermark ownership and its checkpoint, the deterministic abort index, truncation."""

import os

import pytest

from oncelog.protocol.record_batch import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    parse_batches,
    set_base_offset,
)
from oncelog.storage import AppendOrigin, CorruptLogError, LogConfig, LogManager, PartitionLog
from oncelog.storage.batch_records import empty_batch
from oncelog.storage.errors import CorruptBatchError, StorageError, UnexpectedAppendOffsetError
from oncelog.storage.leader_epoch import FILE_NAME as EPOCH_FILE
from oncelog.storage.leader_epoch import LeaderEpochCache
from oncelog.storage.manager import REPLICATION_OFFSET_CHECKPOINT_FILE
from oncelog.storage.txn_index import FILE_NAME as TXN_INDEX_FILE
from oncelog.storage.txn_index import AbortedTxn

NOW_MS = 1_700_000_000_000
ALL = 1 << 30


def open_log(tmp_path, name="leader", *, replicated=True, config=None, recover=False, **kwargs) -> PartitionLog:
    return PartitionLog.open(tmp_path / name / "orders-0", "orders", 0, config or LogConfig(), recover=recover,
                             now_ms=NOW_MS, replicated=replicated, **kwargs)


def batch(count=1, **kwargs) -> bytearray:
    return bytearray(build_batch([Record(b"k", b"v%d" % i) for i in range(count)], timestamp_ms=NOW_MS, **kwargs))


def append(log, count=1, *, leader_epoch=0, **kwargs):
    data = batch(count, **kwargs)
    return log.append(data, parse_batches(data), now_ms=NOW_MS, leader_epoch=leader_epoch)


def txn_append(log, producer_id, sequence, count=2, *, leader_epoch=0):
    return append(log, count, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True,
                  leader_epoch=leader_epoch)


def marker(log, kind, producer_id, *, leader_epoch=0):
    data = bytearray(build_control_batch(kind, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                         timestamp_ms=NOW_MS))
    return log.append(data, parse_batches(data), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR,
                      leader_epoch=leader_epoch)


def all_bytes(log) -> bytes:
    return log.read(log.log_start_offset, ALL, upper_bound=log.log_end_offset).records


def replicate(leader, follower, max_bytes=ALL) -> None:
    """What the replica fetcher does: fetch from the follower's log end, append as follower."""
    while follower.log_end_offset < leader.log_end_offset:
        fetched = leader.read(follower.log_end_offset, max_bytes, upper_bound=leader.log_end_offset)
        follower.append_as_follower(fetched.records, NOW_MS)


def two_producers_with_an_abort_while_another_transaction_is_open(log, *, high_watermark_at=None):
    """P1 and P2 open transactions; P1 aborts while P2's is open; the leader epoch moves
    from 0 to 2 midway; P1 aborts again with nothing else open. `high_watermark_at(log)`
    moves the high watermark after each append (a lagging or a caught-up ISR)."""
    steps = [
        lambda: txn_append(log, 1, 0),                                   # 0-1  P1 opens
        lambda: txn_append(log, 2, 0),                                   # 2-3  P2 opens
        lambda: append(log, 1, producer_id=3, producer_epoch=0, base_sequence=0),  # 4 idempotent
        lambda: marker(log, ControlType.ABORT, 1, leader_epoch=2),       # 5    P1 aborts, P2 open
        lambda: txn_append(log, 2, 2, leader_epoch=2),                   # 6-7
        lambda: marker(log, ControlType.COMMIT, 2, leader_epoch=2),      # 8    P2 commits
        lambda: txn_append(log, 1, 2, leader_epoch=2),                   # 9-10 P1 opens again
        lambda: marker(log, ControlType.ABORT, 1, leader_epoch=2),       # 11   P1 aborts, none open
    ]
    for step in steps:
        step()
        if high_watermark_at is not None:
            log.update_high_watermark(high_watermark_at(log))


EXPECTED_ABORTS = [AbortedTxn(1, 0, 5, 2), AbortedTxn(1, 9, 11, 12)]


# -- leader appends and the epoch cache ------------------------------------------------------


def test_leader_append_assigns_a_new_epoch_at_its_first_offset(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=0)
    append(log, 1, leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 4)]
    assert [h.partition_leader_epoch for h in parse_batches(all_bytes(log))] == [0, 0, 3]
    log.flush()  # a leader's new epochs are written by the flush that covers them
    assert LeaderEpochCache(log.directory / EPOCH_FILE).entries() == [(0, 0), (3, 4)]
    log.close()


def test_a_leaders_new_epoch_unwritten_at_a_crash_comes_back_from_the_batches(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    log.flush()
    append(log, 3, leader_epoch=4)  # not written yet: past the recovery point
    assert LeaderEpochCache(log.directory / EPOCH_FILE).entries() == [(0, 0)]
    log.close_without_flush()  # the process dies
    reopened = open_log(tmp_path, recover=True, recovery_point=log.recovery_point)
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (4, 2)]
    reopened.close()
    assert LeaderEpochCache(log.directory / EPOCH_FILE).entries() == [(0, 0), (4, 2)]


def test_a_new_partitions_first_epoch_unwritten_at_a_crash_comes_back_from_the_batches(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=1)
    assert not (log.directory / EPOCH_FILE).exists()
    log.close_without_flush()
    reopened = open_log(tmp_path, recover=True)
    assert reopened.leader_epoch_cache.entries() == [(1, 0)]
    reopened.close()


def test_leader_append_with_an_older_epoch_leaves_the_cache(tmp_path):
    log = open_log(tmp_path)
    append(log, 1, leader_epoch=3)
    append(log, 1, leader_epoch=1)
    assert log.leader_epoch_cache.entries() == [(3, 0)]
    log.close()


def test_end_offset_for_epoch_answers_from_the_cache_with_the_log_end(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=1)
    append(log, 3, leader_epoch=4)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(4) == (4, 5)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(9) == (-1, -1)
    log.close()


# -- follower appends ------------------------------------------------------------------------


@pytest.mark.parametrize("max_bytes", [1, ALL], ids=["batch-by-batch", "all-at-once"])
def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path, max_bytes):
    leader, follower = open_log(tmp_path), open_log(tmp_path, "follower")
    append(leader, 3, leader_epoch=0)
    append(leader, 1, leader_epoch=2)
    append(leader, 2, leader_epoch=5)
    replicate(leader, follower, max_bytes)
    assert all_bytes(follower) == all_bytes(leader)
    assert [(h.base_offset, h.partition_leader_epoch) for h in parse_batches(all_bytes(follower))] == [
        (0, 0), (3, 2), (4, 5)
    ]
    assert follower.leader_epoch_cache.entries() == [(0, 0), (2, 3), (5, 4)]
    assert follower.log_end_offset == 6
    leader.close()
    follower.close()


def test_follower_append_does_not_move_the_high_watermark(tmp_path):
    leader, follower = open_log(tmp_path), open_log(tmp_path, "follower")
    append(leader, 4)
    replicate(leader, follower)
    assert (follower.log_end_offset, follower.high_watermark) == (4, 0)
    assert follower.read(0, ALL).records == b""  # consumers see nothing past the high watermark
    assert follower.update_high_watermark(3)
    assert follower.high_watermark == 3
    leader.close()
    follower.close()


def test_follower_segments_roll_as_usual(tmp_path):
    leader = open_log(tmp_path)
    follower = open_log(tmp_path, "follower", config=LogConfig(segment_bytes=2 * len(batch(2))))
    for _ in range(6):
        append(leader, 2)
    replicate(leader, follower, max_bytes=1)  # one batch per fetch: an append never splits
    assert follower.segment_base_offsets == [0, 4, 8]
    assert all_bytes(follower) == all_bytes(leader)
    leader.close()
    follower.close()


def test_follower_append_below_the_log_end_is_an_unexpected_offset(tmp_path):
    leader, follower = open_log(tmp_path), open_log(tmp_path, "follower")
    append(leader, 2)
    append(leader, 2)
    replicate(leader, follower)
    again = leader.read(2, ALL, upper_bound=leader.log_end_offset).records
    with pytest.raises(UnexpectedAppendOffsetError, match=r"first offset 2 .* less than the log end offset 4") as error:
        follower.append_as_follower(again, NOW_MS)
    assert (error.value.first_offset, error.value.last_offset, error.value.log_end_offset) == (2, 3, 4)
    assert follower.log_end_offset == 4
    leader.close()
    follower.close()


def test_follower_append_refuses_a_batch_whose_crc_fails(tmp_path):
    follower = open_log(tmp_path, "follower")
    data = batch(2, partition_leader_epoch=0)
    data[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC32C"):
        follower.append_as_follower(data, NOW_MS)
    assert (follower.log_end_offset, follower.leader_epoch_cache.entries()) == (0, [])
    follower.close()


def test_follower_append_accepts_a_gap_left_by_compaction(tmp_path):
    follower = open_log(tmp_path, "follower")
    follower.append_as_follower(batch(2, base_offset=5, partition_leader_epoch=1), NOW_MS)
    assert follower.log_end_offset == 7
    assert follower.leader_epoch_cache.entries() == [(1, 5)]
    follower.close()


def test_follower_append_takes_batches_over_max_message_bytes(tmp_path):
    # The leader accepted them (perhaps under another max.message.bytes): Kafka's follower
    # ignores the record size.
    follower = open_log(tmp_path, "follower", config=LogConfig(max_message_bytes=20))
    follower.append_as_follower(batch(2, partition_leader_epoch=0), NOW_MS)
    assert follower.log_end_offset == 2
    follower.close()


def test_follower_builds_the_same_producer_state_and_abort_index_as_the_leader(tmp_path):
    leader = open_log(tmp_path)
    leader.update_high_watermark(0)
    # The ISR lags: the leader's high watermark stays two offsets behind its log end.
    two_producers_with_an_abort_while_another_transaction_is_open(
        leader, high_watermark_at=lambda log: log.log_end_offset - 2
    )
    batch_by_batch, all_at_once = open_log(tmp_path, "follower-1"), open_log(tmp_path, "follower-2")
    replicate(leader, batch_by_batch, max_bytes=1)
    replicate(leader, all_at_once)
    assert leader.txn_index.entries == EXPECTED_ABORTS
    leader_index = (leader.directory / TXN_INDEX_FILE).read_bytes()
    for follower in (batch_by_batch, all_at_once):
        assert all_bytes(follower) == all_bytes(leader)
        assert follower.producer_state.producers == leader.producer_state.producers
        high_watermark = leader.high_watermark
        assert follower.producer_state.first_unstable_offset(high_watermark) == \
            leader.producer_state.first_unstable_offset(high_watermark)
        assert follower.txn_index.entries == EXPECTED_ABORTS
        assert (follower.directory / TXN_INDEX_FILE).read_bytes() == leader_index
        assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries() == [(0, 0), (2, 5)]
        follower.close()
    leader.close()


def test_abort_index_last_stable_offset_does_not_depend_on_the_high_watermark(tmp_path):
    lagging = open_log(tmp_path, "lagging")
    caught_up = open_log(tmp_path, "caught-up")
    standalone = open_log(tmp_path, "standalone", replicated=False)
    two_producers_with_an_abort_while_another_transaction_is_open(lagging)  # high watermark stays at 0
    two_producers_with_an_abort_while_another_transaction_is_open(
        caught_up, high_watermark_at=lambda log: log.log_end_offset
    )
    two_producers_with_an_abort_while_another_transaction_is_open(standalone)
    assert lagging.high_watermark == 0 and standalone.high_watermark == standalone.log_end_offset
    # Kafka's lastStableOffset(completedTxn): the other open transaction's first offset
    # (P2's, 2), else the offset after the marker (12).
    for log in (lagging, caught_up, standalone):
        assert log.txn_index.entries == EXPECTED_ABORTS
        log.close()


def test_replaying_the_log_rebuilds_the_same_abort_index(tmp_path):
    log = open_log(tmp_path)
    two_producers_with_an_abort_while_another_transaction_is_open(log, high_watermark_at=lambda log: 1)
    log.flush()
    log.close_without_flush()
    for name in os.listdir(log.directory):
        if name.endswith(".snapshot") or name == TXN_INDEX_FILE:
            os.unlink(log.directory / name)
    reopened = open_log(tmp_path, recover=True)
    assert reopened.txn_index.entries == EXPECTED_ABORTS
    assert reopened.producer_state.first_unstable_offset(reopened.log_end_offset) is None
    reopened.close()


# -- truncation and log start moves ----------------------------------------------------------


def test_truncation_drops_epochs_producer_state_and_aborts_past_the_new_end(tmp_path):
    log = open_log(tmp_path)
    txn_append(log, 1, 0, leader_epoch=0)                 # 0-1 P1 opens
    append(log, 1, leader_epoch=0)                         # 2
    marker(log, ControlType.ABORT, 1, leader_epoch=1)      # 3   P1 aborts
    txn_append(log, 2, 0, leader_epoch=2)                  # 4-5 P2 opens
    log.update_high_watermark(6)
    assert log.txn_index.entries == [AbortedTxn(1, 0, 3, 4)]
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 3), (2, 4)]

    log.truncate_to(3)
    assert (log.log_end_offset, log.high_watermark) == (3, 3)
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    assert LeaderEpochCache(log.directory / EPOCH_FILE).entries() == [(0, 0)]
    assert log.txn_index.entries == []
    assert (log.directory / TXN_INDEX_FILE).read_bytes() == b""
    assert log.producer_state.producers[1].current_txn_first_offset == 0  # P1's transaction is open again
    assert 2 not in log.producer_state.producers
    append(log, 1, leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 3)]
    log.close()


def test_truncation_at_the_log_end_drops_an_epoch_that_wrote_nothing(tmp_path):
    """A leader at epoch 1 that appended nothing becomes a follower: truncating to its log
    end must forget epoch 1, or it keeps fetching with a last epoch the new leader never
    had data for and is told to truncate at the same offset forever."""
    log = open_log(tmp_path)
    append(log, 3, leader_epoch=0)
    log.begin_leader_epoch(1)  # what becoming leader does
    assert log.leader_epoch_cache.latest_epoch == 1
    log.truncate_to(log.log_end_offset)
    assert (log.log_end_offset, log.leader_epoch_cache.entries()) == (3, [(0, 0)])
    log.close()


def test_truncate_fully_clears_the_epoch_cache(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=1)
    log.truncate_fully_and_start_at(10)
    assert log.leader_epoch_cache.entries() == []
    assert (log.directory / EPOCH_FILE).read_text() == "0\n0\n"
    log.append_as_follower(batch(1, base_offset=10, partition_leader_epoch=4), NOW_MS)
    assert log.leader_epoch_cache.entries() == [(4, 10)]
    log.close()


def test_delete_records_moves_the_first_epoch_to_the_new_log_start(tmp_path):
    log = open_log(tmp_path)
    append(log, 4, leader_epoch=0)
    append(log, 4, leader_epoch=1)
    log.update_high_watermark(8)
    log.delete_records_before(5)
    assert log.leader_epoch_cache.entries() == [(1, 5)]
    assert LeaderEpochCache(log.directory / EPOCH_FILE).entries() == [(1, 5)]
    log.close()


def test_retention_moves_the_first_epoch_to_the_new_log_start(tmp_path):
    size = len(batch(2))
    log = open_log(tmp_path, config=LogConfig(segment_bytes=size, retention_bytes=2 * size))
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=1)
    append(log, 2, leader_epoch=1)
    assert log.apply_retention(NOW_MS) == 2
    assert log.log_start_offset == 4
    assert log.leader_epoch_cache.entries() == [(1, 4)]
    log.close()


# -- loading ---------------------------------------------------------------------------------


def test_checkpoint_survives_reopen(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=2)
    log.close()
    assert (tmp_path / "leader" / "orders-0" / EPOCH_FILE).read_text() == "0\n2\n0 0\n2 2\n"
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (2, 2)]
    reopened.close()


def test_missing_epoch_checkpoint_is_rebuilt_from_the_batch_headers(tmp_path):
    log = open_log(tmp_path, config=LogConfig(segment_bytes=2 * len(batch(2))))
    for epoch in (0, 0, 2, 2, 2, 5):
        append(log, 2, leader_epoch=epoch)
    log.close()
    (log.directory / EPOCH_FILE).unlink()
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (2, 4), (5, 10)]
    reopened.flush()  # the rebuilt cache is written by the next flush or the close
    assert LeaderEpochCache(reopened.directory / EPOCH_FILE).entries() == [(0, 0), (2, 4), (5, 10)]
    reopened.close()


def test_data_dir_from_before_the_cache_gets_epoch_0_from_the_log_start(tmp_path):
    log = open_log(tmp_path, replicated=False)
    for _ in range(3):
        append(log, 2)  # standalone appends stamp epoch 0
    log.close()
    (log.directory / EPOCH_FILE).unlink()
    reopened = open_log(tmp_path, replicated=False, log_start_offset=3)
    assert reopened.leader_epoch_cache.entries() == [(0, 3)]
    reopened.close()


def test_empty_log_without_a_checkpoint_writes_none(tmp_path):
    log = open_log(tmp_path)
    assert log.leader_epoch_cache.entries() == []
    assert not (log.directory / EPOCH_FILE).exists()
    log.close()


def test_corrupt_epoch_checkpoint_fails_the_open(tmp_path):
    log = open_log(tmp_path)
    append(log, 2)
    log.close()
    (log.directory / EPOCH_FILE).write_text("0\n3\n0 0\n")
    with pytest.raises(CorruptLogError, match="expected 3 entries"):
        open_log(tmp_path)


def test_recovery_drops_epochs_past_the_recovered_end(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=3)
    log.flush()
    log.close_without_flush()
    segment = log.directory / "00000000000000000000.log"
    os.truncate(segment, segment.stat().st_size - 5)  # tear the epoch-3 batch
    reopened = open_log(tmp_path, recover=True)
    assert reopened.log_end_offset == 2
    assert reopened.leader_epoch_cache.entries() == [(0, 0)]
    reopened.close()


def test_recovery_assigns_newer_epochs_of_rescanned_batches(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=3)
    log.flush()
    log.close_without_flush()
    (log.directory / EPOCH_FILE).write_text("0\n1\n0 0\n")  # as if the epoch-3 entry were lost
    reopened = open_log(tmp_path, recover=True)
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (3, 2)]
    reopened.close()


def test_delete_removes_the_epoch_checkpoint_with_the_directory(tmp_path):
    log = open_log(tmp_path)
    append(log, 1)
    log.flush()
    assert (log.directory / EPOCH_FILE).exists()
    log.delete()
    assert not log.directory.exists()


# -- high watermark ownership --------------------------------------------------------------


def test_leader_append_does_not_move_a_replicated_high_watermark(tmp_path):
    log = open_log(tmp_path)
    append(log, 3)
    assert (log.log_end_offset, log.high_watermark) == (3, 0)
    log.close()


def test_update_high_watermark_is_kept_between_log_start_and_log_end(tmp_path):
    log = open_log(tmp_path)
    append(log, 4)
    assert log.update_high_watermark(100)
    assert log.high_watermark == 4
    assert not log.update_high_watermark(4)
    log.delete_records_before(2)
    assert log.update_high_watermark(0)  # a follower may be told a lower value: the caller decides
    assert log.high_watermark == 2
    log.close()


def test_set_replicated_false_returns_the_high_watermark_to_the_log_end(tmp_path):
    log = open_log(tmp_path)
    append(log, 3)
    log.set_replicated(False)
    assert log.high_watermark == 3
    append(log, 1)
    assert log.high_watermark == 4
    log.set_replicated(True)
    append(log, 1)
    assert log.high_watermark == 4
    log.close()


def reopened_manager(tmp_path, *, replicated):
    manager = LogManager([tmp_path / "data"], LogConfig(), replicated=replicated)
    manager.load()
    return manager


def test_high_watermark_is_restored_from_the_replication_checkpoint(tmp_path):
    manager = reopened_manager(tmp_path, replicated=True)
    manager.create_topic("orders", 2, {})
    log = manager.partition("orders", 0)
    assert log.replicated
    append(log, 5)
    log.update_high_watermark(3)
    manager.close()
    checkpoint = tmp_path / "data" / REPLICATION_OFFSET_CHECKPOINT_FILE
    assert checkpoint.read_text() == "0\n2\norders 0 3\norders 1 0\n"  # Kafka's OffsetCheckpointFile

    manager = reopened_manager(tmp_path, replicated=True)
    assert manager.partition("orders", 0).high_watermark == 3
    manager.close()


def test_high_watermark_without_a_checkpoint_entry_starts_at_the_log_start(tmp_path):
    manager = reopened_manager(tmp_path, replicated=True)
    manager.create_topic("orders", 1, {})
    append(manager.partition("orders", 0), 5)
    manager.partition("orders", 0).update_high_watermark(5)
    manager.close()
    checkpoint = tmp_path / "data" / REPLICATION_OFFSET_CHECKPOINT_FILE
    checkpoint.write_text("0\n0\n")
    manager = reopened_manager(tmp_path, replicated=True)
    assert manager.partition("orders", 0).high_watermark == 0
    manager.close()


def test_high_watermark_above_the_log_end_is_capped_at_load(tmp_path):
    manager = reopened_manager(tmp_path, replicated=True)
    manager.create_topic("orders", 1, {})
    append(manager.partition("orders", 0), 5)
    manager.close()
    (tmp_path / "data" / REPLICATION_OFFSET_CHECKPOINT_FILE).write_text("0\n1\norders 0 50\n")
    manager = reopened_manager(tmp_path, replicated=True)
    assert manager.partition("orders", 0).high_watermark == 5
    manager.close()


def test_unreadable_replication_checkpoint_restarts_high_watermarks_at_the_log_start(tmp_path):
    manager = reopened_manager(tmp_path, replicated=True)
    manager.create_topic("orders", 1, {})
    append(manager.partition("orders", 0), 5)
    manager.partition("orders", 0).update_high_watermark(5)
    manager.close()
    (tmp_path / "data" / REPLICATION_OFFSET_CHECKPOINT_FILE).write_text("0\n1\norders zero 5\n")
    manager = reopened_manager(tmp_path, replicated=True)
    assert manager.partition("orders", 0).high_watermark == 0
    manager.close()


def test_standalone_log_high_watermark_is_the_log_end(tmp_path):
    manager = reopened_manager(tmp_path, replicated=False)
    manager.create_topic("orders", 1, {})
    log = manager.partition("orders", 0)
    assert not log.replicated
    append(log, 5)
    assert log.high_watermark == log.log_end_offset == 5
    manager.close()
    assert not (tmp_path / "data" / REPLICATION_OFFSET_CHECKPOINT_FILE).exists()
    manager = reopened_manager(tmp_path, replicated=False)
    assert manager.partition("orders", 0).high_watermark == 5
    manager.close()


def test_a_committed_transaction_stays_unstable_until_the_high_watermark_passes_its_marker(tmp_path):
    # Kafka's unreplicatedTxns: a leader that fails before its followers have the COMMIT
    # marker takes the marker with it, so read_committed must not get past the
    # transaction's records before then (the soak saw a record read this way).
    log = open_log(tmp_path)
    txn_append(log, 1, 0)                  # 0-1
    log.update_high_watermark(2)
    assert log.last_stable_offset == 0
    marker(log, ControlType.COMMIT, 1)     # 2, on the leader only
    assert (log.high_watermark, log.last_stable_offset) == (2, 0)
    log.update_high_watermark(3)
    assert log.last_stable_offset == 3
    log.close()


def test_a_follower_forgets_completed_transactions_as_its_high_watermark_passes_their_markers(tmp_path):
    leader, follower = open_log(tmp_path), open_log(tmp_path, "follower")
    for sequence in range(0, 200, 2):
        txn_append(leader, 1, sequence)
        marker(leader, ControlType.COMMIT, 1)
    replicate(leader, follower)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.producer_state._unreplicated == []  # no entry per transaction kept for good
    follower.close()
    leader.close()


def test_an_abort_marker_whose_index_write_failed_is_gone_once_the_dir_takes_writes_again(tmp_path, monkeypatch):
    """The 10-minute cluster soak's replica mismatch (2026-12-03): on a full disk an abort
    marker reached the segment, the aborted-transaction index's write failed, and the log
    end offset stayed before it. When the dir came back, the follower wrote the new
    leader's marker for the same offset after the stale one: its file held the offset
    twice. Now the dir's logs drop what a failed append left before going on."""
    directory = tmp_path / "data"
    manager = LogManager([directory], LogConfig(), replicated=True)
    manager.load()
    manager.create_topic("out", 1, {})
    log = manager.partition("out", 0)
    assert log is not None
    txn_append(log, 7, 0)  # offsets 0-1, a transaction of producer 7
    real_write = os.write

    def full_disk(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(TXN_INDEX_FILE):
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(StorageError):
        marker(log, ControlType.ABORT, 7)  # the marker is in the segment, the index entry is not
    monkeypatch.undo()
    assert log.log_end_offset == 2
    error = StorageError(str(directory), "No space left on device", 28)
    manager.set_dir_offline(directory, error)
    manager.set_dir_online(directory)  # the dir takes writes again

    marker(log, ControlType.ABORT, 7, leader_epoch=1)  # the new leader's marker for offset 2, as a follower would
    offsets = [(header.base_offset, header.partition_leader_epoch) for header in parse_batches(all_bytes(log))]
    assert offsets == [(0, 0), (2, 1)]
    assert log.txn_index.collect(0, 3) == [(7, 0)]
    manager.close()
    reopened = LogManager([directory], LogConfig(), replicated=True)
    reopened.load()
    again = reopened.partition("out", 0)
    assert again is not None
    assert [(h.base_offset, h.partition_leader_epoch) for h in parse_batches(all_bytes(again))] == [(0, 0), (2, 1)]
    reopened.close()


def test_a_follower_takes_a_marker_the_leaders_cleaner_emptied(tmp_path):
    """The leader's cleaner keeps a producer's last marker as an empty batch; a follower
    that fetches it appends it (it changes nothing, as on replay) instead of failing."""
    follower = open_log(tmp_path, "follower")
    data = batch(2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)  # offsets 0 and 1
    control = bytearray(build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0,
                                            coordinator_epoch=0, timestamp_ms=NOW_MS))
    [header] = parse_batches(control)
    emptied = bytearray(empty_batch(header))
    [emptied_header] = parse_batches(emptied)
    set_base_offset(emptied, emptied_header, 2)
    follower.append_as_follower(bytes(data + emptied), NOW_MS)
    assert follower.log_end_offset == 3
    [last] = parse_batches(all_bytes(follower))[-1:]
    assert (last.base_offset, last.is_control, last.record_count) == (2, True, 0)


def test_an_empty_epoch_checkpoint_left_by_a_crash_is_rebuilt_from_the_batch_headers(tmp_path):
    log = open_log(tmp_path, config=LogConfig(segment_bytes=2 * len(batch(2))))
    for epoch in (1, 1, 3, 5):
        append(log, 2, leader_epoch=epoch)
    log.flush()
    log.close_without_flush()
    (log.directory / EPOCH_FILE).write_bytes(b"")  # the rename was durable, the data not
    reopened = open_log(tmp_path, config=LogConfig(segment_bytes=2 * len(batch(2))), recover=True,
                        recovery_point=log.recovery_point)
    assert reopened.leader_epoch_cache.entries() == [(1, 0), (3, 4), (5, 6)]
    reopened.close()
