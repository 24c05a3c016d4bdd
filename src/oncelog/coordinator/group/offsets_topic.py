"""The group coordinator's side of `__consumer_offsets`: which partition a group lives
in, appending its records, and reading a partition back when it is loaded.

The topic is compacted and created by the first FindCoordinator with
`offsets.topic.num.partitions` partitions (the broker's `TopicAdmin.ensure_internal`);
once it exists its real partition count decides the group -> partition mapping, as in
Kafka (changing the setting later does not move groups).
Records are appended as uncompressed batches through a `CoordinatorLog`: on the
partition's leader only, and `replicated` says when they are on the ISR.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.coordinator.coordinator_log import CoordinatorLog
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS
from oncelog.kernel.partitions import read_all_batches
from oncelog.protocol import record_batch
from oncelog.protocol.messages import ErrorCode
from oncelog.protocol.record_batch import (
    BatchHeader,
    ControlType,
    CorruptRecordError,
    DecodedRecord,
    Record,
)

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.group")


@dataclass(frozen=True, slots=True)
class LoadedBatch:
    """One batch of an offsets partition, as the loader needs it."""

    header: BatchHeader
    records: list[DecodedRecord]
    control_type: ControlType | None  # COMMIT/ABORT for a control batch


class OffsetsTopic:
    def __init__(self, broker: Node, configured_partitions: int) -> None:
        self._broker = broker
        self._log = CoordinatorLog(broker, CONSUMER_OFFSETS, broker.config["offsets.commit.timeout.ms"],
                                   configured_partitions)

    @property
    def partition_count(self) -> int:
        return self._log.partition_count

    def partition_for(self, group_id: str) -> int:
        return self._log.partition_of(group_id)

    def owns(self, partition: int) -> bool:
        """Whether this broker coordinates the partition's groups (leads the partition)."""
        return self._log.owns(partition)

    def take(self, partition: int, leader_epoch: int) -> None:
        self._log.take(partition, leader_epoch)

    def append(self, partition: int, records: list[Record], *, now_ms: int, producer_id: int = -1,
               producer_epoch: int = -1, transactional: bool = False) -> int:
        """Append one batch on the partition's leader; returns its base offset. Raises the
        storage layer's errors, AppendRefused (not the leader, ISR under min.insync.replicas)
        or LookupError (no such partition)."""
        batch = record_batch.build_batch(
            records, timestamp_ms=now_ms, producer_id=producer_id, producer_epoch=producer_epoch,
            transactional=transactional,
        )
        return self._log.append(partition, batch, now_ms=now_ms).base_offset

    async def replicated(self, partition: int) -> ErrorCode:
        """Wait until this broker's appends to `partition` are on the ISR: NONE, or the
        coordinator error to answer (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        return await self._log.replicated(partition)

    def release(self, partition: int) -> bool:
        """The partition moved away (its pending appends are the next leader's business).
        Whether it was held."""
        return self._log.release(partition)

    def producer_epoch(self, partition: int, producer_id: int) -> int | None:
        """The latest epoch the partition's producer state has for `producer_id`."""
        log_ = self._broker.logs.partition(CONSUMER_OFFSETS, partition)
        if log_ is None:
            return None
        entry = log_.producer_state.producers.get(producer_id)
        return None if entry is None or entry.producer_epoch < 0 else entry.producer_epoch

    def read(self, partition: int) -> Iterator[LoadedBatch]:
        """Every batch of the partition, decoded. A batch the coordinator cannot decode
        (one it did not write: compressed, malformed) is logged and skipped, so that it
        cannot keep the broker from starting."""
        for buffer, header in read_all_batches(self._broker, CONSUMER_OFFSETS, partition):
            try:
                records = record_batch.iter_records(buffer, header)
                control = record_batch.control_type(records[0]) if header.is_control and records else None
            except (CorruptRecordError, ValueError) as error:
                log.error("%s-%d: skipping the batch at offset %d: %s", CONSUMER_OFFSETS, partition,
                          header.base_offset, error)
                continue
            yield LoadedBatch(header, records, control)
