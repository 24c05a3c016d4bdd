"""The Spark pipelines that report to the console.

`oncelog pipeline run` produces one JSON record per finished micro-batch (and one when
it starts and stops) to a compacted topic, `_oncelog_pipelines` by default, keyed by its
query id (oncelog.spark.pipeline_report). The console reads that topic like any
consumer, through the broker's own listener, so every broker of a cluster shows every
pipeline: the latest record per query is the pipeline's state.

Runs on the HTTP server's threads, never on the broker's event loop; one consumer, kept
between requests, reads what is new on each.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

log = logging.getLogger("oncelog.web")

REPORT_TOPIC = "_oncelog_pipelines"
READ_BUDGET_S = 0.5  # the most one request waits for the topic


class PipelineReports:
    def __init__(self, bootstrap_servers: str | None, topic: str = REPORT_TOPIC) -> None:
        self._bootstrap = bootstrap_servers
        self.topic = topic
        self._lock = threading.Lock()
        self._consumer: Any = None  # confluent_kafka.Consumer, once the topic exists
        self._latest: dict[str, dict[str, Any]] = {}

    def read(self) -> tuple[list[dict[str, Any]], str | None]:
        """The latest report of each pipeline, newest first, and an error to show (None when
        the topic was read, or does not exist yet: no pipeline has reported)."""
        if self._bootstrap is None:
            return [], (f"pipelines report to {self.topic}, which the console reads over a PLAINTEXT listener; "
                        "this broker has none")
        with self._lock:
            try:
                self._catch_up()
            except Exception as error:
                log.debug("reading %s failed", self.topic, exc_info=True)
                return self._sorted(), f"cannot read {self.topic}: {error}"
            return self._sorted(), None

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _sorted(self) -> list[dict[str, Any]]:
        return sorted(self._latest.values(), key=lambda report: -int(report.get("timestamp_ms") or 0))

    def _catch_up(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        if self._consumer is None:
            consumer = Consumer({
                "bootstrap.servers": self._bootstrap, "group.id": "oncelog-console",
                "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3,
            })
            topic = consumer.list_topics(self.topic, timeout=READ_BUDGET_S).topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                consumer.close()
                return  # no pipeline has reported yet
            consumer.assign([TopicPartition(self.topic, partition, OFFSET_BEGINNING) for partition in topic.partitions])
            self._consumer = consumer
        deadline = time.monotonic() + READ_BUDGET_S
        at_end: set[int] = set()
        partitions = len(self._consumer.assignment())
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = self._consumer.poll(max(deadline - time.monotonic(), 0.01))
            if message is None:
                break
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise RuntimeError(error.str())
            at_end.discard(message.partition())
            self._take(message.key(), message.value())

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        query_id = key.decode("utf-8", "replace")
        if value is None:  # a tombstone: the pipeline was removed
            self._latest.pop(query_id, None)
            return
        try:
            report = json.loads(value)
        except ValueError:
            return  # not a report: ignored, as a consumer skips what it cannot parse
        if isinstance(report, dict):
            self._latest[query_id] = report
