"""kafka-python and aiokafka group consumers: subscribe, share partitions, commit, and
resume from the committed offsets in a new consumer of the same group."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from tests.support.kafka import create_topic, produce_to_partitions

PARTITIONS = 4


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("py-groups"), {"group.initial.rebalance.delay.ms": "100"}) as broker:
        yield broker


def create_and_fill(bootstrap: str, topic: str, start: int, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        create_topic(bootstrap, topic, PARTITIONS)
    if count:
        numbers = range(start, start + count)
        produce_to_partitions(bootstrap, topic, [(i % PARTITIONS, str(i).encode()) for i in numbers])


def test_kafka_python_group_consumers_share_commit_and_resume(group_broker):
    from kafka import KafkaConsumer

    bootstrap = group_broker.bootstrap_servers
    create_and_fill(bootstrap, "kp-group", 0, 0)

    def consumer():
        return KafkaConsumer(
            "kp-group", bootstrap_servers=bootstrap, group_id="kp", auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
        )

    class Member(threading.Thread):
        """One consumer, polled and committed from its own thread."""

        def __init__(self) -> None:
            super().__init__(daemon=True)
            self.consumer = consumer()
            self.values: list[int] = []
            self.partitions: set[int] = set()
            self.stop = threading.Event()
            self.start()

        def run(self) -> None:
            while not self.stop.is_set():
                for records in self.consumer.poll(timeout_ms=100).values():
                    self.values.extend(int(r.value) for r in records)
                self.consumer.commit()
                self.partitions = {tp.partition for tp in self.consumer.assignment()}
            self.consumer.close()

    first, second = Member(), Member()
    try:
        wait_until(lambda: first.partitions and second.partitions
                   and first.partitions | second.partitions == set(range(PARTITIONS))
                   and not first.partitions & second.partitions,
                   timeout=30, message="both members own disjoint partitions covering the topic")
        create_and_fill(bootstrap, "kp-group", 0, 40)
        wait_until(lambda: len(first.values) + len(second.values) >= 40, timeout=30, message="40 records")
    finally:
        for member in (first, second):
            member.stop.set()
            member.join(10)
    assert sorted(first.values + second.values) == list(range(40))
    assert first.values and second.values

    create_and_fill(bootstrap, "kp-group", 40, 20)
    resumed = consumer()
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        for records in resumed.poll(timeout_ms=200).values():
            values.extend(int(r.value) for r in records)
    resumed.commit()
    resumed.close()
    assert sorted(values) == list(range(40, 60))


def test_aiokafka_group_consumer_commits_and_resumes(group_broker):
    from aiokafka import AIOKafkaConsumer

    bootstrap = group_broker.bootstrap_servers
    create_and_fill(bootstrap, "aio-group", 0, 30)

    async def consume(expected: int) -> list[int]:
        consumer = AIOKafkaConsumer(
            "aio-group", bootstrap_servers=bootstrap, group_id="aio", auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
        )
        await consumer.start()
        values: list[int] = []
        try:
            while len(values) < expected:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batches.values():
                    values.extend(int(r.value) for r in records)
            await consumer.commit()
            # One more poll: nothing beyond what was expected may arrive.
            extra = await consumer.getmany(timeout_ms=300)
            values.extend(int(r.value) for records in extra.values() for r in records)
        finally:
            await consumer.stop()
        return values

    assert sorted(asyncio.run(consume(30))) == list(range(30))
    create_and_fill(bootstrap, "aio-group", 30, 12)
    assert sorted(asyncio.run(consume(12))) == list(range(30, 42))


def test_aiokafka_two_members_share_a_topic_without_overlap(group_broker):
    from aiokafka import AIOKafkaConsumer

    bootstrap = group_broker.bootstrap_servers
    create_and_fill(bootstrap, "aio-shared", 0, 0)

    async def run() -> list[tuple[set[int], list[tuple[int, int]]]]:
        members = [
            AIOKafkaConsumer(
                "aio-shared", bootstrap_servers=bootstrap, group_id="aio-shared", auto_offset_reset="earliest",
                enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
            )
            for _ in range(2)
        ]
        for member in members:
            await member.start()
        received: list[list[tuple[int, int]]] = [[], []]

        async def poll_all() -> None:
            for member, records in zip(members, received, strict=True):
                batches = await member.getmany(timeout_ms=50)
                records.extend((r.partition, int(r.value)) for batch in batches.values() for r in batch)

        def owned(member) -> set[int]:
            return {tp.partition for tp in member.assignment()}

        try:
            deadline = time.monotonic() + 20
            # Both members in the group first, so no partition moves while records flow.
            while not (owned(members[0]) and owned(members[1]) and not owned(members[0]) & owned(members[1])
                       and owned(members[0]) | owned(members[1]) == set(range(PARTITIONS))):
                assert time.monotonic() < deadline, "two members owning disjoint partitions covering the topic"
                await poll_all()
            await asyncio.to_thread(create_and_fill, bootstrap, "aio-shared", 0, 40)
            while sum(map(len, received)) < 40:
                assert time.monotonic() < deadline, f"40 records, got {sum(map(len, received))}"
                await poll_all()
            for member in members:
                await member.commit()
            return [(owned(member), records) for member, records in zip(members, received, strict=True)]
        finally:
            for member in members:
                await member.stop()

    (first_owned, first_records), (second_owned, second_records) = asyncio.run(run())
    assert sorted(value for _, value in first_records + second_records) == list(range(40))
    assert {partition for partition, _ in first_records} == first_owned
    assert {partition for partition, _ in second_records} == second_owned
