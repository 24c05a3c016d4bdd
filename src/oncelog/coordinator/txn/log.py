"""Records of `__transaction_state`, in Kafka's TransactionLogKey v0 and
TransactionLogValue v0/v1 layouts (big-endian):

    key      = version int16 (0), transactional_id string (int16 length)
    value v0 = version int16 (0), producer_id int64, producer_epoch int16,
               transaction_timeout_ms int32, transaction_status int8 (TransactionState id),
               partitions: int32 count (-1 = null) of (topic string, int32 count of int32),
               last_update_timestamp_ms int64, start_timestamp_ms int64
    value v1 = the same fields, flexible: partitions a compact array (unsigned varint
               count + 1, 0 = null) of (topic compact string, compact int32 array, tagged
               fields), then the value's tagged fields: 0 previous_producer_id int64,
               1 next_producer_id int64, 2 client_transaction_version int16 (each left
               out at its default: -1, -1, 0)

A null value (tombstone) removes an expired transactional id. v0 does not hold the
previous and next producer ids nor the client's transaction version; v1 does (KIP-890
part 2 needs them to finish an epoch overflow after a restart). Neither holds the last
epoch. Kafka writes v1 from transaction.version 1; oncelog writes it from level 2, so a
broker at level 0 or 1 writes exactly what it wrote before.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from oncelog.coordinator.txn.metadata import NO_PRODUCER_ID, TransactionMetadata
from oncelog.coordinator.txn.state import TransactionState
from oncelog.protocol.framing import unsigned_varint

VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
PREVIOUS_PRODUCER_ID_TAG = 0
NEXT_PRODUCER_ID_TAG = 1
CLIENT_TRANSACTION_VERSION_TAG = 2
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMESTAMPS = struct.Struct(">qq")


class CorruptTxnRecordError(ValueError):
    pass


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(VERSION) + _string(transactional_id)


def _readunsigned_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise struct.error("truncated unsigned varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise struct.error("unsigned varint longer than 5 bytes")


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return unsigned_varint(len(data) + 1) + data


def encode_value(metadata: TransactionMetadata, version: int = VERSION) -> bytes:
    if version == VERSION:
        return _encode_value_v0(metadata)
    if version == FLEXIBLE_VALUE_VERSION:
        return _encode_value_v1(metadata)
    raise ValueError(f"no transaction log value version {version}")


def _encode_value_v0(metadata: TransactionMetadata) -> bytes:
    out = bytearray(_VALUE_HEAD.pack(
        VERSION, metadata.producer_id, metadata.producer_epoch, metadata.txn_timeout_ms, metadata.state.id
    ))
    by_topic = _partitions_by_topic(metadata)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic) + _I32.pack(len(partitions))
        out += b"".join(_I32.pack(p) for p in partitions)
    out += _TIMESTAMPS.pack(metadata.txn_last_update_timestamp, metadata.txn_start_timestamp)
    return bytes(out)


def _partitions_by_topic(metadata: TransactionMetadata) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(metadata.partitions):
        by_topic[topic].append(partition)
    return by_topic


def _encode_value_v1(metadata: TransactionMetadata) -> bytes:
    out = bytearray(_VALUE_HEAD.pack(
        FLEXIBLE_VALUE_VERSION, metadata.producer_id, metadata.producer_epoch, metadata.txn_timeout_ms,
        metadata.state.id,
    ))
    by_topic = _partitions_by_topic(metadata)
    out += unsigned_varint(len(by_topic) + 1)
    for topic, partitions in by_topic.items():
        out += _compact_string(topic) + unsigned_varint(len(partitions) + 1)
        out += b"".join(_I32.pack(p) for p in partitions)
        out += unsigned_varint(0)  # no tagged fields in the partition entry
    out += _TIMESTAMPS.pack(metadata.txn_last_update_timestamp, metadata.txn_start_timestamp)
    tagged = []
    if metadata.previous_producer_id != NO_PRODUCER_ID:
        tagged.append((PREVIOUS_PRODUCER_ID_TAG, _I64.pack(metadata.previous_producer_id)))
    if metadata.next_producer_id != NO_PRODUCER_ID:
        tagged.append((NEXT_PRODUCER_ID_TAG, _I64.pack(metadata.next_producer_id)))
    if metadata.client_transaction_version != 0:
        tagged.append((CLIENT_TRANSACTION_VERSION_TAG, _I16.pack(metadata.client_transaction_version)))
    out += unsigned_varint(len(tagged))
    for tag, data in tagged:
        out += unsigned_varint(tag) + unsigned_varint(len(data)) + data
    return bytes(out)


def decode_key(data: bytes) -> str:
    try:
        (_version,) = _I16.unpack_from(data, 0)
        (length,) = _I16.unpack_from(data, 2)
        return data[4 : 4 + length].decode()
    except (struct.error, UnicodeDecodeError) as error:
        raise CorruptTxnRecordError(f"bad transaction log key: {error}") from None


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    (version,) = _I16.unpack_from(data, 0) if len(data) >= 2 else (None,)
    if version == FLEXIBLE_VALUE_VERSION:
        return _decode_value_v1(transactional_id, data)
    try:
        version, producer_id, epoch, timeout_ms, status = _VALUE_HEAD.unpack_from(data, 0)
        position = _VALUE_HEAD.size
        (topics,) = _I32.unpack_from(data, position)
        position += 4
        partitions = set()
        for _ in range(max(topics, 0)):
            (length,) = _I16.unpack_from(data, position)
            topic = data[position + 2 : position + 2 + length].decode()
            position += 2 + length
            (count,) = _I32.unpack_from(data, position)
            position += 4
            for _ in range(count):
                partitions.add((topic, _I32.unpack_from(data, position)[0]))
                position += 4
        last_update, start = _TIMESTAMPS.unpack_from(data, position)
        state = TransactionState.from_id(status)
    except (struct.error, UnicodeDecodeError, ValueError) as error:
        raise CorruptTxnRecordError(f"bad transaction log value for {transactional_id!r}: {error}") from None
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, txn_timeout_ms=timeout_ms,
        state=state, partitions=frozenset(partitions), txn_start_timestamp=start, txn_last_update_timestamp=last_update,
    )


def _decode_value_v1(transactional_id: str, data: bytes) -> TransactionMetadata:
    try:
        _version, producer_id, epoch, timeout_ms, status = _VALUE_HEAD.unpack_from(data, 0)
        position = _VALUE_HEAD.size
        topics, position = _readunsigned_varint(data, position)
        partitions = set()
        for _ in range(max(topics - 1, 0)):
            length, position = _readunsigned_varint(data, position)
            topic = data[position : position + length - 1].decode()
            position += length - 1
            count, position = _readunsigned_varint(data, position)
            for _ in range(max(count - 1, 0)):
                partitions.add((topic, _I32.unpack_from(data, position)[0]))
                position += 4
            position = _skip_tagged_fields(data, position)
        last_update, start = _TIMESTAMPS.unpack_from(data, position)
        position += _TIMESTAMPS.size
        previous_producer_id = next_producer_id = NO_PRODUCER_ID
        client_transaction_version = 0
        fields, position = _readunsigned_varint(data, position)
        for _ in range(fields):
            tag, position = _readunsigned_varint(data, position)
            size, position = _readunsigned_varint(data, position)
            if tag == PREVIOUS_PRODUCER_ID_TAG:
                (previous_producer_id,) = _I64.unpack_from(data, position)
            elif tag == NEXT_PRODUCER_ID_TAG:
                (next_producer_id,) = _I64.unpack_from(data, position)
            elif tag == CLIENT_TRANSACTION_VERSION_TAG:
                (client_transaction_version,) = _I16.unpack_from(data, position)
            position += size  # unknown tags are skipped, as flexible versions allow
        state = TransactionState.from_id(status)
    except (struct.error, UnicodeDecodeError, ValueError) as error:
        raise CorruptTxnRecordError(f"bad transaction log value for {transactional_id!r}: {error}") from None
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=producer_id, previous_producer_id=previous_producer_id,
        producer_epoch=epoch, txn_timeout_ms=timeout_ms, state=state, partitions=frozenset(partitions),
        txn_start_timestamp=start, txn_last_update_timestamp=last_update, next_producer_id=next_producer_id,
        client_transaction_version=client_transaction_version,
    )


def _skip_tagged_fields(data: bytes, position: int) -> int:
    fields, position = _readunsigned_varint(data, position)
    for _ in range(fields):
        _tag, position = _readunsigned_varint(data, position)
        size, position = _readunsigned_varint(data, position)
        position += size
    return position
