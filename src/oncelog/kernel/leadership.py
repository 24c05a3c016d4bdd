"""Who leads a partition here, and when a write is replicated: what the Produce, Fetch
and ListOffsets handlers ask before they touch a log.

A standalone broker leads every partition it has, with leader epoch 0, and a write is
replicated as soon as it is appended (the ISR is this broker). In cluster mode
`oncelog.cluster.replica_manager.ReplicaManager` answers the same questions from the
cluster metadata; the handlers and coordinators are the same in both modes. The
coordinators learn which partitions of their internal topic they own from leadership
callbacks in both modes: a standalone broker announces every partition of the internal
topics at start-up (`lead_existing`) and when it creates them (`lead`), at its
coordinator epoch for this start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.names import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.names import TopicPartition
    from oncelog.storage.manager import LogManager

# Told when this broker starts or stops leading a partition: (topic, partition), whether
# it leads it now, and the epoch to take it at (a coordinator's coordinator epoch).
LeadershipListener = Callable[["TopicPartition", bool, int], None]

STANDALONE_LEADER_EPOCH = 0
INTERNAL_TOPICS_IN_LOAD_ORDER = (CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as Metadata and DescribeTopicPartitions describe it."""

    leader: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BrokerView:
    node_id: int
    host: str
    port: int


def check_epoch(current_leader_epoch: int, leader_epoch: int) -> ErrorCode:
    """Kafka's check of a request's current leader epoch (-1: the client sent none): an
    older epoch is FENCED_LEADER_EPOCH (the client is ahead of nobody: refresh), a newer
    one UNKNOWN_LEADER_EPOCH (this broker has not seen the change yet: retry)."""
    if current_leader_epoch == -1 or current_leader_epoch == leader_epoch:
        return ErrorCode.none
    return ErrorCode.fenced_leader_epoch if current_leader_epoch < leader_epoch else ErrorCode.unknown_leader_epoch


class StandaloneLeadership:
    """The `node.Leadership` of a standalone broker. `logs` and `address` (the advertised
    host and port) are read when asked: the broker sets them up after this is made."""

    def __init__(self, node_id: int, logs: Callable[[], LogManager], address: Callable[[str], tuple[str, int] | None],
                 wake_fetches: Callable[[str, int], None]) -> None:
        self._node_id = node_id
        self._logs = logs
        self._address = address
        self._wake_fetches = wake_fetches
        self._listeners: list[LeadershipListener] = []
        self._coordinator_epoch: int | None = None  # set by lead_existing() at start-up

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    @property
    def coordinator_epoch(self) -> int | None:
        """The coordinator epoch this start takes the internal partitions at (None before)."""
        return self._coordinator_epoch

    def lead_existing(self, coordinator_epoch: int) -> None:
        """Start-up: announce every partition of the internal topics (groups first:
        markers the transaction coordinator completes on load must find their pending
        transactional offsets), to be taken at `coordinator_epoch`."""
        self._coordinator_epoch = coordinator_epoch
        for topic in INTERNAL_TOPICS_IN_LOAD_ORDER:
            self.lead(topic)

    def lead(self, topic: str) -> None:
        """Announce the partitions of `topic` (just created, or found at start-up)."""
        if self._coordinator_epoch is None:
            return  # not started: nobody owns anything yet
        for partition in range(self.partition_count(topic) or 0):
            for listener in self._listeners:
                listener((topic, partition), True, self._coordinator_epoch)

    def partition_count(self, topic: str) -> int | None:
        return self._logs().partition_count(topic)

    def leader_of(self, topic: str, partition: int) -> int | None:
        return self._node_id if self._logs().partition(topic, partition) is not None else None

    def leader_epoch(self, topic: str, partition: int, current_leader_epoch: int = -1) -> tuple[ErrorCode, int]:
        """(NONE, the leader epoch) when this broker leads the partition and the
        request's epoch matches; else the error to answer."""
        if self._logs().partition(topic, partition) is None:
            return ErrorCode.unknown_topic_or_partition, -1
        return check_epoch(current_leader_epoch, STANDALONE_LEADER_EPOCH), STANDALONE_LEADER_EPOCH

    def check_min_isr(self, topic: str, partition: int) -> ErrorCode:
        """NOT_ENOUGH_REPLICAS when an acks=all write may not even be appended."""
        return ErrorCode.none

    def has_partition(self, topic: str, partition: int) -> bool:
        """Whether the partition exists (in cluster mode: anywhere in the cluster)."""
        return self._logs().partition(topic, partition) is not None

    def appended(self, topic: str, partition: int) -> None:
        """A leader appended to the partition: wake the fetches waiting for it."""
        self._wake_fetches(topic, partition)

    def replication_reached(self, topic: str, partition: int, end_offset: int) -> ErrorCode | None:
        """The one replica has every append: acks=all never waits here."""
        return ErrorCode.none

    async def wait_for_replication(self, topic: str, partition: int, end_offset: int, timeout_s: float) -> ErrorCode:
        """Wait until the high watermark reaches `end_offset` (acks=all)."""
        return ErrorCode.none

    def is_replica_fetch(self, replica_id: int) -> bool:
        return False

    def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int) -> ErrorCode:
        return ErrorCode.not_leader_or_follower  # no followers: replica fetches are refused before this

    def describe_partition(self, topic: str, partition: int) -> PartitionView:
        node = self._node_id
        return PartitionView(node, STANDALONE_LEADER_EPOCH, (node,), (node,), ())

    def live_brokers(self, listener: str) -> list[BrokerView]:
        address = self._address(listener)
        return [] if address is None else [BrokerView(self._node_id, *address)]

    @property
    def controller_id(self) -> int:
        return self._node_id
