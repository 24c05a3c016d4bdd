"""One group: a classic group's state machine, members and generation, and the
committed offsets of a group of either protocol (a consumer group's membership is in
`consumer_group.py`, reached through `Group.consumer`).

Kafka's classic group states and their valid previous states (`VALID_PREVIOUS_STATES`):

    Empty                 <- PreparingRebalance        (a rebalance ended with no members)
    PreparingRebalance    <- Empty, Stable, CompletingRebalance
    CompletingRebalance   <- PreparingRebalance        (everyone joined; waiting for the
                                                        leader's assignment in SyncGroup)
    Stable                <- CompletingRebalance       (assignment stored and handed out)
    Dead                  <- every state               (group deleted or expired)

`Group.transition_to` refuses anything else by raising: a refused transition is a bug in
the coordinator, never a protocol outcome. The group is plain data plus the rules that
only look at the group; the protocol steps (who gets which response, timers, writes to
`__consumer_offsets`) live in `GroupCoordinator`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from oncelog.coordinator.group.group_states import (
    CAN_REBALANCE as CAN_REBALANCE,
)
from oncelog.coordinator.group.group_states import (
    COMPLETING_REBALANCE as COMPLETING_REBALANCE,
)
from oncelog.coordinator.group.group_states import (
    DEAD as DEAD,
)
from oncelog.coordinator.group.group_states import (
    EMPTY as EMPTY,
)
from oncelog.coordinator.group.group_states import (
    PREPARING_REBALANCE as PREPARING_REBALANCE,
)
from oncelog.coordinator.group.group_states import (
    STABLE as STABLE,
)
from oncelog.coordinator.group.group_states import (
    VALID_PREVIOUS_STATES as VALID_PREVIOUS_STATES,
)
from oncelog.coordinator.group.group_states import (
    Cancellable as Cancellable,
)
from oncelog.coordinator.group.group_states import (
    GroupState as GroupState,
)
from oncelog.coordinator.group.group_states import (
    IllegalGroupTransition as IllegalGroupTransition,
)
from oncelog.names import TopicPartition

if TYPE_CHECKING:
    from oncelog.coordinator.group.consumer_group import ConsumerGroup


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """An offset commit and where its record sits in `__consumer_offsets`: when a
    transactional commit completes, the commit written later in the log wins (Kafka's
    CommitRecordMetadataAndOffset.olderThan)."""

    value: OffsetAndMetadata
    record_offset: int


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    # The JoinGroup / SyncGroup response this member is waiting for, if any.
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    # Joined during a rebalance and not yet part of a generation: may expire while waiting.
    is_new: bool = False
    heartbeat_timer: Cancellable | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = EMPTY
    current_state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # join order: the next leader is the oldest
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # KIP-394: given an id, not yet joined with it
    pending_sync_members: set[str] = field(default_factory=set)
    # A member joined during the initial rebalance delay: the delay is extended once more.
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None  # None: unknown (not a consumer group, or unparsable)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    # Timers of the rebalance in progress (join completion, sync expiry).
    join_timer: Cancellable | None = None
    sync_timer: Cancellable | None = None
    initial_join_in_progress: bool = False
    # Set when the group is a consumer group (KIP-848): its membership is there, and the
    # classic fields above stay unused (Empty, no members). Offsets stay here either way,
    # so a group keeps them when it converts between the protocols.
    consumer: ConsumerGroup | None = None

    @property
    def group_type(self) -> str:
        return "classic" if self.consumer is None else "consumer"

    @property
    def is_empty(self) -> bool:
        """No members, whatever the protocol (DeleteGroups, offset expiry)."""
        return self.state is EMPTY if self.consumer is None else self.consumer.is_empty

    @property
    def state_name(self) -> str:
        return self.state.value if self.consumer is None else self.consumer.state.value

    # ---- state machine -------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupTransition(self.group_id, self.state, target)
        self.state = target
        self.current_state_timestamp_ms = now_ms

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def can_rebalance(self) -> bool:
        return self.state in CAN_REBALANCE

    # ---- members -------------------------------------------------------------------------

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.pending_members.discard(member.member_id)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member rejoined without its member id: it keeps its place (and its
        assignment) under a new id. The caller fences whatever the old id waited for."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's ClassicGroup.validateMember: static members are checked by instance id."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
            return ErrorCode.none
        return ErrorCode.none if member_id in self.members else ErrorCode.unknown_member_id

    def not_yet_rejoined(self) -> list[Member]:
        return [member for member in self.members.values() if not member.awaiting_join]

    @property
    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(member.awaiting_join for member in self.members.values())

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for member in self.members.values() if member.awaiting_join)

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did. False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    @property
    def max_rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    # ---- protocols -----------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Can a member with these protocols join? An empty group takes any non-empty
        set; otherwise the type must match and one protocol must be supported by all."""
        if not self.members:
            return bool(protocol_type) and bool(protocol_names)
        if protocol_type != self.protocol_type:
            return False
        counts = Counter(name for member in self.members.values() for name in set(member.protocol_names()))
        return any(counts[name] == len(self.members) for name in protocol_names)

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        candidates = set(members[0].protocol_names())
        for member in members[1:]:
            candidates &= set(member.protocol_names())
        return candidates

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol among those all support; the most
        votes win. Ties go to the protocol the leader prefers, for determinism."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id!r} has no protocol every member supports")
        votes = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        winners = {name for name, count in votes.items() if count == best}
        preference = self.members[self.leader_id].protocol_names() if self.leader_id in self.members else []
        for name in preference:
            if name in winners:
                return name
        return min(winners)

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, group instance id, metadata for the selected protocol) of each
        member: what the leader gets in its JoinGroup response to compute the assignment."""
        return [
            (member.member_id, member.group_instance_id, member.metadata_for(self.protocol_name))
            for member in self.members.values()
        ]

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None or not self.members:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscribed_topics(member.metadata_for(self.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Unknown subscriptions count as subscribed, so nothing is deleted by mistake."""
        if self.consumer is not None:
            return self.consumer.is_subscribed_to_topic(topic)
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        """End the join phase: a new generation, with a protocol if anyone is left."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(EMPTY, now_ms)

    # ---- offsets -------------------------------------------------------------------------

    def has_pending_offsets(self, topic_partition: TopicPartition) -> bool:
        return any(topic_partition in pending for pending in self.pending_txn_offsets.values())

    def apply_offset_commit(self, topic_partition: TopicPartition, committed: CommittedOffset) -> None:
        current = self.offsets.get(topic_partition)
        if current is None or current.record_offset <= committed.record_offset:
            self.offsets[topic_partition] = committed

    def add_pending_txn_offsets(self, producer_id: int, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def complete_pending_txn_offsets(self, producer_id: int, committed: bool) -> int:
        """Apply (commit) or drop (abort) the producer's pending offsets; how many there were."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if committed:
            for topic_partition, offset in pending.items():
                self.apply_offset_commit(topic_partition, offset)
        return len(pending)

    def remove_offsets(self, topic_partitions: list[TopicPartition]) -> None:
        for topic_partition in topic_partitions:
            self.offsets.pop(topic_partition, None)
            for pending in self.pending_txn_offsets.values():
                pending.pop(topic_partition, None)

    @property
    def has_offsets(self) -> bool:
        return bool(self.offsets) or any(self.pending_txn_offsets.values())
