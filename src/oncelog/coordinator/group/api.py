"""The inputs and results of the group coordinator's operations, and its settings.

Plain frozen values that the broker's handlers build from requests and turn back into
responses: what `GroupCoordinator` takes (JoinRequest, CommitOffset, HeartbeatRequest),
what it answers (JoinResult, SyncResult, FetchedOffset, GroupSummary, ListedGroup,
HeartbeatResult, ConsumerGroupSummary), the broker settings it runs with
(GroupSettings, with the group.consumer.* keys of KIP-848) and what it asks of a group's
own configs (GroupTimings). Nothing here has behaviour beyond reading and checking config.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.assignment import Assignment
from oncelog.coordinator.group.assignors import assignor_names

if TYPE_CHECKING:
    from oncelog.config.broker import BrokerConfig


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
    # Consumer groups (KIP-848): the session and heartbeat interval the coordinator
    # imposes, the assignors it offers (the first is the default), its largest group,
    # and whether classic groups convert to consumer groups and back online.
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_migration_policy: str = "bidirectional"

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
            consumer_session_timeout_ms=_within(config, "group.consumer.session.timeout.ms",
                                                "group.consumer.min.session.timeout.ms",
                                                "group.consumer.max.session.timeout.ms"),
            consumer_heartbeat_interval_ms=_within(config, "group.consumer.heartbeat.interval.ms",
                                                   "group.consumer.min.heartbeat.interval.ms",
                                                   "group.consumer.max.heartbeat.interval.ms"),
            consumer_max_size=config["group.consumer.max.size"],
            consumer_assignors=assignor_names(config["group.consumer.assignors"]),
            consumer_migration_policy=_migration_policy(config["group.consumer.migration.policy"]),
        )._checked()

    def _checked(self) -> GroupSettings:
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ValueError(f"group.consumer.heartbeat.interval.ms={self.consumer_heartbeat_interval_ms} must be "
                             f"less than group.consumer.session.timeout.ms={self.consumer_session_timeout_ms}")
        return self

    @property
    def upgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("downgrade", "bidirectional")


class GroupTimings(Protocol):
    """A consumer group's own session timeout and heartbeat interval (KIP-848 group
    configs, oncelog.config.groups): None where the group has none and
    GroupSettings' consumer_* apply."""

    def session_timeout_ms(self, group_id: str) -> int | None: ...
    def heartbeat_interval_ms(self, group_id: str) -> int | None: ...


class NoGroupTimings:
    """No group has configs of its own (a coordinator without a store: tests, tools)."""

    def session_timeout_ms(self, group_id: str) -> int | None:
        return None

    def heartbeat_interval_ms(self, group_id: str) -> int | None:
        return None


MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def _within(config: BrokerConfig, key: str, minimum_key: str, maximum_key: str) -> int:
    """A consumer group timing, checked against its bounds as Kafka checks it at start-up."""
    value, minimum, maximum = config[key], config[minimum_key], config[maximum_key]
    if not minimum <= value <= maximum:
        raise ValueError(f"{key}={value} must be within {minimum_key}={minimum} and {maximum_key}={maximum}")
    return value


def _migration_policy(value: str) -> str:
    policy = value.strip().lower()
    if policy not in MIGRATION_POLICIES:
        raise ValueError(f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}, "
                         f"not {value!r}")
    return policy


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
class GroupsSnapshot:
    """The groups of this coordinator as /metrics reports them."""

    by_state: dict[tuple[str, str], int]  # (state, protocol type) -> groups
    rebalances: int
    committed: dict[tuple[str, str, int], int]  # (group, topic, partition) -> committed offset
    protocol_types: dict[str, str] = field(default_factory=dict)  # group -> protocol type, "" offsets-only
    loads_count: int = 0  # partitions loaded, and how long that took (KIP-484)
    loads_total_s: float = 0.0
    loads_cumulative: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848)


# ---- consumer groups (KIP-848) ------------------------------------------------------------

TopicPartitionIds = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat. None (or -1) means "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: TopicPartitionIds | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(frozen=True, slots=True)
class AssignedTopic:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerMemberSummary:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[AssignedTopic, ...]
    target_assignment: tuple[AssignedTopic, ...]
    uses_classic_protocol: bool


@dataclass(frozen=True, slots=True)
class ConsumerGroupSummary:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ConsumerMemberSummary, ...]
