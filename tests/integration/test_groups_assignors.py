"""Client-side assignors through the broker's classic group protocol, with confluent-kafka:
the round-robin assignor deals partitions out in member order, and cooperative-sticky
rebalances incrementally, so a member never gives up a partition it keeps."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from tests.support.groups import PARTITIONS, consumer_config, describe, wait_for_stable
from tests.support.kafka import create_topic


@pytest.fixture(scope="module")
def assignor_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("assignors"), {"group.initial.rebalance.delay.ms": "200"}) as broker:
        yield broker


class RecordingConsumer:
    """A consumer polled from its own thread, recording each rebalance callback: with the
    cooperative protocol on_assign/on_revoke get only the partitions added/taken away."""

    def __init__(self, config: dict, topic: str) -> None:
        self.consumer = Consumer(config)
        self.cooperative = config["partition.assignment.strategy"] == "cooperative-sticky"
        self.events: list[tuple[str, list[int]]] = []
        self.owned: set[int] = set()
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions) -> None:
        added = sorted(tp.partition for tp in partitions)
        self.events.append(("assign", added))
        if self.cooperative:
            self.owned |= set(added)
        else:
            self.owned = set(added)

    def _on_revoke(self, consumer, partitions) -> None:
        taken = sorted(tp.partition for tp in partitions)
        self.events.append(("revoke", taken))
        self.owned -= set(taken)

    def revoked(self) -> set[int]:
        return {p for kind, partitions in self.events if kind == "revoke" for p in partitions}

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.1)

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            self.consumer.close()  # LeaveGroup; the revoke callback runs here


def test_roundrobin_deals_partitions_out_in_member_id_order(assignor_broker):
    topic, group = "rr-topic", "rr-group"
    create_topic(assignor_broker.bootstrap_servers, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": assignor_broker.bootstrap_servers})
    members = [RecordingConsumer(consumer_config(assignor_broker.bootstrap_servers, group, "roundrobin", None), topic)
               for _ in range(3)]
    try:
        owned = wait_for_stable(admin, group, 3)
        assert describe(admin, group).partition_assignor == "roundrobin"
        # Partitions in order, one to each member in member id order, round and round.
        assert [owned[member_id] for member_id in sorted(owned)] == [[0, 3], [1, 4], [2, 5]]
        assert sorted(sorted(m.owned) for m in members) == [[0, 3], [1, 4], [2, 5]]
    finally:
        for member in members:
            member.close()


def test_cooperative_sticky_never_revokes_a_partition_that_stays(assignor_broker):
    topic, group = "coop-topic", "coop-group"
    create_topic(assignor_broker.bootstrap_servers, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": assignor_broker.bootstrap_servers})
    config = consumer_config(assignor_broker.bootstrap_servers, group, "cooperative-sticky", None)
    first = RecordingConsumer(config, topic)
    second = None
    try:
        wait_until(lambda: first.owned == set(range(PARTITIONS)), timeout=15, message="first member owns all")

        second = RecordingConsumer(config, topic)
        owned = wait_for_stable(admin, group, 2)
        wait_until(lambda: len(first.owned) == len(second.owned) == PARTITIONS // 2, timeout=15,
                   message="3 partitions each")
        # The first member gave up exactly what moved to the second; what it kept it never lost.
        assert first.revoked() == second.owned
        assert not first.revoked() & first.owned
        assert sorted(owned.values()) == sorted([sorted(first.owned), sorted(second.owned)])
        assert [kind for kind, _ in second.events if kind == "revoke"] == []

        revoked_before_leave = first.revoked()
        second.close()  # its partitions are added to the first member, nothing taken away
        wait_until(lambda: first.owned == set(range(PARTITIONS)), timeout=15, message="first member owns all again")
        assert first.revoked() == revoked_before_leave
        assert wait_for_stable(admin, group, 1)
    finally:
        first.close()
        if second is not None:
            second.close()
