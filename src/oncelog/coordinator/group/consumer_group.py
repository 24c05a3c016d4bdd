"""One consumer group (KIP-848): its epochs, members, target assignment and who owns
which partition, rebuilt from its records.

All of it is kept as records in `__consumer_offsets` (consumer_records.py), and
`replay` is the only way it changes: the live path writes the records a heartbeat
produced and then replays them, loading replays the partition's records in log order,
so what a restarted or new coordinator rebuilds is what the old one had. Timers and the
regex refresh bookkeeping are soft state, not replayed.

The group's state is derived, as in Kafka's ConsumerGroup:

    Empty         no members
    Assigning     the group epoch is ahead of the target assignment's epoch
    Reconciling   some member is not yet at the target assignment epoch, or not STABLE
    Stable        every member is reconciled to the target assignment
    Dead          deleted, or this coordinator stopped leading its partition

Every partition assigned to a member (or pending its revocation) is owned at the
member's epoch (`partition_epoch`); a partition goes to a new owner only once the old
one released it, and a conflict on replay is a broken invariant (it raises).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, replace
from enum import Enum

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group import consumer_records as cr
from oncelog.coordinator.group.assignment import EMPTY, Assignment, assignment, to_wire
from oncelog.coordinator.group.consumer_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberState,
)
from oncelog.coordinator.group.group_states import Cancellable

FIRST_OFFSET_COMMIT_VERSION_FOR_CONSUMER_MEMBERS = 9


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp_ms: int


class PartitionOwnershipError(RuntimeError):
    """Two members would own the same partition: a broken invariant of the reconciliation."""


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}  # in join order
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMetadata] = {}  # subscribed topics that exist, by name
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self._partition_epochs: dict[uuid.UUID, dict[int, int]] = {}
        self.dead = False
        # Soft state: each member's timers ("session", "rebalance", "join", "sync"), and
        # when the regular expressions were last resolved and against which topics.
        self.timers: dict[tuple[str, str], Cancellable] = {}
        self.regex_refreshed_ms = -1
        self.regex_topics_seen: frozenset[str] = frozenset()

    # ---- derived state -------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not member.is_reconciled_to(self.assignment_epoch) for member in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the partition's current owner; -1 when nobody owns it."""
        return self._partition_epochs.get(topic_id, {}).get(partition, -1)

    def member_topics(self, member: ConsumerGroupMember) -> frozenset[str]:
        """The topic names a member subscribes to: its names and what its regex resolved to."""
        topics = member.subscribed_topic_names
        if member.subscribed_topic_regex:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                topics = topics | resolved.topics
        return topics

    def subscribed_topic_names(self) -> frozenset[str]:
        topics: set[str] = set()
        for member in self.members.values():
            topics |= self.member_topics(member)
        return frozenset(topics)

    def subscribed_regexes(self) -> Counter[str]:
        return Counter(m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex)

    def preferred_assignor(self) -> str | None:
        """The server assignor most members ask for (None: none asks)."""
        votes = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        return votes.most_common(1)[0][0] if votes else None

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """The member's target; a static member that replaced another gets that one's."""
        if member_id in self.target_assignment:
            return self.target_assignment[member_id]
        previous = self.static_members.get(instance_id) if instance_id is not None else None
        return self.target_assignment.get(previous, EMPTY) if previous is not None else EMPTY

    @property
    def all_members_use_classic_protocol(self) -> bool:
        return all(member.uses_classic_protocol for member in self.members.values())

    # ---- offsets -------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, member_epoch: int, *, transactional: bool,
                               api_version: int) -> tuple[ErrorCode, str | None]:
        """Kafka's ConsumerGroup.validateOffsetCommit: an admin (or a consumer without group
        management) may commit only while the group is empty; a member only at its epoch."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.none, None
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {self.group_id}."
        if (not transactional and not member.uses_classic_protocol
                and api_version < FIRST_OFFSET_COMMIT_VERSION_FOR_CONSUMER_MEMBERS):
            return ErrorCode.unsupported_version, ("OffsetCommit version 9 or above must be used by members "
                                                   "using the consumer group protocol")
        return self._validate_member_epoch(member, member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> tuple[ErrorCode, str | None]:
        if member_id is None and member_epoch < 0:
            return ErrorCode.none, None  # an admin client, or a consumer that does not say
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {self.group_id}."
        return self._validate_member_epoch(member, member_epoch)

    @staticmethod
    def _validate_member_epoch(member: ConsumerGroupMember, received: int) -> tuple[ErrorCode, str | None]:
        if received == member.member_epoch:
            return ErrorCode.none, None
        if member.uses_classic_protocol:
            return ErrorCode.illegal_generation, (f"The received generation id {received} does not match the "
                                                  f"expected member epoch {member.member_epoch}.")
        return ErrorCode.stale_member_epoch, (f"The received member epoch {received} does not match the "
                                              f"expected member epoch {member.member_epoch}.")

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    # ---- changes (only through replay) -----------------------------------------------------

    def update_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release_partitions(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._own_partitions(member)

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._release_partitions(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]

    def _own_partitions(self, member: ConsumerGroupMember) -> None:
        for owned in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in owned.items():
                epochs = self._partition_epochs.setdefault(topic_id, {})
                for partition in partitions:
                    current = epochs.get(partition, -1)
                    if current != -1:
                        raise PartitionOwnershipError(
                            f"group {self.group_id}: member {member.member_id} at epoch {member.member_epoch} "
                            f"cannot own {topic_id}-{partition}, still owned at epoch {current}")
                    epochs[partition] = member.member_epoch

    def _release_partitions(self, member: ConsumerGroupMember) -> None:
        for owned in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in owned.items():
                epochs = self._partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                for partition in partitions:
                    epochs.pop(partition, None)
                if not epochs:
                    del self._partition_epochs[topic_id]

    def replay(self, key: cr.ConsumerGroupKey, value: cr.ConsumerGroupValue | None) -> None:
        """Apply one record of this group (the group-level tombstone of the epoch record is
        the caller's: it drops the group)."""
        kind, member_id = key.version, key.member or ""
        if kind == cr.GROUP_METADATA_KEY:
            if isinstance(value, cr.GroupEpochValue):
                self.group_epoch = value.epoch
        elif kind == cr.PARTITION_METADATA_KEY:
            topics = value.topics if isinstance(value, cr.PartitionMetadataValue) else ()
            self.subscription_metadata = {t.name: TopicMetadata(t.topic_id, t.name, t.num_partitions) for t in topics}
        elif kind == cr.MEMBER_METADATA_KEY:
            if isinstance(value, cr.MemberMetadataValue):
                self.update_member(_with_subscription(self.members.get(member_id), member_id, value))
            else:
                self.remove_member(member_id)
        elif kind == cr.TARGET_ASSIGNMENT_METADATA_KEY:
            self.assignment_epoch = value.assignment_epoch if isinstance(value, cr.TargetAssignmentEpochValue) else 0
        elif kind == cr.TARGET_ASSIGNMENT_MEMBER_KEY:
            if isinstance(value, cr.TargetAssignmentMemberValue):
                self.target_assignment[member_id] = assignment(value.partitions)
            else:
                self.target_assignment.pop(member_id, None)
        elif kind == cr.CURRENT_MEMBER_ASSIGNMENT_KEY:
            current = self.members.get(member_id) or ConsumerGroupMember(member_id=member_id)
            if isinstance(value, cr.CurrentAssignmentValue):
                self.update_member(replace(
                    current, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                    state=MemberState.from_value(value.state), assigned_partitions=assignment(value.assigned),
                    partitions_pending_revocation=assignment(value.pending_revocation),
                ))
            elif member_id in self.members:
                # The member is leaving: it owns nothing any more (its metadata tombstone follows).
                self.update_member(replace(
                    current, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    state=MemberState.UNREVOKED_PARTITIONS, assigned_partitions=EMPTY,
                    partitions_pending_revocation=EMPTY,
                ))
        elif kind == cr.REGULAR_EXPRESSION_KEY:
            if isinstance(value, cr.RegularExpressionValue):
                self.resolved_regexes[member_id] = ResolvedRegex(frozenset(value.topics), value.version,
                                                                 value.timestamp_ms)
            else:
                self.resolved_regexes.pop(member_id, None)


def _with_subscription(current: ConsumerGroupMember | None, member_id: str,
                       value: cr.MemberMetadataValue) -> ConsumerGroupMember:
    base = current or ConsumerGroupMember(member_id=member_id)
    classic = None
    if value.classic is not None:
        classic = ClassicMemberMetadata(value.classic.session_timeout_ms, value.classic.supported_protocols)
    return replace(
        base, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
        client_host=value.client_host, subscribed_topic_names=frozenset(value.subscribed_topic_names),
        subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
        server_assignor=value.server_assignor, classic=classic,
    )


# ---- the records of a change -------------------------------------------------------------


Record = tuple[cr.ConsumerGroupKey, cr.ConsumerGroupValue | None]


def epoch_record(group_id: str, epoch: int) -> Record:
    return cr.ConsumerGroupKey(cr.GROUP_METADATA_KEY, group_id), cr.GroupEpochValue(epoch)


def subscription_metadata_record(group_id: str, metadata: dict[str, TopicMetadata]) -> Record:
    topics = tuple(cr.TopicMetadataValue(t.topic_id, t.name, t.num_partitions)
                   for t in sorted(metadata.values(), key=lambda t: t.name))
    return cr.ConsumerGroupKey(cr.PARTITION_METADATA_KEY, group_id), cr.PartitionMetadataValue(topics)


def member_subscription_record(group_id: str, member: ConsumerGroupMember) -> Record:
    classic = None
    if member.classic is not None:
        classic = cr.ClassicMetadataValue(member.classic.session_timeout_ms, member.classic.supported_protocols)
    return cr.ConsumerGroupKey(cr.MEMBER_METADATA_KEY, group_id, member.member_id), cr.MemberMetadataValue(
        member.instance_id, member.rack_id, member.client_id, member.client_host,
        tuple(sorted(member.subscribed_topic_names)), member.subscribed_topic_regex, member.rebalance_timeout_ms,
        member.server_assignor, classic,
    )


def target_assignment_record(group_id: str, member_id: str, target: Assignment) -> Record:
    partitions = tuple((topic_id, tuple(parts)) for topic_id, parts in to_wire(target))
    return (cr.ConsumerGroupKey(cr.TARGET_ASSIGNMENT_MEMBER_KEY, group_id, member_id),
            cr.TargetAssignmentMemberValue(partitions))


def target_assignment_epoch_record(group_id: str, epoch: int) -> Record:
    return cr.ConsumerGroupKey(cr.TARGET_ASSIGNMENT_METADATA_KEY, group_id), cr.TargetAssignmentEpochValue(epoch)


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> Record:
    def wire(value: Assignment) -> cr.TopicPartitions:
        return tuple((topic_id, tuple(parts)) for topic_id, parts in to_wire(value))

    return cr.ConsumerGroupKey(cr.CURRENT_MEMBER_ASSIGNMENT_KEY, group_id, member.member_id), cr.CurrentAssignmentValue(
        member.member_epoch, member.previous_member_epoch, int(member.state), wire(member.assigned_partitions),
        wire(member.partitions_pending_revocation),
    )


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex) -> Record:
    return cr.ConsumerGroupKey(cr.REGULAR_EXPRESSION_KEY, group_id, regex), cr.RegularExpressionValue(
        tuple(sorted(resolved.topics)), resolved.version, resolved.timestamp_ms)


def tombstone(version: int, group_id: str, member: str | None = None) -> Record:
    return cr.ConsumerGroupKey(version, group_id, member), None


def member_removal_records(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: the current assignment, the target, then the subscription."""
    return [
        tombstone(cr.CURRENT_MEMBER_ASSIGNMENT_KEY, group_id, member_id),
        tombstone(cr.TARGET_ASSIGNMENT_MEMBER_KEY, group_id, member_id),
        tombstone(cr.MEMBER_METADATA_KEY, group_id, member_id),
    ]


def group_removal_records(group: ConsumerGroup) -> list[Record]:
    """Every record of the group, tombstoned (DeleteGroups, expiry, a downgrade)."""
    records: list[Record] = []
    for member_id in group.members:
        records.append(tombstone(cr.CURRENT_MEMBER_ASSIGNMENT_KEY, group.group_id, member_id))
    for member_id in group.target_assignment:
        records.append(tombstone(cr.TARGET_ASSIGNMENT_MEMBER_KEY, group.group_id, member_id))
    records.append(tombstone(cr.TARGET_ASSIGNMENT_METADATA_KEY, group.group_id))
    for member_id in group.members:
        records.append(tombstone(cr.MEMBER_METADATA_KEY, group.group_id, member_id))
    for regex in group.resolved_regexes:
        records.append(tombstone(cr.REGULAR_EXPRESSION_KEY, group.group_id, regex))
    records.append(tombstone(cr.PARTITION_METADATA_KEY, group.group_id))
    records.append(tombstone(cr.GROUP_METADATA_KEY, group.group_id))
    return records
