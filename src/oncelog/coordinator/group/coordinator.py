"""The group coordinator: Kafka's classic consumer-group protocol and offset storage.

Owns the groups of the `__consumer_offsets` partitions this broker leads: membership
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup) with session and rebalance timeouts, the
initial rebalance delay, static membership (KIP-345) and the member id handshake
(KIP-394); committed offsets (OffsetCommit/OffsetFetch/OffsetDelete) and
transactional offsets (TxnOffsetCommit, KIP-447), which stay pending until the
transaction coordinator writes the COMMIT/ABORT marker and calls `complete_transaction`.

Every change that must survive a restart is appended to the group's `__consumer_offsets`
partition before it takes effect, and loading a partition rebuilds the same state from
those records. The handlers of the APIs that write answer once the write is on the ISR
(`replicated`, see coordinator_log.py), as Kafka answers after its acks=all append.

A standalone broker leads every partition: it loads them all at start-up (`load`) and
creates the topic on the first FindCoordinator (`find`). In cluster mode a partition is
loaded when this broker becomes its leader and dropped when it stops leading it
(`on_leadership`): its groups' timers stop and whatever their members wait for is
answered NOT_COORDINATOR, as Kafka's onResignation does; requests for groups of
partitions led elsewhere get NOT_COORDINATOR, and ListGroups lists only the groups of
partitions led here.

All of it runs on the broker's event loop: JoinGroup and SyncGroup answer with a future
that a later request or timer completes; timers come from the scheduler.

The group's states and transitions are in `state.py`; the records in `records.py`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncelog.broker.partitions import AppendRefused
from oncelog.coordinator.coordinator_log import append_failure
from oncelog.coordinator.group import records
from oncelog.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
)
from oncelog.coordinator.group.scheduler import LoopScheduler
from oncelog.coordinator.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Cancellable,
    CommittedOffset,
    Group,
    Member,
    OffsetAndMetadata,
    TopicPartition,
)
from oncelog.coordinator.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.record_batch import ControlType, Record
from oncelog.storage.errors import LogError, RecordBatchTooLargeError, RecordTooLargeError

if TYPE_CHECKING:
    from oncelog.broker.config import BrokerConfig
    from oncelog.broker.node import Node

log = logging.getLogger("oncelog.group")

# What appending to `__consumer_offsets` may raise: the storage layer's refusals,
# AppendRefused off the leader or under min.insync.replicas, LookupError for a missing
# partition (CoordinatorLog.append).
WRITE_ERRORS = (LogError, AppendRefused, LookupError)

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a member that joined during a
# rebalance may wait for it to finish before it is dropped.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


# ---- inputs and results of the coordinator's operations ----------------------------------


@dataclass(frozen=True, slots=True)
class GroupSettings:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_topic_partitions: int = 50
    offsets_topic_segment_bytes: int = 104_857_600

    @classmethod
    def from_config(cls, config: BrokerConfig) -> GroupSettings:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_topic_partitions=config["offsets.topic.num.partitions"],
            offsets_topic_segment_bytes=config["offsets.topic.segment.bytes"],
        )


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool = True  # JoinGroup v9+ (KIP-814)
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()  # only the leader gets them


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class CommitOffset:
    """One partition's offset as a client commits it."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


NO_OFFSET = FetchedOffset(-1, -1, "", ErrorCode.none)
UNSTABLE_OFFSET = FetchedOffset(-1, -1, "", ErrorCode.unstable_offset_commit)


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str  # "" unless Stable, as Kafka reports it
    members: tuple[MemberSummary, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


def _resolve(waiter: asyncio.Future | None, result) -> None:
    """Answer a waiting JoinGroup/SyncGroup; its connection may have gone away meanwhile."""
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


# ---- the coordinator --------------------------------------------------------------------


class GroupCoordinator:
    def __init__(self, broker: Node, *, settings: GroupSettings | None = None, scheduler=None) -> None:
        self.settings = settings or GroupSettings.from_config(broker.config)
        self._scheduler = scheduler or LoopScheduler()
        self._offsets_topic = OffsetsTopic(
            broker, self.settings.offsets_topic_partitions, self.settings.offsets_topic_segment_bytes
        )
        self._groups: dict[str, Group] = {}
        # Groups with pending transactional offsets, by producer id: where a marker for the
        # producer must look (Kafka's openGroupsForProducer).
        self._open_groups_by_producer: dict[int, set[str]] = {}
        self._expiration_timer: Cancellable | None = None
        # Standalone: every partition is this broker's, loaded now. Cluster mode: the
        # `__consumer_offsets` partitions this broker leads (`OffsetsTopic.take`).
        self.standalone = broker.cluster is None
        if self.standalone:
            self.load()
        self._schedule_offset_expiration()

    def close(self) -> None:
        """Cancel every timer (broker shutdown)."""
        if self._expiration_timer is not None:
            self._expiration_timer.cancel()
        for group in self._groups.values():
            for timer in (group.join_timer, group.sync_timer):
                if timer is not None:
                    timer.cancel()
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()

    # ---- lookups ---------------------------------------------------------------------------

    def find(self, group_id: str) -> ErrorCode:
        """FindCoordinator on a standalone broker: it coordinates every group; the offsets
        topic is created on the first lookup, as Kafka does."""
        self._offsets_topic.ensure()
        return ErrorCode.none

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

    # ---- JoinGroup -----------------------------------------------------------------------

    def join_group(self, request: JoinRequest) -> asyncio.Future:
        """Returns a future of JoinResult: done now for errors and immediate answers,
        otherwise when the rebalance completes."""
        waiter = asyncio.get_running_loop().create_future()
        self._join(request, waiter)
        return waiter

    def _join(self, request: JoinRequest, waiter: asyncio.Future) -> None:
        def fail(error: ErrorCode, member_id: str = request.member_id) -> None:
            _resolve(waiter, JoinResult(error, member_id=member_id))

        if not request.group_id:
            return fail(ErrorCode.invalid_group_id)
        owner = self.owner_error(request.group_id)
        if owner != ErrorCode.none:
            return fail(owner)
        settings = self.settings
        if not settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms:
            return fail(ErrorCode.invalid_session_timeout)
        unknown_member = request.member_id == ""
        group = self._groups.get(request.group_id)
        if group is None:
            if not unknown_member:
                return fail(ErrorCode.unknown_member_id)
            group = self._create_group(request.group_id)
        if not self._accepts_joining_member(group, request):
            log.info("group %s: member %r refused, group.max.size=%d reached",
                     group.group_id, request.member_id, settings.max_size)
            return fail(ErrorCode.group_max_size_reached)
        if unknown_member:
            self._join_new_member(group, request, waiter)
        else:
            self._join_known_member(group, request, waiter)

    def _accepts_joining_member(self, group: Group, request: JoinRequest) -> bool:
        """group.max.size: members already counted (a known member id, or a restarted
        static member's instance id) may always rejoin."""
        limit = self.settings.max_size
        member_id = request.member_id or group.static_members.get(request.group_instance_id or "", "")
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.awaiting_join_count < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group: Group, request: JoinRequest, waiter: asyncio.Future) -> None:
        if group.is_(DEAD):
            return _resolve(waiter, JoinResult(ErrorCode.coordinator_not_available))
        if not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
            return _resolve(waiter, JoinResult(ErrorCode.inconsistent_group_protocol))
        prefix = request.group_instance_id if request.group_instance_id is not None else request.client_id
        new_member_id = f"{prefix}-{uuid.uuid4()}"
        if request.group_instance_id is not None:
            old_member_id = group.static_members.get(request.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, old_member_id, new_member_id, request, waiter)
            return self._add_member_and_rebalance(group, new_member_id, request, waiter)
        if request.require_known_member_id:
            # KIP-394: hand out the id first; the member joins with it in a second request.
            group.pending_members.add(new_member_id)
            self._scheduler.call_later(
                request.session_timeout_ms, lambda: self._expire_pending_member(group, new_member_id)
            )
            return _resolve(waiter, JoinResult(ErrorCode.member_id_required, member_id=new_member_id))
        self._add_member_and_rebalance(group, new_member_id, request, waiter)

    def _join_known_member(self, group: Group, request: JoinRequest, waiter: asyncio.Future) -> None:
        member_id = request.member_id
        if group.is_(DEAD):
            return _resolve(waiter, JoinResult(ErrorCode.coordinator_not_available, member_id=member_id))
        if not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
            return _resolve(waiter, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, member_id, request, waiter)
        error = group.validate_member(member_id, request.group_instance_id)
        if error != ErrorCode.none:
            return _resolve(waiter, JoinResult(error, member_id=member_id))
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, waiter, "member rejoined during rebalance")
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # It lost the response to its join: answer again for the current generation.
                _resolve(waiter, self._join_result(group, member, with_members=group.leader_id == member_id))
            else:
                self._update_member_and_rebalance(group, member, request, waiter,
                                                  f"member {member_id} changed its metadata")
        elif group.is_(STABLE):
            if group.leader_id == member_id:
                # The leader rejoins to reassign (e.g. the topics' partitions changed).
                self._update_member_and_rebalance(group, member, request, waiter,
                                                  f"leader {member_id} rejoined")
            elif not member.matches(request.protocols):
                self._update_member_and_rebalance(group, member, request, waiter,
                                                  f"member {member_id} changed its metadata")
            else:
                _resolve(waiter, self._join_result(group, member, with_members=False))
        else:  # EMPTY: no members, validate_member already refused
            _resolve(waiter, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))

    def _join_result(self, group: Group, member: Member, *, with_members: bool, leader_id: str | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if with_members:
            members = tuple(JoinedMember(*entry) for entry in group.current_member_metadata())
        return JoinResult(
            ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(leader_id if leader_id is not None else group.leader_id) or "",
            skip_assignment=skip_assignment,
            members=members,
        )

    def _add_member_and_rebalance(self, group: Group, member_id: str, request: JoinRequest,
                                  waiter: asyncio.Future) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(request.protocols),
            join_waiter=waiter,
            is_new=True,
        )
        group.add_member(member)
        if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        # A new member must see its rebalance complete within this time, or it is dropped.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}"
                                      + (f" with instance id {member.group_instance_id}" if member.is_static else ""))
        self._try_complete_join(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, request: JoinRequest,
                                     waiter: asyncio.Future, reason: str) -> None:
        self._update_member(member, request, waiter)
        self._maybe_prepare_rebalance(group, reason)
        self._try_complete_join(group)

    def _update_member(self, member: Member, request: JoinRequest, waiter: asyncio.Future) -> None:
        member.protocols = tuple(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # An earlier JoinGroup of the same member is still open: the newer one takes over.
            _resolve(member.join_waiter, JoinResult(ErrorCode.rebalance_in_progress, member_id=member.member_id))
        member.join_waiter = waiter

    def _replace_static_member(self, group: Group, old_member_id: str, new_member_id: str,
                               request: JoinRequest, waiter: asyncio.Future) -> None:
        """A known group.instance.id joins with no member id (it restarted): it takes over
        its old place under a new id, fencing the old id. In a Stable group with
        unchanged protocol metadata it keeps its assignment without a rebalance."""
        member = group.members[old_member_id]
        old_leader_id = group.leader_id
        old_protocols = member.protocols
        old_protocol_name = group.protocol_name
        # Whatever the old incarnation still waits for is fenced.
        _resolve(member.join_waiter, JoinResult(ErrorCode.fenced_instance_id, member_id=old_member_id))
        _resolve(member.sync_waiter, SyncResult(ErrorCode.fenced_instance_id))
        member.join_waiter = member.sync_waiter = None
        assert request.group_instance_id is not None  # a static member
        group.replace_static_member(request.group_instance_id, old_member_id, new_member_id)
        self._update_member(member, request, waiter)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        log.info("group %s: static member %s rejoined as %s (was %s)",
                 group.group_id, request.group_instance_id, new_member_id, old_member_id)
        if group.is_(STABLE):
            if group.select_protocol() == old_protocol_name and member.matches(old_protocols):
                self._complete_static_rejoin(group, member, old_member_id, old_leader_id, request)
            else:
                self._prepare_rebalance(group, f"static member {request.group_instance_id} rejoined "
                                               "with changed protocol metadata")
        elif group.is_(COMPLETING_REBALANCE):
            # The leader may already be assigning with the old member id: start over.
            self._prepare_rebalance(group, f"static member {request.group_instance_id} rejoined "
                                           "while the group was completing a rebalance")
        else:  # PREPARING_REBALANCE: it simply counts as joined
            self._try_complete_join(group)

    def _complete_static_rejoin(self, group: Group, member: Member, old_member_id: str,
                                old_leader_id: str | None, request: JoinRequest) -> None:
        """Persist the new member id and answer the join at once, without a rebalance."""
        try:
            self._persist_group(group)
        except WRITE_ERRORS as error:
            # Undo: the old id stays valid, the new one never existed.
            log.warning("group %s: could not store static member rejoin: %s", group.group_id, error)
            waiter, member.join_waiter = member.join_waiter, None
            assert request.group_instance_id is not None  # a static member
            group.replace_static_member(request.group_instance_id, member.member_id, old_member_id)
            _resolve(waiter, JoinResult(_storage_error(error), member_id=""))
            return
        waiter, member.join_waiter = member.join_waiter, None
        member.is_new = False
        is_leader = group.leader_id == member.member_id
        if is_leader and request.supports_skip_assignment:
            # KIP-814: the leader learns the members' metadata but must not reassign.
            result = self._join_result(group, member, with_members=True, skip_assignment=True)
        else:
            # Older clients: report the old leader id so that the rejoined member, whose new
            # id does not match it, does not compute an assignment a Stable group would drop.
            leader = old_member_id if is_leader else (old_leader_id or "")
            result = self._join_result(group, member, with_members=False, leader_id=leader)
        _resolve(waiter, result)

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.debug("group %s: pending member %s did not join within its session timeout",
                      group.group_id, member_id)
            self._try_complete_join(group)

    # ---- rebalancing ---------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel_group_timers(group)
        group.pending_sync_members.clear()
        if group.is_(EMPTY):
            # The first rebalance of an empty group waits for more members to arrive.
            delay = self.settings.initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms - delay, 0)
            group.initial_join_in_progress = True
            group.new_member_added = False
            group.join_timer = self._scheduler.call_later(
                delay, lambda: self._initial_join_delay_expired(group, remaining)
            )
        else:
            group.join_timer = self._scheduler.call_later(
                group.max_rebalance_timeout_ms, lambda: self._complete_join(group)
            )
        previous = group.state
        group.transition_to(PREPARING_REBALANCE, self._now())
        log.info("group %s: preparing to rebalance in state %s with old generation %d (reason: %s)",
                 group.group_id, previous.value, group.generation_id, reason)
        self._try_complete_join(group)  # e.g. the last member left: nobody to wait for

    def _initial_join_delay_expired(self, group: Group, remaining_ms: int) -> None:
        if not group.is_(PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.settings.initial_rebalance_delay_ms, remaining_ms)
            left = max(remaining_ms - delay, 0)
            group.join_timer = self._scheduler.call_later(
                delay, lambda: self._initial_join_delay_expired(group, left)
            )
            return
        group.initial_join_in_progress = False
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.is_(PREPARING_REBALANCE) and not group.initial_join_in_progress and group.has_all_members_joined:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation,
        answer every waiting JoinGroup (the leader gets the members' metadata)."""
        if not group.is_(PREPARING_REBALANCE):
            return
        self._cancel_group_timers(group)
        group.initial_join_in_progress = False
        for member in group.not_yet_rejoined():
            if not member.is_static:  # static members keep their place until their session expires
                log.info("group %s: removing member %s, which did not rejoin within the rebalance timeout",
                         group.group_id, member.member_id)
                self._remove_member(group, member)
        if group.members and not group.elect_joined_leader():
            # Only absent static members are left: wait for them, or for their sessions to end.
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            group.join_timer = self._scheduler.call_later(
                group.max_rebalance_timeout_ms, lambda: self._complete_join(group)
            )
            return
        now = self._now()
        group.init_next_generation(now)
        if group.is_(EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._try_persist_group(group)
            return
        log.info("group %s: stabilizing generation %d (protocol %s, leader %s, %d member(s))",
                 group.group_id, group.generation_id, group.protocol_name, group.leader_id, len(group.members))
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            _resolve(waiter, self._join_result(group, member, with_members=group.leader_id == member.member_id))
            member.is_new = False
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        # Members that do not come back with SyncGroup within the rebalance timeout are dropped.
        group.pending_sync_members = set(group.members)
        generation = group.generation_id
        group.sync_timer = self._scheduler.call_later(
            group.max_rebalance_timeout_ms, lambda: self._expire_pending_sync(group, generation)
        )

    def _expire_pending_sync(self, group: Group, generation: int) -> None:
        if group.generation_id != generation or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync_members:
            return
        missing = sorted(group.pending_sync_members)
        log.info("group %s: removing %s, which did not send SyncGroup within the rebalance timeout",
                 group.group_id, ", ".join(missing))
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member)
        self._prepare_rebalance(group, f"members {missing} did not sync")
        self._try_complete_join(group)

    def _cancel_group_timers(self, group: Group) -> None:
        for timer in (group.join_timer, group.sync_timer):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                waiter, member.sync_waiter = member.sync_waiter, None
                _resolve(waiter, SyncResult(
                    error,
                    assignment=member.assignment if error == ErrorCode.none else b"",
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                ))
                self._schedule_heartbeat(group, member, member.session_timeout_ms)

    # ---- members leaving -----------------------------------------------------------------

    def _remove_member(self, group: Group, member: Member) -> None:
        """Take a member out; whatever it waits for is answered UNKNOWN_MEMBER_ID."""
        group.remove_member(member.member_id)
        self._release_member(member, ErrorCode.unknown_member_id)

    @staticmethod
    def _release_member(member: Member, error: ErrorCode) -> None:
        """Stop the member's session timer and answer whatever it waits for with `error`."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        _resolve(member.join_waiter, JoinResult(error, member_id=member.member_id))
        _resolve(member.sync_waiter, SyncResult(error))
        member.join_waiter = member.sync_waiter = None

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self._scheduler.call_later(
            timeout_ms, lambda: self._heartbeat_expired(group, member)
        )

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return  # already gone
        member.heartbeat_timer = None
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # waiting on the coordinator is as good as a heartbeat; rescheduled when answered
        log.info("group %s: member %s has failed, removing it (session timeout %d ms%s)",
                 group.group_id, member.member_id, member.session_timeout_ms,
                 ", never completed its first join" if member.is_new else "")
        self._remove_member_and_update_group(group, member,
                                             f"removing member {member.member_id} on heartbeat expiration")

    # ---- SyncGroup -----------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Mapping[str, bytes]) -> asyncio.Future:
        """Returns a future of SyncResult: followers wait until the leader's assignment is stored."""
        waiter = asyncio.get_running_loop().create_future()
        self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                   assignments, waiter)
        return waiter

    def _sync(self, group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
              assignments, waiter) -> None:
        def fail(error: ErrorCode) -> None:
            _resolve(waiter, SyncResult(error))

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return fail(owner)
        group = self._groups.get(group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        if group.is_(DEAD):
            return fail(ErrorCode.coordinator_not_available)
        error = group.validate_member(member_id, group_instance_id)
        if error != ErrorCode.none:
            return fail(error)
        if generation_id != group.generation_id:
            return fail(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return fail(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_(EMPTY):
            return fail(ErrorCode.unknown_member_id)
        if group.is_(PREPARING_REBALANCE):
            return fail(ErrorCode.rebalance_in_progress)
        self._synced(group, member_id)
        if group.is_(STABLE):
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return _resolve(waiter, SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            ))
        # COMPLETING_REBALANCE: wait for the leader's assignment.
        if member.sync_waiter is not None:
            _resolve(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            self._store_assignment(group, dict(assignments))

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _store_assignment(self, group: Group, assignments: dict[str, bytes]) -> None:
        missing = [member_id for member_id in group.members if member_id not in assignments]
        if missing:
            log.warning("group %s: leader sent no assignment for %s; they get an empty one",
                        group.group_id, ", ".join(missing))
        assignment = {member_id: assignments.get(member_id, b"") for member_id in group.members}
        try:
            self._persist_group(group, assignment)
        except WRITE_ERRORS as error:
            log.error("group %s: storing the assignment of generation %d failed: %s",
                      group.group_id, group.generation_id, error)
            self._reset_and_propagate_assignment_error(group, _storage_error(error))
            self._maybe_prepare_rebalance(group, "storing the assignment failed")
            return
        for member_id, member in group.members.items():
            member.assignment = assignment[member_id]
        self._propagate_assignment(group, ErrorCode.none)
        group.transition_to(STABLE, self._now())
        log.info("group %s: generation %d is stable", group.group_id, group.generation_id)

    # ---- Heartbeat -----------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return owner
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_(PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---- LeaveGroup ----------------------------------------------------------------------

    def leave_group(self, group_id: str, leaving: Iterable[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group-level error, one error per (member id, group instance id) leaving)."""
        leaving = list(leaving)
        if not group_id:
            return ErrorCode.invalid_group_id, []
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available, []
        return ErrorCode.none, [self._leave(group, member_id, instance_id) for member_id, instance_id in leaving]

    def _leave(self, group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            existing = group.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if member_id and existing != member_id:
                return ErrorCode.fenced_instance_id
            member_id = existing
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on LeaveGroup")
        return ErrorCode.none

    # ---- OffsetCommit / TxnOffsetCommit --------------------------------------------------

    def _validate_offset_commit(self, group: Group, generation_id: int, member_id: str,
                                group_instance_id: str | None, *, transactional: bool) -> ErrorCode:
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(EMPTY):
            return ErrorCode.none  # an admin client, or a consumer not using group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error != ErrorCode.none:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if not transactional and not group.is_(EMPTY):
            # Only members may commit for a group with members. Transactional commits are
            # exempt: TxnOffsetCommit v0-v2 carries no member id or generation.
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _offset_records(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[Record]:
        return [
            Record(
                records.encode_offset_commit_key(OffsetCommitKey(group_id, topic, partition)),
                records.encode_offset_commit_value(OffsetCommitValue(
                    value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                    value.expire_timestamp_ms,
                )),
            )
            for (topic, partition), value in offsets.items()
        ]

    def _stamp(self, offsets: Mapping[TopicPartition, CommitOffset], retention_ms: int = -1
               ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets as stored: commit time now; an explicit retention (OffsetCommit
        v2-v4) fixes the expiry time, as in Kafka, instead of offsets.retention.minutes."""
        now = self._now()
        # -1 is "no retention given"; any other value counts, a negative one expires at once.
        expire_timestamp_ms = -1 if retention_ms == -1 else max(0, now + retention_ms)
        return {
            tp: OffsetAndMetadata(commit.offset, commit.leader_epoch, commit.metadata or "", now, expire_timestamp_ms)
            for tp, commit in offsets.items()
        }

    def _metadata_errors(self, offsets: Mapping[TopicPartition, CommitOffset]) -> dict[TopicPartition, ErrorCode]:
        limit = self.settings.offset_metadata_max_bytes
        return {
            tp: ErrorCode.offset_metadata_too_large
            for tp, commit in offsets.items()
            if commit.metadata is not None and len(commit.metadata.encode()) > limit
        }

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, CommitOffset], *, retention_ms: int = -1
                       ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: an error code per partition. A member of a group that does not
        exist gets GROUP_ID_NOT_FOUND (the handler answers ILLEGAL_GENERATION below v9, as
        Kafka does). `retention_ms` other than -1: the offsets expire that long after now."""
        def all_fail(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, error)

        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return all_fail(owner)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # The group is gone or never existed: the request is from an old generation.
                return all_fail(ErrorCode.group_id_not_found)
            group = self._create_group(group_id)  # a "simple" consumer storing offsets only
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                             transactional=False)
        if error != ErrorCode.none:
            return all_fail(error)
        if group.is_(COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            return all_fail(ErrorCode.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        results = self._metadata_errors(offsets)
        accepted = self._stamp({tp: commit for tp, commit in offsets.items() if tp not in results}, retention_ms)
        if accepted:
            try:
                base_offset = self._offsets_topic.append(
                    self.partition_for_group(group_id), self._offset_records(group_id, accepted), now_ms=self._now()
                )
            except WRITE_ERRORS as write_error:
                log.error("group %s: storing offsets failed: %s", group_id, write_error)
                results.update(dict.fromkeys(accepted, _storage_error(write_error)))
                return results
            for tp, value in accepted.items():
                group.apply_offset_commit(tp, CommittedOffset(value, base_offset))
                results[tp] = ErrorCode.none
        return {tp: results[tp] for tp in offsets}

    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                          generation_id: int, group_instance_id: str | None,
                          offsets: Mapping[TopicPartition, CommitOffset]) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: append the offsets as one transactional batch of the producer;
        they stay pending (invisible to OffsetFetch) until `complete_transaction`. The
        caller has verified that the transaction is open and holds the group's partition."""
        def all_fail(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, error)

        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return all_fail(owner)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A consumer of a generation the group no longer has (Kafka 4's coordinator;
                # the older one created the group and answered UNKNOWN_MEMBER_ID).
                return all_fail(ErrorCode.illegal_generation)
            group = self._create_group(group_id)  # a producer committing for a simple group
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                             transactional=True)
        if error != ErrorCode.none:
            return all_fail(error)
        partition = self.partition_for_group(group_id)
        self._offsets_topic.ensure()
        known_epoch = self._offsets_topic.producer_epoch(partition, producer_id)
        if known_epoch is not None and producer_epoch < known_epoch:
            return all_fail(ErrorCode.invalid_producer_epoch)
        results = self._metadata_errors(offsets)
        accepted = self._stamp({tp: commit for tp, commit in offsets.items() if tp not in results})
        if accepted:
            try:
                base_offset = self._offsets_topic.append(
                    partition, self._offset_records(group_id, accepted), now_ms=self._now(),
                    producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
                )
            except WRITE_ERRORS as write_error:
                log.error("group %s: storing transactional offsets of producer %d failed: %s",
                          group_id, producer_id, write_error)
                results.update(dict.fromkeys(accepted, _storage_error(write_error)))
                return {tp: results[tp] for tp in offsets}
            group.add_pending_txn_offsets(
                producer_id, {tp: CommittedOffset(value, base_offset) for tp, value in accepted.items()}
            )
            self._open_groups_by_producer.setdefault(producer_id, set()).add(group_id)
            results.update(dict.fromkeys(accepted, ErrorCode.none))
        return {tp: results[tp] for tp in offsets}

    def complete_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        """The transaction coordinator wrote a COMMIT (or ABORT) marker for `producer_id`
        to `__consumer_offsets` partition `offsets_partition`: the producer's pending
        offsets of the groups in that partition become committed (or are dropped)."""
        open_groups = self._open_groups_by_producer.get(producer_id)
        if not open_groups:
            return
        for group_id in sorted(open_groups):
            if self.partition_for_group(group_id) != offsets_partition:
                continue
            open_groups.discard(group_id)
            group = self._groups.get(group_id)
            if group is None:
                continue
            count = group.complete_pending_txn_offsets(producer_id, committed)
            log.debug("group %s: %s %d transactional offset(s) of producer %d", group_id,
                      "committed" if committed else "aborted", count, producer_id)
        if not open_groups:
            del self._open_groups_by_producer[producer_id]

    # ---- OffsetFetch ---------------------------------------------------------------------

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool
                      ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """Committed offsets of `partitions` (None: every partition with an offset).
        With `require_stable`, a partition with pending transactional offsets answers
        UNSTABLE_OFFSET_COMMIT, so the consumer retries once the transaction ends."""
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.none, dict.fromkeys(partitions or (), NO_OFFSET)
        wanted = list(group.offsets) if partitions is None else partitions
        result = {}
        for tp in wanted:
            if require_stable and group.has_pending_offsets(tp):
                result[tp] = UNSTABLE_OFFSET
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                result[tp] = NO_OFFSET
            else:
                value = committed.value
                result[tp] = FetchedOffset(value.offset, value.leader_epoch, value.metadata, ErrorCode.none)
        return ErrorCode.none, result

    # ---- OffsetDelete / DeleteGroups -----------------------------------------------------

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.group_id_not_found, {}
        if group.is_(EMPTY):
            deletable = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            deletable = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
        else:
            return ErrorCode.non_empty_group, {}
        results = {tp: ErrorCode.group_subscribed_to_topic for tp in partitions if tp not in deletable}
        to_remove = [tp for tp in deletable if tp in group.offsets or group.has_pending_offsets(tp)]
        if to_remove:
            try:
                self._write_offset_tombstones(group, to_remove)
            except WRITE_ERRORS as error:
                return _storage_error(error), {}
            group.remove_offsets(to_remove)
        results.update(dict.fromkeys(deletable, ErrorCode.none))
        return ErrorCode.none, {tp: results[tp] for tp in partitions}

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self._groups.get(group_id)
            owner = self.owner_error(group_id)
            if owner != ErrorCode.none:
                results[group_id] = owner
            elif group is None or group.is_(DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_(EMPTY):
                results[group_id] = ErrorCode.non_empty_group
            else:
                try:
                    self._remove_group(group)
                except WRITE_ERRORS as error:
                    results[group_id] = _storage_error(error)
                    continue
                log.info("group %s deleted", group_id)
                results[group_id] = ErrorCode.none
        return results

    def _remove_group(self, group: Group) -> None:
        """Tombstone the group and its offsets, then forget it (state Dead)."""
        tombstones = [Record(self._offset_key(group.group_id, tp), None) for tp in self._all_offset_partitions(group)]
        tombstones.append(Record(records.encode_group_metadata_key(GroupMetadataKey(group.group_id)), None))
        self._offsets_topic.append(self.partition_for_group(group.group_id), tombstones, now_ms=self._now())
        self._cancel_group_timers(group)
        group.transition_to(DEAD, self._now())
        group.offsets.clear()
        group.pending_txn_offsets.clear()
        del self._groups[group.group_id]

    @staticmethod
    def _offset_key(group_id: str, tp: TopicPartition) -> bytes:
        return records.encode_offset_commit_key(OffsetCommitKey(group_id, tp[0], tp[1]))

    @staticmethod
    def _all_offset_partitions(group: Group) -> list[TopicPartition]:
        partitions = set(group.offsets)
        for pending in group.pending_txn_offsets.values():
            partitions |= set(pending)
        return sorted(partitions)

    def _write_offset_tombstones(self, group: Group, partitions: list[TopicPartition]) -> None:
        self._offsets_topic.append(
            self.partition_for_group(group.group_id),
            [Record(self._offset_key(group.group_id, tp), None) for tp in partitions],
            now_ms=self._now(),
        )

    # ---- DescribeGroups / ListGroups -----------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary | None]:
        """(NONE, None) when the group does not exist (Kafka reports it as Dead);
        (NOT_COORDINATOR, None) for a group coordinated elsewhere."""
        owner = self.owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, None
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD):
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

    def list_groups(self, states: Iterable[str] = ()) -> list[ListedGroup]:
        """The groups this broker coordinates (only those of the partitions it leads)."""
        wanted = {state.lower() for state in states}
        return [
            ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if not group.is_(DEAD) and (not wanted or group.state.value.lower() in wanted)
        ]

    # ---- persistence ---------------------------------------------------------------------

    def _persist_group(self, group: Group, assignment: Mapping[str, bytes] | None = None) -> None:
        """Append the group's GroupMetadata record (members with their assignment)."""
        members = tuple(
            MemberMetadataValue(
                member.member_id, member.group_instance_id, member.client_id, member.client_host,
                member.rebalance_timeout_ms, member.session_timeout_ms,
                member.metadata_for(group.protocol_name),
                assignment.get(member.member_id, b"") if assignment is not None else member.assignment,
            )
            for member in group.members.values()
        )
        value = GroupMetadataValue(
            group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
            group.current_state_timestamp_ms, members,
        )
        self._offsets_topic.append(
            self.partition_for_group(group.group_id),
            [Record(records.encode_group_metadata_key(GroupMetadataKey(group.group_id)),
                    records.encode_group_metadata_value(value))],
            now_ms=self._now(),
        )

    def _try_persist_group(self, group: Group) -> None:
        try:
            self._persist_group(group)
        except WRITE_ERRORS as error:
            log.error("group %s: storing group metadata failed: %s", group.group_id, error)

    def load(self) -> None:
        """Standalone: rebuild groups, committed and pending offsets from every
        `__consumer_offsets` partition: later records win, tombstones delete,
        transactional offsets stay pending until their producer's COMMIT/ABORT marker."""
        if not self._offsets_topic.exists:
            return
        loaded_groups = loaded_offsets = 0
        for partition in range(self._offsets_topic.partition_count):
            groups, offsets = self._load_partition(partition)
            loaded_groups += groups
            loaded_offsets += offsets
        if loaded_groups or loaded_offsets:
            log.info("loaded %d group(s) and %d committed offset(s) from __consumer_offsets",
                     loaded_groups, loaded_offsets)

    def on_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        """Cluster mode: this broker became leader of a `__consumer_offsets` partition
        (load its groups from the log) or stopped leading it (drop them)."""
        self._unload_partition(partition)
        if leader:
            self._offsets_topic.take(partition, leader_epoch)
            groups, offsets = self._load_partition(partition)
            if groups:
                log.info("%s-%d: leader at epoch %d; loaded %d group(s) and %d committed offset(s)",
                         CONSUMER_OFFSETS, partition, leader_epoch, groups, offsets)

    def _unload_partition(self, partition: int) -> None:
        """Kafka's onResignation: the partition's groups go (Dead here), their timers
        stop, waiting JoinGroup/SyncGroup requests are answered NOT_COORDINATOR (their
        members find the new coordinator), pending transactional offsets are dropped
        (the new coordinator loads them from the log)."""
        if not self._offsets_topic.release(partition):
            return
        dropped = [group for group in self._groups.values() if self.partition_for_group(group.group_id) == partition]
        for group in dropped:
            self._cancel_group_timers(group)
            for member in group.members.values():
                self._release_member(member, ErrorCode.not_coordinator)
            # Dead: a timer or callback still holding the group finds nothing to do.
            group.transition_to(DEAD, self._now())
            del self._groups[group.group_id]
        dropped_ids = {group.group_id for group in dropped}
        for producer_id, open_groups in list(self._open_groups_by_producer.items()):
            open_groups.difference_update(dropped_ids)
            if not open_groups:
                del self._open_groups_by_producer[producer_id]
        if dropped:
            log.info("%s-%d: no longer its leader; dropped %d group(s)", CONSUMER_OFFSETS, partition, len(dropped))

    def _load_partition(self, partition: int) -> tuple[int, int]:
        metadata: dict[str, GroupMetadataValue | None] = {}
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        for batch in self._offsets_topic.read(partition):
            header = batch.header
            if header.is_control:
                producer_pending = pending.pop(header.producer_id, {})
                if batch.control_type is ControlType.COMMIT:
                    for group_id, group_offsets in producer_pending.items():
                        committed = offsets.setdefault(group_id, {})
                        for tp, offset in group_offsets.items():
                            current = committed.get(tp)
                            if current is None or current.record_offset <= offset.record_offset:
                                committed[tp] = offset
                continue
            for record in batch.records:
                try:
                    key = records.decode_key(record.key or b"")
                    if isinstance(key, OffsetCommitKey):
                        tp = (key.topic, key.partition)
                        if header.is_transactional:
                            target = pending.setdefault(header.producer_id, {}).setdefault(key.group, {})
                        else:
                            target = offsets.setdefault(key.group, {})
                        if record.value is None:
                            target.pop(tp, None)
                        else:
                            value = records.decode_offset_commit_value(record.value)
                            target[tp] = CommittedOffset(
                                OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata,
                                                  value.commit_timestamp_ms, value.expire_timestamp_ms),
                                header.base_offset,
                            )
                    elif isinstance(key, GroupMetadataKey):
                        metadata[key.group] = (
                            None if record.value is None else records.decode_group_metadata_value(record.value)
                        )
                        if record.value is None:
                            offsets.pop(key.group, None)
                            for producer_groups in pending.values():
                                producer_groups.pop(key.group, None)
                except RecordFormatError as error:
                    log.error("__consumer_offsets-%d offset %d: skipping undecodable record: %s",
                              partition, record.offset, error)
        group_ids = {g for g, value in metadata.items() if value is not None} | {g for g, o in offsets.items() if o}
        for producer_groups in pending.values():
            group_ids |= {g for g, o in producer_groups.items() if o}
        offset_count = 0
        for group_id in group_ids:
            group = self._restore_group(group_id, metadata.get(group_id))
            for tp, offset in offsets.get(group_id, {}).items():
                group.offsets[tp] = offset
                offset_count += 1
        for producer_id, producer_groups in pending.items():
            for group_id, group_offsets in producer_groups.items():
                if group_offsets:
                    self._groups[group_id].add_pending_txn_offsets(producer_id, group_offsets)
                    self._open_groups_by_producer.setdefault(producer_id, set()).add(group_id)
        return len(group_ids), offset_count

    def _restore_group(self, group_id: str, value: GroupMetadataValue | None) -> Group:
        now = self._now()
        if value is None:
            group = Group(group_id, current_state_timestamp_ms=now)
            self._groups[group_id] = group
            return group
        group = Group(
            group_id,
            state=STABLE if value.members else EMPTY,
            current_state_timestamp_ms=(
                value.current_state_timestamp_ms if value.current_state_timestamp_ms >= 0 else now
            ),
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
        )
        for stored in value.members:
            group.add_member(Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                session_timeout_ms=stored.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", stored.subscription),),
                assignment=stored.assignment,
            ))
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        group.subscribed_topics = group.compute_subscribed_topics()
        self._groups[group_id] = group
        # Members must heartbeat again within their session timeout, or they are removed.
        for member in group.members.values():
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        return group

    # ---- offset expiration ---------------------------------------------------------------

    def _schedule_offset_expiration(self) -> None:
        self._expiration_timer = self._scheduler.call_later(
            self.settings.offsets_retention_check_interval_ms, self._expiration_tick
        )

    def _expiration_tick(self) -> None:
        try:
            self.expire_offsets()
        finally:
            self._schedule_offset_expiration()

    def expire_offsets(self) -> int:
        """Kafka's offsets.retention.minutes (KIP-211): an empty group's offsets expire that
        long after the group became empty (or after the commit, if later); a consumer
        group's offsets of topics it no longer subscribes to, that long after the commit.
        An empty group left with no offsets is deleted. Returns how many offsets expired."""
        now = self._now()
        retention = self.settings.offsets_retention_ms
        expired_total = 0
        for group in list(self._groups.values()):
            expired = self._expired_offsets(group, now, retention)
            try:
                if expired:
                    self._write_offset_tombstones(group, expired)
                    group.remove_offsets(expired)
                    expired_total += len(expired)
                    log.info("group %s: %d offset(s) expired", group.group_id, len(expired))
                if group.is_(EMPTY) and not group.has_offsets and not group.pending_members:
                    self._remove_group(group)
                    log.info("group %s: empty with no offsets, removed", group.group_id)
            except WRITE_ERRORS as error:
                log.error("group %s: offset expiration failed: %s", group.group_id, error)
        return expired_total

    def _expired_offsets(self, group: Group, now: int, retention: int) -> list[TopicPartition]:
        def expired(tp: TopicPartition, committed: CommittedOffset, base: Callable[[CommittedOffset], int]) -> bool:
            if group.has_pending_offsets(tp):
                return False
            value = committed.value
            if value.expire_timestamp_ms >= 0:
                return now >= value.expire_timestamp_ms
            return now - base(committed) >= retention

        if group.is_(EMPTY):
            def since(committed: CommittedOffset) -> int:
                return max(group.current_state_timestamp_ms, committed.value.commit_timestamp_ms)
            return [tp for tp, c in group.offsets.items() if expired(tp, c, since)]
        if group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics is not None:
            return [
                tp for tp, c in group.offsets.items()
                if tp[0] not in group.subscribed_topics
                and expired(tp, c, lambda committed: committed.value.commit_timestamp_ms)
            ]
        return []


def _storage_error(error: Exception) -> ErrorCode:
    """Kafka's mapping of append failures on `__consumer_offsets` for clients: this
    broker no longer leads the partition (NOT_COORDINATOR), its ISR is too small or the
    partition is missing (COORDINATOR_NOT_AVAILABLE), a batch too large."""
    if isinstance(error, (RecordTooLargeError, RecordBatchTooLargeError)):
        return ErrorCode.invalid_commit_offset_size
    if isinstance(error, (AppendRefused, LookupError)):
        return append_failure(error)
    return ErrorCode.coordinator_not_available

