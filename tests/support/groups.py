"""confluent-kafka consumers in a group, for the consumer group tests: their settings, a
consumer polled from its own thread, and the group as DescribeConsumerGroups shows it
(`wait_for_stable`: every partition owned exactly once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from oncelog.local.process import wait_until

PARTITIONS = 6  # of the topic the group tests' consumers share, unless a test says otherwise
SESSION_TIMEOUT_MS = 6000


def consumer_config(bootstrap: str, group: str, strategy: str, instance: str | None) -> dict:
    """A group member with `strategy` as its assignor, committing by hand; static
    (KIP-345) when `instance` names its group.instance.id."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": strategy,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if instance is not None:
        config["group.instance.id"] = instance
    return config


def consume_loop(consumer: Consumer, topic: str, stop: threading.Event, on_message: Callable[[int, int], None],
                 on_assign: Callable[[list[TopicPartition]], None] | None = None) -> None:
    """Poll, record, commit each message synchronously (so nothing committed is redelivered).
    A consumer is used from this one thread only: librdkafka's handle is not shared."""
    if on_assign is None:
        consumer.subscribe([topic])
    else:
        consumer.subscribe([topic], on_assign=lambda _, partitions: on_assign(partitions))
    while not stop.is_set():
        message = consumer.poll(0.1)
        if message is None or message.error():
            continue
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None
        on_message(partition, offset)
        consumer.commit(message=message, asynchronous=False)


class ConsumerThread:
    """A consumer running `consume_loop` in a daemon thread: what it received as
    (partition, offset), and each assignment it got (eager assignors). Whatever the loop
    raises (a refused commit, a failed check) is raised again by `close`, on the test's
    thread, so it fails the test instead of ending a thread nobody watches."""

    def __init__(self, config: dict, topic: str) -> None:
        self.consumer = Consumer(config)
        self.received: list[tuple[int, int]] = []
        self.assignments: list[list[int]] = []  # each assignment the consumer got (eager assignors)
        self.failure: BaseException | None = None
        self.closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        try:
            consume_loop(self.consumer, topic, self._stop, lambda p, o: self.received.append((p, o)),
                         lambda partitions: self.assignments.append(sorted(tp.partition for tp in partitions)))
        except BaseException as error:  # noqa: BLE001 - close() raises it on the test's thread
            self.failure = error

    def close(self) -> None:
        """Stop polling and close the consumer, once (a second call does nothing); then raise
        what the loop raised, if it did."""
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        if self.failure is not None:
            raise AssertionError(f"the consumer's polling thread failed: {self.failure!r}") from self.failure


def leave_then_close(*consumers: Consumer, timeout: float = 10.0) -> None:
    """Close group members as librdkafka's own workaround advises: each unsubscribes and is
    polled until it owns no partition, and only then closed. librdkafka's close() can hang
    when an assignment reaches a consumer that is closing (librdkafka #4527, #4884): with
    several members of one group closed in turn, the first one's leave hands its partitions
    to the next."""
    for consumer in consumers:
        consumer.unsubscribe()
    deadline = time.monotonic() + timeout
    while any(consumer.assignment() for consumer in consumers) and time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)
    for consumer in consumers:
        consumer.close()


def describe(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    return admin.describe_consumer_groups([group])[group].result(10)


def stable_assignment(admin: AdminClient, group: str, members: int) -> dict[str, list[int]] | None:
    """member id -> partitions, when the group is Stable with `members` members owning
    every one of the PARTITIONS partitions exactly once; else None."""
    description = describe(admin, group)
    if description.state != ConsumerGroupState.STABLE or len(description.members) != members:
        return None
    owned = {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in description.members}
    every = sorted(p for partitions in owned.values() for p in partitions)
    return owned if every == list(range(PARTITIONS)) else None


def wait_for_stable(admin: AdminClient, group: str, members: int, timeout: float = 20.0) -> dict[str, list[int]]:
    found: dict = {}

    def check():
        found["owned"] = stable_assignment(admin, group, members)
        return found["owned"] is not None

    wait_until(check, timeout=timeout, interval=0.2, message=f"{members} members owning all partitions once")
    return found["owned"]
