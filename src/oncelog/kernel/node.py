"""The broker as its parts see it: the narrow, typed seams between the composition root
(`oncelog.broker.broker.Broker`) and the code it runs.

The coordinators, the replication (oncelog.cluster), the append path
(oncelog.kernel.partitions) and the topic administration never import `Broker`: they
are given a `Node`, and ask it only what is named here. `Broker` has every attribute
below; a test may hand in anything else that has them. Each protocol is what one
collaborator needs, in its own verbs:

- `Leadership`: who leads a partition here and when a write is replicated (standalone:
  `kernel.leadership.StandaloneLeadership`; cluster: `cluster.replica_manager`);
- `TopicAdmin`: creating, deleting, growing and reconfiguring topics (standalone:
  `kernel.topics.StandaloneTopics`; cluster: `cluster.topics.ClusterTopics`), the one
  component chosen at start-up where the modes differ for topics;
- `BrokerDirectory`: where the other brokers are, for peer connections (standalone:
  `kernel.peer.NoPeers`; cluster: `cluster.runtime.ClusterRuntime`);
- `TransactionGate` and `RemoteVerification`: what the append path asks the transaction
  coordinator (KIP-890), implemented by `coordinator.txn`;
- `TransactionalOffsets`: what the transaction coordinator asks the group coordinator.

This module imports only oncelog.pacing, and the leadership views, the config and the
storage types under TYPE_CHECKING: none of them imports it back, so every part may
depend on it without closing a loop. It knows nothing of cluster mode's types: what a
peer's user reads of a metadata change is `MetadataChanges`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from oncelog.pacing import Pace, unpaced

if TYPE_CHECKING:
    from oncelog.config.broker import BrokerConfig
    from oncelog.kernel.leadership import BrokerView, LeadershipListener, PartitionView
    from oncelog.kernel.topic_errors import TopicRequestError
    from oncelog.names import TopicPartition
    from oncelog.protocol.messages import ErrorCode
    from oncelog.security.inter_broker import PeerSecurity
    from oncelog.storage.manager import LogManager, TopicInfo

# ElectLeaders' outcome: per topic, in the order asked, (partition, error code, message).
PartitionOutcome = tuple[int, "ErrorCode", "str | None"]
ElectionOutcomes = list[tuple[str, list[PartitionOutcome]]]

# A topic's new override set, from its overrides now (the config APIs' read-modify-write).
OverridesChange = Callable[[Mapping[str, str]], dict[str, str]]


@dataclass(frozen=True, slots=True)
class TopicCreation:
    """One topic of a CreateTopics request: -1 partitions or replication factor for the
    broker's default; `assignment` the explicit replicas of each partition, if given."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    assignment: list[list[int]] | None = None


@dataclass(eq=False, slots=True)
class VerificationGuard:
    """Held while a partition's KIP-890 verification at a remote transaction coordinator
    is out; compared by identity (see coordinator/txn/verification.py)."""

    leader_epoch: int


class Leadership(Protocol):
    """Who leads a partition here, and when a write is replicated."""

    def leader_epoch(self, topic: str, partition: int, current_leader_epoch: int = -1) -> tuple[ErrorCode, int]: ...
    def check_min_isr(self, topic: str, partition: int) -> ErrorCode: ...
    def has_partition(self, topic: str, partition: int) -> bool: ...
    def appended(self, topic: str, partition: int) -> None: ...
    # NONE once the high watermark has reached end_offset, the error when waiting cannot
    # help, None when the caller must wait (wait_for_replication).
    def replication_reached(self, topic: str, partition: int, end_offset: int) -> ErrorCode | None: ...
    async def wait_for_replication(self, topic: str, partition: int, end_offset: int,
                                   timeout_s: float) -> ErrorCode: ...
    def is_replica_fetch(self, replica_id: int) -> bool: ...
    def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int) -> ErrorCode: ...
    def describe_partition(self, topic: str, partition: int) -> PartitionView: ...
    def live_brokers(self, listener: str) -> list[BrokerView]: ...  # their addresses on that listener
    @property
    def controller_id(self) -> int: ...
    def partition_count(self, topic: str) -> int | None: ...  # None: no such topic
    def leader_of(self, topic: str, partition: int) -> int | None: ...  # -1: no leader now; None: no such partition
    def add_leadership_listener(self, listener: LeadershipListener) -> None: ...


class TopicAdmin(Protocol):
    """Topic administration; every failure is a `kernel.topics.TopicRequestError` with
    Kafka's code and message. A call returns once this broker can use the change; `pace`
    is awaited between the partitions of an explicit assignment (oncelog.pacing)."""

    async def create(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str], *,
                     validate_only: bool = False, assignment: list[list[int]] | None = None,
                     pace: Pace = unpaced) -> TopicInfo: ...
    async def create_topics(self, creations: Sequence[TopicCreation], *, validate_only: bool = False,
                            pace: Pace = unpaced) -> list[TopicInfo | TopicRequestError]:
        """Each topic's outcome, in order, as `create` would give it (a name given twice
        exists the second time); the work may be shared between them."""
        ...
    async def delete(self, name: str) -> None: ...
    async def create_partitions(self, name: str, new_total: int, *, validate_only: bool = False,
                                assignment: list[list[int]] | None = None, pace: Pace = unpaced) -> None: ...
    async def alter_configs(self, name: str, change: OverridesChange, *, validate_only: bool = False) -> None: ...
    async def ensure_internal(self, name: str) -> tuple[ErrorCode, str | None]:
        """Create `__consumer_offsets` or `__transaction_state` if missing (FindCoordinator
        does, as Kafka's): NONE once it exists, else COORDINATOR_NOT_AVAILABLE and why."""
        ...
    async def elect_leaders(self, election_type: int, wanted: Sequence[tuple[str, Sequence[int]]] | None,
                            pace: Pace = unpaced) -> ElectionOutcomes:
        """ElectLeaders: each partition's outcome, per topic (`kernel.topics.elect_each`)."""
        ...


class MetadataChanges(Protocol):
    """What a peer's user reads of a metadata change (`cluster.image.MetadataDelta`)."""

    @property
    def registered_brokers(self) -> Mapping[int, object]: ...
    @property
    def unregistered_brokers(self) -> AbstractSet[int]: ...
    @property
    def changed_partitions(self) -> Mapping[tuple[str, int], object]: ...


class BrokerDirectory(Protocol):
    """Where the other brokers of the cluster are, and word when that changes (the
    listener is called with the new image and a `MetadataChanges`)."""

    def add_listener(self, listener: Callable[[object, MetadataChanges], None]) -> None: ...
    def inter_broker_address(self, node_id: int) -> tuple[str, int] | None: ...
    @property
    def peer_security(self) -> PeerSecurity | None: ...  # TLS and SASL on the inter-broker listener


class ProducerIdSource(Protocol):
    def next_producer_id(self) -> int: ...  # raises ProducerIdsUnavailable while none is at hand


class ProducerIdsUnavailable(Exception):
    """No reserved producer id is at hand yet (cluster mode, while a block is reserved); retry."""


class RemoteVerification(Protocol):
    """KIP-890 with the transaction coordinator on another broker: the guards the append
    path holds while the coordinator is asked."""

    def needs_verification(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> bool: ...
    def guard(self, topic: str, partition: int, producer_id: int, leader_epoch: int) -> VerificationGuard: ...
    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: set[TopicPartition], *, verify_only: bool) -> dict[TopicPartition, ErrorCode]: ...
    def holds(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              guard: VerificationGuard | None, leader_epoch: int) -> bool: ...
    def drop(self, topic: str, partition: int, producer_id: int, guard: VerificationGuard) -> None: ...
    def release(self, topic: str, partition: int, producer_id: int) -> None: ...


class TransactionGate(Protocol):
    """What the append path asks the transaction coordinator before a transactional
    batch is written (KIP-890 parts 1 and 2)."""

    @property
    def verification(self) -> RemoteVerification: ...
    def owner_error(self, transactional_id: str) -> ErrorCode: ...
    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int, partitions: set[TopicPartition],
                       now: int, *, transaction_version: int = 0) -> ErrorCode: ...
    def verify_partition(self, transactional_id: str, producer_id: int, epoch: int,
                         tp: TopicPartition) -> ErrorCode: ...


class TransactionalOffsets(Protocol):
    """What the transaction coordinator asks the group coordinator: where a group's
    offsets live, and the end of a transaction's offsets in it."""

    def partition_for_group(self, group_id: str) -> int: ...
    def complete_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> None: ...


class Node(Protocol):
    """The broker a part runs in: its identity, configuration, logs and components."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...  # advertised to clients
    @property
    def port(self) -> int: ...
    @property
    def bound_port(self) -> int: ...
    @property
    def endpoints(self) -> dict[str, tuple[str, int]]: ...  # each listener's advertised address
    @property
    def inter_broker_host(self) -> str: ...
    @property
    def inter_broker_port(self) -> int: ...
    @property
    def logs(self) -> LogManager: ...
    @property
    def leadership(self) -> Leadership: ...
    @property
    def topics(self) -> TopicAdmin: ...
    @property
    def directory(self) -> BrokerDirectory: ...
    @property
    def producer_ids(self) -> ProducerIdSource: ...
    @property
    def txn_coordinator(self) -> TransactionGate: ...
    @property
    def group_coordinator(self) -> TransactionalOffsets: ...
    def partition_appended(self, topic: str, partition: int) -> None: ...
