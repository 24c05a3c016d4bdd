"""Where a share partition's leader reads and writes its state (Kafka's persister): the
leader of the key's `__share_group_state` partition, which is this broker itself when
it leads that partition (a standalone broker always does), else another broker, asked
with ReadShareGroupState, WriteShareGroupState and DeleteShareGroupState over the
inter-broker listener. Either way the answer is the share coordinator's
(state_topic.py): NONE once the write is on the ISR there, FENCED_LEADER_EPOCH for a
leader that was superseded, or the coordinator error, which the caller answers as
COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR and retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.delete_share_group_state.v0 import request as delete_state
from kio.schema.initialize_share_group_state.v0 import request as initialize_state
from kio.schema.read_share_group_state.v0 import request as read_state
from kio.schema.write_share_group_state.v0 import request as write_state
from kio.static.primitive import i8, i16, i32, i64

from oncelog import clock
from oncelog.coordinator.share.partition import UNINITIALIZED, RecordState, ShareState, StateBatch
from oncelog.names import SHARE_GROUP_STATE
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.coordinator.share.records import StateKey
    from oncelog.coordinator.share.state_topic import ShareStateTopic
    from oncelog.kernel.peer import PeerConnection

log = logging.getLogger("oncelog.share")


class SharePersister:
    def __init__(self, store: ShareStateTopic, leader_of: Callable[[str, int], int | None],
                 peer: Callable[[int], PeerConnection | None], node_id: int, timeout_s: float) -> None:
        """`leader_of(topic, partition)`: its leader's node id; `peer(node_id)`: the
        connection to that broker (None while it is not registered)."""
        self._store = store
        self._leader_of = leader_of
        self._peer = peer
        self._node_id = node_id
        self._timeout_s = timeout_s

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        if self._store.owns(key):
            return await self._store.read_for_leader(key, leader_epoch, now_ms=clock.now_ms())
        request = read_state.ReadShareGroupStateRequest(group_id=key.group_id, topics=(read_state.ReadStateData(
            topic_id=key.topic_id, partitions=(read_state.PartitionData(
                partition=i32(key.partition), leader_epoch=i32(leader_epoch)),)),))
        response, code = await self._ask(key, request)
        if response is None:
            return code, None
        [result] = [p for t in response.results for p in t.partitions]
        if result.error_code != ErrorCode.none:
            return ErrorCode(result.error_code), None
        if result.start_offset == UNINITIALIZED and result.state_epoch < 0:  # never initialized
            return ErrorCode.none, None
        return ErrorCode.none, ShareState(result.start_offset, tuple(
            StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
            for b in result.state_batches), result.state_epoch)

    async def reset(self, key: StateKey, start_offset: int) -> ErrorCode:
        """An admin change: start again at `start_offset` (UNINITIALIZED: where
        share.auto.offset.reset says), at the share coordinator's next state epoch."""
        if self._store.owns(key):
            return await self._store.reset(key, start_offset, now_ms=clock.now_ms())
        request: object
        if start_offset == UNINITIALIZED:
            request = delete_state.DeleteShareGroupStateRequest(group_id=key.group_id, topics=(
                delete_state.DeleteStateData(topic_id=key.topic_id, partitions=(
                    delete_state.PartitionData(partition=i32(key.partition)),)),))
        else:
            request = initialize_state.InitializeShareGroupStateRequest(group_id=key.group_id, topics=(
                initialize_state.InitializeStateData(topic_id=key.topic_id, partitions=(
                    initialize_state.PartitionData(partition=i32(key.partition), state_epoch=i32(-1),
                                                   start_offset=i64(start_offset)),)),))
        return await self._result(key, request)

    async def write(self, key: StateKey, state: ShareState, leader_epoch: int) -> ErrorCode:
        """Persist the partition leader's `state`."""
        if self._store.owns(key):
            return await self._store.write(key, state, leader_epoch, now_ms=clock.now_ms())
        request = write_state.WriteShareGroupStateRequest(group_id=key.group_id, topics=(
            write_state.WriteStateData(topic_id=key.topic_id, partitions=(write_state.PartitionData(
                partition=i32(key.partition), state_epoch=i32(state.state_epoch),
                leader_epoch=i32(leader_epoch), start_offset=i64(state.start_offset),
                state_batches=tuple(write_state.StateBatch(
                    first_offset=i64(b.first), last_offset=i64(b.last), delivery_state=i8(int(b.state)),
                    delivery_count=i16(b.delivery_count)) for b in state.batches)),)),))
        return await self._result(key, request)

    async def _result(self, key: StateKey, request) -> ErrorCode:
        response, code = await self._ask(key, request)
        if response is None:
            return code
        [result] = [p for t in response.results for p in t.partitions]
        return ErrorCode(result.error_code)

    async def _ask(self, key: StateKey, request) -> tuple[Any, ErrorCode]:
        """The response of the key's share coordinator, or (None, the error to answer)."""
        partition = self._store.partition_of(key)
        leader = self._leader_of(SHARE_GROUP_STATE, partition)
        if leader is None or leader < 0 or leader == self._node_id:
            return None, ErrorCode.coordinator_not_available  # no leader, or taking it over just now
        peer = self._peer(leader)
        if peer is None:
            return None, ErrorCode.coordinator_not_available
        try:
            return await peer.request(request, self._timeout_s), ErrorCode.none
        except (ConnectionError, TimeoutError) as error:
            log.info("%s to broker %d failed: %s", type(request).__name__, leader, error)
            return None, ErrorCode.coordinator_not_available
