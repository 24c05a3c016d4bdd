"""RecordBatch v2 (magic 2): the header view the broker needs, and a builder for the
batches the broker writes itself (control markers, internal topics).

The broker never decodes the records of a client's batch: it reads the 61-byte header,
checks the CRC32C and rewrites the two fields that are not covered by the CRC
(base offset and partition leader epoch) when it assigns offsets.

Wire layout of one batch (big-endian):

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes that follow this field
        12     4  partitionLeaderEpoch
        16     1  magic                  = 2
        17     4  crc                    CRC32C of bytes [21, end)
        21     2  attributes             bits 0-2 compression, 3 timestamp type,
                                         4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61     …  records

One record (inside the batch, uncompressed form):

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value, headerCount varint,
    headers (keyLength varint, key, valueLength varint, value)*

A control record's key is (version int16 = 0, type int16: 0 abort, 1 commit); its value
is (version int16 = 0, coordinatorEpoch int32).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from crc32c import crc32c

from oncelog.protocol.framing import unsigned_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
MAGIC = 2

# Where the header's fields start (the table above): the one place the layout is given.
BATCH_LENGTH_POSITION = 8
PARTITION_LEADER_EPOCH_POSITION = 12
MAGIC_POSITION = 16
CRC_POSITION = 17
ATTRIBUTES_POSITION = 21
LAST_OFFSET_DELTA_POSITION = 23
BASE_TIMESTAMP_POSITION = 27
MAX_TIMESTAMP_POSITION = 35

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">qi")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class CorruptRecordError(ValueError):
    """A batch whose framing, magic or CRC is wrong (Kafka's CORRUPT_MESSAGE)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header of one batch at `position` within a buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_id(self) -> int:
        """The raw codec bits: 5-7 are undefined (a corrupt batch), so check this first."""
        return self.attributes & COMPRESSION_MASK

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record, wrapping at Int.MAX like Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def read_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Read the header at `position`; checks framing and magic, not the CRC."""
    if len(buffer) - position < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at position {position} needs {HEADER_SIZE} bytes, "
            f"{len(buffer) - position} remain"
        )
    fields = _HEADER.unpack_from(buffer, position)
    header = BatchHeader(position, *fields)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"batch at position {position} has magic {header.magic}, expected 2")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at position {position} declares length {header.batch_length}, "
            f"below the minimum {HEADER_SIZE - LOG_OVERHEAD}"
        )
    if position + header.size > len(buffer):
        raise CorruptRecordError(
            f"batch at position {position} declares {header.size} bytes, "
            f"{len(buffer) - position} remain"
        )
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecordError(f"batch at position {position} has a negative offset delta or count")
    return header


def crc_matches(buffer: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    start = header.position + 21
    end = header.position + header.size
    return crc32c(memoryview(buffer)[start:end]) == header.crc


def parse_batches(buffer: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> list[BatchHeader]:
    """All batch headers in `buffer`, which must hold whole batches and nothing else.

    Raises CorruptRecordError on a short, malformed or CRC-failing batch.
    """
    headers = []
    position = 0
    end = len(buffer)
    while position < end:
        header = read_header(buffer, position)
        if verify_crc and not crc_matches(buffer, header):
            raise CorruptRecordError(
                f"batch at position {position} fails its CRC32C check (stored {header.crc:#010x})"
            )
        headers.append(header)
        position += header.size
    return headers


def scan_valid_prefix(buffer: bytes | bytearray | memoryview) -> tuple[list[BatchHeader], int]:
    """Headers of the leading whole, CRC-valid batches and the byte length they cover.

    Used by recovery: whatever follows the returned length is a torn or corrupt tail.
    """
    headers = []
    position = 0
    end = len(buffer)
    while position < end:
        try:
            header = read_header(buffer, position)
        except CorruptRecordError:
            break
        if not crc_matches(buffer, header):
            break
        headers.append(header)
        position += header.size
    return headers, position


def set_base_offset(buffer: bytearray | memoryview, header: BatchHeader, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buffer, header.position, base_offset)


def set_partition_leader_epoch(buffer: bytearray | memoryview, header: BatchHeader, epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buffer, header.position + PARTITION_LEADER_EPOCH_POSITION, epoch)


# ---------------------------------------------------------------------------------------
# Building batches (uncompressed): control markers and the broker's internal topics.


def _varint(value: int) -> bytes:
    """Zig-zag varint, as Kafka's records use for signed fields."""
    return unsigned_varint((value << 1) ^ (value >> 63))


_NULL_FIELD = b"\x01"  # zig-zag varint -1: a null key, value or header value


def _bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return _NULL_FIELD
    return _varint(len(data)) + data


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_delta: int = 0


def _encode_record(record: Record, offset_delta: int) -> bytes:
    parts = [
        b"\x00",  # attributes, unused
        _varint(record.timestamp_delta),
        _varint(offset_delta),
        _bytes_field(record.key),
        _bytes_field(record.value),
        _varint(len(record.headers)),
    ]
    for header_key, header_value in record.headers:
        parts.append(_bytes_field(header_key.encode()))
        parts.append(_bytes_field(header_value))
    body = b"".join(parts)
    return _varint(len(body)) + body


_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count
_EPOCH_MAGIC_CRC = struct.Struct(">ibI")


def build_batch(
    records: list[Record],
    *,
    base_offset: int = 0,
    timestamp_ms: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """An uncompressed v2 batch holding `records`, all stamped `timestamp_ms`."""
    if not records:
        raise ValueError("a batch holds at least one record")
    attributes = (TRANSACTIONAL_BIT if transactional else 0) | (CONTROL_BIT if control else 0)
    if len(records) == 1:  # every coordinator record and marker: no generator, no max()
        body = _encode_record(records[0], 0)
        max_timestamp_delta = records[0].timestamp_delta
    else:
        body = b"".join([_encode_record(record, delta) for delta, record in enumerate(records)])
        max_timestamp_delta = max(r.timestamp_delta for r in records)
    after_crc = _AFTER_CRC.pack(
        attributes,
        len(records) - 1,
        timestamp_ms,
        timestamp_ms + max_timestamp_delta,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + body
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return b"".join((
        _LENGTH.pack(base_offset, batch_length),
        _EPOCH_MAGIC_CRC.pack(partition_leader_epoch, MAGIC, crc32c(after_crc)),
        after_crc,
    ))


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """A COMMIT or ABORT marker: one control record in a transactional control batch."""
    record = Record(
        key=_CONTROL_KEY.pack(0, control_type),
        value=_CONTROL_VALUE.pack(0, coordinator_epoch),
    )
    return build_batch(
        [record],
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


# ---------------------------------------------------------------------------------------
# Decoding records: only for the broker's own internal topics (uncompressed batches it
# wrote itself) and for tools. Client batches on the produce/fetch path stay opaque.


def _read_varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if position >= len(data):
            raise CorruptRecordError("varint runs past the end of the batch")
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), position


def _read_bytes(data: bytes | memoryview, position: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(data, position)
    if length < 0:
        return None, position
    end = position + length
    if end > len(data):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(data[position:end]), end


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def iter_records(buffer: bytes | bytearray | memoryview, header: BatchHeader) -> list[DecodedRecord]:
    """The records of one uncompressed batch; raises on a compressed or malformed one."""
    if header.compression_id != Compression.NONE:
        raise CorruptRecordError(f"cannot decode a batch with compression codec {header.compression_id} here")
    return parse_records(memoryview(buffer)[header.position : header.position + header.size], HEADER_SIZE, header)


def parse_records(data: memoryview, position: int, header: BatchHeader) -> list[DecodedRecord]:
    """The `header.record_count` records of a batch from `position` of `data`: the batch
    itself after its header, or its payload once decompressed (oncelog.protocol.compression)."""
    records = []
    for _ in range(header.record_count):
        length, position = _read_varint(data, position)
        end = position + length
        position += 1  # attributes
        timestamp_delta, position = _read_varint(data, position)
        offset_delta, position = _read_varint(data, position)
        key, position = _read_bytes(data, position)
        value, position = _read_bytes(data, position)
        count, position = _read_varint(data, position)
        headers = []
        for _ in range(count):
            name, position = _read_bytes(data, position)
            header_value, position = _read_bytes(data, position)
            try:
                headers.append(((name or b"").decode(), header_value))
            except UnicodeDecodeError:
                raise CorruptRecordError(
                    f"record at offset delta {offset_delta} has a header key that is not UTF-8"
                ) from None
        if position != end:
            raise CorruptRecordError(f"record at offset delta {offset_delta} has {end - position} stray bytes")
        records.append(DecodedRecord(
            header.base_offset + offset_delta, header.base_timestamp + timestamp_delta, key, value, tuple(headers)
        ))
    return records


def control_type(record: DecodedRecord) -> ControlType:
    """The COMMIT/ABORT type in a control record's key."""
    assert record.key is not None  # a control record's key is its type
    _version, kind = _CONTROL_KEY.unpack(record.key)
    return ControlType(kind)


def read_control_record(records_bytes: bytes | memoryview) -> tuple[ControlType, int]:
    """(marker type, coordinator epoch) of a control batch, from the bytes right after its
    61-byte header (its one record's key and value); reads a few varints, not the batch."""
    position = 0
    _length, position = _read_varint(records_bytes, position)
    position += 1  # attributes
    _timestamp_delta, position = _read_varint(records_bytes, position)
    _offset_delta, position = _read_varint(records_bytes, position)
    key_length, position = _read_varint(records_bytes, position)
    if key_length < 4 or position + key_length > len(records_bytes):
        raise CorruptRecordError("control record key is shorter than 4 bytes")
    _version, kind = _CONTROL_KEY.unpack_from(records_bytes, position)
    position += key_length
    value_length, position = _read_varint(records_bytes, position)
    coordinator_epoch = -1
    if value_length >= 6 and position + 6 <= len(records_bytes):
        _value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(records_bytes, position)
    try:
        return ControlType(kind), coordinator_epoch
    except ValueError:
        raise CorruptRecordError(f"unknown control record type {kind}") from None
