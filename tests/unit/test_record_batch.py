"""The batch header view and builder against bytes made by a real client library."""

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from oncelog.protocol import record_batch as rb


def kafka_python_batch(count=3, *, compression=0, producer_id=-1, epoch=-1, sequence=-1, transactional=False,
                       value_size=2):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=f"k{i}".encode(),
                       value=f"v{i}".encode().ljust(value_size, b"."), headers=[])
    return bytes(builder.build())


def test_header_of_a_client_batch_is_read_field_by_field():
    data = kafka_python_batch(3, producer_id=42, epoch=7, sequence=100, transactional=True)
    (header,) = rb.parse_batches(data)
    assert header.base_offset == 0
    assert header.size == len(data)
    assert header.last_offset_delta == 2 and header.record_count == 3
    assert header.producer_id == 42 and header.producer_epoch == 7
    assert header.base_sequence == 100 and header.last_sequence == 102
    assert header.is_transactional and not header.is_control
    assert header.max_timestamp == 1_700_000_000_002


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_parse_and_report_their_codec(codec):
    # Values that compress: kafka-python sends a batch uncompressed when that is smaller.
    (header,) = rb.parse_batches(kafka_python_batch(5, compression=codec, value_size=500))
    assert header.compression == rb.Compression(codec)


def test_a_flipped_byte_in_the_records_fails_the_crc():
    data = bytearray(kafka_python_batch())
    data[-1] ^= 0xFF
    with pytest.raises(rb.CorruptRecordError, match="CRC32C"):
        rb.parse_batches(data)


def test_base_offset_and_leader_epoch_are_outside_the_crc():
    data = bytearray(kafka_python_batch())
    (header,) = rb.parse_batches(data)
    rb.set_base_offset(data, header, 12345)
    rb.set_partition_leader_epoch(data, header, 9)
    (rewritten,) = rb.parse_batches(data)
    assert rewritten.base_offset == 12345 and rewritten.partition_leader_epoch == 9


def test_truncated_batch_is_corrupt_and_the_valid_prefix_is_found():
    first, second = kafka_python_batch(), kafka_python_batch(2)
    torn = first + second[:-7]
    with pytest.raises(rb.CorruptRecordError, match="declares"):
        rb.parse_batches(torn)
    headers, valid = rb.scan_valid_prefix(torn + b"garbage")
    assert len(headers) == 1 and valid == len(first)


def test_wrong_magic_is_corrupt():
    data = bytearray(kafka_python_batch())
    data[16] = 1
    with pytest.raises(rb.CorruptRecordError, match="magic 1"):
        rb.read_header(data)


def test_negative_length_is_corrupt():
    data = bytearray(kafka_python_batch())
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(rb.CorruptRecordError):
        rb.read_header(data)


def test_built_batches_are_read_back_by_kafka_python():
    from kafka.record.default_records import DefaultRecordBatch

    data = rb.build_batch(
        [rb.Record(b"key", b"value", (("h", b"1"),)), rb.Record(None, b"second", timestamp_delta=5)],
        base_offset=10, timestamp_ms=1000, producer_id=5, producer_epoch=1, base_sequence=0,
    )
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    records = list(batch)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (10, b"key", b"value", 1000), (11, None, b"second", 1005),
    ]
    assert records[0].headers == [("h", b"1")]


def test_control_batch_carries_the_marker_and_coordinator_epoch():
    from kafka.record.default_records import DefaultRecordBatch

    data = rb.build_control_batch(
        rb.ControlType.COMMIT, producer_id=7, producer_epoch=3, coordinator_epoch=11, timestamp_ms=5
    )
    (header,) = rb.parse_batches(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (7, 3)
    (record,) = list(DefaultRecordBatch(data))
    assert struct.unpack(">hh", record.key) == (0, rb.ControlType.COMMIT)
    assert struct.unpack(">hi", record.value) == (0, 11)


def test_sequence_wraps_at_int_max():
    data = kafka_python_batch(3, producer_id=1, epoch=0, sequence=2**31 - 2)
    (header,) = rb.parse_batches(data)
    assert header.last_sequence == 0


def test_records_decode_back_from_a_built_batch():
    records = [rb.Record(b"a", b"1", (("h", b"x"),)), rb.Record(None, None, (), timestamp_delta=7)]
    data = rb.build_batch(records, base_offset=40, timestamp_ms=100)
    (header,) = rb.parse_batches(data)
    decoded = rb.iter_records(data, header)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (40, 100, b"a", b"1", (("h", b"x"),)), (41, 107, None, None, ()),
    ]


def test_records_of_a_kafka_python_batch_decode():
    data = kafka_python_batch(4)
    (header,) = rb.parse_batches(data)
    assert [r.key for r in rb.iter_records(data, header)] == [b"k0", b"k1", b"k2", b"k3"]


def test_control_record_type_is_read_from_the_key():
    data = rb.build_control_batch(rb.ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                  timestamp_ms=0)
    (header,) = rb.parse_batches(data)
    (record,) = rb.iter_records(data, header)
    assert rb.control_type(record) is rb.ControlType.ABORT


def test_control_type_is_read_from_the_bytes_after_the_header():
    data = rb.build_control_batch(rb.ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=4,
                                  timestamp_ms=0)
    assert rb.read_control_record(data[rb.HEADER_SIZE:rb.HEADER_SIZE + 64]) == (rb.ControlType.COMMIT, 4)
