"""One member of a consumer group (KIP-848): its subscription and its assignment state.

A `ConsumerGroupMember` is an immutable value: every change (a heartbeat updating the
subscription, the reconciliation moving it to a new epoch) makes a new one, which is
written to `__consumer_offsets` and then replayed into the group. Its fields are those
of Kafka's ConsumerGroupMemberMetadataValue (the subscription) and
ConsumerGroupCurrentMemberAssignmentValue (the epochs, state and partitions).

Member epochs (KIP-848): 0 asks to join, -1 leaves, -2 leaves for now (a static member
that will come back with the same instance id); the coordinator hands out the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

from oncelog.coordinator.group.assignment import EMPTY, Assignment

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(IntEnum):
    """Kafka's MemberState, with its stored values (see reconciliation.py)."""

    STABLE = 0  # reconciled with the target assignment
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before it moves to the next epoch
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions others still own
    UNKNOWN = 127  # stored by a newer coordinator: the member is fenced and starts over

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member of a consumer group that speaks the classic protocol (JoinGroup,
    SyncGroup, Heartbeat): its session timeout and the protocols it joined with."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]  # (assignor name, subscription)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None
    # The assignment state (ConsumerGroupCurrentMemberAssignmentValue).
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=lambda: EMPTY)
    partitions_pending_revocation: Assignment = field(default_factory=lambda: EMPTY)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    def with_epoch(self, member_epoch: int) -> ConsumerGroupMember:
        """Kafka's updateMemberEpoch: the old epoch becomes the previous one."""
        return replace(self, member_epoch=member_epoch, previous_member_epoch=self.member_epoch)

    def same_subscription(self, other: ConsumerGroupMember) -> bool:
        """Whether the stored subscription (ConsumerGroupMemberMetadataValue) is unchanged."""
        return (
            self.instance_id == other.instance_id and self.rack_id == other.rack_id
            and self.client_id == other.client_id and self.client_host == other.client_host
            and self.rebalance_timeout_ms == other.rebalance_timeout_ms
            and self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.server_assignor == other.server_assignor and self.classic == other.classic
        )

    def same_assignment_state(self, other: ConsumerGroupMember) -> bool:
        """Whether the stored assignment state (ConsumerGroupCurrentMemberAssignmentValue) is unchanged."""
        return (
            self.member_epoch == other.member_epoch and self.previous_member_epoch == other.previous_member_epoch
            and self.state is other.state and self.assigned_partitions == other.assigned_partitions
            and self.partitions_pending_revocation == other.partitions_pending_revocation
        )
