"""The share coordinator's side of `__share_group_state`: where each share partition's
state is kept, appending it, and reading a partition back when this broker comes to
lead it.

The topic is compacted and created on first use with
share.coordinator.state.topic.num.partitions partitions; a key (group, topic id,
partition) lives in partition `partition_for("group:topicId:partition")`, as in Kafka.
Records are written through a `CoordinatorLog`, so a write counts once it is on the
ISR, and loading a partition rebuilds the latest state of each of its keys. Each state
remembers the leader epoch of the partition leader that wrote it or took it over
(`read_for_leader`): a write from an older leader is FENCED_LEADER_EPOCH, so a leader
that lost its partition cannot overwrite what its successor does, as in Kafka's share
coordinator. The same operations serve this broker's share partitions and, through
ReadShareGroupState, WriteShareGroupState and DeleteShareGroupState, the other brokers'.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from oncelog.coordinator.coordinator_log import CoordinatorLog, append_failure
from oncelog.coordinator.share.partition import UNINITIALIZED, ShareState
from oncelog.coordinator.share.records import (
    StateKey,
    StoredState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from oncelog.kernel.partitions import read_all_batches
from oncelog.names import SHARE_GROUP_STATE
from oncelog.protocol import record_batch
from oncelog.protocol.messages import ErrorCode
from oncelog.protocol.record_batch import CorruptRecordError, Record

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.share")


class ShareStateTopic:
    def __init__(self, broker: Node) -> None:
        self._broker = broker
        self._log = CoordinatorLog(broker, SHARE_GROUP_STATE, broker.config["share.coordinator.write.timeout.ms"],
                                   broker.config["share.coordinator.state.topic.num.partitions"])
        self._states: dict[StateKey, StoredState] = {}  # of the partitions led here
        self._per_group: Counter[str] = Counter()  # how many of those keys each group has

    def partition_of(self, key: StateKey) -> int:
        return self._log.partition_of(key.routing_key())

    def owns(self, key: StateKey) -> bool:
        return self._log.owns(self.partition_of(key))

    def read(self, key: StateKey) -> ShareState | None:
        """The key's initialized state as persisted here (no fencing: a summary's read)."""
        stored = self._states.get(key)
        return None if stored is None or not stored.state.initialized else stored.state

    def persisted_keys(self) -> list[StateKey]:
        """The keys with an initialized state persisted here."""
        return sorted(key for key, stored in self._states.items() if stored.state.initialized)

    def groups(self) -> set[str]:
        """The groups with a state persisted here."""
        return set(self._per_group)

    def has_group(self, group_id: str) -> bool:
        return group_id in self._per_group

    # ---- the share coordinator's operations (ReadShareGroupState, WriteShareGroupState,
    # ---- DeleteShareGroupState, for this broker's partitions and for the other brokers')

    async def read_for_leader(self, key: StateKey, leader_epoch: int, *, now_ms: int
                              ) -> tuple[ErrorCode, ShareState | None]:
        """The state a partition leader at `leader_epoch` takes over (None: never
        initialized; a start offset of -1: reset by an admin, to start again):
        FENCED_LEADER_EPOCH for an older leader than the last writer; a newer one is
        recorded first, so that the previous leader's late writes are fenced from now on.
        -1: read without fencing."""
        if not self.owns(key):
            return ErrorCode.not_coordinator, None
        stored = self._states.get(key)
        if leader_epoch < 0 or stored is None or leader_epoch == stored.leader_epoch:
            return ErrorCode.none, None if stored is None else stored.state
        if leader_epoch < stored.leader_epoch:
            return ErrorCode.fenced_leader_epoch, None
        code = await self.write(key, stored.state, leader_epoch, now_ms=now_ms)
        return code, stored.state if code is ErrorCode.none else None

    async def write(self, key: StateKey, state: ShareState, leader_epoch: int | None, *, now_ms: int) -> ErrorCode:
        """Persist `state` as written by the partition leader at `leader_epoch` (None: by
        an admin change, which keeps the last leader's): NONE once it is on the ISR;
        FENCED_LEADER_EPOCH for an older leader than the last writer, FENCED_STATE_EPOCH
        for a state older than the one kept (written before an admin reset it), else
        the coordinator error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        partition = self.partition_of(key)
        if not self._log.owns(partition):
            return ErrorCode.not_coordinator
        stored = self._states.get(key)
        if stored is not None:
            if leader_epoch is not None and leader_epoch < stored.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if state.state_epoch < stored.state.state_epoch:
                return ErrorCode.fenced_state_epoch
        if leader_epoch is None:
            leader_epoch = -1 if stored is None else stored.leader_epoch
        value = StoredState(state, leader_epoch)
        batch = record_batch.build_batch([Record(encode_key(key), encode_value(value))], timestamp_ms=now_ms)
        try:
            end = self._log.append(partition, batch, now_ms=now_ms).last_offset + 1
        except Exception as error:  # noqa: BLE001 - a failed append is answered as a coordinator error
            log.warning("%s-%d: cannot write the state of %s: %s", SHARE_GROUP_STATE, partition, key, error)
            return append_failure(error)
        self._set(key, value)
        return await self._log.replicated(partition, end)

    async def reset(self, key: StateKey, start_offset: int, *, now_ms: int) -> ErrorCode:
        """An admin change (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups):
        the share partition starts again at `start_offset` (UNINITIALIZED: where
        share.auto.offset.reset says) with nothing in flight, at a state epoch past the
        one kept, so that its leader's writes of the state before are fenced
        (FENCED_STATE_EPOCH) and it reloads."""
        stored = self._states.get(key)
        if stored is None and start_offset == UNINITIALIZED:
            return ErrorCode.none if self.owns(key) else ErrorCode.not_coordinator
        epoch = 0 if stored is None else stored.state.state_epoch + 1
        return await self.write(key, ShareState(start_offset, (), epoch), None, now_ms=now_ms)

    def _set(self, key: StateKey, stored: StoredState | None) -> None:
        """Keep `stored` (None: forget the key); a group counts where it has a state
        that is initialized."""
        previous = self._states.pop(key, None)
        if stored is not None:
            self._states[key] = stored
        had = previous is not None and previous.state.initialized
        has = stored is not None and stored.state.initialized
        if had != has:
            self._per_group[key.group_id] += 1 if has else -1
            if self._per_group[key.group_id] <= 0:
                del self._per_group[key.group_id]

    def on_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        if not leader:
            if self._log.release(partition):
                for key in [k for k in self._states if self.partition_of(k) == partition]:
                    self._set(key, None)
            return
        self._log.take(partition, leader_epoch)
        loaded: dict[StateKey, StoredState | None] = {}
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
        for key, stored in loaded.items():
            self._set(key, stored)  # a tombstone (None) only from a future version: forgotten
        self._log.loaded(partition)
        if loaded:
            log.info("%s-%d: loaded the state of %d share partition(s)", SHARE_GROUP_STATE, partition,
                     sum(1 for stored in loaded.values() if stored is not None))
