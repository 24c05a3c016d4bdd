"""confluent-kafka consumers in a group, for the consumer group tests: their settings, a
consumer polled from its own thread, and the group as DescribeConsumerGroups shows it
(`wait_for_stable`: every partition owned exactly once)."""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from oncelog.local.process import wait_until

PARTITIONS = 6  # of the topic the group tests' consumers share, unless a test says otherwise
SESSION_TIMEOUT_MS = 6000
# What Kafka answers a member's commit that raced a rebalance (ClassicGroup.validateOffsetCommit).
REBALANCE_COMMIT_ERRORS = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS})


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
        try:
            consumer.commit(message=message, asynchronous=False)
        except KafkaException as error:
            # A commit racing a rebalance carries the generation the group just left, and
            # Kafka refuses it so (a CI run saw ILLEGAL_GENERATION with cooperative-sticky);
            # the next record's commit covers this one, and the tests check the final offsets.
            if error.args[0].code() not in REBALANCE_COMMIT_ERRORS:
                raise


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
        """Stop polling and close the consumer, once (a second call does nothing). Raises
        AssertionError when the loop raised, with the loop's traceback in its message (so a
        test that was already failing still shows its own error), or when the loop did not
        stop: its consumer is then left open, as a handle must not be closed under a thread
        still using it."""
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        self._thread.join(10)
        if self._thread.is_alive():
            raise AssertionError("the consumer's polling thread did not stop within 10 s")
        self.consumer.close()
        if self.failure is not None:
            raise AssertionError("the consumer's polling thread failed:\n"
                                 + "".join(traceback.format_exception(self.failure)))


def close_all(*threads: ConsumerThread) -> None:
    """Close every one of `threads`, even after one's close raised; then raise."""
    with contextlib.ExitStack() as closing:
        for thread in threads:
            closing.callback(thread.close)


def leave_then_close(*consumers: Consumer, timeout: float = 10.0) -> None:
    """Close group members so that librdkafka's close() cannot hang on an assignment: each
    unsubscribes and is polled (what it reads meanwhile is dropped) until it owns no
    partition, and only then closed. librdkafka's close() has hung when an assignment
    reached a consumer that was closing: #4527, since fixed, was one such case, and #4884,
    still open, is another. Unsubscribing first is the workaround proposed in #4527. When
    members of one group are closed in turn, the first one's leave hands its partitions to
    the next. Every consumer is closed; then the call fails if one still owned partitions
    `timeout` seconds after unsubscribing."""
    for consumer in consumers:
        consumer.unsubscribe()

    def left() -> bool:
        if not any(consumer.assignment() for consumer in consumers):
            return True
        for consumer in consumers:
            consumer.poll(0.05)
        return False

    try:
        wait_until(left, timeout=timeout, interval=0, message="the consumers to own no partition after unsubscribing")
    finally:
        with contextlib.ExitStack() as closing:
            for consumer in consumers:
                closing.callback(consumer.close)


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
