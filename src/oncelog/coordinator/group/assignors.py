"""The server-side assignors of consumer groups (KIP-848): `uniform` and `range`.

An assignor maps a `GroupSpec` (each member's subscribed topic ids and instance id, the
partition count of every subscribed topic, the current target assignment) to a new
target assignment, one `Assignment` per member. Assignors are pure: the coordinator
computes the target assignment on a heartbeat and writes what changed.

    uniform  (Kafka's UniformAssignor, the default) spreads every subscribed partition
             as evenly as the subscriptions allow and is sticky: a member keeps what it
             has as long as balance allows, so a rebalance moves as few partitions as
             possible. Balanced means no member could take a partition from one with
             two more than itself.
    range    (Kafka's RangeAssignor) gives each member contiguous ranges of every topic
             it subscribes to, in member order (static members first, by instance id,
             then by member id): members with the same subscription get the same
             partition numbers of equally partitioned topics (co-partitioning).

`ASSIGNORS` is what `group.consumer.assignors` may name; the first configured one is
the default when no member asks for one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from oncelog.coordinator.group.assignment import Assignment


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment (a subscribed topic without partitions)."""


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    instance_id: str | None
    topic_ids: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSubscription]
    partition_counts: Mapping[uuid.UUID, int]  # every subscribed topic that exists
    current: Mapping[str, Assignment] = field(default_factory=dict)  # the target assignment so far

    def partitions(self, topic_id: uuid.UUID) -> int:
        count = self.partition_counts.get(topic_id, -1)
        if count < 0:
            raise PartitionAssignorError(f"subscribed topic {topic_id} does not exist")
        return count


class Assignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, dict[uuid.UUID, frozenset[int]]]: ...


def _sorted_members(spec: GroupSpec) -> list[str]:
    """Static members first, by instance id; then the others by member id (Kafka's order)."""
    def key(member_id: str) -> tuple[int, str]:
        instance_id = spec.members[member_id].instance_id
        return (0, instance_id) if instance_id is not None else (1, member_id)
    return sorted(spec.members, key=key)


def _normalized(assignments: Mapping[str, Mapping[uuid.UUID, set[int]]]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    return {
        member_id: {topic_id: frozenset(parts) for topic_id, parts in topics.items() if parts}
        for member_id, topics in assignments.items()
    }


class UniformAssignor:
    """Sticky and balanced over all subscribed partitions (see the module docstring)."""

    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        members = _sorted_members(spec)
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {member_id: set() for member_id in members}
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in members:
            for topic_id in spec.members[member_id].topic_ids:
                subscribers.setdefault(topic_id, []).append(member_id)
        all_partitions = [
            (topic_id, partition)
            for topic_id in sorted(subscribers, key=str)
            for partition in range(spec.partitions(topic_id))
        ]
        if not members:
            return {}
        # 1. Keep what each member already had in the target while it still subscribes to
        #    the topic and the partition exists; step 3 takes back what balance forbids.
        owner: dict[tuple[uuid.UUID, int], str] = {}
        exists = set(all_partitions)
        for member_id in members:
            subscription = spec.members[member_id].topic_ids
            for topic_id, parts in spec.current.get(member_id, {}).items():
                if topic_id not in subscription:
                    continue
                for partition in parts:
                    tp = (topic_id, partition)
                    if tp in exists and tp not in owner:
                        owner[tp] = member_id
                        owned[member_id].add(tp)
        # 2. Every free partition goes to the subscribed member with the fewest partitions.
        for tp in all_partitions:
            if tp in owner:
                continue
            candidates = subscribers[tp[0]]
            chosen = min(candidates, key=lambda m: (len(owned[m]), members.index(m)))
            owner[tp] = chosen
            owned[chosen].add(tp)
        # 3. Balance: move a partition from a member to another subscriber that has at
        #    least two fewer, until no such move exists (heterogeneous subscriptions).
        self._balance(members, owned, owner, subscribers)
        result: dict[str, dict[uuid.UUID, set[int]]] = {member_id: {} for member_id in members}
        for (topic_id, partition), member_id in owner.items():
            result[member_id].setdefault(topic_id, set()).add(partition)
        return _normalized(result)

    @staticmethod
    def _balance(members: list[str], owned: dict[str, set[tuple[uuid.UUID, int]]],
                 owner: dict[tuple[uuid.UUID, int], str], subscribers: dict[uuid.UUID, list[str]]) -> None:
        order = {member_id: index for index, member_id in enumerate(members)}
        moved = True
        while moved:
            moved = False
            for giver in sorted(members, key=lambda m: (-len(owned[m]), order[m])):
                for tp in sorted(owned[giver], key=lambda tp: (str(tp[0]), -tp[1])):
                    takers = [m for m in subscribers[tp[0]] if len(owned[m]) + 1 < len(owned[giver])]
                    if not takers:
                        continue
                    taker = min(takers, key=lambda m: (len(owned[m]), order[m]))
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    owner[tp] = taker
                    moved = True
                    break
                if moved:
                    break


class RangeAssignor:
    """Contiguous ranges per topic, in member order (see the module docstring)."""

    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        members = _sorted_members(spec)
        subscribers: dict[uuid.UUID, int] = {}
        for member_id in members:
            for topic_id in spec.members[member_id].topic_ids:
                subscribers[topic_id] = subscribers.get(topic_id, 0) + 1
        next_start: dict[uuid.UUID, int] = {}
        extra: dict[uuid.UUID, int] = {}
        result: dict[str, dict[uuid.UUID, set[int]]] = {}
        for member_id in members:
            assigned: dict[uuid.UUID, set[int]] = {}
            for topic_id in sorted(spec.members[member_id].topic_ids, key=str):
                partitions = spec.partitions(topic_id)
                quota, remainder = divmod(partitions, subscribers[topic_id])
                extra.setdefault(topic_id, remainder)
                if extra[topic_id] > 0:
                    quota += 1
                    extra[topic_id] -= 1
                start = next_start.get(topic_id, 0)
                end = min(start + quota, partitions)
                next_start[topic_id] = end
                if start < end:
                    assigned[topic_id] = set(range(start, end))
            result[member_id] = assigned
        return _normalized(result)


ASSIGNORS: dict[str, Assignor] = {assignor.name: assignor for assignor in (UniformAssignor(), RangeAssignor())}

# group.consumer.assignors may name them by Kafka's class names too.
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_names(configured: str) -> tuple[str, ...]:
    """The assignors of a group.consumer.assignors value, by name; ValueError for one
    this coordinator does not have."""
    names = []
    for entry in (part.strip() for part in configured.split(",")):
        if not entry:
            continue
        name = _CLASS_NAMES.get(entry, entry)
        if name not in ASSIGNORS:
            raise ValueError(f"unknown consumer group assignor {entry!r}; known: {', '.join(ASSIGNORS)}")
        names.append(name)
    if not names:
        raise ValueError("group.consumer.assignors names no assignor")
    return tuple(names)
