"""Per-API request counts, handling times and error codes, for /metrics
(oncelog.broker.metrics).

Owned by the server, which counts each request it hands to a handler: how many, how
many are being handled now, a histogram of how long the handler took (decoding done,
up to the response built: waits for replication with acks=all and long polls included;
the time in the socket's queues and sending the response are not), and the error codes
of the responses (Kafka's ErrorsPerSec, NONE included: oncelog.protocol.error_counts).
Plain counters on the event loop, about a microsecond per request; the metrics thread
reads a copy the loop takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.stats import Histogram


class ApiStats(Histogram):
    __slots__ = ("errors", "in_flight")

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.errors: dict[int, int] = {}  # error code -> occurrences in responses


@dataclass(frozen=True, slots=True)
class ApiSnapshot:
    api: str
    count: int
    in_flight: int
    total_s: float
    cumulative: tuple[int, ...]  # requests at or below each of oncelog.stats.BUCKETS_S
    errors: dict[int, int]  # error code -> occurrences in responses


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
        stats.observe(seconds)

    def snapshot(self, names: dict[int, str]) -> list[ApiSnapshot]:
        """A copy, by API name (`names`: API key -> Kafka's name)."""
        return [ApiSnapshot(names.get(api_key, str(api_key)), stats.count, stats.in_flight, stats.total_s,
                            stats.cumulative(), dict(stats.errors))
                for api_key, stats in sorted(self._by_api.items())]
