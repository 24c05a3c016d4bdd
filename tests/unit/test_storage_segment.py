"""LogSegment: one .log file with its sparse offset and time indexes."""

import os
import re
import struct

import pytest
from crc32c import crc32c

from oncelog.protocol.record_batch import TIMESTAMP_TYPE_BIT, Record, build_batch, parse_batches
from oncelog.storage import segment as segment_module
from oncelog.storage.segment import (
    LogSegment,
    parse_segment_base_offset,
    segment_file_name,
)

NOW_MS = 1_700_000_000_000
INTERVAL = 200


def batch(base_offset: int, count: int = 1, *, timestamp_ms: int = 1_000, value_size: int = 40) -> bytes:
    records = [Record(key=None, value=bytes([65 + i % 26]) * value_size) for i in range(count)]
    return build_batch(records, base_offset=base_offset, timestamp_ms=timestamp_ms)


def fill(segment: LogSegment, batches: int, *, first_offset: int | None = None, count: int = 2,
         timestamps=None) -> list[bytes]:
    """Append `batches` batches of `count` records, one append each; returns their bytes."""
    offset = segment.next_offset if first_offset is None else first_offset
    written = []
    for number in range(batches):
        timestamp = timestamps[number] if timestamps else 1_000 + number
        data = batch(offset, count, timestamp_ms=timestamp)
        segment.append(data, parse_batches(data), now_ms=NOW_MS, index_interval_bytes=INTERVAL)
        written.append(data)
        offset += count
    return written


@pytest.fixture
def segment(tmp_path):
    created = LogSegment.create(tmp_path, 100)
    yield created
    created.close_without_flush()


def test_file_names_are_the_base_offset_zero_padded_to_20_digits():
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    assert parse_segment_base_offset("00000000000000000042.log") == 42
    assert parse_segment_base_offset("00000000000000000042.index", ".index") == 42
    assert parse_segment_base_offset("42.log") is None
    assert parse_segment_base_offset("0000000000000000004x.log") is None


def test_appended_batches_read_back_byte_for_byte(segment):
    written = fill(segment, 10, first_offset=100)
    data, reached_end = segment.read(100, 1 << 20, 1 << 62, min_one_batch=True)
    assert data == b"".join(written)
    assert reached_end
    assert segment.next_offset == 120
    assert segment.size == len(data)


def test_read_from_an_offset_inside_a_batch_starts_with_that_whole_batch(segment):
    written = fill(segment, 5, first_offset=100, count=3)
    data, _ = segment.read(107, 1 << 20, 1 << 62, min_one_batch=True)
    assert data == b"".join(written[2:])  # offsets 106..108 hold 107
    assert parse_batches(data)[0].base_offset == 106


def test_read_stops_at_the_last_batch_boundary_within_max_bytes(segment):
    written = fill(segment, 10, first_offset=100)
    size = len(written[0])
    data, reached_end = segment.read(100, size * 3 + size // 2, 1 << 62, min_one_batch=True)
    assert data == b"".join(written[:3])
    assert not reached_end


def test_first_batch_larger_than_max_bytes_is_returned_only_with_min_one_batch(segment):
    written = fill(segment, 3, first_offset=100)
    assert segment.read(102, 10, 1 << 62, min_one_batch=True)[0] == written[1]
    assert segment.read(102, 10, 1 << 62, min_one_batch=False)[0] == b""


def test_read_stops_before_the_first_batch_at_or_past_max_offset(segment):
    written = fill(segment, 5, first_offset=100, count=2)
    assert segment.read(100, 1 << 20, 104, min_one_batch=True)[0] == b"".join(written[:2])
    # a bound inside a batch keeps that batch: only batches starting at or past it go
    assert segment.read(100, 1 << 20, 105, min_one_batch=True)[0] == b"".join(written[:3])
    assert segment.read(104, 1 << 20, 104, min_one_batch=True)[0] == b""


def test_offset_index_gets_an_entry_after_each_interval_of_bytes(segment):
    written = fill(segment, 40, first_offset=100)
    batch_size = len(written[0])
    # Kafka's rule: an entry when more than index.interval.bytes were appended since the last one.
    batches_per_entry = INTERVAL // batch_size + 1
    assert segment.index_entry_count == (40 - 1) // batches_per_entry
    for offset in range(100, 180, 7):
        position, base, last, _size = segment.locate(offset)
        assert base <= offset <= last
        assert position == (base - 100) // 2 * batch_size


def test_indexes_written_at_close_load_back_unchanged(tmp_path, segment):
    fill(segment, 40, first_offset=100, timestamps=[5_000 + (i * 37) % 11 * 100 for i in range(40)])
    segment.close()  # also records the final largest timestamp in the time index
    expected = (list(segment._offset_index.relative_offsets), list(segment._offset_index.positions),
                list(segment._time_index.timestamps), list(segment._time_index.relative_offsets),
                segment.max_timestamp, segment.offset_of_max_timestamp, segment.next_offset)
    reopened = LogSegment.open(tmp_path, 100)
    try:
        assert reopened.load_indexes(INTERVAL, NOW_MS)
        assert (list(reopened._offset_index.relative_offsets), list(reopened._offset_index.positions),
                list(reopened._time_index.timestamps), list(reopened._time_index.relative_offsets),
                reopened.max_timestamp, reopened.offset_of_max_timestamp, reopened.next_offset) == expected
        assert reopened.locate(150)[1] == 150
    finally:
        reopened.close_without_flush()


@pytest.mark.parametrize("damage", ["missing", "odd_length", "position_past_end"])
def test_load_indexes_refuses_missing_or_damaged_index_files(tmp_path, segment, damage):
    fill(segment, 40, first_offset=100)
    segment.close()
    if damage == "missing":
        segment.index_path.unlink()
    elif damage == "odd_length":
        with open(segment.index_path, "ab") as file:
            file.write(b"\x00\x01\x02")
    else:
        with open(segment.index_path, "ab") as file:
            file.write((5000).to_bytes(4, "big") + (1 << 30).to_bytes(4, "big"))
    reopened = LogSegment.open(tmp_path, 100)
    try:
        assert not reopened.load_indexes(INTERVAL, NOW_MS)
        assert reopened.recover(INTERVAL, NOW_MS) == 0
        assert reopened.next_offset == 180
        assert reopened.locate(151)[1] == 150
    finally:
        reopened.close_without_flush()


def test_recover_rebuilds_the_same_indexes_that_appends_built(tmp_path, segment):
    fill(segment, 60, first_offset=100, timestamps=[(i * 7919) % 1000 for i in range(60)])
    built = (list(segment._offset_index.relative_offsets), list(segment._offset_index.positions),
             list(segment._time_index.timestamps), list(segment._time_index.relative_offsets))
    segment.flush(write_indexes=False)
    rebuilt = LogSegment.open(tmp_path, 100)
    try:
        assert rebuilt.recover(INTERVAL, NOW_MS) == 0
        assert (list(rebuilt._offset_index.relative_offsets), list(rebuilt._offset_index.positions),
                list(rebuilt._time_index.timestamps), list(rebuilt._time_index.relative_offsets)) == built
    finally:
        rebuilt.close_without_flush()


def test_find_offset_by_timestamp_returns_the_first_batch_reaching_the_target(segment):
    timestamps = [100, 300, 200, 500, 400, 450, 600, 100]
    fill(segment, len(timestamps), first_offset=100, count=1, timestamps=timestamps)
    assert segment.find_offset_by_timestamp(50, 100) == (100, 100)
    assert segment.find_offset_by_timestamp(250, 100) == (101, 300)
    assert segment.find_offset_by_timestamp(301, 100) == (103, 500)
    assert segment.find_offset_by_timestamp(550, 100) == (106, 600)
    assert segment.find_offset_by_timestamp(601, 100) is None
    # batches below the start offset are skipped
    assert segment.find_offset_by_timestamp(250, 102) == (103, 500)


def test_find_offset_by_timestamp_uses_the_time_index_over_many_batches(segment):
    fill(segment, 200, first_offset=100, count=1, timestamps=list(range(10_000, 10_200)))
    assert segment.time_index_entry_count > 10
    for target in (10_000, 10_001, 10_099, 10_150, 10_199):
        assert segment.find_offset_by_timestamp(target, 100) == (100 + target - 10_000, target)


def records_batch(base_offset: int, timestamps: list[int], *, codec: int = 0, log_append_time: bool = False) -> bytes:
    """One batch holding a record per timestamp (out of order allowed), built by
    kafka-python the way producers build them; `codec` 0-4 compresses it."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta, timestamp in enumerate(timestamps):
        builder.append(delta, timestamp=timestamp, key=b"k%d" % delta, value=b"v" * 30, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    if log_append_time:  # as the log stamps it: type bit, max timestamp, CRC
        (attributes,) = struct.unpack_from(">h", data, 21)
        struct.pack_into(">h", data, 21, attributes | TIMESTAMP_TYPE_BIT)
        struct.pack_into(">q", data, 35, NOW_MS)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def append_raw(segment: LogSegment, data: bytes) -> None:
    segment.append(data, parse_batches(data), now_ms=NOW_MS, index_interval_bytes=INTERVAL)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_find_offset_by_timestamp_returns_the_record_inside_a_multi_record_batch(segment, codec):
    append_raw(segment, records_batch(100, [1_000, 1_010, 1_005, 1_030, 1_020], codec=codec))
    append_raw(segment, records_batch(105, [2_000, 2_040, 2_010], codec=codec))
    assert segment.find_offset_by_timestamp(1_000, 100) == (100, 1_000)
    assert segment.find_offset_by_timestamp(1_006, 100) == (101, 1_010)
    assert segment.find_offset_by_timestamp(1_011, 100) == (103, 1_030)
    assert segment.find_offset_by_timestamp(1_031, 100) == (105, 2_000)
    assert segment.find_offset_by_timestamp(2_001, 100) == (106, 2_040)
    assert segment.find_offset_by_timestamp(2_041, 100) is None
    # records below the start offset do not count, even inside the batch found
    assert segment.find_offset_by_timestamp(1_000, 102) == (102, 1_005)
    assert segment.find_offset_by_timestamp(1_021, 104) == (105, 2_000)


@pytest.mark.parametrize("codec", [0, 4], ids=["none", "zstd"])
def test_max_timestamp_record_is_the_first_record_with_the_largest_timestamp(segment, codec):
    append_raw(segment, records_batch(100, [1_000, 1_050, 1_020], codec=codec))
    append_raw(segment, records_batch(103, [1_010, 1_090, 1_040, 1_090], codec=codec))
    append_raw(segment, records_batch(107, [1_060], codec=codec))
    assert segment.max_timestamp_record() == (104, 1_090)


def test_log_append_time_batches_answer_from_the_header_without_decoding(segment, monkeypatch):
    append_raw(segment, records_batch(100, [1_000, 1_010, 1_020], codec=2, log_append_time=True))
    monkeypatch.setattr(segment_module, "decode_records", None)  # any decoding would fail
    assert segment.find_offset_by_timestamp(5, 100) == (100, NOW_MS)
    assert segment.find_offset_by_timestamp(NOW_MS, 101) == (101, NOW_MS)
    assert segment.max_timestamp_record() == (100, NOW_MS)


def test_find_offset_by_timestamp_on_an_empty_segment_is_none(segment):
    assert segment.find_offset_by_timestamp(0, 100) is None
    assert segment.max_timestamp_record() is None


def test_truncate_to_removes_the_holding_batch_and_everything_after(segment):
    written = fill(segment, 30, first_offset=100, count=2, timestamps=[1_000 + i for i in range(30)])
    removed = segment.truncate_to(121)  # inside the batch 120..121
    assert removed == sum(len(b) for b in written[10:])
    assert segment.next_offset == 120
    assert segment.max_timestamp == 1_009
    assert segment.offset_of_max_timestamp == 118
    assert segment.read(100, 1 << 20, 1 << 62, min_one_batch=True)[0] == b"".join(written[:10])
    assert os.path.getsize(segment.log_path) == segment.size
    # appends continue at the truncation point, indexes stay consistent
    fill(segment, 5, first_offset=120)
    assert segment.locate(125)[1] == 124


def _written_log(tmp_path, batches=12):
    segment = LogSegment.create(tmp_path, 0)
    written = fill(segment, batches, first_offset=0)
    segment.close()
    return written


def _recover(tmp_path):
    segment = LogSegment.open(tmp_path, 0)
    removed = segment.recover(INTERVAL, NOW_MS)
    return segment, removed


def test_recover_truncates_a_batch_torn_in_the_middle(tmp_path):
    written = _written_log(tmp_path)
    path = tmp_path / segment_file_name(0, ".log")
    os.truncate(path, sum(len(b) for b in written[:-1]) + 30)
    segment, removed = _recover(tmp_path)
    try:
        assert removed == 30
        assert segment.next_offset == 22
        assert segment.read(0, 1 << 20, 1 << 62, min_one_batch=True)[0] == b"".join(written[:-1])
    finally:
        segment.close_without_flush()


def test_recover_truncates_garbage_after_the_last_batch(tmp_path):
    written = _written_log(tmp_path)
    with open(tmp_path / segment_file_name(0, ".log"), "ab") as file:
        file.write(os.urandom(5000))
    segment, removed = _recover(tmp_path)
    try:
        assert removed == 5000
        assert segment.next_offset == 24
        assert segment.size == sum(len(b) for b in written)
    finally:
        segment.close_without_flush()


def test_recover_truncates_a_batch_whose_body_fails_its_crc(tmp_path):
    written = _written_log(tmp_path)
    path = tmp_path / segment_file_name(0, ".log")
    with open(path, "r+b") as file:
        file.seek(sum(len(b) for b in written[:-1]) + 70)
        original = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([original[0] ^ 0xFF]))
    segment, removed = _recover(tmp_path)
    try:
        assert removed == len(written[-1])
        assert segment.next_offset == 22
    finally:
        segment.close_without_flush()


def test_recover_truncates_a_batch_with_an_offset_below_its_predecessor(tmp_path):
    segment = LogSegment.create(tmp_path, 0)
    fill(segment, 3, first_offset=0)
    replayed = batch(2, 2)  # overlaps offsets 2..3
    segment.append(replayed, parse_batches(replayed), now_ms=NOW_MS, index_interval_bytes=INTERVAL)
    segment.close()
    recovered, removed = _recover(tmp_path)
    try:
        assert removed == len(replayed)
        assert recovered.next_offset == 6
    finally:
        recovered.close_without_flush()


def test_recover_reads_batches_larger_than_its_read_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_module, "_RECOVERY_CHUNK", 256)
    segment = LogSegment.create(tmp_path, 0)
    big = [batch(0, 3, value_size=400), batch(3, 1, value_size=10), batch(4, 2, value_size=700)]
    for data in big:
        segment.append(data, parse_batches(data), now_ms=NOW_MS, index_interval_bytes=INTERVAL)
    segment.close()
    with open(tmp_path / segment_file_name(0, ".log"), "ab") as file:
        file.write(big[2][:500])  # a torn copy at the end
    recovered, removed = _recover(tmp_path)
    try:
        assert removed == 500
        assert recovered.next_offset == 6
        assert recovered.read(0, 1 << 20, 1 << 62, min_one_batch=True)[0] == b"".join(big)
    finally:
        recovered.close_without_flush()


def test_create_refuses_to_overwrite_an_existing_segment(tmp_path, segment):
    from oncelog.storage.errors import StorageError

    with pytest.raises(StorageError, match=re.escape("00000000000000000100.log")):
        LogSegment.create(tmp_path, 100)


def test_a_range_read_again_is_answered_from_recent_reads_without_reading_it_again(segment, monkeypatch):
    written = fill(segment, 200, first_offset=100)  # 31 KB, indexed every 200 bytes
    first, _ = segment.read(100, 1 << 20, 1 << 62, min_one_batch=True)
    read_sizes = []
    real_pread = os.pread

    def counted_pread(fd, size, position):
        read_sizes.append(size)
        return real_pread(fd, size, position)

    monkeypatch.setattr(segment_module.os, "pread", counted_pread)
    again, reached_end = segment.read(100, 1 << 20, 1 << 62, min_one_batch=True)
    assert again is first and again == b"".join(written) and reached_end
    # Batch headers are read to locate the range (a 16 KiB scan), the range itself is not.
    assert all(size < len(first) for size in read_sizes), (read_sizes, len(first))


def test_a_range_read_before_a_truncation_is_read_afresh_after_it(segment):
    """The bytes at a position change only when the segment is cut back and written again:
    the read after that must be the new bytes, not the remembered ones."""
    fill(segment, 4, first_offset=100)
    start = segment.locate(104)[0]
    before, _ = segment.read(104, 1, 1 << 62, min_one_batch=True)  # the one batch at 104
    segment.truncate_to(104)
    rewritten = batch(104, 2, timestamp_ms=9_999)  # the same size, other bytes
    segment.append(rewritten, parse_batches(rewritten), now_ms=NOW_MS, index_interval_bytes=INTERVAL)
    after, _ = segment.read(104, 1, 1 << 62, min_one_batch=True)
    assert segment.locate(104)[0] == start and len(after) == len(before)
    assert after == rewritten != before


def test_recent_reads_keep_at_most_their_budget_least_recently_used_out_first():
    reads = segment_module.RecentReads(budget=100)
    reads.put(("a", 0, 20), b"a" * 20)
    reads.put(("b", 0, 25), b"b" * 25)
    reads.put(("c", 0, 25), b"c" * 25)
    reads.put(("d", 0, 25), b"d" * 25)  # 95 bytes in all
    assert reads.get(("a", 0, 20)) == b"a" * 20  # a is now the most recent
    reads.put(("e", 0, 25), b"e" * 25)  # over 100: b, the least recent, goes
    assert reads.get(("b", 0, 25)) is None
    assert all(reads.get((name, 0, 25)) is not None for name in "cde") and reads.get(("a", 0, 20))
    reads.put(("f", 0, 26), b"f" * 26)  # more than a quarter of the budget: not kept
    assert reads.get(("f", 0, 26)) is None
