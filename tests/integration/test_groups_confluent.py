"""Three confluent-kafka consumers in one group over a 6-partition topic, with the eager
range assignor, cooperative-sticky incremental rebalancing and static membership:
every partition is owned exactly once; partitions of a consumer that closes or is
SIGKILLed move to the others; committed offsets resume exactly after a restart.

The consumer that gets SIGKILLed runs in a subprocess: this file run as a script.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from tests.support.groups import (
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    ConsumerThread,
    close_all,
    consume_loop,
    consumer_config,
    describe,
    stable_assignment,
    wait_for_stable,
)
from tests.support.kafka import create_topic, produce_to_partitions


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("groups"), {"group.initial.rebalance.delay.ms": "200"}) as broker:
        yield broker


class ConsumerProcess:
    """A consumer in its own process, so that it can be SIGKILLed mid-session."""

    def __init__(self, config: dict, topic: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, json.dumps(config), topic], stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.received: list[tuple[int, int]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None  # a PIPE
        for line in self.process.stdout:
            partition, offset = json.loads(line)
            self.received.append((partition, offset))

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    produce_to_partitions(bootstrap, topic, [(partition, f"{partition}-{i}".encode())
                                             for partition in range(PARTITIONS) for i in range(per_partition)])


def committed(admin_consumer: Consumer, topic: str) -> list[int]:
    return [tp.offset for tp in admin_consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky", "static"])
def test_three_consumers_share_partitions_survive_leave_and_kill_and_resume(group_broker, strategy):
    bootstrap = group_broker.bootstrap_servers
    topic, group = f"orders-{strategy}", f"group-{strategy}"
    static = strategy == "static"
    assignor = "range" if static else strategy
    create_topic(bootstrap, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    produce(bootstrap, topic, 10)

    def config(name):
        return consumer_config(bootstrap, group, assignor, f"{strategy}-{name}" if static else None)

    first, second = ConsumerThread(config("a"), topic), ConsumerThread(config("b"), topic)
    third = ConsumerProcess(config("c"), topic)
    try:
        owned = wait_for_stable(admin, group, 3)
        assert all(len(partitions) == 2 for partitions in owned.values()), owned
        everyone = lambda: first.received + second.received + third.received  # noqa: E731
        wait_until(lambda: len(set(everyone())) == PARTITIONS * 10, timeout=20, message="all 60 records consumed")

        if static:
            # Static members do not leave on close (KIP-345): a closed and a killed member
            # both keep their partitions until their session times out.
            started = time.monotonic()
            first.close()
            third.kill()
            time.sleep(1)
            assert stable_assignment(admin, group, 3) is not None  # nothing moved yet
            owned = wait_for_stable(admin, group, 1, timeout=SESSION_TIMEOUT_MS / 1000 + 15)
            assert time.monotonic() - started >= SESSION_TIMEOUT_MS / 1000 - 1
        else:
            started = time.monotonic()
            first.close()  # LeaveGroup: the others take over at once, well within the session timeout
            wait_for_stable(admin, group, 2, timeout=SESSION_TIMEOUT_MS / 1000)
            assert time.monotonic() - started < SESSION_TIMEOUT_MS / 1000
            started = time.monotonic()
            third.kill()  # no LeaveGroup: its partitions move once its session expires
            owned = wait_for_stable(admin, group, 1, timeout=SESSION_TIMEOUT_MS / 1000 + 15)
            assert time.monotonic() - started >= SESSION_TIMEOUT_MS / 1000 - 1
        assert list(owned.values()) == [list(range(PARTITIONS))]

        produce(bootstrap, topic, 10)
        wait_until(lambda: len(set(everyone())) == PARTITIONS * 20, timeout=20, message="second 60 records consumed")
        second.close()
    finally:
        if third.process.poll() is None:
            third.kill()
        close_all(first, second)

    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    assert committed(checker, topic) == [20] * PARTITIONS
    checker.close()

    # Everyone comes back: consumption resumes at the committed offsets, nothing re-read.
    produce(bootstrap, topic, 5)
    restarted = [ConsumerThread(config(name), topic) for name in ("a", "b", "c")]
    try:
        wait_for_stable(admin, group, 3)
        wait_until(lambda: sum(len(c.received) for c in restarted) >= PARTITIONS * 5, timeout=20,
                   message="the 30 new records")
        time.sleep(0.5)  # anything re-read would arrive right behind them
        resumed = sorted(record for c in restarted for record in c.received)
        assert resumed == [(p, o) for p in range(PARTITIONS) for o in range(20, 25)]
    finally:
        close_all(*restarted)


def test_static_member_restart_keeps_its_partitions_without_rebalance(group_broker):
    bootstrap = group_broker.bootstrap_servers
    topic, group = "static-restart", "static-restart-group"
    create_topic(bootstrap, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumers = [ConsumerThread(consumer_config(bootstrap, group, "range", f"s-{i}"), topic) for i in range(3)]
    replacement = None
    try:
        before = wait_for_stable(admin, group, 3)
        description = describe(admin, group)
        restarted = next(m for m in description.members if m.group_instance_id == "s-1")
        consumers[1].close()  # a static member's close sends no LeaveGroup
        replacement = ConsumerThread(consumer_config(bootstrap, group, "range", "s-1"), topic)
        wait_until(lambda: replacement.assignments, timeout=15, message="assignment after restart")
        after = stable_assignment(admin, group, 3)
        assert after is not None
        by_instance = {m.group_instance_id: m for m in describe(admin, group).members}
        assert by_instance["s-1"].member_id != restarted.member_id
        replacement_partitions = sorted(tp.partition for tp in by_instance["s-1"].assignment.topic_partitions)
        assert replacement_partitions == before[restarted.member_id]
        assert sorted(after.values()) == sorted(before.values())  # nobody else's partitions moved
        assert replacement.assignments == [before[restarted.member_id]]
        # No rebalance: the members that stayed were assigned once, never again.
        assert consumers[0].assignments == [before[m.member_id] for m in description.members
                                            if m.group_instance_id == "s-0"]
    finally:
        close_all(*consumers, *([replacement] if replacement else []))


if __name__ == "__main__":
    # Worker: consume and commit, one JSON line per record on stdout, until killed.
    worker_config, worker_topic = json.loads(sys.argv[1]), sys.argv[2]
    worker = Consumer(worker_config)

    def report(partition: int, offset: int) -> None:
        print(json.dumps([partition, offset]), flush=True)

    consume_loop(worker, worker_topic, threading.Event(), report)
