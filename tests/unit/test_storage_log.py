"""PartitionLog: offsets, reads, rolls, retention, truncation, flush policy and recovery."""

import os
import re

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol.record_batch import (
    ControlType,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
    parse_batches,
    read_header,
)
from oncelog.storage import (
    AppendOrigin,
    InvalidRecordError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordTooLargeError,
)
from oncelog.storage.errors import StorageError
from oncelog.storage.segment import segment_file_name

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


def make_batch(count: int = 1, *, timestamp_ms: int = NOW_MS, value_size: int = 20, **kwargs) -> bytearray:
    records = [Record(key=b"k%d" % i, value=bytes([97 + i % 26]) * value_size) for i in range(count)]
    return bytearray(build_batch(records, timestamp_ms=timestamp_ms, **kwargs))


BATCH_OF_TWO = len(make_batch(2))
TWO_BATCHES = 2 * BATCH_OF_TWO  # a segment.bytes holding two batches of two records


def append(log: PartitionLog, count: int = 1, *, now_ms: int = NOW_MS, timestamp_ms: int | None = None,
           value_size: int = 20, **kwargs):
    data = make_batch(count, timestamp_ms=now_ms if timestamp_ms is None else timestamp_ms, value_size=value_size)
    return log.append(data, parse_batches(data), now_ms=now_ms, **kwargs)


def open_log(path, config=None, *, recover=False, **kwargs) -> PartitionLog:
    return PartitionLog.open(path / "orders-0", "orders", 0, config or LogConfig(), recover=recover, **kwargs)


def read_all(log: PartitionLog, start: int | None = None) -> bytes:
    return log.read(log.log_start_offset if start is None else start, 1 << 30).records


def offsets_of(records: bytes) -> list[tuple[int, int]]:
    return [(header.base_offset, header.last_offset) for header in parse_batches(records)]


@pytest.fixture
def log(tmp_path):
    opened = open_log(tmp_path)
    yield opened
    opened.close()


# -- append and read ---------------------------------------------------------------------


def test_appends_get_consecutive_offsets_and_read_back_intact(log):
    results = [append(log, count) for count in (3, 1, 5)]
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 2), (3, 3), (4, 8)]
    assert log.log_end_offset == log.high_watermark == 9
    records = read_all(log)
    assert offsets_of(records) == [(0, 2), (3, 3), (4, 8)]
    for header in parse_batches(records):  # verifies every CRC
        assert header.partition_leader_epoch == 0


def test_append_result_reports_create_time_and_log_start(log):
    result = append(log, 2)
    assert result.log_append_time_ms == -1
    assert result.log_start_offset == 0


def test_append_rewrites_offsets_in_the_callers_buffer(log):
    append(log, 4)
    data = make_batch(2)
    log.append(data, parse_batches(data), now_ms=NOW_MS)
    assert read_header(data).base_offset == 4
    assert read_all(log, 4) == bytes(data)


def test_log_append_time_rewrites_timestamp_type_and_keeps_a_valid_crc(tmp_path):
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    try:
        result = append(log, 3, now_ms=NOW_MS + 5, timestamp_ms=1_000)
        assert result.log_append_time_ms == NOW_MS + 5
        (header,) = parse_batches(read_all(log), verify_crc=True)
        assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert header.max_timestamp == NOW_MS + 5
        assert header.base_timestamp == 1_000
        assert log.offset_for_timestamp(NOW_MS) == (0, NOW_MS + 5)
    finally:
        log.close()


def test_read_from_an_offset_inside_a_batch_returns_that_whole_batch(log):
    append(log, 5)
    append(log, 5)
    result = log.read(7, 1 << 20)
    assert offsets_of(result.records) == [(5, 9)]
    assert result.first_offset == 5


def test_read_stops_at_a_batch_boundary_within_max_bytes(log):
    for _ in range(10):
        append(log, 2)
    batch_size = len(log.read(0, 1).records)
    result = log.read(4, batch_size * 3 + batch_size // 2)
    assert offsets_of(result.records) == [(4, 5), (6, 7), (8, 9)]


def test_oversized_first_batch_is_returned_only_with_min_one_batch(log):
    append(log, 10, value_size=500)
    assert offsets_of(log.read(0, 100).records) == [(0, 9)]
    assert log.read(0, 100, min_one_batch=False).records == b""


def test_read_stops_before_batches_at_or_past_the_upper_bound(log):
    for _ in range(5):
        append(log, 2)
    assert offsets_of(log.read(0, 1 << 20, upper_bound=6).records) == [(0, 1), (2, 3), (4, 5)]
    assert log.read(6, 1 << 20, upper_bound=6).records == b""


def test_read_defaults_to_the_high_watermark(log):
    for _ in range(5):
        append(log, 2)
    log.high_watermark = 4  # as replication will hold it back
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 1), (2, 3)]
    assert log.read(4, 1 << 20).records == b""
    assert offsets_of(log.read(4, 1 << 20, upper_bound=log.log_end_offset).records)[-1] == (8, 9)


def test_read_at_the_log_end_is_empty_and_past_it_is_out_of_range(log):
    append(log, 3)
    result = log.read(3, 1 << 20)
    assert result.records == b"" and result.first_offset == -1
    assert result.high_watermark == result.log_end_offset == 3
    with pytest.raises(OffsetOutOfRangeError, match="offset 4 is out of range for partition orders-0"):
        log.read(4, 1 << 20)


def test_read_spans_segments(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=600))
    try:
        for _ in range(20):
            append(log, 2)
        assert len(log.segment_base_offsets) > 3
        records = log.read(3, 1 << 20).records
        assert [base for base, _ in offsets_of(records)] == list(range(2, 40, 2))
    finally:
        log.close()


# -- append validation -------------------------------------------------------------------


def test_batch_over_max_message_bytes_is_refused(tmp_path):
    log = open_log(tmp_path, LogConfig(max_message_bytes=200))
    try:
        with pytest.raises(RecordTooLargeError, match=re.escape("exceeds max.message.bytes 200")):
            append(log, 5, value_size=100)
        assert log.log_end_offset == 0
    finally:
        log.close()


def test_append_over_segment_bytes_gets_a_segment_of_its_own(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    try:
        append(log)
        result = append(log, 5, value_size=100)
        append(log)
        assert log.segment_base_offsets == [0, 1, 6]
        assert log._segments[1].size > 300
        assert offsets_of(read_all(log)) == [(0, 0), (result.base_offset, result.last_offset), (6, 6)]
    finally:
        log.close()


def test_clients_may_send_one_batch_and_no_control_batches(log):
    two = make_batch(1) + make_batch(1)
    with pytest.raises(InvalidRecordError, match="2 batches"):
        log.append(two, parse_batches(two), now_ms=NOW_MS)
    marker = bytearray(build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0,
                                           coordinator_epoch=0, timestamp_ms=NOW_MS))
    with pytest.raises(InvalidRecordError, match="control records"):
        log.append(marker, parse_batches(marker), now_ms=NOW_MS)
    result = log.append(marker, parse_batches(marker), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR)
    assert (result.base_offset, log.log_end_offset) == (0, 1)


def test_idempotent_batch_without_a_sequence_is_refused(log):
    data = make_batch(1, producer_id=5, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="invalid sequence number -1"):
        log.append(data, parse_batches(data), now_ms=NOW_MS)


def test_replicated_batches_keep_their_offsets(log):
    data = bytearray(build_batch([Record(None, b"x")] * 3, base_offset=0, timestamp_ms=NOW_MS))
    data += build_batch([Record(None, b"y")], base_offset=5, timestamp_ms=NOW_MS)
    result = log.append(data, parse_batches(data), now_ms=NOW_MS, origin=AppendOrigin.REPLICATION)
    assert (result.base_offset, result.last_offset, log.log_end_offset) == (0, 5, 6)
    stale = bytearray(build_batch([Record(None, b"z")], base_offset=4, timestamp_ms=NOW_MS))
    with pytest.raises(InvalidRecordError, match="below the expected 6"):
        log.append(stale, parse_batches(stale), now_ms=NOW_MS, origin=AppendOrigin.REPLICATION)


# -- rolling -------------------------------------------------------------------------------


def test_segment_rolls_when_the_append_would_pass_segment_bytes(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1000))
    try:
        batch_size = len(make_batch(2))
        for _ in range(20):
            append(log, 2)
        per_segment = 1000 // batch_size
        assert log.segment_base_offsets == list(range(0, 40, 2 * per_segment))
        assert all(segment.size <= 1000 for segment in log._segments)
        names = sorted(os.listdir(log.directory))
        assert segment_file_name(2 * per_segment, ".log") in names
    finally:
        log.close()


def test_segment_rolls_when_older_than_segment_ms(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_ms=HOUR_MS))
    try:
        append(log, now_ms=NOW_MS)
        append(log, now_ms=NOW_MS + HOUR_MS)  # exactly segment.ms: not yet
        assert log.segment_base_offsets == [0]
        append(log, now_ms=NOW_MS + HOUR_MS + 1)
        assert log.segment_base_offsets == [0, 2]
        append(log, now_ms=NOW_MS + HOUR_MS + 2)
        assert log.segment_base_offsets == [0, 2]
    finally:
        log.close()


def test_segment_rolls_when_its_index_is_full(tmp_path):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 3))
    try:
        for _ in range(10):
            append(log)
        # entries from the second batch on; three entries fill the index
        assert log.segment_base_offsets == [0, 4, 8]
    finally:
        log.close()


# -- reopening -----------------------------------------------------------------------------


def test_reopen_after_clean_close_keeps_offsets_and_continues_appending(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=800))
    for _ in range(15):
        append(log, 3)
    before = read_all(log)
    bases = log.segment_base_offsets
    log.close()
    reopened = open_log(tmp_path, LogConfig(segment_bytes=800))
    try:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 45)
        assert reopened.segment_base_offsets == bases
        assert read_all(reopened) == before
        assert append(reopened, 2).base_offset == 45
    finally:
        reopened.close()


def test_indexes_are_rebuilt_when_their_files_were_deleted(tmp_path):
    config = LogConfig(segment_bytes=4000, index_interval_bytes=100)
    log = open_log(tmp_path, config)
    for number in range(60):
        append(log, 2, timestamp_ms=10_000 + number)
    entry_counts = [(s.index_entry_count, s.time_index_entry_count) for s in log._segments]
    log.close()
    for name in os.listdir(tmp_path / "orders-0"):
        if name.endswith((".index", ".timeindex")):
            os.unlink(tmp_path / "orders-0" / name)
    reopened = open_log(tmp_path, config)
    try:
        assert [(s.index_entry_count, s.time_index_entry_count) for s in reopened._segments][:-1] == entry_counts[:-1]
        for offset in range(0, 120, 13):
            assert offsets_of(reopened.read(offset, 1).records)[0][0] == offset - offset % 2
        assert reopened.offset_for_timestamp(10_030) == (60, 10_030)
        # The rebuilt indexes of the inactive segments are written at the open, the active
        # one's by the next flush: the recovery point waits at its base until then.
        assert reopened.recovery_point == reopened._segments[-1].base_offset
        reopened.flush()
        assert reopened.recovery_point == reopened.log_end_offset
        assert sorted(n for n in os.listdir(tmp_path / "orders-0") if n.endswith(".index"))
    finally:
        reopened.close()


def test_leftover_temporary_and_orphan_index_files_are_removed_on_open(tmp_path):
    log = open_log(tmp_path)
    append(log)
    log.close()
    directory = tmp_path / "orders-0"
    (directory / "00000000000000000000.index.tmp").write_bytes(b"junk")
    (directory / "00000000000000000777.index").write_bytes(b"")
    reopened = open_log(tmp_path)
    try:
        assert sorted(os.listdir(directory)) == [
            "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
            "00000000000000000001.snapshot",  # producer state, written at the clean close
            "leader-epoch-checkpoint",  # written by the first append (epoch 0)
        ]
    finally:
        reopened.close()


# -- timestamps ----------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_first_batch_reaching_it_across_segments(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    try:
        timestamps = [1_000, 3_000, 2_000, 4_000, 6_000, 5_000, 7_000, 8_000, 9_000]
        for timestamp in timestamps:
            append(log, 2, timestamp_ms=timestamp)
        assert len(log.segment_base_offsets) > 2
        assert log.offset_for_timestamp(0) == (0, 1_000)
        assert log.offset_for_timestamp(2_500) == (2, 3_000)
        assert log.offset_for_timestamp(4_500) == (8, 6_000)
        assert log.offset_for_timestamp(9_000) == (16, 9_000)
        assert log.offset_for_timestamp(9_001) is None
        assert log.max_timestamp_and_offset() == (16, 9_000)
    finally:
        log.close()


def test_offset_for_timestamp_never_returns_an_offset_below_the_log_start(log):
    append(log, 4, timestamp_ms=1_000)
    append(log, 4, timestamp_ms=2_000)
    log.delete_records_before(2)
    assert log.offset_for_timestamp(0) == (2, 1_000)


# -- retention -----------------------------------------------------------------------------


def test_time_retention_deletes_old_segments_and_moves_the_log_start(tmp_path):
    config = LogConfig(segment_bytes=TWO_BATCHES, retention_ms=HOUR_MS)
    log = open_log(tmp_path, config)
    try:
        for number in range(10):
            append(log, 2, timestamp_ms=NOW_MS + number * 60_000)
        bases = log.segment_base_offsets
        assert len(bases) >= 4
        # at this time, segments whose newest batch is more than an hour old go
        now = NOW_MS + HOUR_MS + 60_000 * (bases[2] // 2 - 1) + 1
        deleted = log.apply_retention(now)
        assert deleted == 2
        assert log.log_start_offset == bases[2] == log.segment_base_offsets[0]
        assert not (log.directory / segment_file_name(bases[0], ".log")).exists()
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bases[2] - 1, 1 << 20)
        assert offsets_of(log.read(bases[2], 1 << 20).records)[0][0] == bases[2]
    finally:
        log.close()


def test_time_retention_rolls_and_deletes_an_expired_active_segment(log):
    append(log, 3, timestamp_ms=NOW_MS)
    assert log.apply_retention(NOW_MS + log.config.retention_ms + 1) == 1
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (3, 3, [3])
    assert log.read(3, 1 << 20).records == b""
    assert append(log).base_offset == 3


def test_size_retention_deletes_oldest_segments_until_under_the_limit(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=500, retention_bytes=1000))
    try:
        for _ in range(20):
            append(log, 2)
        assert log.size_in_bytes > 1000
        assert log.apply_retention(NOW_MS) > 0
        # as in Kafka: delete while the log stays at or above retention.bytes
        assert 1000 <= log.size_in_bytes < 1000 + log._segments[0].size
        assert log.log_start_offset == log.segment_base_offsets[0] > 0
    finally:
        log.close()


def test_retention_does_nothing_for_compacted_topics(tmp_path):
    config = LogConfig(segment_bytes=500, retention_bytes=0, retention_ms=0, cleanup_policy="compact")
    log = open_log(tmp_path, config)
    try:
        for _ in range(10):
            append(log, 2, timestamp_ms=1)
        assert log.apply_retention(NOW_MS) == 0
        assert log.log_start_offset == 0
    finally:
        log.close()


def test_delete_records_moves_the_log_start_and_drops_whole_segments_below_it(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=500))
    try:
        for _ in range(12):
            append(log, 2)
        bases = log.segment_base_offsets
        target = bases[2] + 1
        assert log.delete_records_before(target) == target
        assert log.segment_base_offsets == bases[2:]
        assert log.log_start_offset == target
        assert offsets_of(log.read(target, 1 << 20).records)[0] == (bases[2], bases[2] + 1)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(target - 1, 1 << 20)
        assert log.delete_records_before(2) == target  # never moves backwards
        with pytest.raises(OffsetOutOfRangeError, match="past the high watermark 24"):
            log.delete_records_before(25)
        assert log.delete_records_before(-1) == 24
        assert log.read(24, 1 << 20).records == b""
    finally:
        log.close()


# -- truncation ----------------------------------------------------------------------------


def test_truncate_to_drops_later_segments_and_appends_continue_there(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=500))
    try:
        for _ in range(12):
            append(log, 2)
        kept = log.read(0, 1 << 20, upper_bound=9).records
        log.truncate_to(9)  # inside batch 8..9: the whole batch goes
        assert log.log_end_offset == log.high_watermark == 8
        assert read_all(log) == kept[: len(kept) - len(make_batch(2))]
        assert all(base <= 8 for base in log.segment_base_offsets)
        assert append(log).base_offset == 8
    finally:
        log.close()


def test_truncate_below_the_first_segment_starts_an_empty_log_there(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=500))
    try:
        for _ in range(12):
            append(log, 2)
        log.delete_records_before(20)
        log.apply_retention(NOW_MS)
        first = log.segment_base_offsets[0]
        log.truncate_to(first - 1)
        assert (log.log_start_offset, log.log_end_offset) == (first - 1, first - 1)
        assert log.segment_base_offsets == [first - 1]
    finally:
        log.close()


# -- flushing ------------------------------------------------------------------------------


def test_flush_messages_fsyncs_and_advances_the_recovery_point(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_messages=3))
    try:
        append(log, 2)
        assert log.recovery_point == 0
        append(log, 1)
        assert log.recovery_point == 3
    finally:
        log.close()


def test_a_flush_is_due_once_flush_ms_passed_with_unflushed_data(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_ms=1_000), now_ms=NOW_MS)
    try:
        append(log, 2)
        assert not log.flush_is_due(NOW_MS + 999)
        assert log.flush_is_due(NOW_MS + 1_000)
        log.flush(NOW_MS + 1_000)
        assert log.recovery_point == 2
        assert not log.flush_is_due(NOW_MS + 5_000)  # nothing new
    finally:
        log.close()


def rolled_log(tmp_path):
    """A log of one-batch segments holding two batches: the segment at 0 rolled, not yet
    flushed, and the active one at 2."""
    log = open_log(tmp_path, LogConfig(segment_bytes=BATCH_OF_TWO + 1), now_ms=NOW_MS)
    append(log, 2)
    append(log, 2)
    return log


def test_a_rolled_segment_is_flushed_at_the_next_flush_check(tmp_path):
    log = rolled_log(tmp_path)
    try:
        assert len(log.segment_base_offsets) == 2
        assert log.recovery_point == 0
        assert log.flush_is_due(NOW_MS)
        log.flush(NOW_MS)
        assert log.recovery_point == 4
        assert (log.directory / segment_file_name(0, ".index")).exists()
        assert log.flush_is_due(NOW_MS)  # the index files' renames wait for a directory fsync
        log.flush(NOW_MS)
        assert not log.flush_is_due(NOW_MS)
    finally:
        log.close()


def test_the_producer_snapshot_of_a_roll_is_fsynced_by_the_next_flush_not_by_the_roll(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log = rolled_log(tmp_path)  # the roll happens on the event loop in a broker
    try:
        snapshot = str(log.directory / "00000000000000000002.snapshot")  # the roll at 2
        assert os.path.exists(snapshot)
        assert snapshot not in synced
        flush = log.take_flush()
        flush.sync()  # on the flusher thread
        flush.finish(NOW_MS)
        assert synced.count(snapshot) == 1
        log.flush(NOW_MS)
        assert synced.count(snapshot) == 1  # once is enough
    finally:
        log.close()


def test_a_failed_flush_leaves_the_rolls_producer_snapshot_to_the_next_one(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    failing = [False]

    def flaky_fsync(fd):
        if failing[0]:
            raise OSError(5, "Input/output error")
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", flaky_fsync)
    log = rolled_log(tmp_path)
    try:
        snapshot = str(log.directory / "00000000000000000002.snapshot")
        flush = log.take_flush()
        failing[0] = True  # the disk fails for this flush
        flush.sync()
        with pytest.raises(StorageError):
            flush.finish(NOW_MS)
        failing[0] = False
        log.flush(NOW_MS)
        assert synced.count(snapshot) == 1
    finally:
        failing[0] = False
        log.close()


def test_a_flush_synced_while_appends_go_on_covers_what_was_there_when_taken(tmp_path):
    log = rolled_log(tmp_path)
    try:
        flush = log.take_flush()
        append(log, 2)
        flush.sync()  # as on the flusher thread
        append(log, 2)
        flush.finish(NOW_MS)
        assert log.recovery_point == 4
        assert (log.directory / segment_file_name(0, ".index")).exists()
        assert not [path.name for path in log.directory.iterdir() if path.name.endswith(".tmp")]
        log.flush(NOW_MS)
        assert log.recovery_point == 8
    finally:
        log.close()


def test_a_flush_taken_before_a_truncation_leaves_the_recovery_point_where_it_was(tmp_path):
    log = open_log(tmp_path, now_ms=NOW_MS)
    try:
        append(log, 2)
        log.flush(NOW_MS)
        append(log, 2)
        append(log, 2)
        flush = log.take_flush()
        log.truncate_to(4)
        append(log, 2)  # new data at 4..5, never synced
        flush.sync()
        flush.finish(NOW_MS)
        assert log.recovery_point == 2
    finally:
        log.close()


def test_a_flush_of_a_segment_deleted_while_it_syncs_leaves_no_file_of_it(tmp_path):
    log = rolled_log(tmp_path)
    try:
        flush = log.take_flush()  # the rolled segment at 0, with its index files
        log.delete_records_before(2)  # deletes that segment
        flush.sync()
        flush.finish(NOW_MS)
        names = sorted(path.name for path in log.directory.iterdir())
        assert not [name for name in names if name.startswith(segment_file_name(0, ""))], names
        assert not [name for name in names if name.endswith(".tmp")], names
    finally:
        log.close()


def test_a_flush_discarded_unfinished_leaves_its_work_to_the_next_one(tmp_path):
    log = rolled_log(tmp_path)
    try:
        flush = log.take_flush()
        flush.sync()
        flush.discard()  # as when the broker stops while the flusher thread syncs
        assert log.flush_is_due(NOW_MS)
        assert log.recovery_point == 0
        assert not [path.name for path in log.directory.iterdir() if path.name.endswith(".tmp")]
    finally:
        log.close()


def test_a_flush_taken_while_another_is_in_flight_covers_everything_still_unsynced(tmp_path):
    log = rolled_log(tmp_path)  # the roll made a file in the directory
    try:
        in_flight = log.take_flush()
        again = log.take_flush()  # e.g. flush.messages reached while the flusher thread syncs
        assert again.directory is not None and [s.segment for s in again.segments] == [
            s.segment for s in in_flight.segments]
        again.sync()
        again.finish(NOW_MS)
        in_flight.sync()
        in_flight.finish(NOW_MS)
        assert log.recovery_point == 4
    finally:
        log.close()


def test_a_flush_whose_index_rename_fails_leaves_the_segment_to_be_flushed_again(tmp_path):
    failures = []
    log = rolled_log(tmp_path)
    log.storage_failed = lambda failed, error: failures.append(error)
    try:
        flush = log.take_flush()
        index = log.directory / segment_file_name(0, ".index")
        index.mkdir()  # a rename cannot replace a directory
        (index / "in-the-way").write_bytes(b"")
        flush.sync()
        with pytest.raises(StorageError):
            flush.finish(NOW_MS)
        assert failures and log.recovery_point == 0 and log.flush_is_due(NOW_MS)
        assert not [path.name for path in log.directory.iterdir() if path.name.endswith(".tmp")]
        (index / "in-the-way").unlink()
        index.rmdir()
        log.flush(NOW_MS)
        assert index.is_file() and log.recovery_point == 4
    finally:
        log.close()


def test_a_flush_finished_after_the_partition_was_deleted_reports_nothing(tmp_path):
    failures = []
    log = rolled_log(tmp_path)
    log.storage_failed = lambda failed, error: failures.append(error)
    flush = log.take_flush()
    log.delete()
    flush.sync()
    flush.finish(NOW_MS)
    assert failures == []
    assert not log.directory.exists()


# -- recovery ------------------------------------------------------------------------------


def crashed_log(tmp_path, batches=10, config=None):
    """A log that was written and then abandoned without close (a crash)."""
    log = open_log(tmp_path, config)
    for _ in range(batches):
        append(log, 2)
    records = read_all(log)
    log.close_without_flush()
    return records, log


def active_segment_path(log):
    return log.directory / segment_file_name(log.segment_base_offsets[-1], ".log")


def test_recovery_truncates_a_torn_batch_and_appends_continue_at_its_offset(tmp_path, caplog):
    records, log = crashed_log(tmp_path)
    batch_size = len(records) // 10
    os.truncate(active_segment_path(log), len(records) - batch_size // 2)
    with caplog.at_level("WARNING", logger="oncelog.storage"):
        recovered = open_log(tmp_path, recover=True)
    assert f"truncating {batch_size - batch_size // 2} bytes at position {9 * batch_size}" in caplog.text
    try:
        assert recovered.log_end_offset == 18
        assert read_all(recovered) == records[: 9 * batch_size]
        assert append(recovered, 2).base_offset == 18
    finally:
        recovered.close()


def test_recovery_drops_garbage_after_the_last_batch(tmp_path):
    records, log = crashed_log(tmp_path)
    with open(active_segment_path(log), "ab") as file:
        file.write(b"\x00" * 100 + os.urandom(1000))
    recovered = open_log(tmp_path, recover=True)
    try:
        assert recovered.log_end_offset == 20
        assert read_all(recovered) == records
    finally:
        recovered.close()


def test_recovery_drops_a_last_batch_whose_body_was_flipped(tmp_path):
    records, log = crashed_log(tmp_path)
    batch_size = len(records) // 10
    with open(active_segment_path(log), "r+b") as file:
        file.seek(len(records) - 5)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x01]))
    recovered = open_log(tmp_path, recover=True)
    try:
        assert recovered.log_end_offset == 18
        assert read_all(recovered) == records[: 9 * batch_size]
        assert append(recovered).base_offset == 18
    finally:
        recovered.close()


def test_recovery_from_a_recovery_point_rescans_later_segments_and_drops_those_after_damage(tmp_path):
    config = LogConfig(segment_bytes=TWO_BATCHES)
    _records, log = crashed_log(tmp_path, batches=12, config=config)
    bases = log.segment_base_offsets
    assert len(bases) >= 4
    damaged = log.directory / segment_file_name(bases[1], ".log")
    with open(damaged, "r+b") as file:
        file.seek(80)  # inside the first batch's records
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x01]))
    recovered = open_log(tmp_path, config, recover=True, recovery_point=bases[1])
    try:
        assert recovered.segment_base_offsets == bases[:2]
        assert recovered.log_end_offset == bases[1]
        assert append(recovered).base_offset == bases[1]
    finally:
        recovered.close()


def test_recovery_without_a_recovery_point_trusts_all_but_the_last_segment(tmp_path):
    config = LogConfig(segment_bytes=500)
    records, _ = crashed_log(tmp_path, batches=12, config=config)
    log2 = open_log(tmp_path, config, recover=True)
    try:
        assert log2.log_end_offset == 24
        assert read_all(log2) == records
    finally:
        log2.close()


def test_log_start_offset_from_the_checkpoint_is_restored(tmp_path):
    crashed_log(tmp_path)
    reopened = open_log(tmp_path, recover=True, log_start_offset=7)
    try:
        assert reopened.log_start_offset == 7
        with pytest.raises(OffsetOutOfRangeError):
            reopened.read(6, 100)
    finally:
        reopened.close()


def test_delete_removes_the_partition_directory(tmp_path):
    log = open_log(tmp_path)
    append(log)
    log.delete()
    assert not (tmp_path / "orders-0").exists()


def test_updated_config_applies_to_the_next_append(log):
    append(log)
    log.update_config(LogConfig(message_timestamp_type="LogAppendTime"))
    assert append(log, now_ms=NOW_MS + 1).log_append_time_ms == NOW_MS + 1


def test_log_append_time_crc_matches_a_fresh_computation(tmp_path):
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    try:
        append(log, 4)
        records = read_all(log)
        assert int.from_bytes(records[17:21], "big") == crc32c(records[21:])
    finally:
        log.close()


# -- reads against a model -----------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch_shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 250)), min_size=1, max_size=40),
    segment_bytes=st.integers(1700, 5000),
    index_interval_bytes=st.integers(0, 600),
    reads=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 4000), st.integers(0, 10**6), st.booleans()),
                   min_size=1, max_size=15),
    reopen=st.booleans(),
)
def test_reads_match_a_model_of_whole_batches(tmp_path_factory, batch_shapes, segment_bytes, index_interval_bytes,
                                              reads, reopen):
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    directory = tmp_path_factory.mktemp("model")
    log = open_log(directory, config)
    model = []  # (base offset, last offset, bytes)
    for count, value_size in batch_shapes:
        data = make_batch(count, value_size=value_size)
        result = log.append(data, parse_batches(data), now_ms=NOW_MS)
        model.append((result.base_offset, result.last_offset, bytes(data)))
    if reopen:
        log.close()
        log = open_log(directory, config)
    try:
        end = log.log_end_offset
        for raw_offset, max_bytes, raw_bound, min_one in reads:
            offset = raw_offset % (end + 1)
            bound = raw_bound % (end + 2)
            expected = b""
            for base, last, data in model:
                if offset >= bound:  # nothing at or past the bound, even inside a batch
                    break
                if last < offset:
                    continue
                if base >= bound:
                    break
                if len(expected) + len(data) > max_bytes and (expected or not min_one):
                    break
                expected += data
            got = log.read(offset, max_bytes, upper_bound=bound, min_one_batch=min_one).records
            assert got == expected, (offset, max_bytes, bound, min_one)
    finally:
        log.close()


@settings(max_examples=30, deadline=None)
@given(
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=25),
    cut_fraction=st.floats(0, 1),
    garbage=st.binary(max_size=300),
)
def test_recovery_keeps_exactly_the_whole_batches_before_a_torn_tail(tmp_path_factory, counts, cut_fraction,
                                                                     garbage):
    directory = tmp_path_factory.mktemp("torn")
    log = open_log(directory)
    ends = []  # (byte end, next offset) per batch
    for count in counts:
        append(log, count)
        ends.append((log.size_in_bytes, log.log_end_offset))
    records = read_all(log)
    log.close_without_flush()
    cut = int(len(records) * cut_fraction)
    path = active_segment_path(log)
    os.truncate(path, cut)
    with open(path, "ab") as file:
        file.write(garbage)
    # A batch is kept when its bytes are whole: the garbage may give a cut batch its own
    # last bytes back (a record's last byte is often 0, the headers count).
    damaged = records[:cut] + garbage
    kept_bytes, kept_end = max(((end, offset) for end, offset in ends if damaged[:end] == records[:end]),
                               default=(0, 0))
    recovered = open_log(directory, recover=True)
    try:
        assert recovered.log_end_offset == kept_end
        assert read_all(recovered) == records[:kept_bytes]
        assert append(recovered).base_offset == kept_end
    finally:
        recovered.close()


def test_recovery_from_the_log_start_makes_inactive_segments_durable_at_once_and_leaves_the_active_one(tmp_path):
    # A crash with no recovery-point checkpoint rescans every segment: the inactive ones
    # are written at the open, one at a time (a later flush would hold descriptors for
    # all of them at once); only the active one waits for the next flush.
    config = LogConfig(segment_bytes=1000, index_interval_bytes=100)
    log = open_log(tmp_path, config)
    for number in range(60):
        append(log, 2, timestamp_ms=10_000 + number)
    bases = [segment.base_offset for segment in log._segments]
    assert len(bases) > 3
    log.close_without_flush()
    reopened = PartitionLog.open(tmp_path / "orders-0", "orders", 0, config, recover=True, recovery_point=0)
    try:
        assert reopened.recovery_point == bases[-1]
        assert not any(segment.needs_flush for segment in reopened._segments[:-1])
        assert reopened._segments[-1].needs_flush
        assert {f"{base:020d}.index" for base in bases[:-1]} <= set(os.listdir(tmp_path / "orders-0"))
    finally:
        reopened.close()
