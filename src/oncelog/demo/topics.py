"""The demos' topics: created with PARTITIONS partitions each, and read back to the end by a
consumer (read_committed for the check, read_uncommitted to count what no committed
reader sees); the names of `oncelog demo --stateful`'s (without importing Spark)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

from oncelog.demo.driver import DemoError

PARTITIONS = 3
READ_IDLE_TIMEOUT_S = 20.0
# The demos' embedded broker: two-phase commit for batch mode, and http.listener (the console
# and the broker's /metrics) on a free port.
BROKER_CONFIG = {"transaction.two.phase.commit.enable": "true", "http.listener": "127.0.0.1:0"}

# `oncelog demo --stateful`'s topics, the seeds' (its application: oncelog.demo.streams).
EVENTS_TOPIC = "input-events"
REFERENCE_TOPIC = "reference-data"  # compacted: the table's changelog
COUNTS_TOPIC = "windowed-counts"  # compacted: each window's latest count
HIGH_TOPIC = "high-priority-events"
NORMAL_TOPIC = "normal-priority-events"
ENRICHED_TOPIC = "enriched-events"
SOURCE_TOPICS = (EVENTS_TOPIC, REFERENCE_TOPIC)
SINK_TOPICS = (COUNTS_TOPIC, HIGH_TOPIC, NORMAL_TOPIC, ENRICHED_TOPIC)


@dataclass
class OutputRead:
    values: list[bytes] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    headers: list[list | None] = field(default_factory=list)
    stuck_partitions: list[int] = field(default_factory=list)  # read_committed end below the high watermark
    gate_records: int = 0  # batch mode's aborted gate records (read_uncommitted sees them)
    tombstones: int = 0  # records without a value


def read_topic(bootstrap: str, topic: str, isolation: str) -> OutputRead:
    """Every record of `topic` a consumer with `isolation` can read now."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from oncelog.spark.sink.batch_commit import GATE_HEADER

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"oncelog-demo-verify-{isolation}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "log_level": 0,
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    read = OutputRead()
    at_end: set[int | None] = set()  # the partitions read to their end
    last_progress = time.monotonic()
    try:
        while len(at_end) < PARTITIONS and time.monotonic() - last_progress < READ_IDLE_TIMEOUT_S:
            for message in consumer.consume(1000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                    continue
                at_end.discard(message.partition())
                # A consumed message's headers are (name, value) pairs; the stub also allows
                # the dict that produce() accepts.
                headers = cast("list[tuple[str, bytes | None]] | None", message.headers())
                if any(name == GATE_HEADER for name, _ in headers or ()):
                    read.gate_records += 1
                    continue
                value = message.value()
                if value is None:  # the demos write none: counted, not checked
                    read.tombstones += 1
                    continue
                read.values.append(value)
                read.keys.append(message.key())
                read.headers.append(headers)
                last_progress = time.monotonic()
        if isolation == "read_committed":
            open_transactions = partitions_with_open_transactions(bootstrap, topic)
            read.stuck_partitions = sorted(set(range(PARTITIONS)) - at_end | open_transactions)
    finally:
        consumer.close()
    return read


def partitions_with_open_transactions(bootstrap: str, topic: str) -> set[int]:
    """Partitions whose last stable offset is below the high watermark."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    ends = {}
    for isolation in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        found = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)},
            isolation_level=isolation, request_timeout=10,
        )
        ends[isolation] = {tp.partition: future.result(15).offset for tp, future in found.items()}
    return {p for p in range(PARTITIONS)
            if ends[IsolationLevel.READ_COMMITTED][p] < ends[IsolationLevel.READ_UNCOMMITTED][p]}


def create_topics(bootstrap: str, topics: tuple[str, ...], configs: dict[str, dict[str, str]] | None = None) -> None:
    """`topics` with PARTITIONS partitions each; `configs`: topic configs by topic."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1, config=(configs or {}).get(t, {})) for t in topics])
    for topic, future in futures.items():
        try:
            future.result(30)
        except (KafkaException, TimeoutError) as error:  # the admin request failed, or got no answer
            raise DemoError(f"cannot create topic {topic!r}: {error}") from None


def seeding_producer(bootstrap: str, transactional_id: str):
    """The seeders' transactional producer (not yet initialised); failures surface as exceptions."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                     "log_level": 0})
