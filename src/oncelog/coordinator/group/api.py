"""The inputs and results of the group coordinator's operations, and its settings.

Plain frozen values that the broker's handlers build from requests and turn back into
responses: what `GroupCoordinator` takes (JoinRequest, CommitOffset), what it answers
(JoinResult, SyncResult, FetchedOffset, GroupSummary, ListedGroup), and the broker
settings it runs with (GroupSettings). Nothing here has behaviour beyond reading config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.config import BrokerConfig


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
class GroupsSnapshot:
    """The groups of this coordinator as /metrics reports them."""

    by_state: dict[tuple[str, str], int]  # (state, protocol type) -> groups
    rebalances: int
    committed: dict[tuple[str, str, int], int]  # (group, topic, partition) -> committed offset
    loads_count: int = 0  # partitions loaded, and how long that took (KIP-484)
    loads_total_s: float = 0.0
    loads_cumulative: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
