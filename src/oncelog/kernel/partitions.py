"""Appends to and reads from partitions: the checks Kafka makes before a write reaches the
log, in the order it makes them, each answered with Kafka's error code.

Record batches stay opaque: only headers are read, and the CRC32C is checked.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog import clock
from oncelog.kernel.topics import error_code_for
from oncelog.names import INTERNAL_TOPICS, TopicPartition
from oncelog.pacing import Pace, unpaced
from oncelog.protocol import record_batch
from oncelog.protocol.messages import ErrorCode
from oncelog.protocol.record_batch import (
    BATCH_LENGTH_POSITION,
    MAGIC_POSITION,
    Compression,
    CorruptRecordError,
)
from oncelog.storage import batch_records
from oncelog.storage.errors import LogError, StorageError
from oncelog.storage.log import AppendOrigin

if TYPE_CHECKING:
    from oncelog.kernel.node import Node, RemoteVerification, VerificationGuard

log = logging.getLogger("oncelog.partitions")

ZSTD_MIN_PRODUCE_VERSION = 7
FIRST_IMPLICIT_ADD_PRODUCE_VERSION = 12  # KIP-890 part 2
# Message-set framing shared by every magic: offset int64, size int32, then (magic 0/1)
# crc int32 and magic int8, or (magic 2) leader epoch int32 and magic int8.
LEGACY_RECORD_OVERHEAD_V0 = 14
_SIZE = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    error_code: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    end_offset: int = -1  # the appended (or duplicate) batch's last offset + 1: what acks=all waits for


def append_records(
    broker: Node,
    topic: str,
    partition: int,
    records: bytes | memoryview | None,
    *,
    produce_version: int,
    now_ms: int,
    transactional_id: str | None = None,
    internal_topics_allowed: bool = False,
    acks: int = 1,
    verification_guard: VerificationGuard | None = None,
) -> ProduceOutcome:
    """Validate one partition's records from a Produce request and append them.
    `verification_guard`: from `verify_with_remote_coordinator`, when the transaction
    coordinator (on another broker) was asked about this partition."""
    leadership = broker.leadership
    code, leader_epoch = leadership.leader_epoch(topic, partition)
    if code is not ErrorCode.none:
        return ProduceOutcome(code)
    log_ = broker.logs.partition(topic, partition)
    if log_ is None:
        return ProduceOutcome(ErrorCode.unknown_topic_or_partition)
    if not records:
        return ProduceOutcome(
            ErrorCode.invalid_record,
            error_message=f"Produce requests with version {produce_version} must have at least one record batch",
        )
    if _is_legacy_message(records):
        return ProduceOutcome(
            ErrorCode.invalid_record,
            error_message=f"Produce requests with version {produce_version} are only allowed to contain record "
            "batches with magic version 2",
        )
    # The log stamps offsets into the batch in place: a writable view of the request
    # frame (what the server's Produce decoding gives) is used as is, anything else copied.
    buffer = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
    try:
        batches = record_batch.parse_batches(buffer, verify_crc=False)
    except CorruptRecordError as error:
        return ProduceOutcome(ErrorCode.corrupt_message, error_message=str(error))
    if batches[0].compression_id == Compression.ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        return ProduceOutcome(ErrorCode.unsupported_compression_type)
    if len(batches) != 1:
        return ProduceOutcome(
            ErrorCode.invalid_record,
            error_message=f"Produce requests with version {produce_version} must have exactly one record batch "
            f"per partition, got {len(batches)}",
        )
    if topic in INTERNAL_TOPICS and not internal_topics_allowed:
        # Kafka's ReplicaManager refuses clients' writes to internal topics (its answer
        # carries no message).
        log.debug("produce to internal topic %s-%d refused", topic, partition)
        return ProduceOutcome(ErrorCode.invalid_topic_exception)
    batch = batches[0]
    max_message_bytes = log_.config.max_message_bytes
    if batch.size > max_message_bytes:
        return ProduceOutcome(
            ErrorCode.message_too_large,
            error_message=f"The record batch of {batch.size} bytes exceeds max.message.bytes={max_message_bytes} "
            f"of {topic}-{partition}",
        )
    if not record_batch.crc_matches(buffer, batch):
        return ProduceOutcome(
            ErrorCode.corrupt_message,
            error_message=f"Record batch for {topic}-{partition} fails its CRC32C check",
        )
    if batch.is_control:
        return ProduceOutcome(
            ErrorCode.invalid_record, error_message="Produce requests may not contain control batches"
        )
    if batch.compression_id > Compression.ZSTD:
        return ProduceOutcome(ErrorCode.corrupt_message,
                              error_message=f"unknown compression codec {batch.compression_id}")
    if batch.is_transactional:
        refusal = _verify_transactional(broker, transactional_id, batch, topic, partition, produce_version, now_ms,
                                        leader_epoch, verification_guard)
        if refusal is not None:
            return refusal
    if log_.config.compacts:
        refusal = _refuse_keyless_record(buffer, batch, topic, partition)
        if refusal is not None:
            return refusal
    if acks == -1:
        code = leadership.check_min_isr(topic, partition)
        if code is not ErrorCode.none:
            return ProduceOutcome(code, error_message=f"the ISR of {topic}-{partition} is below min.insync.replicas="
                                  f"{log_.config.min_insync_replicas}")
    try:
        result = log_.append(buffer, batches, now_ms=now_ms, leader_epoch=leader_epoch)
    except LogError as error:
        # Refusals by the producer state are expected protocol outcomes; I/O failures are not.
        log.log(logging.ERROR if isinstance(error, StorageError) else logging.DEBUG,
                "append to %s-%d refused: %s", topic, partition, error)
        return ProduceOutcome(error_code_for(error), error_message=str(error))
    if not result.duplicate:
        leadership.appended(topic, partition)
        if batch.is_transactional:
            _release_verification(broker, topic, partition, batch.producer_id)
    return ProduceOutcome(
        ErrorCode.none,
        end_offset=result.last_offset + 1,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time_ms,
        log_start_offset=result.log_start_offset,
    )


def _is_legacy_message(records: bytes | memoryview) -> bool:
    """Whether `records` starts with a whole magic 0 or 1 message set entry: Kafka's
    ProduceRequest.validateRecords answers INVALID_RECORD for those, while framing that
    is broken or a magic above 2 stays CORRUPT_MESSAGE (its ByteBufferLogInputStream)."""
    if len(records) < MAGIC_POSITION + 1:
        return False
    (size,) = _SIZE.unpack_from(records, BATCH_LENGTH_POSITION)
    return size >= LEGACY_RECORD_OVERHEAD_V0 and BATCH_LENGTH_POSITION + 4 + size <= len(records) \
        and records[MAGIC_POSITION] in (0, 1)


_PRODUCE_ERROR_FOR_VERIFICATION = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    # Produce v12's add could not be written to __transaction_state: retriable, as Kafka says it.
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
}
# Asking a coordinator on another broker can also fail on the way (it moved, is
# loading, did not answer): Kafka's ReplicaManager answers those NOT_ENOUGH_REPLICAS
# too. Its coordinator says TRANSACTION_ABORTABLE for a partition not in the
# transaction, which producers are told as the in-process check tells them.
_PRODUCE_ERROR_FOR_REMOTE_VERIFICATION = {
    **_PRODUCE_ERROR_FOR_VERIFICATION,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.network_exception: ErrorCode.not_enough_replicas,
    ErrorCode.transaction_abortable: ErrorCode.invalid_txn_state,
}


def _refuse_keyless_record(buffer, batch, topic: str, partition: int) -> ProduceOutcome | None:
    """Kafka's LogValidator check for compacted topics: every record needs a key. The
    one place produce decodes (and decompresses) records, as Kafka does for this check."""
    try:
        index = batch_records.first_record_without_key(buffer, batch)
    except CorruptRecordError as error:
        return ProduceOutcome(ErrorCode.corrupt_message, error_message=f"{topic}-{partition}: {error}")
    if index is None:
        return None
    return ProduceOutcome(
        ErrorCode.invalid_record,
        error_message="One or more records have been rejected due to 1 record errors in total, and only showing "
        f"the first three errors at most: [RecordError(batchIndex={index}, message='Compacted topic cannot "
        f"accept message without key in topic partition {topic}-{partition}.')]",
    )


def _verify_transactional(broker: Node, transactional_id: str | None, batch, topic: str,
                          partition: int, produce_version: int, now_ms: int, leader_epoch: int,
                          verification_guard: VerificationGuard | None) -> ProduceOutcome | None:
    """KIP-890 part 1: a transactional batch is accepted only for a partition of the
    producer's ongoing transaction, so a late write of an ended transaction cannot land.
    KIP-890 part 2: Produce v12 (a transaction version 2 client, which sends no
    AddPartitionsToTxn) adds the partition to the transaction instead, under the same
    producer id and epoch checks. Asked in-process when this broker coordinates the
    id; otherwise the Produce handler asked the coordinator before
    (`verify_with_remote_coordinator`) and only its guard is checked here."""
    coordinator = broker.txn_coordinator
    if transactional_id is None:
        return ProduceOutcome(
            ErrorCode.invalid_record, error_message="a transactional batch needs the request's transactional id"
        )
    if coordinator.owner_error(transactional_id) is not ErrorCode.none:
        return _check_remote_verification(coordinator.verification, transactional_id, batch, topic, partition,
                                          leader_epoch, verification_guard)
    if produce_version >= FIRST_IMPLICIT_ADD_PRODUCE_VERSION:
        code = coordinator.add_partitions(transactional_id, batch.producer_id, batch.producer_epoch,
                                          {(topic, partition)}, now_ms, transaction_version=2)
    else:
        code = coordinator.verify_partition(transactional_id, batch.producer_id, batch.producer_epoch,
                                            (topic, partition))
    if code is ErrorCode.none:
        return None
    # Kafka's broker translates the coordinator's answers for producers: a fenced one
    # expects INVALID_PRODUCER_EPOCH; CONCURRENT_TRANSACTIONS (markers being written)
    # becomes NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh.
    if code in _PRODUCE_ERROR_FOR_VERIFICATION:
        return ProduceOutcome(
            _PRODUCE_ERROR_FOR_VERIFICATION[code],
            error_message=f"unable to verify that {topic}-{partition} is in the transaction of transactional id "
            f"{transactional_id!r} (producer {batch.producer_id} epoch {batch.producer_epoch}): {code.name}",
        )
    if produce_version >= FIRST_IMPLICIT_ADD_PRODUCE_VERSION:
        return ProduceOutcome(
            code,
            error_message=f"unable to add {topic}-{partition} to the transaction of transactional id "
            f"{transactional_id!r} (producer {batch.producer_id} epoch {batch.producer_epoch}): {code.name}",
        )
    return ProduceOutcome(
        code,
        error_message=f"{topic}-{partition} is not part of an ongoing transaction of transactional id "
        f"{transactional_id!r} with producer {batch.producer_id} epoch {batch.producer_epoch}",
    )


def _check_remote_verification(verifier: RemoteVerification, transactional_id: str, batch, topic: str, partition: int,
                               leader_epoch: int, guard: VerificationGuard | None) -> ProduceOutcome | None:
    """The append side of a remote verification (Kafka's VerificationGuard check): the
    transaction is open here at the batch's epoch, or the coordinator's yes still holds."""
    if verifier.holds(topic, partition, batch.producer_id, batch.producer_epoch, guard, leader_epoch):
        return None
    if guard is None:
        # The coordinator moved away from this broker while the request was verified.
        return ProduceOutcome(
            ErrorCode.not_enough_replicas,
            error_message=f"{topic}-{partition} was not verified with the transaction coordinator of transactional "
            f"id {transactional_id!r}, which is on another broker",
        )
    return ProduceOutcome(
        ErrorCode.invalid_txn_state,
        error_message=f"the transaction of producer {batch.producer_id} epoch {batch.producer_epoch} ended on "
        f"{topic}-{partition} while it was being verified",
    )


async def verify_with_remote_coordinator(
    broker: Node, transactional_id: str | None, partition_records, produce_version: int, *, pace: Pace = unpaced
) -> dict[TopicPartition, ProduceOutcome | VerificationGuard]:
    """KIP-890 in cluster mode, for a Produce request whose transactional id is
    coordinated by another broker: ask that coordinator about every partition led here
    whose batch is transactional and whose transaction is not open here yet, in one
    AddPartitionsToTxn (`verify_only` below Produce v12, an add from v12), before
    anything is appended. Answers per partition: the refusal for the producer, or the
    guard to append with. Only batch headers are read; partitions left out are checked
    by `append_records` as usual. `partition_records`: (topic, partition, records), read
    only then, with `pace` between them."""
    coordinator = broker.txn_coordinator
    # Standalone, the broker coordinates every transactional id: never remote.
    if transactional_id is None or coordinator.owner_error(transactional_id) is ErrorCode.none:
        return {}
    verifier = coordinator.verification
    answers: dict[TopicPartition, ProduceOutcome | VerificationGuard] = {}
    guards: dict[TopicPartition, VerificationGuard] = {}
    producer: tuple[int, int] | None = None
    for topic, partition, records in partition_records:
        await pace()
        code, leader_epoch = broker.leadership.leader_epoch(topic, partition)
        if code is not ErrorCode.none or not records:
            continue
        try:
            header = record_batch.read_header(records)
        except CorruptRecordError:
            continue
        if not header.is_transactional or header.is_control:
            continue
        if producer is None:
            producer = (header.producer_id, header.producer_epoch)
        elif (header.producer_id, header.producer_epoch) != producer:
            answers[(topic, partition)] = ProduceOutcome(
                ErrorCode.invalid_producer_id_mapping,
                error_message="Transactional records contained more than one producer ID or epoch")
            continue
        if verifier.needs_verification(topic, partition, *producer):
            guards[(topic, partition)] = verifier.guard(topic, partition, producer[0], leader_epoch)
    if not guards:
        return answers
    assert producer is not None  # the guards were taken for it
    producer_id, producer_epoch = producer
    adding = produce_version >= FIRST_IMPLICIT_ADD_PRODUCE_VERSION
    codes = await verifier.verify(transactional_id, producer_id, producer_epoch, set(guards), verify_only=not adding)
    for (topic, partition), guard in guards.items():
        await pace()
        code = codes[(topic, partition)]
        if code is ErrorCode.none:
            answers[(topic, partition)] = guard
            continue
        verifier.drop(topic, partition, producer_id, guard)
        action = "add" if adding else "verify"
        answers[(topic, partition)] = ProduceOutcome(
            _PRODUCE_ERROR_FOR_REMOTE_VERIFICATION.get(code, code),
            error_message=f"unable to {action} {topic}-{partition} in the transaction of transactional id "
            f"{transactional_id!r} (producer {producer_id} epoch {producer_epoch}) at its coordinator: {code.name}",
        )
    return answers


def _release_verification(broker: Node, topic: str, partition: int, producer_id: int) -> None:
    """The producer's marker or transactional batch is in the log: a verification still
    out for it on this partition no longer holds (see verification.py)."""
    broker.txn_coordinator.verification.release(topic, partition, producer_id)


class AppendRefused(Exception):
    """This broker may not append to the partition now: it does not lead it, or (every
    internal write is acks=all, as Kafka's) its ISR is below min.insync.replicas."""

    def __init__(self, code: ErrorCode, topic: str, partition: int) -> None:
        super().__init__(f"{topic}-{partition}: {code.name}")
        self.code = code


def append_internal(broker: Node, topic: str, partition: int, batch: bytes, *, now_ms: int,
                    marker_transaction_version: int = 0):
    """Append a batch the broker built itself (coordinator records, control markers).

    Only on the partition's leader, with the ISR at min.insync.replicas or above
    (AppendRefused otherwise), stamped with the leader epoch. Goes through the log's
    coordinator path: offsets are assigned, producer state is updated, client-only
    checks are skipped. Wakes fetches (and followers) waiting on the partition; the
    caller waits for the write to be replicated when it must (acks=all).
    `marker_transaction_version` 2 applies KIP-890 part 2's stricter marker epoch check.
    """
    leadership = broker.leadership
    code, leader_epoch = leadership.leader_epoch(topic, partition)
    if code is ErrorCode.none:
        code = leadership.check_min_isr(topic, partition)
    log_ = broker.logs.partition(topic, partition)
    if code is ErrorCode.unknown_topic_or_partition or log_ is None:
        raise LookupError(f"internal partition {topic}-{partition} does not exist")
    if code is not ErrorCode.none:
        raise AppendRefused(code, topic, partition)
    buffer = bytearray(batch)
    # Built in this process a moment ago: its CRC is not checked again.
    result = log_.append(buffer, record_batch.parse_batches(buffer, verify_crc=False), now_ms=now_ms,
                         origin=AppendOrigin.COORDINATOR, leader_epoch=leader_epoch,
                         marker_transaction_version=marker_transaction_version)
    leadership.appended(topic, partition)
    return result


def read_all_batches(broker: Node, topic: str, partition: int, from_offset: int = 0, chunk_bytes: int = 1 << 20):
    """Yield (buffer, header) for every batch from `from_offset` to the log end: how a
    coordinator loads its state from an internal partition it has just become leader of
    (everything the new leader holds is what the partition will keep)."""
    log_ = broker.logs.partition(topic, partition)
    assert log_ is not None  # the partition this broker has just become leader of
    offset = max(from_offset, log_.log_start_offset)
    while offset < log_.log_end_offset:
        records = log_.read(offset, chunk_bytes, upper_bound=log_.log_end_offset).records
        if not records:
            break
        for header in record_batch.parse_batches(records, verify_crc=False):
            yield records, header
            offset = header.next_offset


def append_marker(broker: Node, topic: str, partition: int, producer_id: int, producer_epoch: int,
                  coordinator_epoch: int, *, commit: bool, transaction_version: int = 0):
    """Write a COMMIT or ABORT control batch for `producer_id` (the coordinator's phase
    two, and WriteTxnMarkers). Raises the storage error if the partition refuses it.
    With transaction version 2 the marker carries the bumped epoch and must be above
    the producer's epoch on the partition (see ProducerStateManager.check_marker)."""
    marker = record_batch.build_control_batch(
        record_batch.ControlType.COMMIT if commit else record_batch.ControlType.ABORT,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=clock.now_ms(),
    )
    result = append_internal(broker, topic, partition, marker, now_ms=clock.now_ms(),
                             marker_transaction_version=transaction_version)
    _release_verification(broker, topic, partition, producer_id)
    return result
