"""A latency histogram for /metrics: plain counters, updated on the event loop by the
part that owns what it measures, copied out by the loop for each scrape."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

# Upper bounds (seconds) of the buckets; one more bucket holds the rest.
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    __slots__ = ("buckets", "count", "total_s")

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self.buckets = [0] * (len(BUCKETS_S) + 1)

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        self.buckets[bisect_left(BUCKETS_S, seconds)] += 1

    def cumulative(self) -> tuple[int, ...]:
        """How many observations were at or below each of BUCKETS_S."""
        result, running = [], 0
        for count in self.buckets[:-1]:
            running += count
            result.append(running)
        return tuple(result)

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.count, self.total_s, self.cumulative())


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    count: int
    total_s: float
    cumulative: tuple[int, ...]  # observations at or below each of BUCKETS_S
