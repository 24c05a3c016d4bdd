"""A classic group's states and the transitions between them (Kafka's
VALID_PREVIOUS_STATES; see state.py), apart from the group itself so that the consumer
group (consumer_group.py) can use them without importing the group that holds it."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Protocol


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

VALID_PREVIOUS_STATES: Mapping[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({EMPTY, STABLE, COMPLETING_REBALANCE}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD}),
}

# States from which a join or a departure starts a new rebalance.
CAN_REBALANCE = frozenset({EMPTY, STABLE, COMPLETING_REBALANCE})


class IllegalGroupTransition(RuntimeError):
    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(
            f"group {group_id!r} cannot move from {current.value} to {target.value}; "
            f"{target.value} is reachable only from "
            f"{', '.join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))}"
        )
        self.current = current
        self.target = target


class Cancellable(Protocol):
    def cancel(self) -> None: ...
