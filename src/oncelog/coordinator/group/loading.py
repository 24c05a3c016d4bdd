"""Loading groups from `__consumer_offsets`, and dropping them when the partition goes.

Owns rebuilding the coordinator's state from the log: classic groups from their
GroupMetadata records (written by `persistence.py`), consumer groups (KIP-848) by
replaying their records in log order (`ConsumerGroup.replay`, the same path the live
coordinator takes after a write), committed offsets, and transactional offsets that
stay pending until their producer's COMMIT/ABORT marker. A GroupMetadata tombstone
drops the classic group and its pending transactional offsets, not its committed ones:
those have their own tombstones (DeleteGroups writes them), and a group converted to
a consumer group keeps them. A standalone broker leads every
partition and loads them all at start-up (`load`); in cluster mode a partition is loaded
when this broker becomes its leader and dropped when it stops leading it
(`on_leadership`): its groups' timers stop and whatever their members wait for is
answered NOT_COORDINATOR, as Kafka's onResignation does.

It fills and empties the coordinator's groups dict and its index of open transactional
offsets by producer; a restored member's session timer is started through `Membership`.
"""

from __future__ import annotations

import logging
import time

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group import consumer_records, records
from oncelog.coordinator.group.consumer_group import ConsumerGroup, PartitionOwnershipError
from oncelog.coordinator.group.consumer_membership import ConsumerMembership
from oncelog.coordinator.group.membership import Membership
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.records import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, RecordFormatError
from oncelog.coordinator.group.scheduler import Scheduler
from oncelog.coordinator.group.state import (
    DEAD,
    EMPTY,
    STABLE,
    CommittedOffset,
    Group,
    Member,
    OffsetAndMetadata,
    TopicPartition,
)
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.record_batch import ControlType
from oncelog.stats import Histogram

log = logging.getLogger("oncelog.group")


class GroupLoader:
    """Fills the coordinator's groups from a `__consumer_offsets` partition it leads, and
    empties them of that partition's groups when it stops leading it."""

    def __init__(self, groups: dict[str, Group], open_groups_by_producer: dict[int, set[str]],
                 scheduler: Scheduler, offsets_topic: OffsetsTopic, membership: Membership,
                 consumer: ConsumerMembership) -> None:
        self._groups = groups
        self._open_groups_by_producer = open_groups_by_producer
        self._scheduler = scheduler
        self._offsets_topic = offsets_topic
        self._membership = membership
        self._consumer = consumer
        self.load_times = Histogram()  # loading a partition (KIP-484's load time), for /metrics

    def _now(self) -> int:
        return self._scheduler.now_ms()

    def on_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        """This broker became leader of a `__consumer_offsets` partition (rebuild its
        groups, committed and pending offsets from the log: later records win, tombstones
        delete, transactional offsets stay pending until their producer's COMMIT/ABORT
        marker) or stopped leading it (drop them)."""
        self._unload_partition(partition)
        if leader:
            self._offsets_topic.take(partition, leader_epoch)
            started = time.perf_counter()
            groups, offsets = self._load_partition(partition)
            self.load_times.observe(time.perf_counter() - started)
            if groups:
                log.info("%s-%d: leader at epoch %d; loaded %d group(s) and %d committed offset(s)",
                         CONSUMER_OFFSETS, partition, leader_epoch, groups, offsets)

    def _unload_partition(self, partition: int) -> None:
        """Kafka's onResignation: the partition's groups go (Dead here), their timers
        stop, waiting JoinGroup/SyncGroup requests are answered NOT_COORDINATOR (their
        members find the new coordinator), pending transactional offsets are dropped
        (the new coordinator loads them from the log)."""
        if not self._offsets_topic.release(partition):
            return
        dropped = [
            group for group in self._groups.values() if self._offsets_topic.partition_for(group.group_id) == partition
        ]
        for group in dropped:
            self._membership.cancel_group_timers(group)
            for member in group.members.values():
                self._membership.release_member(member, ErrorCode.not_coordinator)
            if group.consumer is not None:
                self._consumer.cancel_timers(group.consumer)
                group.consumer.dead = True
            # Dead: a timer or callback still holding the group finds nothing to do.
            group.transition_to(DEAD, self._now())
            del self._groups[group.group_id]
        dropped_ids = {group.group_id for group in dropped}
        for producer_id, open_groups in list(self._open_groups_by_producer.items()):
            open_groups.difference_update(dropped_ids)
            if not open_groups:
                del self._open_groups_by_producer[producer_id]
        if dropped:
            log.info("%s-%d: no longer its leader; dropped %d group(s)", CONSUMER_OFFSETS, partition, len(dropped))

    def _load_partition(self, partition: int) -> tuple[int, int]:
        metadata: dict[str, GroupMetadataValue | None] = {}
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        consumer_groups: dict[str, ConsumerGroup] = {}
        for batch in self._offsets_topic.read(partition):
            header = batch.header
            if header.is_control:
                producer_pending = pending.pop(header.producer_id, {})
                if batch.control_type is ControlType.COMMIT:
                    for group_id, group_offsets in producer_pending.items():
                        committed = offsets.setdefault(group_id, {})
                        for tp, offset in group_offsets.items():
                            current = committed.get(tp)
                            if current is None or current.record_offset <= offset.record_offset:
                                committed[tp] = offset
                continue
            for record in batch.records:
                try:
                    key = records.decode_key(record.key or b"")
                    if isinstance(key, OffsetCommitKey):
                        tp = (key.topic, key.partition)
                        if header.is_transactional:
                            target = pending.setdefault(header.producer_id, {}).setdefault(key.group, {})
                        else:
                            target = offsets.setdefault(key.group, {})
                        if record.value is None:
                            target.pop(tp, None)
                        else:
                            value = records.decode_offset_commit_value(record.value)
                            target[tp] = CommittedOffset(
                                OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata,
                                                  value.commit_timestamp_ms, value.expire_timestamp_ms),
                                header.base_offset,
                            )
                    elif isinstance(key, GroupMetadataKey):
                        metadata[key.group] = (
                            None if record.value is None else records.decode_group_metadata_value(record.value)
                        )
                        if record.value is None:
                            for producer_groups in pending.values():
                                producer_groups.pop(key.group, None)
                    elif key is None and not header.is_transactional:
                        self._replay_consumer_record(consumer_groups, record.key or b"", record.value)
                except (RecordFormatError, PartitionOwnershipError) as error:
                    log.error("__consumer_offsets-%d offset %d: skipping undecodable record: %s",
                              partition, record.offset, error)
        group_ids = {g for g, value in metadata.items() if value is not None} | {g for g, o in offsets.items() if o}
        for producer_groups in pending.values():
            group_ids |= {g for g, o in producer_groups.items() if o}
        group_ids |= set(consumer_groups)
        offset_count = 0
        for group_id in group_ids:
            consumer_group = consumer_groups.get(group_id)
            if consumer_group is not None and metadata.get(group_id) is not None:
                log.error("group %s has both classic and consumer group records; loading it as a consumer group",
                          group_id)
            group = self._restore_group(group_id, None if consumer_group is not None else metadata.get(group_id))
            if consumer_group is not None:
                group.consumer = consumer_group
                self._consumer.on_loaded(consumer_group)
            for tp, offset in offsets.get(group_id, {}).items():
                group.offsets[tp] = offset
                offset_count += 1
        for producer_id, producer_groups in pending.items():
            for group_id, group_offsets in producer_groups.items():
                if group_offsets:
                    self._groups[group_id].add_pending_txn_offsets(producer_id, group_offsets)
                    self._open_groups_by_producer.setdefault(producer_id, set()).add(group_id)
        return len(group_ids), offset_count

    @staticmethod
    def _replay_consumer_record(consumer_groups: dict[str, ConsumerGroup], raw_key: bytes,
                                raw_value: bytes | None) -> None:
        """A consumer group record, in log order; a tombstone of its epoch record drops the group."""
        key = consumer_records.decode_key(raw_key)
        if key is None:
            return  # a record of another group type (share, streams): not this coordinator's
        value = None if raw_value is None else consumer_records.decode_value(key, raw_value)
        if key.version == consumer_records.GROUP_METADATA_KEY and value is None:
            consumer_groups.pop(key.group, None)
            return
        group = consumer_groups.get(key.group)
        if group is None:
            group = consumer_groups[key.group] = ConsumerGroup(key.group)
        group.replay(key, value)

    def _restore_group(self, group_id: str, value: GroupMetadataValue | None) -> Group:
        now = self._now()
        if value is None:
            group = Group(group_id, current_state_timestamp_ms=now)
            self._groups[group_id] = group
            return group
        group = Group(
            group_id,
            state=STABLE if value.members else EMPTY,
            current_state_timestamp_ms=(
                value.current_state_timestamp_ms if value.current_state_timestamp_ms >= 0 else now
            ),
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
        )
        for stored in value.members:
            group.add_member(Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                session_timeout_ms=stored.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", stored.subscription),),
                assignment=stored.assignment,
            ))
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        group.subscribed_topics = group.compute_subscribed_topics()
        self._groups[group_id] = group
        # Members must heartbeat again within their session timeout, or they are removed.
        for member in group.members.values():
            self._membership.schedule_heartbeat(group, member, member.session_timeout_ms)
        return group
