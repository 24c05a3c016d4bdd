"""Classic protocol members of consumer groups, and converting a group between the two
protocols while it has members (KIP-848's online migration), as Kafka 4's coordinator.

Upgrade: the first ConsumerGroupHeartbeat (epoch 0) for a classic group with members
(protocol type "consumer", group.consumer.migration.policy upgrade or bidirectional, no
more members than group.consumer.max.size) turns it into a consumer group: each member
keeps its member id and the partitions of its last assignment, at an epoch equal to the
classic generation, and stays a classic member. The group's GroupMetadata record is
tombstoned in the same batch as the consumer group's records are written.

Classic members of a consumer group keep using JoinGroup, SyncGroup, Heartbeat and
LeaveGroup; their assignment is computed by the coordinator's assignor, not by a leader:

    Heartbeat   REBALANCE_IN_PROGRESS when the group epoch moved past the member's, when it
                must revoke, or when partitions it waits for became free: it must rejoin
                (within its rebalance timeout, or it is removed)
    JoinGroup   updates its subscription (from its protocol metadata) and reconciles it
                with the partitions it says it owns; answered at once, with no leader and
                generation = its member epoch
    SyncGroup   hands out its assigned partitions as a ConsumerProtocolAssignment (it
                must come within its rebalance timeout after its JoinGroup)
    LeaveGroup  removes it; the group epoch moves on

Downgrade: when the last member speaking the consumer protocol leaves (or is fenced),
and only classic members remain (policy downgrade or bidirectional, no more members
than group.max.size), the group becomes a classic group again: Stable at generation =
the group epoch, each member holding its target assignment, and a rebalance starts at
once so the leaving member's partitions are assigned again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import replace

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group import records as classic_records
from oncelog.coordinator.group.api import GroupSettings, JoinRequest, JoinResult, SyncResult
from oncelog.coordinator.group.assignment import Assignment, assignment, to_wire
from oncelog.coordinator.group.consumer_group import (
    ConsumerGroup,
    Record,
    current_assignment_record,
    epoch_record,
    group_removal_records,
    member_subscription_record,
    target_assignment_epoch_record,
    target_assignment_record,
)
from oncelog.coordinator.group.consumer_member import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from oncelog.coordinator.group.consumer_membership import (
    Change,
    ConsumerMembership,
    GroupError,
    TopicsImage,
)
from oncelog.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    encode_assignment,
    parse_assignment,
    parse_subscription,
    subscription_version,
)
from oncelog.coordinator.group.membership import Membership
from oncelog.coordinator.group.records import GroupMetadataKey, GroupMetadataValue, MemberMetadataValue
from oncelog.coordinator.group.scheduler import Scheduler
from oncelog.coordinator.group.state import EMPTY, STABLE, Group, Member
from oncelog.protocol.record_batch import Record as LogRecord

log = logging.getLogger("oncelog.group")

JOIN, SYNC = "join", "sync"


class ClassicMembers:
    """The classic protocol's APIs on consumer groups, and the conversions both ways."""

    def __init__(self, consumer: ConsumerMembership, membership: Membership, scheduler: Scheduler,
                 topics: TopicsImage, groups: dict[str, Group]) -> None:
        self._consumer = consumer
        self._membership = membership
        self._scheduler = scheduler
        self._topics = topics
        self._groups = groups
        consumer.upgrade = self.upgrade
        consumer.downgrade = self.downgrade
        consumer.classic_dropped = self.drop_classic_state

    @property
    def _settings(self) -> GroupSettings:
        return self._consumer.settings

    def _now(self) -> int:
        return self._scheduler.now_ms()

    # ---- topic names and ids -----------------------------------------------------------------

    def _to_ids(self, partitions: Iterable[tuple[str, Iterable[int]]]) -> dict[uuid.UUID, frozenset[int]]:
        found = ((self._topics.topic(name), parts) for name, parts in partitions)
        return assignment((info.topic_id, parts) for info, parts in found if info is not None)

    def _to_names(self, value: Assignment) -> list[tuple[str, list[int]]]:
        found = ((self._topics.topic_by_id(topic_id), parts) for topic_id, parts in to_wire(value))
        return [(info.name, parts) for info, parts in found if info is not None]

    # ---- upgrade -----------------------------------------------------------------------------

    def upgrade(self, container: Group, change: Change) -> ConsumerGroup | None:
        """The consumer group a classic group with members becomes (its records added to
        `change`), or None when it may not be upgraded."""
        group_id = container.group_id
        if not self._settings.upgrade_enabled:
            log.info("group %s: cannot upgrade to a consumer group: group.consumer.migration.policy=%s",
                     group_id, self._settings.consumer_migration_policy)
            return None
        if container.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("group %s: cannot upgrade to a consumer group: protocol type %r is not the consumer protocol",
                     group_id, container.protocol_type)
            return None
        if len(container.members) > self._settings.consumer_max_size:
            log.info("group %s: cannot upgrade to a consumer group: more members than group.consumer.max.size",
                     group_id)
            return None
        generation = container.generation_id
        records: list[Record] = []
        members: list[ConsumerGroupMember] = []
        claimed: set[tuple[uuid.UUID, int]] = set()
        for classic in container.members.values():
            metadata = classic.metadata_for(container.protocol_name) or (classic.protocols[0][1]
                                                                         if classic.protocols else b"")
            try:
                subscription = parse_subscription(metadata)
                owned = self._to_ids(parse_assignment(classic.assignment))
            except ConsumerProtocolError:
                raise GroupError(ErrorCode.group_id_not_found,
                                 f"Cannot upgrade the classic group {group_id} to consumer group because the "
                                 "embedded consumer protocol is malformed.") from None
            # A partition two members claim (a client assignor's mistake) stays with the first.
            kept = {tp for topic_id, parts in owned.items() for tp in ((topic_id, p) for p in parts)} - claimed
            claimed |= kept
            members.append(ConsumerGroupMember(
                member_id=classic.member_id, instance_id=classic.group_instance_id, rack_id=subscription.rack_id,
                client_id=classic.client_id, client_host=classic.client_host,
                rebalance_timeout_ms=classic.rebalance_timeout_ms,
                subscribed_topic_names=frozenset(subscription.topics),
                classic=ClassicMemberMetadata(classic.session_timeout_ms, tuple(classic.protocols)),
                member_epoch=generation, previous_member_epoch=generation, state=MemberState.STABLE,
                assigned_partitions=assignment(((t, [p]) for t, p in kept)),
            ))
        for member in members:
            records.append(member_subscription_record(group_id, member))
        records.append(epoch_record(group_id, generation))
        for member in members:
            records.append(target_assignment_record(group_id, member.member_id, member.assigned_partitions))
        records.append(target_assignment_epoch_record(group_id, generation))
        for member in members:
            records.append(current_assignment_record(group_id, member))
        upgraded = ConsumerGroup(group_id)
        for key, value in records:
            upgraded.replay(key, value)
        change.drops_classic_group = True
        change.records.extend(records)

        def sessions() -> None:
            live = self._consumer.live_group(group_id)
            if live is not None:
                for member in members:
                    if member.member_id in live.members:
                        self._consumer.schedule_session(live, member.member_id,
                                                        self._consumer.session_timeout_of(group_id, member))

        change.after.append(sessions)
        log.info("group %s: the classic group (generation %d, %d member(s)) becomes a consumer group", group_id,
                 generation, len(members))
        return upgraded

    def drop_classic_state(self, container: Group) -> None:
        """The group's GroupMetadata was tombstoned: its classic members' timers stop and
        whatever they wait for is answered REBALANCE_IN_PROGRESS (they join again, now
        members of the consumer group). Offsets stay."""
        self._membership.cancel_group_timers(container)
        for member in list(container.members.values()):
            self._membership.release_member(member, ErrorCode.rebalance_in_progress)
        container.members.clear()
        container.static_members.clear()
        container.pending_members.clear()
        container.pending_sync_members.clear()
        container.generation_id = 0
        container.protocol_type = container.protocol_name = container.leader_id = None
        container.subscribed_topics = None
        # What remains holds offsets only: Empty, set directly (the transition table has no
        # way there from Stable), since the classic group ended here rather than moved on.
        container.state = EMPTY

    # ---- downgrade ---------------------------------------------------------------------------

    def downgrade(self, group: ConsumerGroup, leaving: ConsumerGroupMember) -> ErrorCode | None:
        """Convert the group to a classic group if `leaving` is its last consumer protocol
        member and classic members remain; the write's error, or None when not converted."""
        remaining = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if leaving.uses_classic_protocol or not remaining or not all(m.uses_classic_protocol for m in remaining):
            return None
        if not self._settings.downgrade_enabled:
            log.info("group %s: cannot downgrade to a classic group: group.consumer.migration.policy=%s",
                     group.group_id, self._settings.consumer_migration_policy)
            return None
        if len(remaining) > self._settings.max_size:
            log.info("group %s: cannot downgrade to a classic group: more members than group.max.size",
                     group.group_id)
            return None
        group_id, generation = group.group_id, group.group_epoch
        classic = Group(group_id, generation_id=generation, protocol_type=CONSUMER_PROTOCOL_TYPE)
        for member in remaining:
            assert member.classic is not None  # checked above
            classic.add_member(Member(
                member_id=member.member_id, group_instance_id=member.instance_id, client_id=member.client_id,
                client_host=member.client_host, rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=member.classic.supported_protocols,
            ))
        protocol = classic.select_protocol()
        for classic_member in classic.members.values():
            version = subscription_version(classic_member.metadata_for(protocol))
            target = group.target_assignment.get(classic_member.member_id, {})
            classic_member.assignment = encode_assignment(self._to_names(target), version)
        now = self._now()
        value = GroupMetadataValue(
            CONSUMER_PROTOCOL_TYPE, generation, protocol, classic.leader_id, now,
            tuple(MemberMetadataValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                      m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata_for(protocol),
                                      m.assignment) for m in classic.members.values()),
        )
        change = Change(group_removal_records(group))
        change.classic_records.append(LogRecord(
            classic_records.encode_group_metadata_key(GroupMetadataKey(group_id)),
            classic_records.encode_group_metadata_value(value)))

        def install() -> None:
            container = self._groups.get(group_id)
            if container is None:
                return
            container.generation_id, container.protocol_type = generation, CONSUMER_PROTOCOL_TYPE
            container.protocol_name = protocol
            container.current_state_timestamp_ms = now
            # Built Stable, as Kafka builds it, then rebalanced at once: the transition table
            # has no way from Empty to Stable, this is a new group, not a step of the old one.
            container.state = STABLE
            for classic_member in classic.members.values():
                container.add_member(classic_member)
                self._membership.schedule_heartbeat(container, classic_member, classic_member.session_timeout_ms)
            container.leader_id = classic.leader_id
            container.subscribed_topics = container.compute_subscribed_topics()
            self._membership.prepare_rebalance(container, f"downgrade of group {group_id} from consumer to classic")

        change.after.append(install)
        log.info("group %s: member %s was the last consumer protocol member; the group becomes a classic group "
                 "(generation %d, %d member(s))", group_id, leaving.member_id, generation, len(remaining))
        return self._consumer.write(group_id, change)

    # ---- JoinGroup ---------------------------------------------------------------------------

    def join(self, container: Group, request: JoinRequest) -> JoinResult:
        group = container.consumer
        assert group is not None  # the coordinator routes only consumer groups here
        try:
            return self._join(group, request)
        except GroupError as error:
            return JoinResult(error.code, member_id=request.member_id)

    def _join(self, group: ConsumerGroup, request: JoinRequest) -> JoinResult:
        group_id = group.group_id
        unknown = request.member_id == ""
        member_id = request.member_id or str(uuid.uuid4())
        if len(group.members) >= self._settings.consumer_max_size and member_id not in group.members:
            raise GroupError(ErrorCode.group_max_size_reached)
        if not self._supports(group, request):
            raise GroupError(ErrorCode.inconsistent_group_protocol)
        if unknown and request.require_known_member_id and request.group_instance_id is None:
            return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        change = Change()
        stored = group.members.get(member_id)
        member, replaced = self._member_for_join(group, request, member_id, unknown, change)
        try:
            subscription = parse_subscription(request.protocols[0][1])
        except ConsumerProtocolError:
            raise GroupError(ErrorCode.inconsistent_group_protocol) from None
        updated = replace(
            member,
            instance_id=request.group_instance_id if request.group_instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            subscribed_topic_names=frozenset(subscription.topics), client_id=request.client_id,
            client_host=request.client_host,
            classic=ClassicMemberMetadata(request.session_timeout_ms, tuple(request.protocols)),
        )
        bump = False
        if stored is None or replaced is not None or not updated.same_subscription(stored):
            change.records.append(member_subscription_record(group_id, updated))
            bump = updated.subscribed_topic_names != member.subscribed_topic_names
        owned = self._to_ids(subscription.owned_partitions)
        reconciled, _ = self._consumer.update_and_reconcile(group, updated, stored, replaced, owned,
                                                            group.resolved_regexes, bump, change)

        def scheduled() -> None:
            live = self._consumer.live_group(group_id)
            if live is None:
                return
            if replaced is not None:
                self._consumer.cancel_member_timers(live, replaced)
            self._consumer.cancel(live, JOIN, member_id)
            self._consumer.schedule_session(live, member_id, request.session_timeout_ms)
            self._schedule_fence(live, SYNC, member_id, reconciled.rebalance_timeout_ms,
                                 "it did not send SyncGroup within its rebalance timeout")

        change.after.append(scheduled)
        error = self._consumer.write(group_id, change)
        if error != ErrorCode.none:
            return JoinResult(error, member_id=member_id)
        return JoinResult(
            ErrorCode.none, member_id=member_id, generation_id=reconciled.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=request.protocols[0][0], leader_id="",
        )

    @staticmethod
    def _supports(group: ConsumerGroup, request: JoinRequest) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every
        classic member of the group supports."""
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            return False
        classic = [m.classic for m in group.members.values() if m.classic is not None]
        names = {name for name, _ in request.protocols}
        return any(all(name in {n for n, _ in c.supported_protocols} for c in classic) for name in names)

    def _member_for_join(self, group: ConsumerGroup, request: JoinRequest, member_id: str, unknown: bool,
                         change: Change) -> tuple[ConsumerGroupMember, str | None]:
        instance_id = request.group_instance_id
        if instance_id is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id=member_id), None
        existing = group.static_member(instance_id)
        if unknown:
            if existing is None:
                return ConsumerGroupMember(member_id=member_id), None
            return self._consumer.replace_static_member(group, existing, member_id, change), existing.member_id
        if existing is None:
            raise GroupError(ErrorCode.unknown_member_id)
        if existing.member_id != member_id:
            raise GroupError(ErrorCode.fenced_instance_id)
        return existing, None

    # ---- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------------

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
        if member is None or not member.uses_classic_protocol:
            raise GroupError(ErrorCode.unknown_member_id)
        return member

    def sync(self, container: Group, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        group = container.consumer
        assert group is not None
        try:
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise GroupError(ErrorCode.illegal_generation)
            assert member.classic is not None
            name = member.classic.supported_protocols[0][0]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                    (protocol_name is not None and protocol_name != name):
                raise GroupError(ErrorCode.inconsistent_group_protocol)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                self._schedule_join_timeout(group, member)
                raise GroupError(ErrorCode.rebalance_in_progress)
        except GroupError as error:
            return SyncResult(error.code)
        self._consumer.cancel(group, SYNC, member_id)
        self._consumer.schedule_session(group, member_id, self._consumer.session_timeout_of(group.group_id, member))
        version = subscription_version(member.classic.supported_protocols[0][1])
        return SyncResult(ErrorCode.none, encode_assignment(self._to_names(member.assigned_partitions), version),
                          CONSUMER_PROTOCOL_TYPE, name)

    def heartbeat(self, container: Group, generation_id: int, member_id: str, instance_id: str | None) -> ErrorCode:
        group = container.consumer
        assert group is not None
        try:
            member = self._classic_member(group, member_id, instance_id)
        except GroupError as error:
            return error.code
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        self._consumer.schedule_session(group, member_id, self._consumer.session_timeout_of(group.group_id, member))
        # It must rejoin when the group moved on, when it must revoke, or when partitions it
        # waits for became free.
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting(group, member))):
            self._schedule_join_timeout(group, member)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    @staticmethod
    def _waiting(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether a partition of its target is still owned by another member."""
        for topic_id, partitions in group.target_assignment.get(member.member_id, {}).items():
            assigned = member.assigned_partitions.get(topic_id, frozenset())
            if any(p not in assigned and group.partition_epoch(topic_id, p) != -1 for p in partitions):
                return True
        return False

    def leave(self, container: Group, leaving: Iterable[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        group = container.consumer
        assert group is not None
        results: list[ErrorCode] = []
        members: list[ConsumerGroupMember] = []
        for member_id, instance_id in leaving:
            try:
                if instance_id is None:
                    member = self._classic_member(group, member_id, None)
                else:
                    found = group.static_member(instance_id)
                    if found is None or not found.uses_classic_protocol:
                        raise GroupError(ErrorCode.unknown_member_id)
                    if member_id and found.member_id != member_id:
                        raise GroupError(ErrorCode.fenced_instance_id)
                    member = found
            except GroupError as error:
                results.append(error.code)
                continue
            log.info("group %s: classic member %s left", group.group_id, member.member_id)
            members.append(member)
            results.append(ErrorCode.none)
        if members:
            written = self._consumer.remove_members(group, members)
            if written != ErrorCode.none:
                return written, []
        return ErrorCode.none, results

    # ---- timers --------------------------------------------------------------------------------

    def _schedule_join_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        if (JOIN, member.member_id) not in group.timers:
            self._schedule_fence(group, JOIN, member.member_id, member.rebalance_timeout_ms,
                                 "it did not join again within its rebalance timeout")

    def _schedule_fence(self, group: ConsumerGroup, kind: str, member_id: str, timeout_ms: int, why: str) -> None:
        def expired() -> None:
            group.timers.pop((kind, member_id), None)
            member = group.members.get(member_id)
            if group.dead or member is None:
                return
            log.info("group %s: classic member %s fenced: %s", group.group_id, member_id, why)
            self._consumer.fence_member(group, member)

        self._consumer.schedule(group, kind, member_id, timeout_ms if timeout_ms > 0 else 300_000, expired)

