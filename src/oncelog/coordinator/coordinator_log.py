"""An internal topic as a coordinator holds it: how many partitions it has and which
of them this broker coordinates (at which epoch), appends on the partition's leader,
under its leader epoch, and the wait until an append is replicated.

Kafka's coordinators write `__transaction_state` and `__consumer_offsets` with acks=all
and answer a client only once the write is on the ISR, so that a new leader of the
partition (the next coordinator) has everything a client was told. Here the append is
synchronous and local (`append`, which refuses below min.insync.replicas, as an acks=all
append does), and the handler then awaits `replicated` before it answers. A coordinator
applies a transition to its memory when the local append succeeds; if the write then
fails to replicate, the broker has lost the partition's leadership (or the ISR shrank
under min.insync.replicas after the append, and the record may still be committed), and
the client gets Kafka's coordinator error and retries: with the new coordinator, which
rebuilt its state from the replicated log, or with this one, which has the write.

The coordinator `take`s a partition when its broker becomes the leader (announced by
the broker's `Leadership`; in cluster mode the leader epoch is the coordinator epoch,
standalone the broker's coordinator epoch for this start) and `release`s it when it
stops leading it. A standalone broker leads every partition, and its writes are
replicated once appended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.kernel.internal_topics import partition_for
from oncelog.kernel.partitions import AppendRefused, append_internal
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

# How Kafka's coordinators answer a client whose write failed (TransactionStateManager
# and GroupMetadataManager): lost leadership sends it to find the coordinator again, a
# replication problem makes it retry here.
_CLIENT_ERROR = {
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.fenced_leader_epoch: ErrorCode.not_coordinator,
    ErrorCode.leader_not_available: ErrorCode.not_coordinator,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
}


def coordinator_error(code: ErrorCode) -> ErrorCode:
    """The error a coordinator answers for a write that failed with `code`."""
    if code is ErrorCode.none:
        return code
    return _CLIENT_ERROR.get(code, ErrorCode.unknown_server_error)


def append_failure(error: Exception) -> ErrorCode:
    """The client's error for an exception of `CoordinatorLog.append`."""
    if isinstance(error, AppendRefused):
        return coordinator_error(error.code)
    if isinstance(error, LookupError):
        return ErrorCode.coordinator_not_available
    return ErrorCode.not_coordinator  # the log failed: Kafka's KAFKA_STORAGE_ERROR mapping


class CoordinatorLog:
    def __init__(self, broker: Node, topic: str, timeout_ms: int, configured_partitions: int) -> None:
        self._broker = broker
        self.topic = topic
        self._timeout_s = timeout_ms / 1000
        self._configured_partitions = configured_partitions
        self._written: dict[int, int] = {}  # partition -> end offset of this broker's last append
        self._epochs: dict[int, int] = {}  # partition -> the epoch it was taken at, for those led here

    # -- the partitions -----------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        """The topic's real partition count once it exists (what FindCoordinator maps keys
        with), else the configured one."""
        count = self._broker.leadership.partition_count(self.topic)
        return self._configured_partitions if count is None else count

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partition_count)

    def owns(self, partition: int) -> bool:
        """Whether this broker coordinates the partition's keys (leads the partition)."""
        return partition in self._epochs

    def epoch_of(self, partition: int) -> int | None:
        """The epoch the partition was taken at (the coordinator epoch: in cluster mode its
        leader epoch, standalone the broker's coordinator epoch), None if not led here."""
        return self._epochs.get(partition)

    def take(self, partition: int, leader_epoch: int) -> None:
        self._epochs[partition] = leader_epoch

    def release(self, partition: int) -> bool:
        """The partition moved away: forget it, and its pending appends (the next
        leader's business). Whether it was held."""
        self._written.pop(partition, None)
        return self._epochs.pop(partition, None) is not None

    def append(self, partition: int, batch: bytes, *, now_ms: int, marker_transaction_version: int = 0):
        """Append on the leader (AppendRefused, LookupError, or the storage error)."""
        result = append_internal(self._broker, self.topic, partition, batch, now_ms=now_ms,
                                 marker_transaction_version=marker_transaction_version)
        self._written[partition] = result.last_offset + 1
        return result

    async def replicated(self, partition: int, end_offset: int | None = None) -> ErrorCode:
        """Wait until this broker's appends to `partition` (up to `end_offset`, default
        all of them) are on the ISR; NONE, or the error to answer the client."""
        end = self._written.get(partition, 0) if end_offset is None else end_offset
        if end <= 0:
            return ErrorCode.none
        code = await self._broker.leadership.wait_for_replication(self.topic, partition, end, self._timeout_s)
        return coordinator_error(code)

    def loaded(self, partition: int) -> None:
        """This broker became the partition's leader and loaded it to its log end: what
        it loaded counts as written here, so nothing decided in it (a PrepareCommit) is
        acted on before the ISR has it."""
        partition_log = self._broker.logs.partition(self.topic, partition)
        if partition_log is not None:
            self._written[partition] = partition_log.log_end_offset
