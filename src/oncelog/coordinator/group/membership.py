"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Owns how members come and go and how a group moves through its rebalances: session and
rebalance timeouts, the initial rebalance delay, static membership (KIP-345), the member
id handshake (KIP-394), electing the leader, storing its assignment and handing it out.
JoinGroup and SyncGroup answer with a future that a later request or timer completes;
timers come from the scheduler and live on the group and its members, so
`schedule_heartbeat`, `cancel_group_timers` and `release_member` are also what offset
storage and partition loading use to touch them.

It works on the coordinator's groups dict; a new group is made by the coordinator
(`create_group`). The group's states and transitions are in `state.py`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.api import GroupSettings, JoinedMember, JoinRequest, JoinResult, SyncResult
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.persistence import WRITE_ERRORS, persist_group, storage_error, try_persist_group
from oncelog.coordinator.group.scheduler import Scheduler
from oncelog.coordinator.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    Member,
)

log = logging.getLogger("oncelog.group")

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a member that joined during a
# rebalance may wait for it to finish before it is dropped.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


def _resolve(waiter: asyncio.Future | None, result) -> None:
    """Answer a waiting JoinGroup/SyncGroup; its connection may have gone away meanwhile."""
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


class Membership:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup on the coordinator's groups, and the
    rebalances, session timers and member removals they start."""

    def __init__(self, groups: dict[str, Group], settings: GroupSettings, scheduler: Scheduler,
                 offsets_topic: OffsetsTopic, *, owner_error: Callable[[str], ErrorCode],
                 create_group: Callable[[str], Group]) -> None:
        self._groups = groups
        self._settings = settings
        self._scheduler = scheduler
        self._offsets_topic = offsets_topic  # where the group's GroupMetadata record goes
        self._owner_error = owner_error
        self._create_group = create_group
        self.rebalances = 0  # rebalances begun (PreparingRebalance entered), for /metrics

    def _now(self) -> int:
        return self._scheduler.now_ms()

    # ---- JoinGroup -----------------------------------------------------------------------

    def join_group(self, request: JoinRequest) -> asyncio.Future:
        """Returns a future of JoinResult: done now for errors and immediate answers,
        otherwise when the rebalance completes."""
        waiter = asyncio.get_running_loop().create_future()
        self._join(request, waiter)
        return waiter

    def _join(self, request: JoinRequest, waiter: asyncio.Future) -> None:
        def fail(error: ErrorCode, member_id: str = request.member_id) -> None:
            _resolve(waiter, JoinResult(error, member_id=member_id))

        if not request.group_id:
            return fail(ErrorCode.invalid_group_id)
        owner = self._owner_error(request.group_id)
        if owner != ErrorCode.none:
            return fail(owner)
        settings = self._settings
        if not settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms:
            return fail(ErrorCode.invalid_session_timeout)
        unknown_member = request.member_id == ""
        group = self._groups.get(request.group_id)
        if group is None:
            if not unknown_member:
                return fail(ErrorCode.unknown_member_id)
            group = self._create_group(request.group_id)
        if not self._accepts_joining_member(group, request):
            log.info("group %s: member %r refused, group.max.size=%d reached",
                     group.group_id, request.member_id, settings.max_size)
            return fail(ErrorCode.group_max_size_reached)
        if unknown_member:
            self._join_new_member(group, request, waiter)
        else:
            self._join_known_member(group, request, waiter)

    def _accepts_joining_member(self, group: Group, request: JoinRequest) -> bool:
        """group.max.size: members already counted (a known member id, or a restarted
        static member's instance id) may always rejoin."""
        limit = self._settings.max_size
        member_id = request.member_id or group.static_members.get(request.group_instance_id or "", "")
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.awaiting_join_count < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group: Group, request: JoinRequest, waiter: asyncio.Future) -> None:
        if group.is_(DEAD):
            return _resolve(waiter, JoinResult(ErrorCode.coordinator_not_available))
        if not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
            return _resolve(waiter, JoinResult(ErrorCode.inconsistent_group_protocol))
        prefix = request.group_instance_id if request.group_instance_id is not None else request.client_id
        new_member_id = f"{prefix}-{uuid.uuid4()}"
        if request.group_instance_id is not None:
            old_member_id = group.static_members.get(request.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, old_member_id, new_member_id, request, waiter)
            return self._add_member_and_rebalance(group, new_member_id, request, waiter)
        if request.require_known_member_id:
            # KIP-394: hand out the id first; the member joins with it in a second request.
            group.pending_members.add(new_member_id)
            self._scheduler.call_later(
                request.session_timeout_ms, lambda: self._expire_pending_member(group, new_member_id)
            )
            return _resolve(waiter, JoinResult(ErrorCode.member_id_required, member_id=new_member_id))
        self._add_member_and_rebalance(group, new_member_id, request, waiter)

    def _join_known_member(self, group: Group, request: JoinRequest, waiter: asyncio.Future) -> None:
        member_id = request.member_id
        if group.is_(DEAD):
            return _resolve(waiter, JoinResult(ErrorCode.coordinator_not_available, member_id=member_id))
        if not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
            return _resolve(waiter, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, member_id, request, waiter)
        error = group.validate_member(member_id, request.group_instance_id)
        if error != ErrorCode.none:
            return _resolve(waiter, JoinResult(error, member_id=member_id))
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, waiter, "member rejoined during rebalance")
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # It lost the response to its join: answer again for the current generation.
                _resolve(waiter, self._join_result(group, member, with_members=group.leader_id == member_id))
            else:
                self._update_member_and_rebalance(group, member, request, waiter,
                                                  f"member {member_id} changed its metadata")
        elif group.is_(STABLE):
            if group.leader_id == member_id:
                # The leader rejoins to reassign (e.g. the topics' partitions changed).
                self._update_member_and_rebalance(group, member, request, waiter,
                                                  f"leader {member_id} rejoined")
            elif not member.matches(request.protocols):
                self._update_member_and_rebalance(group, member, request, waiter,
                                                  f"member {member_id} changed its metadata")
            else:
                _resolve(waiter, self._join_result(group, member, with_members=False))
        else:  # EMPTY: no members, validate_member already refused
            _resolve(waiter, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))

    def _join_result(self, group: Group, member: Member, *, with_members: bool, leader_id: str | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if with_members:
            members = tuple(JoinedMember(*entry) for entry in group.current_member_metadata())
        return JoinResult(
            ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(leader_id if leader_id is not None else group.leader_id) or "",
            skip_assignment=skip_assignment,
            members=members,
        )

    def _add_member_and_rebalance(self, group: Group, member_id: str, request: JoinRequest,
                                  waiter: asyncio.Future) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(request.protocols),
            join_waiter=waiter,
            is_new=True,
        )
        group.add_member(member)
        if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        # A new member must see its rebalance complete within this time, or it is dropped.
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}"
                                      + (f" with instance id {member.group_instance_id}" if member.is_static else ""))
        self._try_complete_join(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, request: JoinRequest,
                                     waiter: asyncio.Future, reason: str) -> None:
        self._update_member(member, request, waiter)
        self._maybe_prepare_rebalance(group, reason)
        self._try_complete_join(group)

    def _update_member(self, member: Member, request: JoinRequest, waiter: asyncio.Future) -> None:
        member.protocols = tuple(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # An earlier JoinGroup of the same member is still open: the newer one takes over.
            _resolve(member.join_waiter, JoinResult(ErrorCode.rebalance_in_progress, member_id=member.member_id))
        member.join_waiter = waiter

    def _replace_static_member(self, group: Group, old_member_id: str, new_member_id: str,
                               request: JoinRequest, waiter: asyncio.Future) -> None:
        """A known group.instance.id joins with no member id (it restarted): it takes over
        its old place under a new id, fencing the old id. In a Stable group with
        unchanged protocol metadata it keeps its assignment without a rebalance."""
        member = group.members[old_member_id]
        old_leader_id = group.leader_id
        old_protocols = member.protocols
        old_protocol_name = group.protocol_name
        # Whatever the old incarnation still waits for is fenced.
        _resolve(member.join_waiter, JoinResult(ErrorCode.fenced_instance_id, member_id=old_member_id))
        _resolve(member.sync_waiter, SyncResult(ErrorCode.fenced_instance_id))
        member.join_waiter = member.sync_waiter = None
        assert request.group_instance_id is not None  # a static member
        group.replace_static_member(request.group_instance_id, old_member_id, new_member_id)
        self._update_member(member, request, waiter)
        self.schedule_heartbeat(group, member, member.session_timeout_ms)
        log.info("group %s: static member %s rejoined as %s (was %s)",
                 group.group_id, request.group_instance_id, new_member_id, old_member_id)
        if group.is_(STABLE):
            if group.select_protocol() == old_protocol_name and member.matches(old_protocols):
                self._complete_static_rejoin(group, member, old_member_id, old_leader_id, request)
            else:
                self._prepare_rebalance(group, f"static member {request.group_instance_id} rejoined "
                                               "with changed protocol metadata")
        elif group.is_(COMPLETING_REBALANCE):
            # The leader may already be assigning with the old member id: start over.
            self._prepare_rebalance(group, f"static member {request.group_instance_id} rejoined "
                                           "while the group was completing a rebalance")
        else:  # PREPARING_REBALANCE: it simply counts as joined
            self._try_complete_join(group)

    def _complete_static_rejoin(self, group: Group, member: Member, old_member_id: str,
                                old_leader_id: str | None, request: JoinRequest) -> None:
        """Persist the new member id and answer the join at once, without a rebalance."""
        try:
            persist_group(self._offsets_topic, group, self._now())
        except WRITE_ERRORS as error:
            # Undo: the old id stays valid, the new one never existed.
            log.warning("group %s: could not store static member rejoin: %s", group.group_id, error)
            waiter, member.join_waiter = member.join_waiter, None
            assert request.group_instance_id is not None  # a static member
            group.replace_static_member(request.group_instance_id, member.member_id, old_member_id)
            _resolve(waiter, JoinResult(storage_error(error), member_id=""))
            return
        waiter, member.join_waiter = member.join_waiter, None
        member.is_new = False
        is_leader = group.leader_id == member.member_id
        if is_leader and request.supports_skip_assignment:
            # KIP-814: the leader learns the members' metadata but must not reassign.
            result = self._join_result(group, member, with_members=True, skip_assignment=True)
        else:
            # Older clients: report the old leader id so that the rejoined member, whose new
            # id does not match it, does not compute an assignment a Stable group would drop.
            leader = old_member_id if is_leader else (old_leader_id or "")
            result = self._join_result(group, member, with_members=False, leader_id=leader)
        _resolve(waiter, result)

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.debug("group %s: pending member %s did not join within its session timeout",
                      group.group_id, member_id)
            self._try_complete_join(group)

    # ---- rebalancing ---------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        """Start a rebalance (a consumer group just became this classic group again)."""
        self._maybe_prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self.cancel_group_timers(group)
        group.pending_sync_members.clear()
        if group.is_(EMPTY):
            # The first rebalance of an empty group waits for more members to arrive.
            delay = self._settings.initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms - delay, 0)
            group.initial_join_in_progress = True
            group.new_member_added = False
            group.join_timer = self._scheduler.call_later(
                delay, lambda: self._initial_join_delay_expired(group, remaining)
            )
        else:
            group.join_timer = self._scheduler.call_later(
                group.max_rebalance_timeout_ms, lambda: self._complete_join(group)
            )
        previous = group.state
        group.transition_to(PREPARING_REBALANCE, self._now())
        self.rebalances += 1
        log.info("group %s: preparing to rebalance in state %s with old generation %d (reason: %s)",
                 group.group_id, previous.value, group.generation_id, reason)
        self._try_complete_join(group)  # e.g. the last member left: nobody to wait for

    def _initial_join_delay_expired(self, group: Group, remaining_ms: int) -> None:
        if not group.is_(PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self._settings.initial_rebalance_delay_ms, remaining_ms)
            left = max(remaining_ms - delay, 0)
            group.join_timer = self._scheduler.call_later(
                delay, lambda: self._initial_join_delay_expired(group, left)
            )
            return
        group.initial_join_in_progress = False
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.is_(PREPARING_REBALANCE) and not group.initial_join_in_progress and group.has_all_members_joined:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation,
        answer every waiting JoinGroup (the leader gets the members' metadata)."""
        if not group.is_(PREPARING_REBALANCE):
            return
        self.cancel_group_timers(group)
        group.initial_join_in_progress = False
        for member in group.not_yet_rejoined():
            if not member.is_static:  # static members keep their place until their session expires
                log.info("group %s: removing member %s, which did not rejoin within the rebalance timeout",
                         group.group_id, member.member_id)
                self._remove_member(group, member)
        if group.members and not group.elect_joined_leader():
            # Only absent static members are left: wait for them, or for their sessions to end.
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            group.join_timer = self._scheduler.call_later(
                group.max_rebalance_timeout_ms, lambda: self._complete_join(group)
            )
            return
        now = self._now()
        group.init_next_generation(now)
        if group.is_(EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            try_persist_group(self._offsets_topic, group, self._now())
            return
        log.info("group %s: stabilizing generation %d (protocol %s, leader %s, %d member(s))",
                 group.group_id, group.generation_id, group.protocol_name, group.leader_id, len(group.members))
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            _resolve(waiter, self._join_result(group, member, with_members=group.leader_id == member.member_id))
            member.is_new = False
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
        # Members that do not come back with SyncGroup within the rebalance timeout are dropped.
        group.pending_sync_members = set(group.members)
        generation = group.generation_id
        group.sync_timer = self._scheduler.call_later(
            group.max_rebalance_timeout_ms, lambda: self._expire_pending_sync(group, generation)
        )

    def _expire_pending_sync(self, group: Group, generation: int) -> None:
        if group.generation_id != generation or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync_members:
            return
        missing = sorted(group.pending_sync_members)
        log.info("group %s: removing %s, which did not send SyncGroup within the rebalance timeout",
                 group.group_id, ", ".join(missing))
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member)
        self._prepare_rebalance(group, f"members {missing} did not sync")
        self._try_complete_join(group)

    def cancel_group_timers(self, group: Group) -> None:
        for timer in (group.join_timer, group.sync_timer):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                waiter, member.sync_waiter = member.sync_waiter, None
                _resolve(waiter, SyncResult(
                    error,
                    assignment=member.assignment if error == ErrorCode.none else b"",
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                ))
                self.schedule_heartbeat(group, member, member.session_timeout_ms)

    # ---- members leaving -----------------------------------------------------------------

    def _remove_member(self, group: Group, member: Member) -> None:
        """Take a member out; whatever it waits for is answered UNKNOWN_MEMBER_ID."""
        group.remove_member(member.member_id)
        self.release_member(member, ErrorCode.unknown_member_id)

    @staticmethod
    def release_member(member: Member, error: ErrorCode) -> None:
        """Stop the member's session timer and answer whatever it waits for with `error`."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        _resolve(member.join_waiter, JoinResult(error, member_id=member.member_id))
        _resolve(member.sync_waiter, SyncResult(error))
        member.join_waiter = member.sync_waiter = None

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    def schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self._scheduler.call_later(
            timeout_ms, lambda: self._heartbeat_expired(group, member)
        )

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return  # already gone
        member.heartbeat_timer = None
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # waiting on the coordinator is as good as a heartbeat; rescheduled when answered
        log.info("group %s: member %s has failed, removing it (session timeout %d ms%s)",
                 group.group_id, member.member_id, member.session_timeout_ms,
                 ", never completed its first join" if member.is_new else "")
        self._remove_member_and_update_group(group, member,
                                             f"removing member {member.member_id} on heartbeat expiration")

    # ---- SyncGroup -----------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Mapping[str, bytes]) -> asyncio.Future:
        """Returns a future of SyncResult: followers wait until the leader's assignment is stored."""
        waiter = asyncio.get_running_loop().create_future()
        self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                   assignments, waiter)
        return waiter

    def _sync(self, group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
              assignments, waiter) -> None:
        def fail(error: ErrorCode) -> None:
            _resolve(waiter, SyncResult(error))

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return fail(owner)
        group = self._groups.get(group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        if group.is_(DEAD):
            return fail(ErrorCode.coordinator_not_available)
        error = group.validate_member(member_id, group_instance_id)
        if error != ErrorCode.none:
            return fail(error)
        if generation_id != group.generation_id:
            return fail(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return fail(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_(EMPTY):
            return fail(ErrorCode.unknown_member_id)
        if group.is_(PREPARING_REBALANCE):
            return fail(ErrorCode.rebalance_in_progress)
        self._synced(group, member_id)
        if group.is_(STABLE):
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
            return _resolve(waiter, SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            ))
        # COMPLETING_REBALANCE: wait for the leader's assignment.
        if member.sync_waiter is not None:
            _resolve(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            self._store_assignment(group, dict(assignments))

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _store_assignment(self, group: Group, assignments: dict[str, bytes]) -> None:
        missing = [member_id for member_id in group.members if member_id not in assignments]
        if missing:
            log.warning("group %s: leader sent no assignment for %s; they get an empty one",
                        group.group_id, ", ".join(missing))
        assignment = {member_id: assignments.get(member_id, b"") for member_id in group.members}
        try:
            persist_group(self._offsets_topic, group, self._now(), assignment)
        except WRITE_ERRORS as error:
            log.error("group %s: storing the assignment of generation %d failed: %s",
                      group.group_id, group.generation_id, error)
            self._reset_and_propagate_assignment_error(group, storage_error(error))
            self._maybe_prepare_rebalance(group, "storing the assignment failed")
            return
        for member_id, member in group.members.items():
            member.assignment = assignment[member_id]
        self._propagate_assignment(group, ErrorCode.none)
        group.transition_to(STABLE, self._now())
        log.info("group %s: generation %d is stable", group.group_id, group.generation_id)

    # ---- Heartbeat -----------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return owner
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self.schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_(PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---- LeaveGroup ----------------------------------------------------------------------

    def leave_group(self, group_id: str, leaving: Iterable[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group-level error, one error per (member id, group instance id) leaving)."""
        leaving = list(leaving)
        if not group_id:
            return ErrorCode.invalid_group_id, []
        owner = self._owner_error(group_id)
        if owner != ErrorCode.none:
            return owner, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available, []
        return ErrorCode.none, [self._leave(group, member_id, instance_id) for member_id, instance_id in leaving]

    def _leave(self, group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            existing = group.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if member_id and existing != member_id:
                return ErrorCode.fenced_instance_id
            member_id = existing
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on LeaveGroup")
        return ErrorCode.none
