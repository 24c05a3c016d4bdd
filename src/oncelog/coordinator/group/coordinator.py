"""The group coordinator: Kafka's classic group protocol, the consumer group protocol
(KIP-848), and offset storage.

`GroupCoordinator` owns the groups of the `__consumer_offsets` partitions this broker
leads: it holds the one groups dict, the index of groups with pending transactional
offsets by producer, the scheduler and the `OffsetsTopic`, answers the lookups
(FindCoordinator, who coordinates a group, DescribeGroups, ListGroups) and hands each
protocol operation to the part that owns it, all sharing that state:

    membership.py   Membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalancing
    consumer_membership.py  ConsumerMembership: ConsumerGroupHeartbeat, ConsumerGroupDescribe,
                    target assignments and reconciliation of consumer groups (KIP-848)
    classic_members.py  ClassicMembers: classic members of consumer groups, and converting
                    groups between the protocols online (upgrade, downgrade)
    offsets.py      Offsets: OffsetCommit/TxnOffsetCommit, OffsetFetch, OffsetDelete,
                    DeleteGroups, offset expiration
    loading.py      GroupLoader: loading a partition's groups, dropping them on resignation
    persistence.py  the GroupMetadata record, and the errors a failed write answers
    api.py          the inputs and results of these operations, GroupSettings and GroupTimings

Every change that must survive a restart is appended to the group's `__consumer_offsets`
partition before it takes effect, and loading a partition rebuilds the same state from
those records. The handlers of the APIs that write answer once the write is on the ISR
(`replicated`, see coordinator_log.py), as Kafka answers after its acks=all append.

A partition is loaded when this broker becomes its leader and dropped when it stops
leading it (`on_leadership`, called by the broker's `Leadership` in both modes: a
standalone broker leads every partition of the topic once it exists); requests for
groups of partitions led elsewhere get NOT_COORDINATOR, and ListGroups lists only the
groups of partitions led here.

All of it runs on the broker's event loop: JoinGroup and SyncGroup answer with a future
that a later request or timer completes; timers come from the scheduler.

The group's states and transitions are in `state.py`; the records in `records.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.api import (
    CommitOffset,
    ConsumerGroupSummary,
    FetchedOffset,
    GroupSettings,
    GroupsSnapshot,
    GroupSummary,
    GroupTimings,
    HeartbeatRequest,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    ListedGroup,
    MemberSummary,
)
from oncelog.coordinator.group.classic_members import ClassicMembers
from oncelog.coordinator.group.consumer_membership import ConsumerMembership
from oncelog.coordinator.group.loading import GroupLoader
from oncelog.coordinator.group.membership import Membership
from oncelog.coordinator.group.offsets import Offsets
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.scheduler import LoopScheduler
from oncelog.coordinator.group.state import DEAD, STABLE, Group, TopicPartition

if TYPE_CHECKING:
    from oncelog.kernel.node import Node


def filter_value(value: str) -> str:
    """A ListGroups state or type filter as it is compared: case-insensitively."""
    return value.strip().lower()


class GroupCoordinator:
    def __init__(self, broker: Node, *, settings: GroupSettings | None = None, scheduler=None,
                 group_timings: GroupTimings | None = None) -> None:
        """`group_timings`: the groups' own session timeouts and heartbeat intervals
        (KIP-848 group configs); None: every group runs with `settings`."""
        self.settings = settings or GroupSettings.from_config(broker.config)
        self._scheduler = scheduler or LoopScheduler()
        self._offsets_topic = OffsetsTopic(broker, self.settings.offsets_topic_partitions)
        self._groups: dict[str, Group] = {}
        # Groups with pending transactional offsets, by producer id: where a marker for the
        # producer must look (Kafka's openGroupsForProducer).
        self._open_groups_by_producer: dict[int, set[str]] = {}
        # The parts share the dicts above (they add and drop groups in them), the scheduler
        # and the offsets topic; none keeps state of its own but the expiration timer.
        self._membership = Membership(
            self._groups, self.settings, self._scheduler, self._offsets_topic,
            owner_error=self.owner_error, create_group=self._create_group,
        )
        self._consumer = ConsumerMembership(
            self._groups, self.settings, self._scheduler, self._offsets_topic, broker.logs,
            owner_error=self.owner_error, create_group=self._create_group, timings=group_timings,
        )
        # Classic members of consumer groups and the conversions between the protocols.
        self._classic_members = ClassicMembers(self._consumer, self._membership, self._scheduler,
                                               broker.logs, self._groups)
        self._offsets = Offsets(
            self._groups, self._open_groups_by_producer, self.settings, self._scheduler, self._offsets_topic,
            self._membership, self._consumer, owner_error=self.owner_error, create_group=self._create_group,
        )
        self._loader = GroupLoader(
            self._groups, self._open_groups_by_producer, self._scheduler, self._offsets_topic, self._membership,
            self._consumer,
        )
        # The partitions this broker leads are loaded as their leadership is announced
        # (`on_leadership`, `OffsetsTopic.take`), in both modes.
        self._offsets.schedule_expiration()

    def close(self) -> None:
        """Cancel every timer (broker shutdown)."""
        self._offsets.cancel_expiration()
        for group in self._groups.values():
            for timer in (group.join_timer, group.sync_timer):
                if timer is not None:
                    timer.cancel()
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()
            if group.consumer is not None:
                self._consumer.cancel_timers(group.consumer)

    # ---- lookups ---------------------------------------------------------------------------

    def owner_error(self, group_id: str) -> ErrorCode:
        """NOT_COORDINATOR unless this broker coordinates the group (leads its partition)."""
        if self._offsets_topic.owns(self.partition_for_group(group_id)):
            return ErrorCode.none
        return ErrorCode.not_coordinator

    async def replicated(self, group_id: str) -> ErrorCode:
        """Wait until this coordinator's writes to the group's partition are on the ISR:
        NONE, or the error to answer (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        return await self._offsets_topic.replicated(self.partition_for_group(group_id))

    def partition_for_group(self, group_id: str) -> int:
        """The `__consumer_offsets` partition holding `group_id` (AddOffsetsToTxn uses it)."""
        return self._offsets_topic.partition_for(group_id)

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def _now(self) -> int:
        return self._scheduler.now_ms()

    def _create_group(self, group_id: str) -> Group:
        group = Group(group_id, current_state_timestamp_ms=self._now())
        self._groups[group_id] = group
        return group

    # ---- membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (membership.py) ------------

    # A consumer group's classic members (KIP-848's online migration) are served by
    # classic_members.py; a JoinGroup for an empty consumer group makes it a classic group.

    def _consumer_group(self, group_id: str) -> Group | None:
        group = self._groups.get(group_id)
        if group is None or group.consumer is None or self.owner_error(group_id) != ErrorCode.none:
            return None
        return group

    @staticmethod
    def _answered(result: object) -> asyncio.Future:
        waiter = asyncio.get_running_loop().create_future()
        waiter.set_result(result)
        return waiter

    def join_group(self, request: JoinRequest) -> asyncio.Future:
        group = self._consumer_group(request.group_id)
        if group is not None:
            assert group.consumer is not None
            if not group.consumer.is_empty:
                return self._answered(self._classic_members.join(group, request))
            error = self._consumer.release_empty_group(group)
            if error != ErrorCode.none:
                return self._answered(JoinResult(error, member_id=request.member_id))
        return self._membership.join_group(request)

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Mapping[str, bytes]) -> asyncio.Future:
        group = self._consumer_group(group_id)
        if group is not None:
            return self._answered(self._classic_members.sync(group, generation_id, member_id, group_instance_id,
                                                             protocol_type, protocol_name))
        return self._membership.sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                           protocol_name, assignments)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        group = self._consumer_group(group_id)
        if group is not None:
            return self._classic_members.heartbeat(group, generation_id, member_id, group_instance_id)
        return self._membership.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, leaving: Iterable[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self._consumer_group(group_id)
        if group is not None:
            return self._classic_members.leave(group, list(leaving))
        return self._membership.leave_group(group_id, leaving)

    # ---- consumer groups: ConsumerGroupHeartbeat, ConsumerGroupDescribe (consumer_membership.py)

    def consumer_group_heartbeat(self, request: HeartbeatRequest,
                                 describable: Callable[[str], bool] | None = None) -> HeartbeatResult:
        return self._consumer.heartbeat(request, describable)

    def consumer_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroupSummary | None]:
        """(error, error message, the group): GROUP_ID_NOT_FOUND for a group that does not
        exist or is a classic group, NOT_COORDINATOR for one coordinated elsewhere."""
        return self._consumer.describe(group_id)

    # ---- offsets (offsets.py) ---------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, CommitOffset], *, retention_ms: int = -1,
                       api_version: int = 9) -> dict[TopicPartition, ErrorCode]:
        return self._offsets.commit_offsets(group_id, member_id, group_instance_id, generation_id, offsets,
                                            retention_ms=retention_ms, api_version=api_version)

    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                          generation_id: int, group_instance_id: str | None,
                          offsets: Mapping[TopicPartition, CommitOffset]) -> dict[TopicPartition, ErrorCode]:
        return self._offsets.txn_offset_commit(group_id, producer_id, producer_epoch, member_id, generation_id,
                                               group_instance_id, offsets)

    def complete_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        self._offsets.complete_transaction(offsets_partition, producer_id, committed)

    def fetch_offsets(self, group_id: str, partitions: AbstractSet[TopicPartition] | None, require_stable: bool,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        return self._offsets.fetch_offsets(group_id, partitions, require_stable, member_id, member_epoch)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return self._offsets.delete_offsets(group_id, partitions)

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        return self._offsets.delete_groups(group_ids)

    def expire_offsets(self) -> int:
        return self._offsets.expire_offsets()

    # ---- loading (loading.py) ---------------------------------------------------------------

    def on_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        self._loader.on_leadership(partition, leader, leader_epoch)

    def snapshot(self) -> GroupsSnapshot:
        """Groups by state and protocol type, rebalances begun, every committed offset and each
        group's protocol type."""
        by_state: dict[tuple[str, str], int] = {}
        committed: dict[tuple[str, str, int], int] = {}
        protocol_types: dict[str, str] = {}
        for group in self._groups.values():
            protocol_type = group.protocol_type or ("consumer" if group.consumer is not None else "")
            protocol_types[group.group_id] = protocol_type
            key = (group.state_name, protocol_type)
            by_state[key] = by_state.get(key, 0) + 1
            for (topic, partition), offset in group.offsets.items():
                committed[(group.group_id, topic, partition)] = offset.value.offset
        loads = self._loader.load_times
        return GroupsSnapshot(by_state, self._membership.rebalances + self._consumer.rebalances, committed,
                              protocol_types, loads.count, loads.total_s, loads.cumulative())

    # ---- DescribeGroups / ListGroups -----------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary | None]:
        """(NONE, None) when the group does not exist, or is a consumer group (Kafka 4
        describes it as Dead, or answers GROUP_ID_NOT_FOUND from DescribeGroups v6);
        (NOT_COORDINATOR, None) for a group coordinated elsewhere."""
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, None
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD) or group.consumer is not None:
            return ErrorCode.none, None
        stable = group.is_(STABLE)
        members = tuple(
            MemberSummary(
                member.member_id, member.group_instance_id, member.client_id, member.client_host,
                member.metadata_for(group.protocol_name) if stable else b"",
                member.assignment if stable else b"",
            )
            for member in group.members.values()
        )
        return ErrorCode.none, GroupSummary(
            group_id, group.state.value, group.protocol_type or "",
            (group.protocol_name or "") if stable else "", members,
        )

    def is_consumer_group(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and group.consumer is not None

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        """The groups this broker coordinates (only those of the partitions it leads), of
        both protocols; `states` and `types` ("classic", "consumer") filter, case-insensitively."""
        return self.list_groups_matching({filter_value(state) for state in states},
                                         {filter_value(kind) for kind in types})

    def list_groups_matching(self, wanted_states: AbstractSet[str], wanted_types: AbstractSet[str]
                             ) -> list[ListedGroup]:
        """`list_groups` with filters already made `filter_value`s (ListGroups makes them
        at its own pace: a filter may name a million states); empty: any."""
        listed = []
        for group in self._groups.values():
            if group.is_(DEAD):
                continue
            state = group.state_name
            if wanted_states and state.lower() not in wanted_states:
                continue
            if wanted_types and group.group_type not in wanted_types:
                continue
            protocol_type = (group.protocol_type or "") if group.consumer is None else "consumer"
            listed.append(ListedGroup(group.group_id, protocol_type, state, group.group_type))
        return listed

