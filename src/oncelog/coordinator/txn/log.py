"""Records of `__transaction_state`, in Kafka's TransactionLogKey/TransactionLogValue v0
layout (big-endian, strings with int16 lengths):

    key   = version int16 (0), transactional_id string
    value = version int16 (0), producer_id int64, producer_epoch int16,
            transaction_timeout_ms int32, transaction_status int8 (TransactionState id),
            partitions: int32 count (-1 = null) of (topic string, int32 count of int32),
            last_update_timestamp_ms int64, start_timestamp_ms int64

A null value (tombstone) removes an expired transactional id. The previous producer id
and last epoch are not in v0 and are not persisted, as in Kafka's v0 records.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from oncelog.coordinator.txn.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnTransit
from oncelog.coordinator.txn.state import TransactionState

VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMESTAMPS = struct.Struct(">qq")


class CorruptTxnRecordError(ValueError):
    pass


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(VERSION) + _string(transactional_id)


def encode_value(transit: TxnTransit) -> bytes:
    out = bytearray(_VALUE_HEAD.pack(
        VERSION, transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms, transit.state.id
    ))
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(transit.partitions):
        by_topic[topic].append(partition)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic) + _I32.pack(len(partitions))
        out += b"".join(_I32.pack(p) for p in partitions)
    out += _TIMESTAMPS.pack(transit.txn_last_update_timestamp, transit.txn_start_timestamp)
    return bytes(out)


def decode_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        (length,) = _I16.unpack_from(data, 2)
        return data[4 : 4 + length].decode()
    except (struct.error, UnicodeDecodeError) as error:
        raise CorruptTxnRecordError(f"bad transaction log key: {error}") from None


def decode_value(transactional_id: str, data: bytes) -> TxnTransit:
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
    return TxnTransit(
        transactional_id, producer_id, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, timeout_ms, state,
        frozenset(partitions), start, last_update,
    )
