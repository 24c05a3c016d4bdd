"""The share coordinator's side of `__share_group_state`: where each share partition's
state is kept, appending it, and reading a partition back when this broker comes to
lead it.

The topic is compacted and created on first use with
share.coordinator.state.topic.num.partitions partitions; a key (group, topic id,
partition) lives in partition `partition_for("group:topicId:partition")`, as in Kafka.
Records are written through a `CoordinatorLog`, so a write counts once it is on the
ISR (`append`, then `replicated`), and loading a partition rebuilds the latest state of
each of its keys.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from oncelog.coordinator.coordinator_log import CoordinatorLog, append_failure
from oncelog.coordinator.share.records import StateKey, decode_key, decode_value, encode_key, encode_value
from oncelog.kernel.partitions import read_all_batches
from oncelog.names import SHARE_GROUP_STATE
from oncelog.protocol import record_batch
from oncelog.protocol.messages import ErrorCode
from oncelog.protocol.record_batch import CorruptRecordError, Record

if TYPE_CHECKING:
    from oncelog.coordinator.share.partition import ShareState
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.share")


class ShareStateTopic:
    def __init__(self, broker: Node) -> None:
        self._broker = broker
        self._log = CoordinatorLog(broker, SHARE_GROUP_STATE, broker.config["share.coordinator.write.timeout.ms"],
                                   broker.config["share.coordinator.state.topic.num.partitions"])
        self._states: dict[StateKey, ShareState] = {}  # of the partitions led here
        self._per_group: Counter[str] = Counter()  # how many of those keys each group has

    def partition_of(self, key: StateKey) -> int:
        return self._log.partition_of(key.routing_key())

    def owns(self, key: StateKey) -> bool:
        return self._log.owns(self.partition_of(key))

    def read(self, key: StateKey) -> ShareState | None:
        return self._states.get(key)

    def persisted_keys(self) -> list[StateKey]:
        return sorted(self._states)

    def groups(self) -> set[str]:
        """The groups with a state persisted here."""
        return set(self._per_group)

    def has_group(self, group_id: str) -> bool:
        return group_id in self._per_group

    def _set(self, key: StateKey, state: ShareState | None) -> None:
        had = key in self._states
        if state is None:
            self._states.pop(key, None)
        else:
            self._states[key] = state
        if had != (state is not None):
            self._per_group[key.group_id] += 1 if state is not None else -1
            if self._per_group[key.group_id] <= 0:
                del self._per_group[key.group_id]

    def append(self, key: StateKey, state: ShareState | None, *, now_ms: int) -> int | None:
        """Append `state` (None: delete it) on the key's partition: the end offset to wait
        for with `replicated`, or None when it cannot be written here (the partition is
        not led here, the append failed)."""
        partition = self.partition_of(key)
        if not self._log.owns(partition):
            return None
        batch = record_batch.build_batch(
            [Record(encode_key(key), None if state is None else encode_value(state))], timestamp_ms=now_ms)
        try:
            end = self._log.append(partition, batch, now_ms=now_ms).last_offset + 1
        except Exception as error:  # noqa: BLE001 - a failed append is answered as a coordinator error
            log.warning("%s-%d: cannot write the state of %s: %s (%s)", SHARE_GROUP_STATE, partition, key,
                        error, append_failure(error).name)
            return None
        self._set(key, state)
        return end

    async def replicated(self, key: StateKey, end: int) -> ErrorCode:
        """NONE once the key's partition is on the ISR up to `end`, else the coordinator
        error to answer."""
        return await self._log.replicated(self.partition_of(key), end)

    def on_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        if not leader:
            if self._log.release(partition):
                for key in [k for k in self._states if self.partition_of(k) == partition]:
                    self._set(key, None)
            return
        self._log.take(partition, leader_epoch)
        loaded: dict[StateKey, ShareState | None] = {}
        for buffer, header in read_all_batches(self._broker, SHARE_GROUP_STATE, partition):
            if header.is_control:
                continue
            try:
                for record in record_batch.iter_records(buffer, header):
                    if record.key is None:
                        continue
                    key = decode_key(record.key)
                    loaded[key] = None if record.value is None else decode_value(record.value)
            except (CorruptRecordError, ValueError, KeyError, TypeError) as error:
                log.error("%s-%d: skipping the batch at offset %d: %s", SHARE_GROUP_STATE, partition,
                          header.base_offset, error)
        for key, state in loaded.items():
            self._set(key, state)
        self._log.loaded(partition)
        if loaded:
            log.info("%s-%d: loaded the state of %d share partition(s)", SHARE_GROUP_STATE, partition,
                     sum(1 for state in loaded.values() if state is not None))
