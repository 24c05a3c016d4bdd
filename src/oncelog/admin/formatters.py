"""`oncelog consume --formatter`: the internal topics' records decoded, as Kafka's
`TransactionLogMessageFormatter` and `OffsetsMessageFormatter` print them.

Each record becomes one JSON document, Kafka's shape:

    {"key":{"type":0,"data":{"transactionalId":"t1"}},
     "value":{"version":1,"data":{"producerId":1000,"producerEpoch":3,...}}}

`type` is the key's version and `version` the value's; `data` holds the record's fields
under their schema names in camelCase, in schema order; a tagged field appears only when
it differs from its default, as Kafka's JSON converters write them. A tombstone's value
is `null`. Records of another kind (group metadata under the offsets formatter) are
skipped, as Kafka skips them; a value of a version these decoders do not know is
`"unknown"`. Deviation: Kafka's formatter writes no line separator, so its documents
run together on one line; here each ends with a newline, which `jq` and `grep` read.

The names Kafka has used for these formatters select them too, so monitoring scripts
written for Kafka work unchanged (e.g. the seeds' `kafka.coordinator.transaction.
TransactionStateManager$TransactionStateMessageFormatter`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, Protocol

from oncelog.coordinator.group import records as group_records
from oncelog.coordinator.txn import log as txn_log
from oncelog.coordinator.txn.state import TransactionState
from oncelog.errors import CommandError

_VERSION = struct.Struct(">h")
_UNKNOWN = "unknown"
NO_PRODUCER_ID = -1


class Record(Protocol):
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


Decoder = Callable[[bytes, int], dict[str, Any] | None]


class ApiRecordFormatter:
    """One internal topic's records as JSON documents (Kafka's ApiMessageFormatter)."""

    def __init__(self, decode_key: Decoder, decode_value: Callable[[bytes, int, dict[str, Any]], dict[str, Any]]):
        self._decode_key = decode_key
        self._decode_value = decode_value

    def format(self, message: Record) -> bytes:
        key = message.key()
        if not key or len(key) < 2:
            return b""
        (key_version,) = _VERSION.unpack_from(key, 0)
        key_data = self._decode_key(key, key_version)
        if key_data is None:
            return b""  # not a record of this formatter's kind
        document: dict[str, Any] = {"key": {"type": key_version, "data": key_data}}
        value = message.value()
        if value is None:
            document["value"] = None
        else:
            value_version = _VERSION.unpack_from(value, 0)[0] if len(value) >= 2 else -1
            try:
                value_data: Any = self._decode_value(value, value_version, key_data)
            except (ValueError, struct.error):  # a version or shape these decoders do not know
                value_data = _UNKNOWN
            document["value"] = {"version": value_version, "data": value_data}
        return json.dumps(document, separators=(",", ":")).encode() + b"\n"


# ---- __transaction_state (TransactionLogKey v0, TransactionLogValue v0-1) -----------------

def _transaction_key(data: bytes, version: int) -> dict[str, Any] | None:
    if version != 0:
        return None
    try:
        return {"transactionalId": txn_log.decode_key(data)}
    except txn_log.CorruptTxnRecordError:
        return None


def _transaction_value(data: bytes, version: int, key: dict[str, Any]) -> dict[str, Any]:
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue v{version}")
    try:
        transit = txn_log.decode_value(key["transactionalId"], data)
    except txn_log.CorruptTxnRecordError as error:
        raise ValueError(str(error)) from None
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(transit.partitions):
        by_topic.setdefault(topic, []).append(partition)
    fields: dict[str, Any] = {"producerId": transit.producer_id}
    if version >= 1 and transit.previous_producer_id != NO_PRODUCER_ID:
        fields["previousProducerId"] = transit.previous_producer_id
    if version >= 1 and transit.next_producer_id != NO_PRODUCER_ID:
        fields["nextProducerId"] = transit.next_producer_id
    fields.update({
        "producerEpoch": transit.producer_epoch,
        "transactionTimeoutMs": transit.txn_timeout_ms,
        "transactionStatus": transit.state.id,
        # Kafka writes no partition list (null) for an Empty transactional id.
        "transactionPartitions": None if transit.state is TransactionState.EMPTY
        else [{"topic": t, "partitionIds": p} for t, p in by_topic.items()],
        "transactionLastUpdateTimestampMs": transit.txn_last_update_timestamp,
        "transactionStartTimestampMs": transit.txn_start_timestamp,
    })
    if version >= 1 and transit.client_transaction_version != 0:
        fields["clientTransactionVersion"] = transit.client_transaction_version
    return fields


# ---- __consumer_offsets (OffsetCommitKey v0-1, OffsetCommitValue v0-3) -------------------

def _offset_key(data: bytes, version: int) -> dict[str, Any] | None:
    try:
        key = group_records.decode_key(data)
    except group_records.RecordFormatError:
        return None
    if not isinstance(key, group_records.OffsetCommitKey):
        return None  # group metadata and newer record types: not offsets
    return {"group": key.group, "topic": key.topic, "partition": key.partition}


def _offset_value(data: bytes, version: int, key: dict[str, Any]) -> dict[str, Any]:
    try:
        value = group_records.decode_offset_commit_value(data)
    except group_records.RecordFormatError as error:
        raise ValueError(str(error)) from None
    fields: dict[str, Any] = {"offset": value.offset}
    if version >= 3:
        fields["leaderEpoch"] = value.leader_epoch
    fields["metadata"] = value.metadata
    fields["commitTimestamp"] = value.commit_timestamp_ms
    if version == 1:
        fields["expireTimestamp"] = value.expire_timestamp_ms
    return fields


def transaction_log_formatter() -> ApiRecordFormatter:
    return ApiRecordFormatter(_transaction_key, _transaction_value)


def offsets_formatter() -> ApiRecordFormatter:
    return ApiRecordFormatter(_offset_key, _offset_value)


FORMATTERS: dict[str, Callable[[], ApiRecordFormatter]] = {
    "transaction-state": transaction_log_formatter,
    "offsets": offsets_formatter,
}
# The class names Kafka's console consumer has accepted for them, 2.x to 4.x.
KAFKA_NAMES = {
    "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter": "transaction-state",
    "kafka.coordinator.transaction.TransactionLog$TransactionLogMessageFormatter": "transaction-state",
    "kafka.coordinator.transaction.TransactionStateManager$TransactionStateMessageFormatter": "transaction-state",
    "org.apache.kafka.tools.consumer.OffsetsMessageFormatter": "offsets",
    "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter": "offsets",
}


def record_formatter(name: str) -> ApiRecordFormatter:
    """The formatter `--formatter NAME` selects (ours or Kafka's class name)."""
    chosen = FORMATTERS.get(KAFKA_NAMES.get(name, name))
    if chosen is None:
        raise CommandError(f"unknown --formatter {name!r}: use default, {', '.join(FORMATTERS)}, "
                           "or one of Kafka's formatter class names for them")
    return chosen()
