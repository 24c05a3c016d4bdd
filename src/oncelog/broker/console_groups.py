"""The console's offset reset, `POST /api/groups/reset-offsets`, as
`kafka-consumer-groups.sh --reset-offsets` does it: for a group without members only,
planned first (`dry_run`), then committed as AlterConsumerGroupOffsets commits (an
OffsetCommit with no member and generation -1), by a principal with Group READ and Topic
READ (what that OffsetCommit needs).

The request (`ResetRequest.parse`, on the HTTP thread): `{"group": ..., "topic": ...,
"to": "earliest" | "latest" | "timestamp" | "offset", "value": N (timestamp or offset),
"dry_run": true | false}`. Every partition of the topic is planned, on the broker that leads
them all (in cluster mode another broker answers 409): to
its log start, its high watermark, the first offset at or after the timestamp (the high
watermark when none is), or the offset given, clamped to the log as the tool clamps it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.coordinator.group.api import CommitOffset
from oncelog.coordinator.group.group_states import DEAD, EMPTY
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Callable

    from oncelog.coordinator.group.coordinator import GroupCoordinator
    from oncelog.kernel.node import Leadership
    from oncelog.storage.log import PartitionLog

log = logging.getLogger("oncelog.console")

TARGETS = ("earliest", "latest", "timestamp", "offset")
MAX_NAME_CHARS = 249  # a topic name's bound; a group id gets the same


class ResetError(ValueError):
    """A reset that cannot be done: (HTTP status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ResetRequest:
    group: str
    topic: str
    to: str
    value: int | None
    dry_run: bool

    @classmethod
    def parse(cls, body: object) -> ResetRequest:
        if not isinstance(body, dict):
            raise ResetError(400, "expected a JSON object")
        group, topic, to = body.get("group"), body.get("topic"), body.get("to")
        for name, given in (("group", group), ("topic", topic)):
            if not isinstance(given, str) or not 0 < len(given) <= MAX_NAME_CHARS:
                raise ResetError(400, f"{name} must be a name of 1 to {MAX_NAME_CHARS} characters")
        if to not in TARGETS:
            raise ResetError(400, f"to must be one of {', '.join(TARGETS)}")
        value = body.get("value")
        if to in ("timestamp", "offset"):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
                raise ResetError(400, f"reset to {to} needs a value: a number from 0")
        else:
            value = None
        dry_run = body.get("dry_run", True)
        if not isinstance(dry_run, bool):
            raise ResetError(400, "dry_run must be true or false")
        assert isinstance(group, str) and isinstance(topic, str) and isinstance(to, str)
        return cls(group, topic, to, value, dry_run)


async def reset_offsets(coordinator: GroupCoordinator, leadership: Leadership, node_id: int,
                        log_of: Callable[[str, int], PartitionLog | None], request: ResetRequest,
                        by: str) -> dict[str, Any]:
    """The plan (and, unless a dry run, its commit) of `request`; raises ResetError (on the
    loop). Every partition of the topic is planned from its leader's log, so this broker
    must lead them all (standalone: it does)."""
    owner = coordinator.owner_error(request.group)
    if owner == ErrorCode.not_coordinator:
        raise ResetError(409, f"group {request.group!r} is coordinated by another broker: reset it there")
    if owner != ErrorCode.none:
        raise ResetError(409, f"the coordinator of group {request.group!r} is not ready here ({owner.name}); "
                              "try again")
    state = _state(coordinator, request.group)
    if state not in (EMPTY.value, DEAD.value):
        raise ResetError(409, f"Assignments can only be reset if the group '{request.group}' is inactive, "
                              f"but the current state is {state}.")
    count = leadership.partition_count(request.topic)
    if count is None:
        raise ResetError(404, f"topic {request.topic!r} does not exist")
    partitions = []
    for index in range(count):
        log_ = log_of(request.topic, index)
        if leadership.leader_of(request.topic, index) != node_id or log_ is None:
            raise ResetError(409, f"{request.topic}-{index} is not led by this broker: reset the group on a "
                                  "broker that leads every partition of the topic, or with kafka-consumer-groups.sh")
        partitions.append(log_)
    wanted = {(request.topic, each.partition) for each in partitions}
    _error, committed = coordinator.fetch_offsets(request.group, wanted, require_stable=False)
    plan = []
    for each in partitions:
        tp: TopicPartition = (request.topic, each.partition)
        current = committed.get(tp)
        plan.append((tp, None if current is None or current.offset < 0 else current.offset, _target(each, request)))
    if not request.dry_run:
        results = coordinator.commit_offsets(request.group, "", None, -1,
                                             {tp: CommitOffset(target) for tp, _current, target in plan})
        log.info("offsets of group %r on %s reset to %s by %s (%s)", request.group, request.topic, request.to, by,
                 ", ".join(f"{partition}: {code.name}" for (_topic, partition), code in sorted(results.items())))
        if any(code == ErrorCode.none for code in results.values()):
            error = await coordinator.replicated(request.group)
            if error != ErrorCode.none:
                results = {tp: error if code == ErrorCode.none else code for tp, code in results.items()}
        failed = sorted(f"{topic}-{partition}: {code.name}" for (topic, partition), code in results.items()
                        if code != ErrorCode.none)
        if failed:
            raise ResetError(409, f"not reset: {', '.join(failed)}")
    return {"group": request.group, "dry_run": request.dry_run, "offsets": [
        {"topic": topic, "partition": partition, "current": current, "target": target}
        for (topic, partition), current, target in plan]}


def _state(coordinator: GroupCoordinator, group_id: str) -> str:
    """The group's state as ListGroups names it (Dead: no such group here)."""
    if coordinator.is_consumer_group(group_id):
        _error, _message, summary = coordinator.consumer_group_describe(group_id)
        return DEAD.value if summary is None else summary.state
    _error, classic = coordinator.describe_group(group_id)
    return DEAD.value if classic is None else classic.state


def _target(log_: PartitionLog, request: ResetRequest) -> int:
    earliest, latest = log_.log_start_offset, log_.high_watermark
    if request.to == "earliest":
        return earliest
    if request.to == "latest":
        return latest
    assert request.value is not None
    if request.to == "timestamp":
        found = log_.offset_for_timestamp(request.value)
        return latest if found is None or found[0] >= latest else found[0]
    return min(max(request.value, earliest), latest)
