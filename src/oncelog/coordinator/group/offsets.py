"""Offset storage of the group coordinator: committed and transactional offsets.

Owns OffsetCommit and TxnOffsetCommit (KIP-447: a producer's offsets stay pending,
invisible to OffsetFetch, until the transaction coordinator writes the COMMIT/ABORT
marker and calls `complete_transaction`), OffsetFetch, OffsetDelete and DeleteGroups,
and offset expiration (offsets.retention.minutes, KIP-211) with its periodic timer.
Offsets are appended to the group's `__consumer_offsets` partition before they count.

It works on the coordinator's groups dict and its index of the groups with pending
transactional offsets by producer (`open_groups_by_producer`, shared with loading); a
commit refreshes the committing member's session through `Membership`. Commits to a
consumer group (KIP-848) are checked against the member's epoch as Kafka 4 does
(STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for TxnOffsetCommit), and deleting or expiring
one tombstones its records through `ConsumerMembership`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group import records
from oncelog.coordinator.group.api import NO_OFFSET, UNSTABLE_OFFSET, CommitOffset, FetchedOffset, GroupSettings
from oncelog.coordinator.group.consumer_group import group_removal_records
from oncelog.coordinator.group.consumer_membership import Change, ConsumerMembership, encode
from oncelog.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncelog.coordinator.group.membership import Membership
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.persistence import WRITE_ERRORS, storage_error
from oncelog.coordinator.group.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue
from oncelog.coordinator.group.scheduler import Scheduler
from oncelog.coordinator.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    Cancellable,
    CommittedOffset,
    Group,
    OffsetAndMetadata,
    TopicPartition,
)
from oncelog.protocol.record_batch import Record

log = logging.getLogger("oncelog.group")


class Offsets:
    """Committed and transactional offsets of the coordinator's groups, their deletion and
    expiration; DeleteGroups."""

    def __init__(self, groups: dict[str, Group], open_groups_by_producer: dict[int, set[str]],
                 settings: GroupSettings, scheduler: Scheduler, offsets_topic: OffsetsTopic,
                 membership: Membership, consumer: ConsumerMembership, *, owner_error: Callable[[str], ErrorCode],
                 create_group: Callable[[str], Group]) -> None:
        self._groups = groups
        # Groups with pending transactional offsets, by producer id: where a marker for the
        # producer must look (Kafka's openGroupsForProducer).
        self._open_groups_by_producer = open_groups_by_producer
        self._settings = settings
        self._scheduler = scheduler
        self._offsets_topic = offsets_topic
        self._membership = membership
        self._consumer = consumer
        self._owner_error = owner_error
        self._create_group = create_group
        self._expiration_timer: Cancellable | None = None

    def _now(self) -> int:
        return self._scheduler.now_ms()

    def cancel_expiration(self) -> None:
        if self._expiration_timer is not None:
            self._expiration_timer.cancel()

    # ---- OffsetCommit / TxnOffsetCommit --------------------------------------------------

    def _validate_offset_commit(self, group: Group, generation_id: int, member_id: str,
                                group_instance_id: str | None, *, transactional: bool, api_version: int) -> ErrorCode:
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if group.consumer is not None:
            error, _ = group.consumer.validate_offset_commit(member_id, generation_id, transactional=transactional,
                                                             api_version=api_version)
            if transactional and error == ErrorCode.stale_member_epoch:
                return ErrorCode.illegal_generation  # TxnOffsetCommit's clients know only this one
            return error
        if generation_id < 0 and group.is_(EMPTY):
            return ErrorCode.none  # an admin client, or a consumer not using group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error != ErrorCode.none:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if not transactional and not group.is_(EMPTY):
            # Only members may commit for a group with members. Transactional commits are
            # exempt: TxnOffsetCommit v0-v2 carries no member id or generation.
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _offset_records(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[Record]:
        return [
            Record(
                records.encode_offset_commit_key(OffsetCommitKey(group_id, topic, partition)),
                records.encode_offset_commit_value(OffsetCommitValue(
                    value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                    value.expire_timestamp_ms,
                )),
            )
            for (topic, partition), value in offsets.items()
        ]

    def _stamp(self, offsets: Mapping[TopicPartition, CommitOffset], retention_ms: int = -1
               ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets as stored: commit time now; an explicit retention (OffsetCommit
        v2-v4) fixes the expiry time, as in Kafka, instead of offsets.retention.minutes."""
        now = self._now()
        # -1 is "no retention given"; any other value counts, a negative one expires at once.
        expire_timestamp_ms = -1 if retention_ms == -1 else max(0, now + retention_ms)
        return {
            tp: OffsetAndMetadata(commit.offset, commit.leader_epoch, commit.metadata or "", now, expire_timestamp_ms)
            for tp, commit in offsets.items()
        }

    def _metadata_errors(self, offsets: Mapping[TopicPartition, CommitOffset]) -> dict[TopicPartition, ErrorCode]:
        limit = self._settings.offset_metadata_max_bytes
        return {
            tp: ErrorCode.offset_metadata_too_large
            for tp, commit in offsets.items()
            if commit.metadata is not None and len(commit.metadata.encode()) > limit
        }

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, CommitOffset], *, retention_ms: int = -1,
                       api_version: int = 9) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: an error code per partition. A member of a group that does not
        exist gets GROUP_ID_NOT_FOUND (the handler answers ILLEGAL_GENERATION below v9, as
        Kafka does). `retention_ms` other than -1: the offsets expire that long after now."""
        def all_fail(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, error)

        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return all_fail(owner)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # The group is gone or never existed: the request is from an old generation.
                return all_fail(ErrorCode.group_id_not_found)
            group = self._create_group(group_id)  # a "simple" consumer storing offsets only
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                             transactional=False, api_version=api_version)
        if error != ErrorCode.none:
            return all_fail(error)
        if group.is_(COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            return all_fail(ErrorCode.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            self._membership.schedule_heartbeat(group, member, member.session_timeout_ms)
        results = self._metadata_errors(offsets)
        accepted = self._stamp({tp: commit for tp, commit in offsets.items() if tp not in results}, retention_ms)
        if accepted:
            try:
                base_offset = self._offsets_topic.append(
                    self._offsets_topic.partition_for(group_id), self._offset_records(group_id, accepted),
                    now_ms=self._now(),
                )
            except WRITE_ERRORS as write_error:
                log.error("group %s: storing offsets failed: %s", group_id, write_error)
                results.update(dict.fromkeys(accepted, storage_error(write_error)))
                return results
            for tp, value in accepted.items():
                group.apply_offset_commit(tp, CommittedOffset(value, base_offset))
                results[tp] = ErrorCode.none
        return {tp: results[tp] for tp in offsets}

    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                          generation_id: int, group_instance_id: str | None,
                          offsets: Mapping[TopicPartition, CommitOffset]) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: append the offsets as one transactional batch of the producer;
        they stay pending (invisible to OffsetFetch) until `complete_transaction`. The
        caller has verified that the transaction is open and holds the group's partition."""
        def all_fail(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, error)

        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return all_fail(owner)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A consumer of a generation the group no longer has (Kafka 4's coordinator;
                # the older one created the group and answered UNKNOWN_MEMBER_ID).
                return all_fail(ErrorCode.illegal_generation)
            group = self._create_group(group_id)  # a producer committing for a simple group
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                             transactional=True, api_version=-1)
        if error != ErrorCode.none:
            return all_fail(error)
        partition = self._offsets_topic.partition_for(group_id)
        known_epoch = self._offsets_topic.producer_epoch(partition, producer_id)
        if known_epoch is not None and producer_epoch < known_epoch:
            return all_fail(ErrorCode.invalid_producer_epoch)
        results = self._metadata_errors(offsets)
        accepted = self._stamp({tp: commit for tp, commit in offsets.items() if tp not in results})
        if accepted:
            try:
                base_offset = self._offsets_topic.append(
                    partition, self._offset_records(group_id, accepted), now_ms=self._now(),
                    producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
                )
            except WRITE_ERRORS as write_error:
                log.error("group %s: storing transactional offsets of producer %d failed: %s",
                          group_id, producer_id, write_error)
                results.update(dict.fromkeys(accepted, storage_error(write_error)))
                return {tp: results[tp] for tp in offsets}
            group.add_pending_txn_offsets(
                producer_id, {tp: CommittedOffset(value, base_offset) for tp, value in accepted.items()}
            )
            self._open_groups_by_producer.setdefault(producer_id, set()).add(group_id)
            results.update(dict.fromkeys(accepted, ErrorCode.none))
        return {tp: results[tp] for tp in offsets}

    def complete_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        """The transaction coordinator wrote a COMMIT (or ABORT) marker for `producer_id`
        to `__consumer_offsets` partition `offsets_partition`: the producer's pending
        offsets of the groups in that partition become committed (or are dropped)."""
        open_groups = self._open_groups_by_producer.get(producer_id)
        if not open_groups:
            return
        for group_id in sorted(open_groups):
            if self._offsets_topic.partition_for(group_id) != offsets_partition:
                continue
            open_groups.discard(group_id)
            group = self._groups.get(group_id)
            if group is None:
                continue
            count = group.complete_pending_txn_offsets(producer_id, committed)
            log.debug("group %s: %s %d transactional offset(s) of producer %d", group_id,
                      "committed" if committed else "aborted", count, producer_id)
        if not open_groups:
            del self._open_groups_by_producer[producer_id]

    # ---- OffsetFetch ---------------------------------------------------------------------

    def fetch_offsets(self, group_id: str, partitions: AbstractSet[TopicPartition] | None, require_stable: bool,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """Committed offsets of `partitions` (None: every partition with an offset).
        With `require_stable`, a partition with pending transactional offsets answers
        UNSTABLE_OFFSET_COMMIT, so the consumer retries once the transaction ends. A
        member of a consumer group (OffsetFetch v9) must be one at its epoch.

        Of the `partitions` asked for, only those with a committed (or, with
        `require_stable`, a pending) offset are in the answer: the others have none
        (NO_OFFSET). The answer is one moment's, and costs the group's offsets, not the
        request's partitions (they are met with set operations)."""
        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.none, {}
        if group.consumer is not None:
            error, _ = group.consumer.validate_offset_fetch(member_id, member_epoch)
            if error != ErrorCode.none:
                return error, {}
        wanted: Iterable[TopicPartition]
        if partitions is None:
            wanted = list(group.offsets)
        else:
            held = group.offsets.keys() & partitions
            if require_stable:
                for pending in group.pending_txn_offsets.values():
                    held |= pending.keys() & partitions
            wanted = held
        result = {}
        for tp in wanted:
            if require_stable and group.has_pending_offsets(tp):
                result[tp] = UNSTABLE_OFFSET
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                result[tp] = NO_OFFSET
            else:
                value = committed.value
                result[tp] = FetchedOffset(value.offset, value.leader_epoch, value.metadata, ErrorCode.none)
        return ErrorCode.none, result

    # ---- OffsetDelete / DeleteGroups -----------------------------------------------------

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.group_id_not_found, {}
        if group.is_empty:
            deletable = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE or group.consumer is not None:
            deletable = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
        else:
            return ErrorCode.non_empty_group, {}
        results = {tp: ErrorCode.group_subscribed_to_topic for tp in partitions if tp not in deletable}
        to_remove = [tp for tp in deletable if tp in group.offsets or group.has_pending_offsets(tp)]
        if to_remove:
            try:
                self._write_offset_tombstones(group, to_remove)
            except WRITE_ERRORS as error:
                return storage_error(error), {}
            group.remove_offsets(to_remove)
        results.update(dict.fromkeys(deletable, ErrorCode.none))
        return ErrorCode.none, {tp: results[tp] for tp in partitions}

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self._groups.get(group_id)
            owner = self._owner_error(group_id)
            if owner != ErrorCode.none:
                results[group_id] = owner
            elif group is None or group.is_(DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_empty:
                results[group_id] = ErrorCode.non_empty_group
            else:
                try:
                    self._remove_group(group)
                except WRITE_ERRORS as error:
                    results[group_id] = storage_error(error)
                    continue
                log.info("group %s deleted", group_id)
                results[group_id] = ErrorCode.none
        return results

    def _remove_group(self, group: Group) -> None:
        """Tombstone the group and its offsets, then forget it (state Dead)."""
        tombstones = [Record(self._offset_key(group.group_id, tp), None) for tp in self._all_offset_partitions(group)]
        consumer_group = group.consumer
        if consumer_group is None:
            tombstones.append(Record(records.encode_group_metadata_key(GroupMetadataKey(group.group_id)), None))
        else:
            tombstones.extend(encode(group.group_id, Change(group_removal_records(consumer_group))))
        self._offsets_topic.append(self._offsets_topic.partition_for(group.group_id), tombstones, now_ms=self._now())
        self._membership.cancel_group_timers(group)
        if consumer_group is not None:
            self._consumer.cancel_timers(consumer_group)
            consumer_group.dead = True
            group.consumer = None
        group.transition_to(DEAD, self._now())
        group.offsets.clear()
        group.pending_txn_offsets.clear()
        del self._groups[group.group_id]

    @staticmethod
    def _offset_key(group_id: str, tp: TopicPartition) -> bytes:
        return records.encode_offset_commit_key(OffsetCommitKey(group_id, tp[0], tp[1]))

    @staticmethod
    def _all_offset_partitions(group: Group) -> list[TopicPartition]:
        partitions = set(group.offsets)
        for pending in group.pending_txn_offsets.values():
            partitions |= set(pending)
        return sorted(partitions)

    def _write_offset_tombstones(self, group: Group, partitions: list[TopicPartition]) -> None:
        self._offsets_topic.append(
            self._offsets_topic.partition_for(group.group_id),
            [Record(self._offset_key(group.group_id, tp), None) for tp in partitions],
            now_ms=self._now(),
        )

    # ---- offset expiration ---------------------------------------------------------------

    def schedule_expiration(self) -> None:
        self._expiration_timer = self._scheduler.call_later(
            self._settings.offsets_retention_check_interval_ms, self._expiration_tick
        )

    def _expiration_tick(self) -> None:
        try:
            self.expire_offsets()
        finally:
            self.schedule_expiration()

    def expire_offsets(self) -> int:
        """Kafka's offsets.retention.minutes (KIP-211): an empty group's offsets expire that
        long after the group became empty (or after the commit, if later); a consumer
        group's offsets of topics it no longer subscribes to, that long after the commit.
        An empty group left with no offsets is deleted. Returns how many offsets expired."""
        now = self._now()
        retention = self._settings.offsets_retention_ms
        expired_total = 0
        for group in list(self._groups.values()):
            expired = self._expired_offsets(group, now, retention)
            try:
                if expired:
                    self._write_offset_tombstones(group, expired)
                    group.remove_offsets(expired)
                    expired_total += len(expired)
                    log.info("group %s: %d offset(s) expired", group.group_id, len(expired))
                if group.is_empty and not group.has_offsets and not group.pending_members:
                    self._remove_group(group)
                    log.info("group %s: empty with no offsets, removed", group.group_id)
            except WRITE_ERRORS as error:
                log.error("group %s: offset expiration failed: %s", group.group_id, error)
        return expired_total

    def _expired_offsets(self, group: Group, now: int, retention: int) -> list[TopicPartition]:
        def expired(tp: TopicPartition, committed: CommittedOffset, base: Callable[[CommittedOffset], int]) -> bool:
            if group.has_pending_offsets(tp):
                return False
            value = committed.value
            if value.expire_timestamp_ms >= 0:
                return now >= value.expire_timestamp_ms
            return now - base(committed) >= retention

        if group.consumer is not None:
            # Kafka's ConsumerGroup: from the commit, once empty or no longer subscribed.
            def committed_at(committed: CommittedOffset) -> int:
                return committed.value.commit_timestamp_ms
            return [tp for tp, c in group.offsets.items()
                    if (group.consumer.is_empty or not group.consumer.is_subscribed_to_topic(tp[0]))
                    and expired(tp, c, committed_at)]
        if group.is_(EMPTY):
            def since(committed: CommittedOffset) -> int:
                return max(group.current_state_timestamp_ms, committed.value.commit_timestamp_ms)
            return [tp for tp, c in group.offsets.items() if expired(tp, c, since)]
        if group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics is not None:
            return [
                tp for tp, c in group.offsets.items()
                if tp[0] not in group.subscribed_topics
                and expired(tp, c, lambda committed: committed.value.commit_timestamp_ms)
            ]
        return []
