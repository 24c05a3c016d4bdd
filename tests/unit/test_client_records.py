"""The Arrow record codec of oncelog.client.records, checked against the per-record
reference codec of oncelog.protocol.record_batch (build_batch / iter_records), which the
broker's own tests pin to what real clients send."""

from __future__ import annotations

import os
from contextlib import contextmanager
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client import records as records_module
from oncelog.client.records import RecordSet, decode_fetched, encode_records, next_fetch_offset
from oncelog.protocol.record_batch import (
    Compression,
    ControlType,
    CorruptRecordError,
    Record,
    build_batch,
    build_control_batch,
    iter_records,
    parse_batches,
    set_base_offset,
)

# The record-start loop runs in C where the extension was built, else in Python; where it
# was built, the tests run both.
LOOPS = ["python"] + (["c"] if records_module._native_record_starts is not None else [])


@contextmanager
def record_loop(name: str):
    if name == "python":
        with mock.patch.object(records_module, "_native_record_starts", None):
            yield
    else:
        yield


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NOW = 1_700_000_000_000


def batches_at(record_sets: list[RecordSet], base_offset: int = 0, *, producer_id: int = -1,
               transactional: bool = False) -> bytes:
    """The record sets as batches placed at consecutive offsets from `base_offset`."""
    out = bytearray()
    offset = base_offset
    for sequence, record_set in enumerate(record_sets):
        batch = bytearray(record_set.batch(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                           base_sequence=sequence if producer_id >= 0 else -1,
                                           transactional=transactional))
        header = parse_batches(batch)[0]
        set_base_offset(batch, header, offset)
        offset += record_set.count
        out += batch
    return bytes(out)


def reference_records(data: bytes) -> list:
    return [record for header in parse_batches(data) for record in iter_records(data, header)]


def encode(keys, values, headers=None, *, max_batch_bytes=1 << 20, codec=0) -> list[RecordSet]:
    return encode_records(
        None if keys is None else pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        None if headers is None else pa.array(headers, HEADERS),
        max_batch_bytes=max_batch_bytes, timestamp_ms=NOW, codec=codec,
    )


def test_rows_written_as_batches_read_back_by_the_reference_decoder_and_by_the_arrow_decoder():
    keys = [b"k1", None, b"", b"x" * 300, None]
    values = [b"v1", b"two", None, b"y" * 20_000, b""]
    headers = [None, [{"key": "h", "value": b"1"}, {"key": "n", "value": None}], [], None, None]
    data = batches_at(encode(keys, values, headers), base_offset=100)
    reference = reference_records(data)
    assert [r.key for r in reference] == keys
    assert [r.value for r in reference] == values
    assert [r.offset for r in reference] == list(range(100, 105))
    assert reference[1].headers == (("h", b"1"), ("n", None))
    decoded = decode_fetched(data, start=100, end=105, read_committed=False, with_headers=True)
    assert decoded.keys.to_pylist() == keys
    assert decoded.values.to_pylist() == values
    assert decoded.offsets.tolist() == list(range(100, 105))
    assert decoded.timestamps_ms.tolist() == [NOW] * 5
    assert decoded.timestamp_types.tolist() == [0] * 5
    assert decoded.headers == [None, [("h", b"1"), ("n", None)], None, None, None]
    assert decoded.next_offset == 105


def test_batches_from_the_reference_encoder_decode_with_their_timestamps_and_offsets():
    records = [Record(key=b"a", value=b"1", timestamp_delta=0), Record(key=None, value=b"2", timestamp_delta=7),
               Record(key=b"c", value=None, timestamp_delta=300)]
    data = bytearray(build_batch(records, timestamp_ms=NOW, base_offset=40))
    decoded = decode_fetched(bytes(data), start=0, end=1000, read_committed=False)
    assert decoded.keys.to_pylist() == [b"a", None, b"c"]
    assert decoded.values.to_pylist() == [b"1", b"2", None]
    assert decoded.offsets.tolist() == [40, 41, 42]
    assert decoded.timestamps_ms.tolist() == [NOW, NOW + 7, NOW + 300]
    assert decoded.headers is None


def test_rows_split_into_batches_below_the_size_limit_with_offset_deltas_from_zero_in_each():
    values = [os.urandom(1000) for _ in range(50)]
    record_sets = encode([None] * 50, values, max_batch_bytes=10_000)
    assert len(record_sets) > 1
    assert sum(s.count for s in record_sets) == 50
    data = batches_at(record_sets)
    for header in parse_batches(data):
        assert header.size <= 10_000
        assert [r.offset - header.base_offset for r in iter_records(data, header)] == list(range(header.record_count))
    assert decode_fetched(data, start=0, end=50, read_committed=False).values.to_pylist() == values


def test_a_record_larger_than_the_batch_limit_gets_a_batch_of_its_own():
    record_sets = encode([None, None, None], [b"a", os.urandom(5000), b"c"], max_batch_bytes=1000)
    assert [s.count for s in record_sets] == [1, 1, 1]


def test_many_records_in_one_batch_need_multi_byte_offset_deltas():
    values = [b"v%d" % i for i in range(20_000)]
    record_sets = encode(None, values)
    assert len(record_sets) == 1
    data = batches_at(record_sets, base_offset=7)
    assert [r.offset for r in reference_records(data)][-3:] == [20_004, 20_005, 20_006]
    assert decode_fetched(data, start=0, end=30_000, read_committed=False).values.to_pylist() == values


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_round_trip(codec):
    values = [os.urandom(50) + b"x" * 200 for _ in range(300)]
    keys = [b"key-%d" % (i % 7) if i % 3 else None for i in range(300)]
    record_sets = encode(keys, values, codec=codec, max_batch_bytes=20_000)
    assert all(s.attributes == codec for s in record_sets)
    plain = batches_at(encode([b"p"], [b"plain"]), base_offset=0)
    data = plain + batches_at(record_sets, base_offset=1)
    decoded = decode_fetched(data, start=0, end=301, read_committed=False)
    assert decoded.values.to_pylist() == [b"plain", *values]
    assert decoded.keys.to_pylist() == [b"p", *keys]
    assert decoded.offsets.tolist() == list(range(301))


def test_only_records_inside_the_range_are_kept_and_the_next_fetch_starts_after_the_last_whole_batch():
    data = batches_at(encode(None, [b"%d" % i for i in range(10)], max_batch_bytes=90), base_offset=50)
    headers = parse_batches(data)
    assert len(headers) > 2
    cut = data[: -5]  # the last batch is partial, as when the broker cuts at the size limit
    decoded = decode_fetched(cut, start=52, end=57, read_committed=False)
    assert decoded.offsets.tolist() == [52, 53, 54, 55, 56]
    assert decoded.values.to_pylist() == [b"2", b"3", b"4", b"5", b"6"]
    last_whole = headers[-2]
    assert next_fetch_offset(cut, 50) == last_whole.base_offset + last_whole.last_offset_delta + 1


def test_read_committed_skips_aborted_transactions_and_markers_and_read_uncommitted_does_not():
    committed = batches_at(encode(None, [b"c1", b"c2"]), 0, producer_id=7, transactional=True)
    aborted = batches_at(encode(None, [b"a1"]), 2, producer_id=8, transactional=True)
    abort_marker = bytearray(build_control_batch(ControlType.ABORT, producer_id=8, producer_epoch=0,
                                                 coordinator_epoch=0, timestamp_ms=NOW))
    set_base_offset(abort_marker, parse_batches(abort_marker)[0], 3)
    commit_marker = bytearray(build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0,
                                                  coordinator_epoch=0, timestamp_ms=NOW))
    set_base_offset(commit_marker, parse_batches(commit_marker)[0], 4)
    later = batches_at(encode(None, [b"p8-later"]), 5, producer_id=8, transactional=True)
    data = committed + aborted + bytes(abort_marker) + bytes(commit_marker) + later
    read = decode_fetched(data, start=0, end=6, read_committed=True, aborted=[(8, 2)])
    assert read.values.to_pylist() == [b"c1", b"c2", b"p8-later"]
    assert read.offsets.tolist() == [0, 1, 5]
    assert read.next_offset == 6
    uncommitted = decode_fetched(data, start=0, end=6, read_committed=False)
    assert uncommitted.values.to_pylist() == [b"c1", b"c2", b"a1", b"p8-later"]


def test_a_batch_failing_its_crc_is_corrupt():
    data = bytearray(batches_at(encode(None, [b"hello"])))
    data[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        decode_fetched(bytes(data), start=0, end=1, read_committed=False)


def test_log_append_time_batches_give_every_record_the_batch_time():
    data = bytearray(batches_at(encode(None, [b"a", b"b"])))
    header = parse_batches(data)[0]
    # attributes bit 3 and a max timestamp, as a broker with LogAppendTime writes them
    import struct

    from crc32c import crc32c
    attributes, = struct.unpack_from(">h", data, 21)
    struct.pack_into(">h", data, 21, attributes | 0x08)
    struct.pack_into(">q", data, 35, NOW + 999)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:header.size])))
    decoded = decode_fetched(bytes(data), start=0, end=2, read_committed=False)
    assert decoded.timestamps_ms.tolist() == [NOW + 999, NOW + 999]
    assert decoded.timestamp_types.tolist() == [1, 1]


rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=2000)),
        st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                                      max_size=3)),
    ),
    min_size=1, max_size=60,
)


@pytest.mark.parametrize("loop", LOOPS)
@settings(max_examples=150, deadline=None)
@given(rows, st.integers(min_value=200, max_value=5000), st.sampled_from([0, 1, 3, 4]))
def test_any_rows_round_trip_through_both_decoders(loop, generated, limit, codec):
    keys = [k for k, _, _ in generated]
    values = [v for _, v, _ in generated]
    headers = [None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, h in generated]
    data = batches_at(encode(keys, values, headers, max_batch_bytes=limit, codec=codec), base_offset=3)
    with record_loop(loop):
        decoded = decode_fetched(data, start=3, end=3 + len(values), read_committed=False, with_headers=True)
    assert decoded.keys.to_pylist() == keys
    assert decoded.values.to_pylist() == values
    assert decoded.offsets.tolist() == list(range(3, 3 + len(values)))
    expected_headers = [None if not h else [(k, v) for k, v in h] for _, _, h in generated]
    assert (decoded.headers or [None] * len(values)) == expected_headers
    if codec == 0:
        reference = reference_records(data)
        assert [(r.key, r.value) for r in reference] == list(zip(keys, values, strict=True))


def test_values_short_long_null_and_in_the_last_bytes_of_the_buffer_become_one_binary_column():
    import numpy as np

    from oncelog.client.records import binary_column

    arena = bytes(range(40))
    cases = [(0, 0), (0, 12), (1, 13), (5, -1), (30, 10), (39, 1), (20, 20), (27, 13)]
    starts = np.array([s for s, _ in cases], np.int64)
    lengths = np.array([n for _, n in cases], np.int64)
    column = binary_column(arena, starts, lengths)
    assert column.type == pa.binary()
    assert column.to_pylist() == [None if n < 0 else arena[s:s + n] for s, n in cases]
    around_the_limit = binary_column(arena, starts[[1, 2, 6]], lengths[[1, 2, 6]])
    assert around_the_limit.to_pylist() == [arena[0:12], arena[1:14], arena[20:40]]
    assert binary_column(arena, starts[[3]], lengths[[3]]).null_count == 1


def _decoded_or_corrupt(data: bytes, end: int):
    try:
        decoded = decode_fetched(data, start=0, end=end, read_committed=False, with_headers=True, verify_crc=False)
    except CorruptRecordError:
        return "corrupt"
    return decoded.keys.to_pylist(), decoded.values.to_pylist(), decoded.offsets.tolist(), decoded.headers


@pytest.mark.skipif("c" not in LOOPS, reason="the C loop was not built on this machine")
@settings(max_examples=300, deadline=None)
@given(rows, st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4))
def test_records_with_bytes_changed_behind_their_crc_decode_alike_in_c_and_python_or_are_corrupt(generated, changes):
    keys = [k for k, _, _ in generated]
    values = [v for _, v, _ in generated]
    headers = [None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, h in generated]
    data = bytearray(batches_at(encode(keys, values, headers, max_batch_bytes=3000)))
    for where, byte in changes:  # the record count (header bytes 57-60) and the records after the header
        data[57 + where % (len(data) - 57)] = byte
    with record_loop("python"):
        in_python = _decoded_or_corrupt(bytes(data), len(values))
    in_c = _decoded_or_corrupt(bytes(data), len(values))
    assert in_c == in_python


def test_a_header_count_reaching_past_the_last_record_is_corrupt_not_an_index_error():
    data = bytearray(batches_at(encode([b"k"], [b"v"])))
    assert data[-1] == 0  # the last record's header count
    data[-1] = 0x7E  # 63 headers, in no bytes
    with pytest.raises(CorruptRecordError, match="headers"):
        decode_fetched(bytes(data), start=0, end=1, read_committed=False, with_headers=True, verify_crc=False)


def test_the_c_loop_is_built_where_the_test_run_asks_for_it():
    # `make test` sets ONCELOG_REQUIRE_C_RECORDS=1: pip builds the extension where a compiler
    # is (setup.py, optional), and a silent build failure would leave the Python loop.
    if os.environ.get("ONCELOG_REQUIRE_C_RECORDS") != "1":
        pytest.skip("ONCELOG_REQUIRE_C_RECORDS is not set")
    assert records_module._native_record_starts is not None, "oncelog.client._record_starts was not built"


def test_a_negative_record_count_is_corrupt_in_both_loops():
    data = bytearray(batches_at(encode(None, [b"v"])))
    data[57:61] = (-1).to_bytes(4, "big", signed=True)
    for loop in LOOPS:
        with record_loop(loop), pytest.raises(CorruptRecordError, match="negative record count"):
            decode_fetched(bytes(data), start=0, end=1, read_committed=False, verify_crc=False)
