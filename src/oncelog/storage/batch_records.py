"""The records inside a stored batch, for the two places that must look at them: the log
cleaner (keys, tombstones, rewriting a batch with fewer records) and the compacted-topic
check on produce (every record needs a key). Everything else keeps batches opaque.

A batch's records are decompressed with the codec its attributes name (gzip, snappy in
raw or xerial framing, lz4 frame, zstd; oncelog.protocol.compression).

A rewritten batch keeps what Kafka's `MemoryRecords.filterTo` keeps: base offset,
last offset delta (so the producer's last sequence survives), partition leader epoch,
producer id, epoch and base sequence, codec, timestamp type, transactional and control
bits. Records keep their bytes; only their timestamp delta is rewritten when the batch
gets a delete horizon (attribute bit 6, the horizon stored as the base timestamp, as in
KIP-534). An emptied batch that must stay is written with no records at all.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from oncelog.protocol import compression
from oncelog.protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    _read_varint,
    _varint,
)

DELETE_HORIZON_BIT = 0x40

_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiibI")


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a batch: what compaction decides on, and its bytes to copy."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool
    attributes: int
    rest: bytes  # the record after its timestamp delta: offset delta, key, value, headers


def has_delete_horizon(header: BatchHeader) -> bool:
    return bool(header.attributes & DELETE_HORIZON_BIT)


# -- records -----------------------------------------------------------------------------


def decode_records(batch: bytes | bytearray | memoryview, header: BatchHeader) -> list[StoredRecord]:
    """The records of the batch at `header.position` in `batch`.

    Raises CorruptRecordError on malformed records.
    """
    start = header.position + HEADER_SIZE
    payload = bytes(memoryview(batch)[start : header.position + header.size])
    data = bytes(compression.decompress(header.attributes & COMPRESSION_MASK, payload))
    records = []
    position = 0
    for _ in range(header.record_count):
        length, position = _read_varint(data, position)
        end = position + length
        if length < 1 or end > len(data):
            raise CorruptRecordError(f"record of {length} bytes runs past the end of the batch")
        attributes = data[position]
        timestamp_delta, rest_start = _read_varint(data, position + 1)
        cursor = rest_start
        offset_delta, cursor = _read_varint(data, cursor)
        key_length, cursor = _read_varint(data, cursor)
        key = None
        if key_length >= 0:
            key = data[cursor : cursor + key_length]
            cursor += key_length
        value_length, cursor = _read_varint(data, cursor)
        if cursor > end:
            raise CorruptRecordError("record fields run past the record's length")
        records.append(StoredRecord(offset_delta, timestamp_delta, key, value_length >= 0, attributes,
                                    data[rest_start:end]))
        position = end
    if position != len(data):
        raise CorruptRecordError(f"{len(data) - position} stray bytes after the records of the batch")
    return records


def first_record_without_key(batch: bytes | bytearray | memoryview, header: BatchHeader) -> int | None:
    """Index of the first record with a null key, or None (the compacted-topic check)."""
    for index, record in enumerate(decode_records(batch, header)):
        if record.key is None:
            return index
    return None


def rebuild_batch(original: bytes | bytearray | memoryview, header: BatchHeader, records: list[StoredRecord],
                  *, delete_horizon_ms: int | None) -> bytes:
    """The batch with only `records` (a subset of its own, in order), as filterTo writes it.

    With `delete_horizon_ms` the batch gets the delete-horizon bit and that base
    timestamp; record timestamp deltas are rewritten so every record keeps its timestamp.
    """
    if not records:
        raise ValueError("an emptied batch is written with empty_batch")
    codec = header.attributes & COMPRESSION_MASK
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
        base_timestamp = delete_horizon_ms
    timestamps = [header.base_timestamp + record.timestamp_delta for record in records]
    body = bytearray()
    for record, timestamp in zip(records, timestamps, strict=True):
        inner = bytes([record.attributes]) + _varint(timestamp - base_timestamp) + record.rest
        body += _varint(len(inner)) + inner
    if header.attributes & TIMESTAMP_TYPE_BIT:
        max_timestamp = header.max_timestamp  # LogAppendTime: the batch's own time
    else:
        max_timestamp = max(timestamps)
    start = header.position + HEADER_SIZE
    like = bytes(memoryview(original)[start : start + 16])
    payload = compression.compress(codec, bytes(body), xerial=compression.is_xerial(like))
    return _assemble(header, attributes, base_timestamp, max_timestamp, len(records), payload)


def empty_batch(header: BatchHeader) -> bytes:
    """The batch's header with no records: keeps its producer's last sequence and epoch
    (Kafka's RETAIN_EMPTY), uncompressed, both timestamps set to its max timestamp."""
    attributes = header.attributes & (TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
    return _assemble(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _assemble(header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int,
              payload: bytes) -> bytes:
    after_crc = _AFTER_CRC.pack(
        attributes, header.last_offset_delta, base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, count,
    ) + payload
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    return _BEFORE_CRC.pack(header.base_offset, batch_length, header.partition_leader_epoch, MAGIC,
                            crc32c(after_crc)) + after_crc
