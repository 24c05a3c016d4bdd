"""Who leads a partition here, and when a write is replicated: what the Produce, Fetch
and ListOffsets handlers ask before they touch a log.

A standalone broker leads every partition it has, with leader epoch 0, and a write is
replicated as soon as it is appended (the ISR is this broker). In cluster mode
`oncelog.cluster.replica_manager.ReplicaManager` answers the same questions from the
cluster metadata; the handlers are the same in both modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.storage.manager import LogManager

STANDALONE_LEADER_EPOCH = 0


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

    def __init__(self, node_id: int, logs: Callable[[], LogManager], address: Callable[[], tuple[str, int]],
                 wake_fetches: Callable[[str, int], None]) -> None:
        self._node_id = node_id
        self._logs = logs
        self._address = address
        self._wake_fetches = wake_fetches

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

    def live_brokers(self) -> list[BrokerView]:
        return [BrokerView(self._node_id, *self._address())]

    @property
    def controller_id(self) -> int:
        return self._node_id
