"""Fuzzing the RecordBatch reader: random bytes and mutated valid batches (ours and
kafka-python's) make `read_header`, `parse_batches`, `scan_valid_prefix` and
`iter_records` raise CorruptRecordError and nothing else, and `scan_valid_prefix` never
claims a prefix that `parse_batches` rejects.

Two defects the fuzzing found are pinned by regression tests at the end: a CRC-valid
batch whose compression bits say 5-7, and a record header key that is not UTF-8, must
both be CorruptRecordError.
"""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from oncelog.protocol import record_batch as rb

# ONCELOG_FUZZ_SCALE=10 runs ten times the examples (longer fuzzing outside the default run).
SCALE = float(os.environ.get("ONCELOG_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=max(1, int(300 * SCALE)), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Fields worth overwriting with boundary values: (offset in the batch, struct format).
HEADER_FIELDS = [
    (0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"),
    (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i"),
]
BOUNDARIES = {">b": [0, 1, 2, -1, 127, -128], ">h": [0, 1, -1, 7, 0x7FFF, -0x8000, 0x27, 0x1F],
              ">i": [0, 1, -1, 48, 49, 2**31 - 1, -(2**31)], ">q": [0, -1, 2**63 - 1, -(2**63)]}


def exercise(buffer: bytes | bytearray) -> None:
    """Every reader on `buffer`: CorruptRecordError is the only failure allowed."""
    headers, valid_length = rb.scan_valid_prefix(buffer)
    assert 0 <= valid_length <= len(buffer)
    assert sum(h.size for h in headers) == valid_length
    # The claimed prefix must parse, CRCs included, into the same batches.
    assert rb.parse_batches(memoryview(buffer)[:valid_length]) == headers
    for verify_crc in (True, False):
        try:
            parsed = rb.parse_batches(buffer, verify_crc=verify_crc)
        except rb.CorruptRecordError:
            pass
        else:
            assert sum(h.size for h in parsed) == len(buffer)
            if verify_crc:
                assert parsed == headers and valid_length == len(buffer)
    for position in {0, valid_length, *(h.position for h in headers), max(len(buffer) - 61, 0)}:
        try:
            header = rb.read_header(buffer, position)
        except rb.CorruptRecordError:
            continue
        assert header.size >= rb.HEADER_SIZE and header.position + header.size <= len(buffer)
        assert header.last_offset_delta >= 0 and header.record_count >= 0
    for header in headers:
        try:
            records = rb.iter_records(buffer, header)
        except rb.CorruptRecordError:
            continue
        assert len(records) == header.record_count


def fix_crcs(buffer: bytearray) -> bytearray:
    """Recompute the CRC of every batch whose framing still holds, so that mutations
    reach the record decoder instead of stopping at the checksum."""
    position = 0
    while len(buffer) - position >= rb.HEADER_SIZE:
        (length,) = struct.unpack_from(">i", buffer, position + 8)
        end = position + rb.LOG_OVERHEAD + length
        if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD or end > len(buffer):
            break
        struct.pack_into(">I", buffer, position + 17, crc32c(bytes(buffer[position + 21:end])))
        position = end
    return buffer


# -- valid batches to start from -------------------------------------------------------------

small_bytes = st.one_of(st.none(), st.binary(max_size=12))
records = st.lists(
    st.builds(rb.Record, key=small_bytes, value=small_bytes,
              headers=st.lists(st.tuples(st.text(max_size=4), small_bytes), max_size=2).map(tuple),
              timestamp_delta=st.integers(0, 10_000)),
    min_size=1, max_size=5,
)


@st.composite
def our_batch(draw) -> bytes:
    transactional = draw(st.booleans())
    return rb.build_batch(
        draw(records), base_offset=draw(st.integers(0, 2**40)), timestamp_ms=draw(st.integers(0, 2**42)),
        producer_id=draw(st.integers(-1, 2**40)), producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)), transactional=transactional,
    )


@st.composite
def kafka_python_batch(draw) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=draw(st.sampled_from([0, 0, 0, 1])), is_transactional=draw(st.booleans()),
        producer_id=draw(st.integers(-1, 2**40)), producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)), batch_size=1 << 20,
    )
    for offset, record in enumerate(draw(records)):
        builder.append(offset, timestamp=1_700_000_000_000 + record.timestamp_delta, key=record.key,
                       value=record.value, headers=[(k, v) for k, v in record.headers])
    return bytes(builder.build())


valid_batches = st.lists(st.one_of(our_batch(), kafka_python_batch()), min_size=1, max_size=3).map(b"".join)


@st.composite
def mutated(draw) -> bytearray:
    buffer = bytearray(draw(valid_batches))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "field", "truncate", "insert", "delete", "append"]))
        if kind == "flip" and buffer:
            index = draw(st.integers(0, len(buffer) - 1))
            buffer[index] ^= draw(st.integers(1, 255))
        elif kind == "field" and len(buffer) >= rb.HEADER_SIZE:
            offset, fmt = draw(st.sampled_from(HEADER_FIELDS))
            struct.pack_into(fmt, buffer, offset, draw(st.sampled_from(BOUNDARIES[fmt])))
        elif kind == "truncate":
            del buffer[draw(st.integers(0, len(buffer))):]
        elif kind == "insert":
            index = draw(st.integers(0, len(buffer)))
            buffer[index:index] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and buffer:
            index = draw(st.integers(0, len(buffer) - 1))
            del buffer[index:index + draw(st.integers(1, 8))]
        elif kind == "append":
            buffer += draw(st.binary(max_size=70))
    if draw(st.booleans()):
        fix_crcs(buffer)
    return buffer


# -- properties ----------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_only_ever_raise_corrupt_record_error(buffer):
    exercise(buffer)


@FUZZ
@given(st.binary(min_size=rb.HEADER_SIZE - 12, max_size=200), st.integers(0, 2**31 - 1))
def test_random_body_behind_a_plausible_header_only_raises_corrupt_record_error(body, base_offset):
    # Framing and magic right, everything else random, CRC made to match: the deepest
    # random input the record decoder can get.
    buffer = bytearray(struct.pack(">qi", base_offset, len(body)) + body)
    if len(buffer) > 16:
        buffer[16] = rb.MAGIC
    exercise(fix_crcs(buffer))


@FUZZ
@given(mutated())
def test_mutated_valid_batches_only_raise_corrupt_record_error(buffer):
    exercise(buffer)


@FUZZ
@given(valid_batches)
def test_valid_batches_decode_to_what_was_built(buffer):
    headers, length = rb.scan_valid_prefix(buffer)
    assert length == len(buffer)
    for header in headers:
        if header.compression != rb.Compression.NONE:
            with pytest.raises(rb.CorruptRecordError, match="cannot decode"):
                rb.iter_records(buffer, header)
            continue
        decoded = rb.iter_records(buffer, header)
        assert [r.offset for r in decoded] == list(range(header.base_offset, header.next_offset))


@given(records)
@settings(max_examples=max(1, int(100 * SCALE)), deadline=None, derandomize=True, database=None)
def test_our_batch_and_kafka_pythons_decode_to_the_same_records(batch_records):
    ours = rb.build_batch(batch_records, timestamp_ms=1_700_000_000_000)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, record in enumerate(batch_records):
        builder.append(offset, timestamp=1_700_000_000_000 + record.timestamp_delta, key=record.key,
                       value=record.value, headers=list(record.headers))
    theirs = bytes(builder.build())

    def decoded(buffer):
        (header,) = rb.parse_batches(buffer)
        return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in rb.iter_records(buffer, header)]

    assert decoded(ours) == decoded(theirs)


# -- regressions found by the fuzzing ---------------------------------------------------------


def batch_with_compression_bits(codec: int) -> bytes:
    buffer = bytearray(rb.build_batch([rb.Record(b"k", b"v")], timestamp_ms=1))
    (attributes,) = struct.unpack_from(">h", buffer, 21)
    struct.pack_into(">h", buffer, 21, (attributes & ~rb.COMPRESSION_MASK) | codec)
    return bytes(fix_crcs(buffer))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_iter_records_on_an_undefined_compression_codec_raises_corrupt_record_error(codec):
    buffer = batch_with_compression_bits(codec)
    (header,) = rb.parse_batches(buffer)
    with pytest.raises(rb.CorruptRecordError):
        rb.iter_records(buffer, header)


def test_iter_records_on_a_non_utf8_header_key_raises_corrupt_record_error():
    buffer = bytearray(rb.build_batch([rb.Record(b"k", b"v", (("ab", b"x"),))], timestamp_ms=1))
    position = buffer.index(b"ab")
    buffer[position:position + 2] = b"\xc3\x28"  # an invalid two-byte UTF-8 sequence
    buffer = bytes(fix_crcs(buffer))
    (header,) = rb.parse_batches(buffer)
    with pytest.raises(rb.CorruptRecordError):
        rb.iter_records(buffer, header)
