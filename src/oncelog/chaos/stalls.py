"""How long clients waited during each fault of a chaos run, from its history.

A fault's window runs from the moment it began until the next fault began (or the chaos
phase ended): the fault itself and the recovery after its cure. Within it:

- **acknowledged writes**: per partition of the watched topic, the longest time with no
  acknowledgement of the writer's records (`Send` with an offset), kept per partition and
  summed up over the partitions the victim led when the fault began (they wait for a new
  leader) and over all others (they should barely notice), with the worst one named;
- **commits**: per transactional id, the longest time with no committed transaction.

"The longest time with no event" counts from the window's start to the first event, between
events, and from the last event to the window's end.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from oncelog.chaos.history import History, Send, TxnOutcome


@dataclass(frozen=True, slots=True)
class FaultWindow:
    began: float
    until: float
    led: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Stalls:
    """One fault's stalls, per partition of the watched topic and per transactional id:
    pooling them hides a partition that waited for the whole fault behind others that
    did not (issue 45)."""

    writes: Mapping[int, float]  # partition -> its longest time without an acknowledged write
    led: frozenset[int]  # the partitions the victim led when the fault began
    commits_by_id: Mapping[str, float]  # transactional id -> its longest time without a commit

    @property
    def writes_led(self) -> float | None:
        """None: the victim led none of the partitions."""
        return max((gap for partition, gap in self.writes.items() if partition in self.led), default=None)

    @property
    def writes_elsewhere(self) -> float | None:
        """None: no partition the victim did not lead."""
        return max((gap for partition, gap in self.writes.items() if partition not in self.led), default=None)

    @property
    def commits(self) -> float | None:
        """None: no transactional writer in the history."""
        return max(self.commits_by_id.values(), default=None)

    @property
    def worst_partition(self) -> tuple[int, float] | None:
        """The partition that waited longest, and how long."""
        return max(self.writes.items(), key=lambda item: (item[1], -item[0]), default=None)

    def describe(self, topic: str) -> str:
        worst = self.worst_partition
        named = "" if worst is None else f" (worst {topic}-{worst[0]}, {seconds(worst[1])})"
        return (f"longest stall of acknowledged writes {seconds(self.writes_led)} on partitions it led, "
                f"{seconds(self.writes_elsewhere)} elsewhere{named}; of commits {seconds(self.commits)}")


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


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

    return Stalls(
        writes={p: longest_gap(acked[p], window.began, window.until) for p in partitions},
        led=frozenset(p for p in partitions if (topic, p) in window.led),
        commits_by_id={t: longest_gap(commits[t], window.began, window.until) for t in transactional_ids},
    )
