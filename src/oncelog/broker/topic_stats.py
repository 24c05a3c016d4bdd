"""Per-topic traffic for /metrics (Kafka's BrokerTopicMetrics): bytes and messages in,
bytes out to consumers, failed produce and fetch partitions. Counted by the Produce and
Fetch handlers once a response is final (a long poll's earlier rounds do not count;
replicas' fetches do not either, as Kafka counts them apart); owned by the broker,
updated on the event loop, copied out for each scrape. A deleted topic's counters stay
until the broker restarts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TopicCounts:
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    failed_produce: int = 0
    failed_fetch: int = 0


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    topic: str
    bytes_in: int
    messages_in: int
    bytes_out: int
    failed_produce: int
    failed_fetch: int


class TopicStats:
    def __init__(self) -> None:
        self._topics: dict[str, TopicCounts] = {}

    def of(self, topic: str) -> TopicCounts:
        counts = self._topics.get(topic)
        if counts is None:
            counts = self._topics[topic] = TopicCounts()
        return counts

    def snapshot(self) -> list[TopicSnapshot]:
        return [TopicSnapshot(topic, c.bytes_in, c.messages_in, c.bytes_out, c.failed_produce, c.failed_fetch)
                for topic, c in sorted(self._topics.items())]
