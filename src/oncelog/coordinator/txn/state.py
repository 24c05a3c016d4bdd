"""The eight states of a transactional id and the transitions between them.

As in Kafka's TransactionState: each state lists the states it may be entered from;
`check_transition` rejects anything else. The numeric ids are the ones Kafka writes
to `__transaction_state`; the names are the ones its admin APIs report.
"""

from __future__ import annotations

from enum import Enum


class TransactionState(Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, display_name: str) -> None:
        self.id = state_id
        self.display_name = display_name

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        for state in cls:
            if state.display_name == name:
                return state
        return None


S = TransactionState

# target state -> the states it may be entered from
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

# States from which a new transaction may start (and the id may expire).
COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

# Transaction version 2 (KIP-890 part 2) adds to the table above: a client that does not
# know whether its transaction reached the coordinator may abort it anyway, so
# PrepareAbort may also follow a completed state (an abort of nothing, which bumps the
# epoch). Kafka keeps one table with these; here they apply only to TV2 EndTxn.
TV2_EXTRA_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.PREPARE_ABORT: COMPLETED,
}


class IllegalTransitionError(RuntimeError):
    """A transition the table forbids: a coordinator bug, never a client's mistake."""


def check_transition(transactional_id: str, current: TransactionState, target: TransactionState,
                     transaction_version: int = 0) -> None:
    allowed = VALID_PREVIOUS_STATES[target]
    if transaction_version >= 2:
        allowed = allowed | TV2_EXTRA_PREVIOUS_STATES.get(target, frozenset())
    if current not in allowed:
        raise IllegalTransitionError(
            f"transactional id {transactional_id!r} cannot go from {current.display_name} to {target.display_name}"
        )
