"""Share groups (KIP-932) with the Java client's KafkaShareConsumer (kafka-clients 4.3)
against a real broker: several consumers on one partition, implicit and explicit
acknowledgement, RELEASE and REJECT, a killed consumer's locks running out,
read_committed share consumers, and the share-partition state surviving a restart.

The Java side is tests/java/ShareScenario.java; each scenario prints what every record's
delivery was (value@consumer#delivery count), and the checks are made here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from tests.support.java import JavaProgram, JavaRun

SOURCE = Path(__file__).resolve().parents[1] / "java" / "ShareScenario.java"
# Members heartbeat often and locks may be short, so the scenarios run in seconds.
BROKER_CONFIG = {
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.session.timeout.ms": "5000",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
    "share.coordinator.state.topic.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}
EARLIEST = "share.auto.offset.reset=earliest"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("share-groups"), BROKER_CONFIG) as running:
        yield running


@pytest.fixture(scope="module")
def share_program(java_tools, tmp_path_factory):
    return JavaProgram(java_tools, tmp_path_factory.mktemp("share-classes"), SOURCE)


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value.encode())
    assert producer.flush(30) == 0


def produce_transaction(bootstrap: str, topic: str, values: list[str], *, commit: bool, transactional_id: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value.encode())
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def run(program: JavaProgram, broker, scenario: str, topic: str, group: str, expected: int, *extra: str,
        configs: str = EARLIEST) -> dict[str, str]:
    """Run a scenario after setting the group's `configs` (k=v,k=v): its results."""
    return JavaRun(subprocess.run(
        [*program.command(f"-Dgroup.configs={configs}"), broker.bootstrap_servers, scenario, topic, group,
         str(expected), *extra],
        capture_output=True, text=True, timeout=180, check=False)).scenario(scenario)


def deliveries(found: dict[str, str]) -> list[tuple[str, str, int]]:
    """(value, consumer, delivery count) of each delivery, in order."""
    parsed = []
    for entry in filter(None, found["deliveries"].split(",")):
        value, rest = entry.split("@", 1)
        consumer, count = rest.split("#", 1)
        parsed.append((value, consumer, int(count)))
    return parsed


@pytest.mark.parametrize("consumers", [2, 3])
def test_share_consumers_on_one_partition_each_get_every_record_once(broker, share_program, consumers):
    topic, group = f"share-one-partition-{consumers}", f"share-one-partition-{consumers}"
    create_topic(broker.bootstrap_servers, topic)
    values = [f"v{i}" for i in range(60)]
    produce(broker.bootstrap_servers, topic, values)
    found = run(share_program, broker, "implicit", topic, group, len(values), str(consumers))
    delivered = deliveries(found)
    assert int(found["distinct"]) == len(values)
    assert sorted(Counter(value for value, _, _ in delivered)) == sorted(values)
    assert all(count == 1 for count in Counter(value for value, _, _ in delivered).values()), delivered
    assert all(count == 1 for _, _, count in delivered)


def test_explicit_acknowledgement_redelivers_released_records_and_never_rejected_ones(broker, share_program):
    topic = group = "share-explicit"
    create_topic(broker.bootstrap_servers, topic)
    values = [f"release-{i}" for i in range(3)] + [f"reject-{i}" for i in range(3)] + [f"ok-{i}" for i in range(10)]
    produce(broker.bootstrap_servers, topic, values)
    found = run(share_program, broker, "explicit", topic, group, len(values))
    delivered = [entry.rsplit("#", 1) for entry in found["delivered"].split(",")]
    counts = Counter(value for value, _ in delivered)
    assert (int(found["accepted"]), int(found["rejected"]), int(found["after"])) == (13, 3, 0)
    for value in values:
        expected = [str(n) for n in range(1, 3)] if value.startswith("release") else ["1"]
        assert [count for v, count in delivered if v == value] == expected, (value, delivered)
    assert sum(counts.values()) == len(values) + 3


def test_read_committed_share_consumers_never_see_aborted_records(broker, share_program):
    topic = group = "share-read-committed"
    create_topic(broker.bootstrap_servers, topic)
    bootstrap = broker.bootstrap_servers
    produce(bootstrap, topic, ["plain-0", "plain-1"])
    produce_transaction(bootstrap, topic, [f"aborted-{i}" for i in range(5)], commit=False, transactional_id="share-a")
    produce_transaction(bootstrap, topic, [f"committed-{i}" for i in range(5)], commit=True, transactional_id="share-c")
    produce(bootstrap, topic, ["plain-2"])
    found = run(share_program, broker, "implicit", topic, group, 8, "1",
                configs=f"{EARLIEST},share.isolation.level=read_committed")
    values = sorted(value for value, _, _ in deliveries(found))
    assert values == sorted([f"committed-{i}" for i in range(5)] + ["plain-0", "plain-1", "plain-2"])


def test_a_killed_share_consumers_records_are_delivered_again_and_counted(broker, share_program):
    topic = group = "share-lock-expiry"
    create_topic(broker.bootstrap_servers, topic)
    values = [f"v{i}" for i in range(20)]
    produce(broker.bootstrap_servers, topic, values)
    holder = subprocess.Popen(
        [*share_program.command(f"-Dgroup.configs={EARLIEST},share.record.lock.duration.ms=2000"),
         broker.bootstrap_servers, "hold", topic, group, "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    held: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert holder.stdout is not None
        for line in holder.stdout:
            if line.startswith("RESULT hold held "):
                held = line.removeprefix("RESULT hold held ").strip().split(",")
                break
            assert time.monotonic() < deadline
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(30)
    assert held and all(value in values for value in held), held
    found = run(share_program, broker, "implicit", topic, group, len(values), "1")
    delivered = deliveries(found)
    assert sorted(value for value, _, _ in delivered) == sorted(values)
    for value, _consumer, count in delivered:
        assert count == (2 if value in held else 1), (value, count, held)


def test_share_partition_state_survives_a_broker_restart(tmp_path, share_program):
    topic = group = "share-restart"
    with EmbeddedBroker(tmp_path / "broker", BROKER_CONFIG) as broker:
        create_topic(broker.bootstrap_servers, topic)
        produce(broker.bootstrap_servers, topic, [f"before-{i}" for i in range(10)])
        found = run(share_program, broker, "implicit", topic, group, 10, "1")
        assert int(found["distinct"]) == 10
    with EmbeddedBroker(tmp_path / "broker", BROKER_CONFIG) as broker:
        produce(broker.bootstrap_servers, topic, [f"after-{i}" for i in range(5)])
        found = run(share_program, broker, "implicit", topic, group, 5, "1")
        assert sorted(value for value, _, _ in deliveries(found)) == sorted(f"after-{i}" for i in range(5))
