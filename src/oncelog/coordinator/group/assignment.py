"""Partition assignments of consumer groups (KIP-848), keyed by topic id.

An `Assignment` maps a topic id to the set of its partitions: what a member owns, is
assigned in the target, or must revoke. It is always normalized (no topic with an
empty set), so two equal assignments compare equal. The helpers here are the set
algebra the assignors and the reconciliation share; nothing here knows topic names.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

Assignment = Mapping[uuid.UUID, frozenset[int]]

EMPTY: Assignment = {}


def assignment(pairs: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment from (topic id, partitions) pairs; a topic given twice gets both sets."""
    result: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in pairs:
        merged = result.get(topic_id, frozenset()) | frozenset(partitions)
        if merged:
            result[topic_id] = merged
    return result


def partitions_of(value: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(topic_id, partition) for topic_id, partitions in value.items() for partition in partitions}


def union(first: Assignment, second: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return assignment([*first.items(), *second.items()])


def count(value: Assignment) -> int:
    return sum(len(partitions) for partitions in value.values())


def intersects(first: Assignment, second: Assignment) -> bool:
    return any(partitions & second.get(topic_id, frozenset()) for topic_id, partitions in first.items())


def to_wire(value: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    """(topic id, sorted partitions) in topic id order: the stable form records and
    responses carry."""
    return [(topic_id, sorted(value[topic_id])) for topic_id in sorted(value, key=str)]
