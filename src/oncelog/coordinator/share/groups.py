"""Share group membership (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, and the
share groups ListGroups lists.

A share group is coordinated by the broker that coordinates any group of its name (the
leader of its `__consumer_offsets` partition); its id cannot be a classic or consumer
group's at the same time. Members join with epoch 0 and the topics they subscribe to,
heartbeat with the epoch they were last given, and leave with -1. There is no
revocation: records, not partitions, are what members hold (the share partitions' locks,
manager.py), so every heartbeat answers the member's current assignment when it
changed, and the group's epoch moves whenever a member comes or goes, a subscription
changes or a subscribed topic gains partitions.

The assignment is Kafka's SimpleAssignor's shape: per topic, its partitions are dealt
round-robin over the members subscribed to it when there are at least as many
partitions as members; with more members than partitions, member i gets partition
i mod P, so every partition is consumed and a partition is shared by several members.

Membership is kept in memory: after the coordinator moves (a restart, a new leader of
the group's `__consumer_offsets` partition) members get UNKNOWN_MEMBER_ID and join
again, which Kafka's share consumer does by itself. What is consumed survives in the
share partitions' state (`__share_group_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from oncelog.coordinator.group.scheduler import Cancellable, Scheduler
from oncelog.protocol.messages import ErrorCode

STABLE, EMPTY = "Stable", "Empty"
SHARE = "share"  # the group type and protocol type ListGroups gives share groups
LEAVE_EPOCH = -1
SIMPLE_ASSIGNOR = "simple"


class PartitionCounts(Protocol):
    def partition_count(self, topic: str) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ShareTimings:
    session_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[str, tuple[int, ...]] | None = None  # topic -> partitions, None: unchanged


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    epoch: int = 0  # the epoch last answered to the member
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)
    timer: Cancellable | None = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    shape: tuple = ()  # what the assignment was computed from

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


def assign(members: Mapping[str, tuple[str, ...]], counts: Mapping[str, int]) -> dict[str, dict[str, tuple[int, ...]]]:
    """member -> topic -> partitions, for members subscribed to `members[m]` and topics
    with `counts[t]` partitions."""
    result: dict[str, dict[str, list[int]]] = {member: {} for member in members}
    for topic in sorted(counts):
        subscribers = sorted(member for member, topics in members.items() if topic in topics)
        count = counts[topic]
        if not subscribers or count <= 0:
            continue
        if count >= len(subscribers):
            for partition in range(count):
                result[subscribers[partition % len(subscribers)]].setdefault(topic, []).append(partition)
        else:
            for index, member in enumerate(subscribers):
                result[member].setdefault(topic, []).append(index % count)
    return {member: {topic: tuple(parts) for topic, parts in topics.items()} for member, topics in result.items()}


class ShareGroups:
    def __init__(self, topics: PartitionCounts, scheduler: Scheduler, *, timings: Callable[[str], ShareTimings],
                 max_size: Callable[[], int], owner_error: Callable[[str], ErrorCode],
                 other_group: Callable[[str], bool]) -> None:
        """`owner_error`: NOT_COORDINATOR for a group coordinated elsewhere;
        `other_group`: whether a classic or consumer group has the id."""
        self._topics = topics
        self._scheduler = scheduler
        self._timings = timings
        self._max_size = max_size
        self._owner_error = owner_error
        self._other_group = other_group
        self._groups: dict[str, ShareGroup] = {}

    # ---- lookups ---------------------------------------------------------------------------

    def group(self, group_id: str) -> ShareGroup | None:
        return self._groups.get(group_id)

    def is_share_group(self, group_id: str) -> bool:
        """Whether a share group with members, or one emptied but not deleted, has the id."""
        return group_id in self._groups

    def groups(self) -> list[ShareGroup]:
        """The share groups coordinated here."""
        return [group for group_id, group in sorted(self._groups.items())
                if self._owner_error(group_id) is ErrorCode.none]

    # ---- ShareGroupHeartbeat ---------------------------------------------------------------

    def heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatResult:
        if not request.group_id:
            return ShareHeartbeatResult(ErrorCode.invalid_group_id, "GroupId can't be empty.")
        if not request.member_id:
            return ShareHeartbeatResult(ErrorCode.invalid_request, "MemberId can't be empty.")
        if request.member_epoch < LEAVE_EPOCH:
            return ShareHeartbeatResult(ErrorCode.invalid_request, "MemberEpoch is invalid.")
        if request.member_epoch == 0 and not request.subscribed_topic_names:
            return ShareHeartbeatResult(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
        owner = self._owner_error(request.group_id)
        if owner is not ErrorCode.none:
            return ShareHeartbeatResult(owner)
        if self._other_group(request.group_id):
            return ShareHeartbeatResult(ErrorCode.group_id_not_found,
                                        f"Group {request.group_id} is not a share group.")
        timings = self._timings(request.group_id)
        group = self._groups.get(request.group_id)
        if request.member_epoch == LEAVE_EPOCH:
            if group is not None and request.member_id in group.members:
                self._remove(group, request.member_id)
            return ShareHeartbeatResult(ErrorCode.none, member_id=request.member_id, member_epoch=LEAVE_EPOCH,
                                        heartbeat_interval_ms=timings.heartbeat_interval_ms)
        found = self._join(request) if request.member_epoch == 0 else self._known(group, request)
        if isinstance(found, ShareHeartbeatResult):
            return found
        group, member = found
        if request.subscribed_topic_names is not None:
            member.subscribed = tuple(sorted(set(request.subscribed_topic_names)))
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        self._reassign(group)
        self._schedule_expiry(group, member, timings.session_timeout_ms)
        changed = member.epoch != group.epoch
        member.epoch = group.epoch
        return ShareHeartbeatResult(
            ErrorCode.none, member_id=member.member_id, member_epoch=member.epoch,
            heartbeat_interval_ms=timings.heartbeat_interval_ms,
            assignment=dict(member.assignment) if changed else None)

    def _join(self, request: ShareHeartbeat) -> tuple[ShareGroup, ShareMember] | ShareHeartbeatResult:
        """A member joining (epoch 0), new or again: it is answered in full."""
        group = self._groups.get(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        if member is None:
            if group is not None and len(group.members) >= self._max_size():
                return ShareHeartbeatResult(ErrorCode.group_max_size_reached,
                                            f"The share group has reached its maximum capacity of "
                                            f"{self._max_size()} members.")
            if group is None:
                group = self._groups[request.group_id] = ShareGroup(request.group_id)
            member = group.members[request.member_id] = ShareMember(
                request.member_id, request.client_id, request.client_host, request.rack_id, ())
        assert group is not None
        member.epoch = 0
        return group, member

    @staticmethod
    def _known(group: ShareGroup | None, request: ShareHeartbeat
               ) -> tuple[ShareGroup, ShareMember] | ShareHeartbeatResult:
        """A member heartbeating with the epoch it was given."""
        member = None if group is None else group.members.get(request.member_id)
        if group is None or member is None:
            return ShareHeartbeatResult(ErrorCode.unknown_member_id,
                                        f"Member {request.member_id} is not a member of group {request.group_id}.")
        if request.member_epoch != member.epoch:
            return ShareHeartbeatResult(ErrorCode.fenced_member_epoch,
                                        f"The share group member has a smaller member epoch "
                                        f"({request.member_epoch}) than the one known by the group coordinator "
                                        f"({member.epoch}).")
        return group, member

    # ---- group changes ---------------------------------------------------------------------

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one (NON_EMPTY_GROUP)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self._groups[group_id]
        return ErrorCode.none

    def close(self) -> None:
        for group in self._groups.values():
            for member in group.members.values():
                if member.timer is not None:
                    member.timer.cancel()

    def _reassign(self, group: ShareGroup) -> None:
        subscriptions = {member.member_id: member.subscribed for member in group.members.values()}
        topics = sorted({topic for subscribed in subscriptions.values() for topic in subscribed})
        counts = {topic: count for topic in topics if (count := self._topics.partition_count(topic) or 0) > 0}
        shape = (tuple(sorted(subscriptions.items())), tuple(sorted(counts.items())))
        if shape == group.shape:
            return
        group.shape = shape
        group.epoch += 1
        group.assignment_epoch = group.epoch
        for member_id, assignment in assign(subscriptions, counts).items():
            group.members[member_id].assignment = assignment

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.timer is not None:
            member.timer.cancel()
        self._reassign(group)

    def _schedule_expiry(self, group: ShareGroup, member: ShareMember, timeout_ms: int) -> None:
        if member.timer is not None:
            member.timer.cancel()

        def expire() -> None:
            if group.members.get(member.member_id) is member:
                member.timer = None
                self._remove(group, member.member_id)

        member.timer = self._scheduler.call_later(timeout_ms, expire)
