"""The Spark pipelines that report to the console.

`oncelog pipeline run` produces one JSON record per finished micro-batch (and one when
it starts and stops) to a compacted topic, `_oncelog_pipelines` by default, keyed by its
query id (oncelog.spark.pipeline.report). The console reads that topic like any
consumer, through the broker's own listener, so every broker of a cluster shows every
pipeline: the latest record per query is the pipeline's state.

Runs on the HTTP server's threads, never on the broker's event loop; one consumer, kept
between requests, reads what is new on each.

A report's age is measured here, against one clock: the runner creates the topic with
`message.timestamp.type=LogAppendTime`, so each record carries the time its leader broker
appended it, and `age_ms` is this broker's clock, read after the topic was, minus that.
The report's own `timestamp_ms` is the runner's clock, which may run ahead of the
broker's (a page showed "last report -65 ms ago"). On a report topic of CreateTime (made
by an older runner) the record's time is the runner's again; there, and for the skew
between two brokers' clocks, an age below 0 is shown as 0.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

from oncelog.clock import now_ms

if TYPE_CHECKING:
    from confluent_kafka import Message

log = logging.getLogger("oncelog.web")

REPORT_TOPIC = "_oncelog_pipelines"
READ_BUDGET_S = 0.5  # the most one request waits for the topic


class PipelineReports:
    def __init__(self, bootstrap_servers: str | None, topic: str = REPORT_TOPIC) -> None:
        self._bootstrap = bootstrap_servers
        self.topic = topic
        self._lock = threading.Lock()
        self._consumer: Any = None  # confluent_kafka.Consumer, once the topic exists
        # query id -> (its latest report, when it was reported: the record's timestamp)
        self._latest: dict[str, tuple[dict[str, Any], int]] = {}

    def read(self) -> tuple[list[dict[str, Any]], str | None]:
        """The latest report of each pipeline, newest first, each with its `age_ms` (see
        the module docstring), and an error to show (None when the topic was read, or does
        not exist yet: no pipeline has reported)."""
        if self._bootstrap is None:
            return [], (f"pipelines report to {self.topic}, which the console reads over a PLAINTEXT listener; "
                        "this broker has none")
        with self._lock:
            try:
                self._catch_up()
            except Exception as error:
                log.debug("reading %s failed", self.topic, exc_info=True)
                return self._aged(), f"cannot read {self.topic}: {error}"
            return self._aged(), None

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _aged(self) -> list[dict[str, Any]]:
        now = now_ms()  # after the read: a report appended during it is not in the future
        newest_first = sorted(self._latest.values(), key=lambda latest: -latest[1])
        return [{**report, "age_ms": max(now - reported_ms, 0)} for report, reported_ms in newest_first]

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
            self._take(message)

    def _take(self, message: Message) -> None:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

        key, value = message.key(), message.value()
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
        if not isinstance(report, dict):
            return
        timestamp_type, timestamp_ms = message.timestamp()
        if timestamp_type == TIMESTAMP_NOT_AVAILABLE:
            timestamp_ms = _int(report.get("timestamp_ms"))
        self._latest[query_id] = (report, timestamp_ms)


def _int(value: object) -> int:
    """A report's number as an int; 0 for anything else (the topic is anyone's to write)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return int(value)
