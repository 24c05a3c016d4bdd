"""This broker's replicas in cluster mode: which partitions it leads or follows, their
high watermarks and ISRs, and the acks=all purgatory (Kafka's ReplicaManager and
Partition, docs/cluster-design.md section 3).

- The metadata image says who leads each partition, with which leader epoch, and who
  is in the ISR; `apply` turns every image change into local changes: logs created or
  deleted, a partition made leader or follower, followers fetching from a new leader.
- As leader, the high watermark is the smallest log end offset over the (maximal) ISR
  and never goes back. Followers' fetch offsets move it; a follower that catches up
  joins the ISR, one that lags past `replica.lag.time.max.ms` leaves it. ISR changes
  are written to etcd by the leader under the partition's revision (Kafka's
  AlterPartition); until the write is seen the high watermark counts the maximal ISR.
- As follower, the high watermark is min(leader's, own log end), from fetch responses.

Everything runs on the broker's event loop; this object owns the replicas' state.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from oncelog.clock import now_ms
from oncelog.cluster.image import MetadataDelta, MetadataImage, PartitionRecord
from oncelog.cluster.placement import alter_isr
from oncelog.cluster.purgatory import HighWatermarkWaiters
from oncelog.cluster.replica_state import LeaderReplicaState
from oncelog.kernel.leadership import BrokerView, LeadershipListener, PartitionView, check_epoch
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.errors import StorageError

if TYPE_CHECKING:
    from oncelog.cluster.fetcher import ReplicaFetchers
    from oncelog.cluster.metadata_store import MetadataStore
    from oncelog.kernel.node import Node
    from oncelog.storage.log import PartitionLog

log = logging.getLogger("oncelog.cluster.replicas")



@dataclass
class LocalReplica:
    record: PartitionRecord
    log: PartitionLog
    leader: LeaderReplicaState | None = None  # set while this broker leads the partition
    waiters: HighWatermarkWaiters | None = None

    @property
    def is_leader(self) -> bool:
        return self.leader is not None


@dataclass(frozen=True, slots=True)
class FollowerLag:
    topic: str
    partition: int
    replica: int
    records: int  # the leader's log end offset minus the follower's, as last fetched (-1: not yet)


@dataclass(frozen=True, slots=True)
class ReplicationSnapshot:
    """Replication as /metrics reports it (Kafka's ReplicaManager and controller gauges)."""

    partitions: int  # local replicas
    leaders: int
    under_replicated: int  # led here, ISR smaller than the replica set
    under_min_isr: int  # led here, ISR below min.insync.replicas
    isr_shrinks: int
    isr_expands: int
    follower_lags: tuple[FollowerLag, ...]
    produce_waiting: int = 0  # acks=all writes waiting for the high watermark (Kafka's Produce purgatory)


class ReplicationParts(Protocol):
    """What the replica manager uses of the cluster runtime that owns it: the metadata
    store (ISR changes) and the fetchers (following leaders)."""

    @property
    def store(self) -> MetadataStore: ...
    @property
    def fetchers(self) -> ReplicaFetchers: ...


class ReplicaManager:
    def __init__(self, broker: Node, runtime: ReplicationParts) -> None:
        self.broker = broker
        self.runtime = runtime
        self.node_id = broker.node_id
        self.replicas: dict[TopicPartition, LocalReplica] = {}
        self.image = MetadataImage.empty()
        self._lag_time_max_ms = broker.config["replica.lag.time.max.ms"]
        self._isr_writes: set[TopicPartition] = set()
        self.isr_shrinks = self.isr_expands = 0  # ISR changes this broker wrote, for /metrics
        self._listeners: list[LeadershipListener] = []  # called with (tp, became_leader: bool, leader_epoch) on changes

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    # ---- the questions handlers ask (same shape as StandaloneLeadership) ----------------

    def leader_epoch(self, topic: str, partition: int, current_leader_epoch: int = -1) -> tuple[ErrorCode, int]:
        record = self.image.partition(topic, partition)
        if record is None:
            return ErrorCode.unknown_topic_or_partition, -1
        replica = self.replicas.get((topic, partition))
        if replica is None or not replica.is_leader:
            if current_leader_epoch > record.leader_epoch:
                return ErrorCode.unknown_leader_epoch, -1
            if record.leader == -1:
                return ErrorCode.leader_not_available, -1
            return ErrorCode.not_leader_or_follower, -1
        return check_epoch(current_leader_epoch, replica.record.leader_epoch), replica.record.leader_epoch

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.image.partition(topic, partition) is not None

    def check_min_isr(self, topic: str, partition: int) -> ErrorCode:
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.leader is None:
            return ErrorCode.not_leader_or_follower
        if replica.leader.is_under_min_isr(replica.log.config.min_insync_replicas):
            return ErrorCode.not_enough_replicas
        return ErrorCode.none

    def appended(self, topic: str, partition: int) -> None:
        """The leader appended: followers' fetches wake, and with an ISR of one the high
        watermark moves at once."""
        replica = self.replicas.get((topic, partition))
        if replica is not None and replica.leader is not None:
            self._maybe_advance_high_watermark(replica)
        self.broker.partition_appended(topic, partition)

    def replication_reached(self, topic: str, partition: int, end_offset: int) -> ErrorCode | None:
        """NONE once the high watermark is at `end_offset`, NOT_LEADER_OR_FOLLOWER when
        this broker no longer leads the partition, None while the ISR has not caught up."""
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.leader is None:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.none if replica.log.high_watermark >= end_offset else None

    async def wait_for_replication(self, topic: str, partition: int, end_offset: int, timeout_s: float) -> ErrorCode:
        reached = self.replication_reached(topic, partition, end_offset)
        if reached is not None:
            return reached
        replica = self.replicas[(topic, partition)]
        assert replica.waiters is not None  # set with leader
        return await replica.waiters.wait(end_offset, timeout_s)

    def is_replica_fetch(self, replica_id: int) -> bool:
        return replica_id >= 0

    def describe_partition(self, topic: str, partition: int) -> PartitionView:
        record = self.image.partition(topic, partition)
        if record is None:
            return PartitionView(-1, -1, (), (), ())
        live = self.image.brokers
        return PartitionView(record.leader, record.leader_epoch, record.replicas, record.isr,
                             tuple(r for r in record.replicas if r not in live))

    def live_brokers(self, listener: str) -> list[BrokerView]:
        """The registered brokers with an address on `listener`; with none (every session
        lapsed at once, e.g. the quorum lost its leases, and the brokers are registering
        again), this broker alone. librdkafka decommissions every broker a Metadata answer
        leaves out: an answer naming none leaves it nobody to ask until it bootstraps
        again minutes later. This broker answers, and names the new leaders as soon as
        the brokers have registered again."""
        views = []
        for _, registration in sorted(self.image.brokers.items()):
            address = registration.endpoint(listener)
            if address is not None:
                views.append(BrokerView(registration.node_id, *address))
        if not views:
            own = self.broker.endpoints.get(listener)
            if own is not None:
                views.append(BrokerView(self.node_id, *own))
        return views

    @property
    def controller_id(self) -> int:
        return self.image.controller_id

    def partition_count(self, topic: str) -> int | None:
        record = self.image.topics.get(topic)
        return None if record is None else record.partitions

    def leader_of(self, topic: str, partition: int) -> int | None:
        if topic not in self.image.topics:
            return None
        record = self.image.partition(topic, partition)
        return -1 if record is None else record.leader

    # ---- the leader's side of replication ----------------------------------------------

    def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int) -> ErrorCode:
        """A follower's fetch from `fetch_offset`: everything below it is on the follower."""
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.leader is None:
            return ErrorCode.not_leader_or_follower
        if replica_id not in replica.record.replicas:
            return ErrorCode.not_leader_or_follower  # Kafka: UNKNOWN_LEADER_EPOCH-ish; the follower re-reads metadata
        replica.leader.update_follower_fetch(replica_id, fetch_offset, replica.log.log_end_offset, now_ms())
        self._maybe_expand_isr(replica, replica_id)
        self._maybe_advance_high_watermark(replica)
        return ErrorCode.none

    def _maybe_advance_high_watermark(self, replica: LocalReplica) -> None:
        leader, waiters = replica.leader, replica.waiters
        assert leader is not None and waiters is not None  # on the leader only
        # Kafka's isReplicaIsrEligible: a fenced broker (not registered) may not join.
        candidate = leader.high_watermark_candidate(replica.log.log_end_offset, now_ms=now_ms(),
                                                    isr_eligible=self.image.brokers)
        if candidate > replica.log.high_watermark:
            replica.log.update_high_watermark(candidate)
            waiters.advance(replica.log.high_watermark)
            self.broker.partition_appended(replica.record.topic, replica.record.partition)

    def _check_min_isr(self, replica: LocalReplica) -> None:
        """Kafka's DelayedProduce: acks=all writes waiting while the ISR shrinks below
        min.insync.replicas fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
        state, waiters = replica.leader, replica.waiters
        assert state is not None and waiters is not None  # on the leader only
        waiters.check_min_isr(len(state.maximal_isr), state.effective_min_isr(replica.log.config.min_insync_replicas))

    def _maybe_expand_isr(self, replica: LocalReplica, follower: int) -> None:
        """Kafka's maybeExpandIsr: the follower that just fetched joins the ISR once caught
        up, if its broker is registered. A fenced broker is not eligible (KIP-841): the
        fetch state a stalled broker left behind must not bring it back into the ISR the
        controller took it out of, which would let acks=all writes and markers pass a
        min.insync.replicas the ISR does not really have."""
        leader = replica.leader
        assert leader is not None  # on the leader only
        if leader.isr_change_pending or follower not in self.image.brokers:
            return
        if follower in leader.isr_expansion_candidates(replica.log.high_watermark):
            self._write_isr(replica, (*leader.isr, follower))

    def shrink_isrs(self) -> None:
        """Drop followers that lagged past replica.lag.time.max.ms (a periodic task)."""
        now = now_ms()
        for replica in self.replicas.values():
            if replica.leader is None or replica.leader.isr_change_pending:
                continue
            lagging = replica.leader.out_of_sync_replicas(replica.log.log_end_offset, now)
            if lagging:
                self._write_isr(replica, tuple(r for r in replica.leader.isr if r not in lagging))

    def _write_isr(self, replica: LocalReplica, new_isr: tuple[int, ...]) -> None:
        tp = (replica.record.topic, replica.record.partition)
        if tp in self._isr_writes:
            return
        assert replica.leader is not None  # on the leader only
        replica.leader.begin_isr_change(new_isr)
        self._check_min_isr(replica)
        self._isr_writes.add(tp)
        asyncio.get_running_loop().create_task(self._commit_isr(replica, new_isr))

    async def _commit_isr(self, replica: LocalReplica, new_isr: tuple[int, ...]) -> None:
        tp = (replica.record.topic, replica.record.partition)
        expected = replica.record
        try:
            stored = await self.runtime.store.change_partition(
                expected, lambda current: alter_isr(current, expected, self.node_id, new_isr))
        except Exception as error:  # noqa: BLE001 (etcd unavailable or conflicts: retried by the next fetch or shrink)
            log.warning("%s-%d: ISR change to %s not written: %s", *tp, list(new_isr), error)
            stored = None
        finally:
            self._isr_writes.discard(tp)
        current = self.replicas.get(tp)
        if current is not replica or replica.leader is None:
            return
        if stored is None:
            replica.leader.abort_isr_change()
            self._check_min_isr(replica)
        else:
            log.info("%s-%d: ISR %s -> %s", *tp, list(expected.isr), list(stored.isr))
            if len(stored.isr) < len(expected.isr):
                self.isr_shrinks += 1
            elif len(stored.isr) > len(expected.isr):
                self.isr_expands += 1
            self._apply_partition(stored)

    def snapshot(self) -> ReplicationSnapshot:
        leaders = under_replicated = under_min_isr = waiting = 0
        lags: list[FollowerLag] = []
        for (topic, partition), replica in self.replicas.items():
            state = replica.leader
            if state is None:
                continue
            leaders += 1
            waiting += len(replica.waiters) if replica.waiters is not None else 0
            under_replicated += len(state.isr) < len(state.replicas)
            under_min_isr += len(state.isr) < replica.log.config.min_insync_replicas
            end = replica.log.log_end_offset
            for follower in state.followers.values():
                known = follower.log_end_offset >= 0
                lags.append(FollowerLag(topic, partition, follower.replica_id,
                                        end - follower.log_end_offset if known else -1))
        return ReplicationSnapshot(len(self.replicas), leaders, under_replicated, under_min_isr,
                                   self.isr_shrinks, self.isr_expands, tuple(lags), waiting)

    # ---- metadata changes ----------------------------------------------------------------

    def apply(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Make the local replicas match a new metadata image."""
        self.image = image
        for name in delta.deleted_topics:
            self._delete_local_topic(name)
        for topic in delta.created_topics.values():
            self._ensure_local_topic(topic)
        for _before, changed in delta.changed_topics.values():  # more partitions, or new configs
            self._ensure_local_topic(changed)
        for _tp, (_old, new) in sorted(delta.changed_partitions.items()):
            if new is None:
                continue
            self._apply_partition(new)

    def take_dir_offline(self, directory) -> None:
        """A failed log dir: its replicas stop (no leading, no fetching) until it is back."""
        logs = self.broker.logs
        for tp in [tp for tp in self.replicas if logs.log_dir_of(*tp) == directory]:
            self._stop_replica(tp, ErrorCode.kafka_storage_error)

    def resume_replicas(self) -> None:
        """After a log dir came back: every partition of the image made local again
        (replicas already running are left as they are)."""
        for record in list(self.image.partitions.values()):
            self._apply_partition(record)

    def _ensure_local_topic(self, topic) -> None:
        try:
            self._create_local_topic(topic)
        except StorageError as error:  # every log dir offline: made when one is back (resume_replicas)
            log.warning("topic %s: no local log yet: %s", topic.name, error)

    def _create_local_topic(self, topic) -> None:
        logs = self.broker.logs
        existing = logs.topic(topic.name)
        if existing is not None and existing.topic_id != topic.topic_id:
            log.info("topic %s was recreated (id %s -> %s): dropping the local copy", topic.name,
                     existing.topic_id, topic.topic_id)
            self._delete_local_topic(topic.name)
            existing = None
        if existing is None:
            logs.create_topic(topic.name, topic.partitions, dict(topic.configs), topic_id=topic.topic_id)
        elif existing.num_partitions < topic.partitions:
            logs.create_partitions(topic.name, topic.partitions)
        if existing is not None and dict(existing.config_overrides) != dict(topic.configs):
            logs.alter_topic_config(topic.name, dict(topic.configs), replace=True)

    def _delete_local_topic(self, name: str) -> None:
        for tp in [tp for tp in self.replicas if tp[0] == name]:
            self._stop_replica(tp, ErrorCode.unknown_topic_or_partition)
        if self.broker.logs.topic(name) is not None:
            self.broker.logs.delete_topic(name)

    def _apply_partition(self, record: PartitionRecord) -> None:
        tp = (record.topic, record.partition)
        topic = self.image.topics.get(record.topic)
        if topic is not None:
            self._ensure_local_topic(topic)
        if self.node_id not in record.replicas:
            self._stop_replica(tp, ErrorCode.not_leader_or_follower)
            return
        partition_log = self.broker.logs.partition(*tp)
        if partition_log is None:
            return
        if self.broker.logs.is_offline(*tp):
            self._stop_replica(tp, ErrorCode.kafka_storage_error)
            return
        replica = self.replicas.get(tp)
        if record.leader == self.node_id:
            if (replica is not None and replica.leader is not None
                    and replica.record.leader_epoch == record.leader_epoch):
                replica.record = record
                replica.leader.complete_isr_change(record.isr)
                self._check_min_isr(replica)
                self._maybe_advance_high_watermark(replica)
                return
            self._become_leader(tp, record, partition_log, replica)
        else:
            self._become_follower(tp, record, partition_log, replica)

    def _become_leader(self, tp, record: PartitionRecord, partition_log, replica: LocalReplica | None) -> None:
        if replica is not None and replica.waiters is not None:
            replica.waiters.fail_all(ErrorCode.not_leader_or_follower)
        self.runtime.fetchers.remove_partition(tp)
        start = partition_log.begin_leader_epoch(record.leader_epoch)
        state = LeaderReplicaState(
            self.node_id, record.replicas, record.isr, record.leader_epoch, start,
            now_ms=now_ms(), replica_lag_time_max_ms=self._lag_time_max_ms,
        )
        replica = LocalReplica(record, partition_log, state, HighWatermarkWaiters())
        self.replicas[tp] = replica
        log.info("%s-%d: leader at epoch %d (log end %d, high watermark %d, ISR %s)", *tp, record.leader_epoch,
                 start, partition_log.high_watermark, list(record.isr))
        self._maybe_advance_high_watermark(replica)
        for listener in self._listeners:
            listener(tp, True, record.leader_epoch)

    def _become_follower(self, tp, record: PartitionRecord, partition_log, replica: LocalReplica | None) -> None:
        was_leader = replica is not None and replica.is_leader
        if replica is not None and replica.waiters is not None:
            replica.waiters.fail_all(ErrorCode.not_leader_or_follower)
        unchanged = (replica is not None and not was_leader and replica.record.leader == record.leader
                     and replica.record.leader_epoch == record.leader_epoch)
        self.replicas[tp] = LocalReplica(record, partition_log)
        if unchanged:
            return
        self.runtime.fetchers.remove_partition(tp)
        if record.leader >= 0:
            self.runtime.fetchers.add_partition(tp, record.leader, record.leader_epoch, partition_log)
        log.info("%s-%d: follower of %d at epoch %d", *tp, record.leader, record.leader_epoch)
        if was_leader or replica is None:
            for listener in self._listeners:
                listener(tp, False, record.leader_epoch)

    def _stop_replica(self, tp, code: ErrorCode) -> None:
        replica = self.replicas.pop(tp, None)
        if replica is None:
            return
        if replica.waiters is not None:
            replica.waiters.fail_all(code)
        self.runtime.fetchers.remove_partition(tp)
        if replica.is_leader:
            for listener in self._listeners:
                listener(tp, False, replica.record.leader_epoch)

    def close(self) -> None:
        for replica in self.replicas.values():
            if replica.waiters is not None:
                replica.waiters.fail_all(ErrorCode.not_leader_or_follower)
