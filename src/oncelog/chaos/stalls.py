"""How long clients waited during each fault of a chaos run, from its history.

A fault's window runs from the moment it began until the next fault began (or the chaos
phase ended): the fault itself and the recovery after its cure. Within it:

- **acknowledged writes**: per partition of the watched topic, the longest time with no
  acknowledgement of the writer's records (`Send` with an offset), split between the
  partitions the victim led when the fault began (they wait for a new leader) and all
  others (they should barely notice);
- **commits**: per transactional id, the longest time with no committed transaction.

"The longest time with no event" counts from the window's start to the first event, between
events, and from the last event to the window's end.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oncelog.chaos.history import History, Send, TxnOutcome


@dataclass(frozen=True, slots=True)
class FaultWindow:
    began: float
    until: float
    led: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Stalls:
    writes_led: float | None  # None: the victim led none of the partitions
    writes_elsewhere: float | None  # None: no partition the victim did not lead
    commits: float | None  # None: no transactional writer in the history

    def describe(self) -> str:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}s"

        return (f"longest stall of acknowledged writes {seconds(self.writes_led)} on partitions it led, "
                f"{seconds(self.writes_elsewhere)} elsewhere; of commits {seconds(self.commits)}")


def longest_gap(times: Iterable[float], start: float, end: float) -> float:
    """The longest part of [start, end] that holds none of `times`."""
    points = [start, *sorted(t for t in times if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(points))


def fault_stalls(history: History, window: FaultWindow, *, topic: str, partitions: Sequence[int],
                 writers: Sequence[str], transactional_ids: Sequence[str]) -> Stalls:
    """`writers`: the client name prefixes whose acknowledgements count (a recreated
    producer is `name.N`); `transactional_ids`: the ids whose commits count."""
    acked: dict[int, list[float]] = defaultdict(list)
    for op in history.of_type(Send):
        if op.topic == topic and op.acked_offset is not None and op.client.split(".")[0] in writers:
            acked[op.partition].append(op.time)
    commits: dict[str, list[float]] = defaultdict(list)
    for op in history.of_type(TxnOutcome):
        if op.outcome == "commit" and op.transactional_id in transactional_ids:
            commits[op.transactional_id].append(op.time)

    def worst(gaps: list[float]) -> float | None:
        return max(gaps) if gaps else None

    led = [longest_gap(acked[p], window.began, window.until) for p in partitions if (topic, p) in window.led]
    others = [longest_gap(acked[p], window.began, window.until) for p in partitions if (topic, p) not in window.led]
    committed = [longest_gap(commits[t], window.began, window.until) for t in transactional_ids]
    return Stalls(worst(led), worst(others), worst(committed))
