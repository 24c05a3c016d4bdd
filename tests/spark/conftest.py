"""Fixtures for the Spark tests: one real SparkSession (local[2]) for the whole test
session, the session-wide embedded broker from tests/conftest.py, and helpers to make
topics and records. Executors are Python workers on this machine, so they reach the
broker on its loopback port."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

SESSION_CONF = {
    # Tests run short queries: the JVM's quick compiler and serial GC start up faster.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.minBatchesToRetain": "10",
}

_startup: dict[str, float] = {}


@pytest.fixture(scope="session")
def spark():
    from oncelog.spark.session import build_session

    started = time.monotonic()
    session = build_session("oncelog-tests", master="local[2]", conf=SESSION_CONF)
    _startup["SparkSession start-up"] = time.monotonic() - started
    yield session
    session.stop()


def pytest_terminal_summary(terminalreporter):
    for what, seconds in _startup.items():
        terminalreporter.write_line(f"{what}: {seconds:.1f}s")


@pytest.fixture
def topic(request) -> str:
    """A topic name unique to the test (the broker is shared by the whole session)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:150]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Produced:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] | None


class Kafka:
    """Admin and producer helpers against one bootstrap address."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.admin = AdminClient({"bootstrap.servers": bootstrap_servers})

    def create_topic(self, name: str, partitions: int = 1, **config: str) -> None:
        self.admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)

    def add_partitions(self, name: str, total: int) -> None:
        self.admin.create_partitions([NewPartitions(name, total)])[name].result(30)

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name])[name].result(30)

    def produce(self, topic: str, records: Iterable[dict]) -> list[Produced]:
        """Produce with the idempotent producer; each record a dict of Producer.produce
        arguments. Returns what the broker acknowledged, in order."""
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        acknowledged: list[Produced] = []

        def on_delivery(headers):
            # Delivery reports do not carry headers: take them from what was sent.
            def delivered(error, message):
                assert error is None, error
                acknowledged.append(
                    Produced(
                        message.key(),
                        message.value(),
                        message.partition(),
                        message.offset(),
                        message.timestamp()[1],
                        tuple(headers) if headers else None,
                    )
                )

            return delivered

        for record in records:
            producer.produce(topic, on_delivery=on_delivery(record.get("headers")), **record)
            producer.poll(0)
        assert producer.flush(30) == 0
        return acknowledged

    def produce_values(
        self, topic: str, count: int, partitions: int = 1, prefix: str = "v"
    ) -> list[Produced]:
        return self.produce(
            topic,
            ({"value": f"{prefix}{i}".encode(), "partition": i % partitions} for i in range(count)),
        )


@pytest.fixture(scope="session")
def kafka(shared_broker) -> Kafka:
    return Kafka(shared_broker.bootstrap_servers)


class CoordinatorWrites:
    """Writes into a partition the way the transaction coordinator and a transactional
    producer's batches land in the log (through the broker's own append path), so the
    source's read_committed handling can be tested while client transactions are built."""

    def __init__(self, embedded) -> None:
        self.embedded = embedded

    def _append(self, topic: str, partition: int, batch: bytes):
        from oncelog.kernel.partitions import append_internal

        now_ms = int(time.time() * 1000)
        broker = self.embedded.broker
        return self.embedded.call(
            lambda: append_internal(broker, topic, partition, batch, now_ms=now_ms)
        )

    def transactional_records(
        self, topic: str, values: list[bytes], *, producer_id: int, partition: int = 0
    ):
        from oncelog.protocol.record_batch import Record, build_batch

        batch = build_batch(
            [Record(key=None, value=value) for value in values],
            timestamp_ms=int(time.time() * 1000),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        return self._append(topic, partition, batch)

    def marker(self, topic: str, *, commit: bool, producer_id: int, partition: int = 0):
        from oncelog.protocol.record_batch import ControlType, build_control_batch

        batch = build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=producer_id,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=int(time.time() * 1000),
        )
        return self._append(topic, partition, batch)


@pytest.fixture(scope="session")
def coordinator_writes(shared_broker) -> CoordinatorWrites:
    return CoordinatorWrites(shared_broker)
