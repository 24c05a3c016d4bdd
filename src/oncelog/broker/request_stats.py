"""Per-API request counts and handling times, for /metrics (oncelog.broker.metrics).

Owned by the server, which counts each request it hands to a handler: how many, how
many are being handled now, and a histogram of how long the handler took (decoding done,
up to the response built: waits for replication with acks=all and long polls included;
the time in the socket's queues and sending the response are not). Plain counters on the
event loop, a few hundred nanoseconds per request; the metrics thread reads a copy the
loop takes.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

# Upper bounds (seconds) of the handling-time buckets; one more bucket holds the rest.
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ApiStats:
    __slots__ = ("buckets", "count", "in_flight", "total_s")

    def __init__(self) -> None:
        self.count = 0
        self.in_flight = 0
        self.total_s = 0.0
        self.buckets = [0] * (len(BUCKETS_S) + 1)


@dataclass(frozen=True, slots=True)
class ApiSnapshot:
    api: str
    count: int
    in_flight: int
    total_s: float
    cumulative: tuple[int, ...]  # requests at or below each of BUCKETS_S


class RequestStats:
    def __init__(self) -> None:
        self._by_api: dict[int, ApiStats] = {}

    def started(self, api_key: int) -> ApiStats:
        stats = self._by_api.get(api_key)
        if stats is None:
            stats = self._by_api[api_key] = ApiStats()
        stats.in_flight += 1
        return stats

    @staticmethod
    def finished(stats: ApiStats, seconds: float) -> None:
        stats.in_flight -= 1
        stats.count += 1
        stats.total_s += seconds
        stats.buckets[bisect_left(BUCKETS_S, seconds)] += 1

    def snapshot(self, names: dict[int, str]) -> list[ApiSnapshot]:
        """A copy, by API name (`names`: API key -> Kafka's name)."""
        result = []
        for api_key, stats in sorted(self._by_api.items()):
            cumulative, running = [], 0
            for count in stats.buckets[:-1]:
                running += count
                cumulative.append(running)
            result.append(ApiSnapshot(names.get(api_key, str(api_key)), stats.count, stats.in_flight,
                                      stats.total_s, tuple(cumulative)))
        return result
