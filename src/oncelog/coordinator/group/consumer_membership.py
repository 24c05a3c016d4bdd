"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat, ConsumerGroupDescribe,
and the timers of consumer group members, as Kafka 4's GroupMetadataManager.

A heartbeat does three things, in Kafka's order:

1. it creates or updates the member (its subscription: topic names, regex, assignor,
   rack, rebalance timeout); a changed subscription, a changed set of subscribed topics
   (or of their partitions), or a regex resolving to other topics bumps the group epoch;
2. when the group epoch is ahead of the target assignment's, it computes a new target
   assignment with the group's assignor (the one most members ask for, else the first
   of group.consumer.assignors) and writes what changed;
3. it reconciles the member towards its target (reconciliation.py): revoke first, then
   assign what nobody else owns any more.

Everything that changed is written to the group's `__consumer_offsets` partition as one
batch of Kafka's consumer group records, and only then replayed into the group
(consumer_group.py), so a failed write changes nothing and loading rebuilds the same
state. The handler answers once the batch is on the ISR.

Members leave with epoch -1 (or -2, a static member that will come back); a member
that sends nothing for its session timeout is removed, and one that does not revoke
within its rebalance timeout is fenced. The session timeout and the heartbeat interval
a heartbeat answers are the group's own configs (`GroupTimings`: KIP-848's
consumer.session.timeout.ms and consumer.heartbeat.interval.ms, read at each
heartbeat), else the broker's group.consumer.session.timeout.ms and
group.consumer.heartbeat.interval.ms. A static member (instance id) that left with -2
may come back under a new member id and gets its assignment back without a rebalance.
A regex subscription (`subscribed_topic_regex`, RE2/J syntax, matched against whole
topic names with Python's `re`, internal topics excluded) is resolved when a member
brings it and refreshed at most every 10 s when topics come and go.

Deviations from Kafka: regular expressions are resolved synchronously in the heartbeat
(Kafka resolves them in the background); the topics a regex resolves to are those the
heartbeating member's principal may DESCRIBE. A dynamic member that joins again with
epoch 0 under the member id it already has (a fenced consumer keeps its id from v1 on)
gets its place back instead of FENCED_MEMBER_EPOCH until its session expires.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group import consumer_records as cr
from oncelog.coordinator.group import records as classic_records
from oncelog.coordinator.group.api import (
    AssignedTopic,
    ConsumerGroupSummary,
    ConsumerMemberSummary,
    GroupSettings,
    GroupTimings,
    HeartbeatRequest,
    HeartbeatResult,
    NoGroupTimings,
)
from oncelog.coordinator.group.assignment import EMPTY, Assignment, assignment, to_wire
from oncelog.coordinator.group.assignors import ASSIGNORS, GroupSpec, MemberSubscription, PartitionAssignorError
from oncelog.coordinator.group.consumer_group import (
    ConsumerGroup,
    Record,
    ResolvedRegex,
    TopicMetadata,
    current_assignment_record,
    epoch_record,
    group_removal_records,
    member_removal_records,
    member_subscription_record,
    regex_record,
    subscription_metadata_record,
    target_assignment_epoch_record,
    target_assignment_record,
    tombstone,
)
from oncelog.coordinator.group.consumer_member import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.persistence import WRITE_ERRORS, storage_error
from oncelog.coordinator.group.reconciliation import FencedMemberEpoch, reconcile
from oncelog.coordinator.group.records import GroupMetadataKey
from oncelog.coordinator.group.scheduler import Scheduler
from oncelog.coordinator.group.state import EMPTY as CLASSIC_EMPTY
from oncelog.coordinator.group.state import Group
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.record_batch import Record as LogRecord

log = logging.getLogger("oncelog.group")

# Kafka's REGEX_BATCH_REFRESH_INTERVAL_MS: regexes of a group are resolved again at most this often.
REGEX_REFRESH_INTERVAL_MS = 10_000
FIRST_CLIENT_MEMBER_ID_VERSION = 1  # from ConsumerGroupHeartbeat v1 on the client makes the member id
SESSION, REBALANCE = "session", "rebalance"


class TopicInfo(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def num_partitions(self) -> int: ...


class TopicsImage(Protocol):
    """The topics the coordinator assigns (the broker's LogManager): looked up one by one
    on every heartbeat, listed whole only to resolve regexes (at most every 10 s a group)."""

    def topic(self, name: str) -> TopicInfo | None: ...
    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...
    def topics(self) -> Mapping[str, TopicInfo]: ...


class GroupError(Exception):
    """A request this coordinator answers with an error code (and Kafka's message)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass
class Change:
    """What one operation writes to the group's partition, and what it does once stored."""

    records: list[Record] = field(default_factory=list)
    drops_classic_group: bool = False  # a GroupMetadata tombstone first: the classic group goes
    classic_records: list[LogRecord] = field(default_factory=list)  # last: a classic group takes over
    after: list[Callable[[], None]] = field(default_factory=list)


def encode(group_id: str, change: Change) -> list[LogRecord]:
    encoded = []
    if change.drops_classic_group:
        encoded.append(LogRecord(classic_records.encode_group_metadata_key(GroupMetadataKey(group_id)), None))
    for key, value in change.records:
        encoded.append(LogRecord(cr.encode_key(key), None if value is None else cr.encode_value(value)))
    encoded.extend(change.classic_records)
    return encoded


def compile_regex(regex: str) -> re.Pattern[str]:
    """An RE2/J regular expression as Python's `re`; GroupError(INVALID_REGULAR_EXPRESSION)
    for one RE2 would refuse (lookaround and backreferences are not RE2)."""
    if re.search(r"\(\?<?[=!]|\\[1-9]|\(\?P=", regex):
        raise GroupError(ErrorCode.invalid_regular_expression,
                         f"SubscribedTopicRegex `{regex}` is not a valid regular expression: lookaround and "
                         "backreferences are not supported.")
    try:
        return re.compile(regex)
    except re.error as error:
        raise GroupError(ErrorCode.invalid_regular_expression,
                         f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {error}.") from None


def topics_of(member: ConsumerGroupMember, resolved: Mapping[str, ResolvedRegex]) -> frozenset[str]:
    topics = member.subscribed_topic_names
    if member.subscribed_topic_regex:
        regex = resolved.get(member.subscribed_topic_regex)
        if regex is not None:
            topics = topics | regex.topics
    return topics


class ConsumerMembership:
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe on the coordinator's groups."""

    def __init__(self, groups: dict[str, Group], settings: GroupSettings, scheduler: Scheduler,
                 offsets_topic: OffsetsTopic, topics: TopicsImage, *, owner_error: Callable[[str], ErrorCode],
                 create_group: Callable[[str], Group], timings: GroupTimings | None = None) -> None:
        self._groups = groups
        self._settings = settings
        self._timings = timings or NoGroupTimings()
        self._scheduler = scheduler
        self._offsets_topic = offsets_topic
        self._topics = topics
        self._owner_error = owner_error
        self._create_group = create_group
        self.rebalances = 0  # group epoch bumps, for /metrics
        # The online migration between the protocols (classic_members.py), wired by the
        # coordinator: converting a classic group with members, converting back when the
        # last consumer protocol member leaves, and clearing a classic group taken over.
        self.upgrade: Callable[[Group, Change], ConsumerGroup | None] = lambda container, change: None
        self.downgrade: Callable[[ConsumerGroup, ConsumerGroupMember], ErrorCode | None] = lambda group, m: None
        self.classic_dropped: Callable[[Group], None] = _reset_classic

    def _now(self) -> int:
        return self._scheduler.now_ms()

    # ---- writing and replaying ---------------------------------------------------------------

    def write(self, group_id: str, change: Change) -> ErrorCode:
        """Append the change as one batch, then apply it; the error to answer when the
        append fails (nothing changed then)."""
        if not change.records and not change.drops_classic_group:
            for action in change.after:
                action()
            return ErrorCode.none
        partition = self._offsets_topic.partition_for(group_id)
        try:
            self._offsets_topic.append(partition, encode(group_id, change), now_ms=self._now())
        except WRITE_ERRORS as error:
            log.error("group %s: storing consumer group records failed: %s", group_id, error)
            return storage_error(error)
        if change.drops_classic_group:
            container = self._groups.get(group_id)
            if container is not None:
                self.classic_dropped(container)
        for key, value in change.records:
            self.replay(group_id, key, value)
        for action in change.after:
            action()
        return ErrorCode.none

    def replay(self, group_id: str, key: cr.ConsumerGroupKey, value: cr.ConsumerGroupValue | None) -> None:
        container = self._groups.get(group_id)
        if key.version == cr.GROUP_METADATA_KEY and value is None:
            if container is not None and container.consumer is not None:
                self.cancel_timers(container.consumer)
                container.consumer.dead = True
                container.consumer = None
            return
        if container is None:
            container = self._create_group(group_id)
        if container.consumer is None:
            container.consumer = ConsumerGroup(group_id)
        container.consumer.replay(key, value)

    # ---- ConsumerGroupHeartbeat --------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, describable: Callable[[str], bool] | None = None
                  ) -> HeartbeatResult:
        """One heartbeat: join (epoch 0), heartbeat, or leave (-1, -2). `describable` says
        which topics the member's principal may see (for its regex)."""
        try:
            if not request.group_id:
                return HeartbeatResult(ErrorCode.invalid_group_id)
            self._validate(request)
            owner = self._owner_error(request.group_id)
            if owner != ErrorCode.none:
                return HeartbeatResult(owner)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request)
            return self._heartbeat(request, describable or (lambda topic: True))
        except GroupError as error:
            return HeartbeatResult(error.code, error.message)
        except FencedMemberEpoch as error:
            return HeartbeatResult(ErrorCode.fenced_member_epoch, str(error))
        except PartitionAssignorError as error:
            log.error("group %s: computing the target assignment failed: %s", request.group_id, error)
            return HeartbeatResult(ErrorCode.unknown_server_error, f"Failed to compute a new target assignment: "
                                                                     f"{error}")

    def _validate(self, request: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: INVALID_REQUEST,
        UNSUPPORTED_ASSIGNOR."""
        def invalid(message: str) -> GroupError:
            return GroupError(ErrorCode.invalid_request, message)

        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        if request.api_version >= FIRST_CLIENT_MEMBER_ID_VERSION and not request.member_id:
            raise invalid("MemberId can't be empty.")
        epoch = request.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not request.member_id:
                raise invalid("MemberId can't be empty.")
        elif epoch == JOIN_GROUP_MEMBER_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned_partitions is None or request.owned_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not request.member_id:
                raise invalid("MemberId can't be empty.")
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        assignor = request.server_assignor
        if assignor is not None and assignor not in self._settings.consumer_assignors:
            raise GroupError(ErrorCode.unsupported_assignor,
                             f"ServerAssignor {assignor} is not supported. Supported assignors: "
                             f"{', '.join(self._settings.consumer_assignors)}.")

    def _heartbeat(self, request: HeartbeatRequest, describable: Callable[[str], bool]) -> HeartbeatResult:
        group_id = request.group_id
        now = self._now()
        change = Change()
        joining = request.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._consumer_group_for(group_id, joining, change)
        if len(group.members) >= self._settings.consumer_max_size and (
                not request.member_id or request.member_id not in group.members):
            raise GroupError(ErrorCode.group_max_size_reached,
                             f"The consumer group has reached its maximum capacity of "
                             f"{self._settings.consumer_max_size} members.")
        member_id = request.member_id or str(uuid.uuid4())
        stored = group.members.get(member_id)
        member, replaced = self._member_for(group, request, member_id, change)
        owned = None if request.owned_partitions is None else assignment(request.owned_partitions)

        # 1. The member's subscription; a change of what the group subscribes to bumps its epoch.
        updated = replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(frozenset(request.subscribed_topic_names)
                                    if request.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(request.subscribed_topic_regex if request.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=request.client_id, client_host=request.client_host, classic=None,
        )
        bump = group.group_epoch == 0
        if stored is None or replaced is not None or not updated.same_subscription(stored):
            change.records.append(member_subscription_record(group_id, updated))
            bump = bump or updated.subscribed_topic_names != member.subscribed_topic_names
        regex_bump, resolved = self._update_regexes(group, member, updated, change, now, describable)
        reconciled, assignment_changed = self.update_and_reconcile(
            group, updated, stored, replaced, owned, resolved, bump or regex_bump, change)

        def scheduled() -> None:
            live = self.live_group(group_id)
            if live is None:
                return
            if replaced is not None:
                self.cancel_member_timers(live, replaced)
            self.schedule_session(live, reconciled.member_id, self.session_timeout_of(group_id, reconciled))
            if assignment_changed:
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(live, reconciled)
                else:
                    self.cancel(live, REBALANCE, reconciled.member_id)

        change.after.append(scheduled)
        error = self.write(group_id, change)
        if error != ErrorCode.none:
            return HeartbeatResult(error)
        if stored is None:
            log.info("group %s: member %s joined (epoch %d)%s", group_id, member_id, reconciled.member_epoch,
                     f" as static member {updated.instance_id}" if updated.instance_id else "")
        full_request = joining or (request.rebalance_timeout_ms != -1 and request.subscribed_topic_names is not None
                                   and request.owned_partitions is not None)
        send_assignment = full_request or reconciled.assigned_partitions != member.assigned_partitions
        return HeartbeatResult(
            ErrorCode.none, member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_of(group_id),
            assignment=reconciled.assigned_partitions if send_assignment else None,
        )

    def update_and_reconcile(self, group: ConsumerGroup, updated: ConsumerGroupMember,
                             stored: ConsumerGroupMember | None, replaced: str | None, owned: Assignment | None,
                             resolved: Mapping[str, ResolvedRegex], bump: bool, change: Change
                             ) -> tuple[ConsumerGroupMember, bool]:
        """Steps 2 and 3 of a heartbeat (or of a classic member's JoinGroup) once the member's
        subscription is known: bump the group epoch if what the group subscribes to moved,
        compute the target assignment if the epoch moved past it, reconcile the member.
        The reconciled member, and whether its assignment record was written."""
        members_after = dict(group.members)
        if replaced is not None:
            members_after.pop(replaced, None)
        members_after[updated.member_id] = updated
        group_epoch = self._maybe_bump_epoch(group, members_after, resolved, bump, change)
        if group_epoch > group.assignment_epoch:
            targets = self._update_target(group, members_after, resolved, group_epoch, change)
            target_epoch, target = group_epoch, targets.get(updated.member_id, EMPTY)
        else:
            target_epoch, target = group.assignment_epoch, group.target_of(updated.member_id, updated.instance_id)
        reconciled = updated
        if not updated.is_reconciled_to(target_epoch):
            reconciled = reconcile(updated, target_epoch, target, group.partition_epoch, owned)
        assignment_changed = stored is None or replaced is not None or not reconciled.same_assignment_state(stored)
        if assignment_changed:
            change.records.append(current_assignment_record(group.group_id, reconciled))
        return reconciled, assignment_changed

    def _consumer_group_for(self, group_id: str, joining: bool, change: Change) -> ConsumerGroup:
        """The group to heartbeat to: the consumer group, a new one (first member, or an
        empty classic group taken over), or GROUP_ID_NOT_FOUND."""
        container = self._groups.get(group_id)
        if container is not None and container.consumer is not None:
            return container.consumer
        if container is None:
            if not joining:
                raise GroupError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id)
        if joining and _is_empty_classic(container):
            log.info("group %s: the empty classic group becomes a consumer group", group_id)
            change.drops_classic_group = True
            return ConsumerGroup(group_id)
        if joining:
            upgraded = self.upgrade(container, change)
            if upgraded is not None:
                return upgraded
        raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")

    def _member_for(self, group: ConsumerGroup, request: HeartbeatRequest, member_id: str,
                    change: Change) -> tuple[ConsumerGroupMember, str | None]:
        """The member as it is before this heartbeat (new, existing, or a static member's
        new incarnation), and the member id it replaces, if any."""
        epoch = request.member_epoch
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        instance_id = request.instance_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise GroupError(ErrorCode.unknown_member_id,
                                     f"Member {member_id} is not a member of group {group.group_id}.")
                return ConsumerGroupMember(member_id=member_id), None
            if joining and member.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                # The same consumer joins again (it was fenced, or restarted its membership):
                # it owns nothing now, and gets back what it was assigned.
                return replace(member, member_epoch=0, previous_member_epoch=0,
                               partitions_pending_revocation=EMPTY), None
            _check_epoch(member, epoch, request.owned_partitions)
            return member, None
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id=member_id), None
            if existing.member_id == member_id:
                return replace(existing, member_epoch=0, previous_member_epoch=0,
                               partitions_pending_revocation=EMPTY), None
            if not existing.uses_classic_protocol and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise GroupError(ErrorCode.unreleased_instance_id,
                                 f"Static member {member_id} with instance id {instance_id} cannot join the group "
                                 f"because the instance id is owned by {existing.member_id} member.")
            return self.replace_static_member(group, existing, member_id, change), existing.member_id
        if existing is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(ErrorCode.fenced_instance_id,
                             f"Static member {member_id} with instance id {instance_id} was fenced by member "
                             f"{existing.member_id}.")
        _check_epoch(existing, epoch, request.owned_partitions)
        return existing, None

    @staticmethod
    def replace_static_member(group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str,
                              change: Change) -> ConsumerGroupMember:
        """A static member comes back under a new member id: it takes over the old one's
        place, its target and its partitions (Kafka's replaceMember)."""
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0,
                      partitions_pending_revocation=EMPTY)
        change.records.extend(member_removal_records(group.group_id, existing.member_id))
        change.records.append(member_subscription_record(group.group_id, new))
        change.records.append(target_assignment_record(group.group_id, member_id,
                                                       group.target_of(existing.member_id)))
        change.records.append(current_assignment_record(group.group_id, new))
        log.info("group %s: static member %s rejoins as %s (was %s)", group.group_id, existing.instance_id,
                 member_id, existing.member_id)
        return new

    def _update_regexes(self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                        change: Change, now: int, describable: Callable[[str], bool]
                        ) -> tuple[bool, dict[str, ResolvedRegex]]:
        """Resolve the group's regexes when one is new, or when topics came or went (at most
        every 10 s). Whether the group epoch must move, and the resolutions after this."""
        old, new = member.subscribed_topic_regex or None, updated.subscribed_topic_regex or None
        resolved = dict(group.resolved_regexes)
        counts = group.subscribed_regexes()
        bump = refresh = False
        if old != new:
            if old and counts[old] <= 1:
                change.records.append(tombstone(cr.REGULAR_EXPRESSION_KEY, group.group_id, old))
                resolved.pop(old, None)
            if new:
                if counts[new] == 0:
                    compile_regex(new)
                    refresh = True
                else:
                    bump = new in resolved
        after = counts.copy()
        if old:
            after[old] -= 1
        if new:
            after[new] += 1
        regexes = sorted(regex for regex, n in after.items() if n > 0)
        if not regexes:
            return bump, resolved
        if not refresh and now <= group.regex_refreshed_ms + REGEX_REFRESH_INTERVAL_MS:
            return bump, resolved
        names = frozenset(self._topics.topics())
        if not refresh and set(regexes) == set(resolved) and names == group.regex_topics_seen:
            group.regex_refreshed_ms = now  # looked: nothing new (soft state, not written)
            return bump, resolved
        candidates = [name for name in names if name not in INTERNAL_TOPICS]
        for regex in regexes:
            try:
                pattern = compile_regex(regex)
            except GroupError:
                log.error("group %s: cannot resolve regular expression %r; ignoring it", group.group_id, regex)
                continue
            topics = frozenset(t for t in candidates if pattern.fullmatch(t) and describable(t))
            previous = resolved.get(regex)
            if previous is None or previous.topics != topics:
                bump = True
            resolved[regex] = ResolvedRegex(topics, now, now)
            change.records.append(regex_record(group.group_id, regex, resolved[regex]))

        def refreshed() -> None:
            live = self.live_group(group.group_id)
            if live is not None:
                live.regex_refreshed_ms, live.regex_topics_seen = now, names

        change.after.append(refreshed)
        return bump, resolved

    def _maybe_bump_epoch(self, group: ConsumerGroup, members_after: Mapping[str, ConsumerGroupMember],
                          resolved: Mapping[str, ResolvedRegex], bump: bool, change: Change) -> int:
        """Recompute which subscribed topics exist (and their partitions): a difference, or
        `bump`, moves the group epoch. The group epoch after the change."""
        metadata = subscription_metadata(members_after.values(), resolved, self._topics)
        if metadata != group.subscription_metadata:
            change.records.append(subscription_metadata_record(group.group_id, metadata))
            bump = True
        if not bump:
            return group.group_epoch
        epoch = group.group_epoch + 1
        change.records.append(epoch_record(group.group_id, epoch))
        change.after.append(self._count_rebalance)
        log.info("group %s: group epoch bumped to %d", group.group_id, epoch)
        return epoch

    def _count_rebalance(self) -> None:
        self.rebalances += 1

    def _update_target(self, group: ConsumerGroup, members_after: Mapping[str, ConsumerGroupMember],
                       resolved: Mapping[str, ResolvedRegex], group_epoch: int, change: Change
                       ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        """A new target assignment at `group_epoch` (Kafka's TargetAssignmentBuilder): the
        records of the members whose target changed, then the assignment epoch's."""
        metadata = subscription_metadata(members_after.values(), resolved, self._topics)
        topic_ids = {name: topic.topic_id for name, topic in metadata.items()}
        votes: dict[str, int] = {}
        for member in members_after.values():
            if member.server_assignor:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        assignor_name = max(votes, key=lambda name: votes[name]) if votes else self._settings.consumer_assignors[0]
        spec = GroupSpec(
            members={
                member_id: MemberSubscription(member.instance_id, frozenset(
                    topic_ids[name] for name in topics_of(member, resolved) if name in topic_ids))
                for member_id, member in members_after.items()
            },
            partition_counts={topic.topic_id: topic.num_partitions for topic in metadata.values()},
            current={member_id: group.target_of(member_id, member.instance_id)
                     for member_id, member in members_after.items()},
        )
        targets = ASSIGNORS[assignor_name].assign(spec)
        for member_id in members_after:
            target = targets.get(member_id, {})
            if member_id not in group.target_assignment or group.target_assignment[member_id] != target:
                change.records.append(target_assignment_record(group.group_id, member_id, target))
        change.records.append(target_assignment_epoch_record(group.group_id, group_epoch))
        log.info("group %s: computed a new target assignment for epoch %d with the %s assignor",
                 group.group_id, group_epoch, assignor_name)
        return targets

    # ---- leaving ---------------------------------------------------------------------------

    def _leave(self, request: HeartbeatRequest) -> HeartbeatResult:
        group_id, member_id, instance_id = request.group_id, request.member_id, request.instance_id
        container = self._groups.get(group_id)
        group = container.consumer if container is not None else None
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {group_id}.")
            log.info("group %s: member %s left", group_id, member_id)
            error = self.fence_member(group, member)
            return HeartbeatResult(error, member_id=member_id, member_epoch=request.member_epoch)
        static = group.static_member(instance_id)
        if static is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if static.member_id != member_id:
            raise GroupError(ErrorCode.fenced_instance_id,
                             f"Static member {member_id} with instance id {instance_id} was fenced by member "
                             f"{static.member_id}.")
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # It keeps its place and its partitions until its session expires or it comes back.
            leaving = replace(static, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation=EMPTY)
            log.info("group %s: static member %s (instance %s) left for now", group_id, member_id, instance_id)
            error = self.write(group_id, Change([current_assignment_record(group_id, leaving)]))
            return HeartbeatResult(error, member_id=member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        log.info("group %s: static member %s (instance %s) left", group_id, member_id, instance_id)
        error = self.fence_member(group, static)
        return HeartbeatResult(error, member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def fence_member(self, group: ConsumerGroup, member: ConsumerGroupMember) -> ErrorCode:
        """Remove the member: its records are tombstoned and the group epoch moves on, so
        the others get its partitions. When it was the last member speaking the consumer
        protocol, the group may become a classic group again (the online downgrade)."""
        downgraded = self.downgrade(group, member)
        if downgraded is not None:
            return downgraded
        return self.remove_members(group, [member])

    def remove_members(self, group: ConsumerGroup, leaving: list[ConsumerGroupMember]) -> ErrorCode:
        group_id = group.group_id
        change = Change()
        resolved = dict(group.resolved_regexes)
        counts = group.subscribed_regexes()
        gone = {member.member_id for member in leaving}
        for member in leaving:
            change.records.extend(member_removal_records(group_id, member.member_id))
            regex = member.subscribed_topic_regex
            if regex:
                counts[regex] -= 1
                if counts[regex] <= 0 and regex in resolved:
                    change.records.append(tombstone(cr.REGULAR_EXPRESSION_KEY, group_id, regex))
                    del resolved[regex]
        others = [m for m in group.members.values() if m.member_id not in gone]
        metadata = subscription_metadata(others, resolved, self._topics)
        if metadata != group.subscription_metadata:
            change.records.append(subscription_metadata_record(group_id, metadata))
        change.records.append(epoch_record(group_id, group.group_epoch + 1))
        change.after.append(self._count_rebalance)

        def cancel_timers() -> None:
            for member_id in gone:
                self.cancel_member_timers(group, member_id)

        change.after.append(cancel_timers)
        return self.write(group_id, change)

    # ---- timers ----------------------------------------------------------------------------

    def live_group(self, group_id: str) -> ConsumerGroup | None:
        container = self._groups.get(group_id)
        return container.consumer if container is not None else None

    def schedule(self, group: ConsumerGroup, kind: str, member_id: str, delay_ms: int,
                  callback: Callable[[], None]) -> None:
        self.cancel(group, kind, member_id)
        group.timers[(kind, member_id)] = self._scheduler.call_later(delay_ms, callback)

    @staticmethod
    def cancel(group: ConsumerGroup, kind: str, member_id: str) -> None:
        timer = group.timers.pop((kind, member_id), None)
        if timer is not None:
            timer.cancel()

    def cancel_member_timers(self, group: ConsumerGroup, member_id: str) -> None:
        for kind, timer_member in list(group.timers):
            if timer_member == member_id:
                self.cancel(group, kind, member_id)

    def cancel_timers(self, group: ConsumerGroup) -> None:
        for timer in group.timers.values():
            timer.cancel()
        group.timers.clear()

    def schedule_session(self, group: ConsumerGroup, member_id: str, timeout_ms: int) -> None:
        self.schedule(group, SESSION, member_id, timeout_ms, lambda: self._session_expired(group, member_id))

    def _session_expired(self, group: ConsumerGroup, member_id: str) -> None:
        group.timers.pop((SESSION, member_id), None)
        member = group.members.get(member_id)
        if group.dead or member is None:
            return
        log.info("group %s: member %s fenced: its session expired", group.group_id, member_id)
        if self.fence_member(group, member) != ErrorCode.none:
            log.warning("group %s: could not remove member %s; trying again at its next session timeout",
                        group.group_id, member_id)
            self.schedule_session(group, member_id, self.session_timeout_of(group.group_id, member))

    @property
    def settings(self) -> GroupSettings:
        return self._settings

    def session_timeout_of(self, group_id: str, member: ConsumerGroupMember) -> int:
        """A classic member keeps the session timeout it joined with; the others get the
        group's own (consumer.session.timeout.ms), else the coordinator's."""
        if member.classic is not None and member.classic.session_timeout_ms > 0:
            return member.classic.session_timeout_ms
        own = self._timings.session_timeout_ms(group_id)
        return self._settings.consumer_session_timeout_ms if own is None else own

    def heartbeat_interval_of(self, group_id: str) -> int:
        """The group's own consumer.heartbeat.interval.ms, else the coordinator's."""
        own = self._timings.heartbeat_interval_ms(group_id)
        return self._settings.consumer_heartbeat_interval_ms if own is None else own

    def _schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 300_000

        def expired() -> None:
            group.timers.pop((REBALANCE, member_id), None)
            current = group.members.get(member_id)
            if group.dead or current is None or current.member_epoch != epoch:
                return
            log.info("group %s: member %s fenced: it did not revoke its partitions within %d ms", group.group_id,
                     member_id, timeout)
            self.fence_member(group, current)

        self.schedule(group, REBALANCE, member_id, timeout, expired)

    def on_loaded(self, group: ConsumerGroup) -> None:
        """A loaded group's members must heartbeat again within their session (Kafka's onLoaded)."""
        for member in group.members.values():
            self.schedule_session(group, member.member_id, self.session_timeout_of(group.group_id, member))
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group, member)

    # ---- deleting and converting ---------------------------------------------------------------

    def release_empty_group(self, container: Group) -> ErrorCode:
        """An empty consumer group becomes a classic one (a JoinGroup arrived for it): its
        records are tombstoned, its offsets stay."""
        group = container.consumer
        assert group is not None and group.is_empty, "only an empty consumer group is released"
        log.info("group %s: the empty consumer group becomes a classic group", group.group_id)
        return self.write(group.group_id, Change(group_removal_records(group)))

    # ---- ConsumerGroupDescribe ---------------------------------------------------------------

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroupSummary | None]:
        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, None, None
        container = self._groups.get(group_id)
        if container is None:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
        group = container.consumer
        if group is None:
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.", None
        names: dict[uuid.UUID, str | None] = {t.topic_id: name for name, t in group.subscription_metadata.items()}

        def name_of(topic_id: uuid.UUID) -> str | None:
            if topic_id not in names:
                info = self._topics.topic_by_id(topic_id)
                names[topic_id] = info.name if info is not None else None
            return names[topic_id]

        def topics(value: Assignment) -> tuple[AssignedTopic, ...]:
            named = ((topic_id, name_of(topic_id), partitions) for topic_id, partitions in to_wire(value))
            return tuple(AssignedTopic(topic_id, name, tuple(partitions)) for topic_id, name, partitions in named
                         if name is not None)

        members = tuple(
            ConsumerMemberSummary(
                member.member_id, member.instance_id, member.rack_id, member.member_epoch, member.client_id,
                member.client_host, tuple(sorted(member.subscribed_topic_names)), member.subscribed_topic_regex,
                topics(member.assigned_partitions), topics(group.target_assignment.get(member.member_id, EMPTY)),
                member.uses_classic_protocol,
            )
            for member in group.members.values()
        )
        return ErrorCode.none, None, ConsumerGroupSummary(
            group_id, group.state.value, group.group_epoch, group.assignment_epoch,
            group.preferred_assignor() or self._settings.consumer_assignors[0], members,
        )


def subscription_metadata(members: Iterable[ConsumerGroupMember], resolved: Mapping[str, ResolvedRegex],
                          topics_image: TopicsImage) -> dict[str, TopicMetadata]:
    """The subscribed topics that exist, with their ids and partition counts."""
    names: set[str] = set()
    for member in members:
        names |= topics_of(member, resolved)
    metadata = {}
    for name in names:
        info = topics_image.topic(name)
        if info is not None:
            metadata[name] = TopicMetadata(info.topic_id, name, info.num_partitions)
    return metadata


def _check_epoch(member: ConsumerGroupMember, received: int, owned) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: the member's epoch, or the one
    before it when the answer that moved it on may have been lost (and it owns no more
    than it is assigned)."""
    if received > member.member_epoch:
        raise FencedMemberEpoch(f"The consumer group member has a greater member epoch ({received}) than the one "
                                f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                "all its partitions and rejoin.")
    if received < member.member_epoch:
        owned_assignment = None if owned is None else assignment(owned)
        subset = owned_assignment is not None and all(
            partitions <= member.assigned_partitions.get(topic_id, frozenset())
            for topic_id, partitions in owned_assignment.items())
        if received != member.previous_member_epoch or not subset:
            raise FencedMemberEpoch(f"The consumer group member has a smaller member epoch ({received}) than the one "
                                    f"known by the group coordinator ({member.member_epoch}). The member must "
                                    "abandon all its partitions and rejoin.")


def _is_empty_classic(container: Group) -> bool:
    return container.consumer is None and container.state is CLASSIC_EMPTY and not container.members \
        and not container.pending_members


def _reset_classic(container: Group) -> None:
    """The classic group's metadata was tombstoned: what remains is its offsets."""
    container.generation_id = 0
    container.protocol_type = container.protocol_name = container.leader_id = None
    container.subscribed_topics = None
