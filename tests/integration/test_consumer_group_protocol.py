"""The consumer group protocol (KIP-848) with real clients: librdkafka with
`group.protocol=consumer` and the Java client, against real brokers.

Consumers join and leave a group while a transactional producer writes, with
read_committed and manual commits, and nothing is lost or read twice; a
consume-transform-produce application (KIP-447 offsets committed with the transaction,
from a consumer group member) killed with SIGKILL again and again writes each record
once; the group survives a kill -9 of the broker; consumer and classic groups are listed
and described together; static members and regex subscriptions; the Java client runs the
same loop with two members in a rebalancing group.
"""

from __future__ import annotations

import datetime
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import GroupId
from kio.static.primitive import i32, i32Timedelta

from oncelog import EmbeddedBroker
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS, partition_for
from oncelog.local.cluster import ClusterProcess
from oncelog.local.process import BrokerProcess, wait_until
from oncelog.protocol.client import WireClient
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.cluster import create
from tests.support.groups import leave_then_close
from tests.support.java import JVM_OPTIONS, JavaProgram
from tests.support.secured import password, secured_broker

HEARTBEAT_MS = 300
SESSION_MS = 2500
# Members heartbeat often and a killed one is dropped quickly, so rebalances are short.
BROKER_CONFIG = {
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}
JAVA_SOURCE = Path(__file__).resolve().parents[1] / "java" / "ConsumerProtocolScenario.java"

# The consume-transform-produce application the kill test runs (and kills): a
# group.protocol=consumer member whose offsets go with each transaction.
CTP_APP = r"""
import sys, time
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

bootstrap, group, transactional_id, source, sink = sys.argv[1:6]
idle_exit_s = float(sys.argv[6]) if len(sys.argv) > 6 else 3.0
stop_after = int(sys.argv[7]) if len(sys.argv) > 7 else 0  # records; 0: until idle
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
producer.init_transactions(30)
consumer.subscribe([source])


def rewind():
    # After an aborted transaction, read again from what the group committed.
    assigned = consumer.assignment()
    for tp in consumer.committed(assigned, timeout=10) if assigned else ():
        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))


processed, idle_since = 0, time.monotonic()
# Idle for a while once it has worked; at first it may wait for a killed predecessor's session to end.
while time.monotonic() - idle_since < (idle_exit_s if processed else 15) and not 0 < stop_after <= processed:
    records = [m for m in consumer.consume(25, timeout=0.3) if m.error() is None]
    if not records:
        continue
    producer.begin_transaction()
    try:
        for message in records:
            producer.produce(sink, b"enriched:" + message.value(), key=message.key())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    except KafkaException as error:
        if not error.args[0].txn_requires_abort():
            raise
        producer.abort_transaction(30)
        rewind()
        continue
    processed += len(records)
    idle_since = time.monotonic()
    print(f"committed {processed}", flush=True)
consumer.close()
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("consumer-groups"), BROKER_CONFIG) as running:
        yield running


def create_topics(bootstrap: str, **partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, count, 1) for name, count in partitions.items()]).values():
        future.result(10)


def member_config(bootstrap: str, group: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 1000, **extra}


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    while len(at_end) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.2):
            error, value, partition = message.error(), message.value(), message.partition()
            assert partition is not None  # records and partition EOFs name their partition
            if error is None and value is not None:
                values.append(value)
                at_end.discard(partition)
            elif error is not None:
                at_end.add(partition)
    consumer.close()
    assert len(at_end) == partitions, f"did not reach the end of {topic}"
    return values


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(10)
    # A partition that got no records has no offset (-1001): as good as 0.
    return [max(tp.offset, 0) for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


def stable_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets", "isolation.level": "read_committed"})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)]
    consumer.close()
    return ends


def write_transactions(bootstrap: str, topic: str, transactions: int, per_transaction: int,
                       pause_s: float) -> list[bytes]:
    """Transactions of records, every fourth aborted; the values committed."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"writer-{topic}", "linger.ms": 2})
    producer.init_transactions(30)
    committed: list[bytes] = []
    for number in range(transactions):
        values = [f"{topic}-{number}-{i}".encode() for i in range(per_transaction)]
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value, key=str(i).encode())
        if number % 4 == 3:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.extend(values)
        time.sleep(pause_s)
    return committed


def test_members_joining_and_leaving_read_every_committed_record_once(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, **{"rebalance-in": 6})
    committed: list[bytes] = []
    writer = threading.Thread(target=lambda: committed.extend(
        write_transactions(bootstrap, "rebalance-in", 24, 40, 0.15)), daemon=True)
    writer.start()

    received: list[bytes] = []
    assigned: dict[str, set[int]] = {}
    consumers: dict[str, Consumer] = {}
    # Members come and go: a, then b, then c; a leaves, then b; c reads what is left.
    schedule = [(0.0, "join", "a"), (1.5, "join", "b"), (3.0, "join", "c"), (4.5, "leave", "a"),
                (6.0, "leave", "b")]
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        while schedule and schedule[0][0] <= elapsed:
            _, action, name = schedule.pop(0)
            if action == "join":
                consumers[name] = Consumer(member_config(bootstrap, "rebalancing", **{"client.id": name}))
                consumers[name].subscribe(["rebalance-in"])
            else:
                leave_then_close(consumers.pop(name))
        for name, consumer in consumers.items():
            messages = [m for m in consumer.consume(100, timeout=0.02) if m.error() is None]
            if messages:
                received.extend(m.value() for m in messages)  # type: ignore[misc]
                consumer.commit(asynchronous=False)
            assigned.setdefault(name, set()).update(tp.partition for tp in consumer.assignment())
        if not schedule and not writer.is_alive() and len(received) >= len(committed):
            break
        assert time.monotonic() - started < 40, f"read {len(received)} of {len(committed)} committed records"
    leave_then_close(*consumers.values())

    duplicates = {value: n for value, n in Counter(received).items() if n > 1}
    assert duplicates == {}
    assert sorted(received) == sorted(committed)  # and nothing of the aborted transactions
    assert all(assigned[name] for name in "abc"), assigned  # each member had partitions at some point
    assert committed_offsets(bootstrap, "rebalancing", "rebalance-in", 6) == stable_offsets(bootstrap,
                                                                                            "rebalance-in", 6)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_classic_group_upgraded_online_and_downgraded_back_reads_every_record_once(broker, assignor):
    """Classic members (librdkafka, group.protocol=classic) are consuming when a consumer
    protocol member joins: the group becomes a consumer group and the classic members
    get their assignments from the coordinator; when that member leaves, it is a classic
    group again and rebalances. Nothing committed is lost or read twice."""
    bootstrap = broker.bootstrap_servers
    topic, group = f"migrating-{assignor}", f"migrating-{assignor}"
    create_topics(bootstrap, **{topic: 4})
    committed: list[bytes] = []
    writer = threading.Thread(target=lambda: committed.extend(write_transactions(bootstrap, topic, 20, 20, 0.25)),
                              daemon=True)
    writer.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def classic(name: str) -> Consumer:
        return Consumer({**member_config(bootstrap, group, **{"client.id": name}), "group.protocol": "classic",
                         "partition.assignment.strategy": assignor, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300})

    received: list[bytes] = []
    uncommitted: set[bytes] = set()
    types_seen: set[str] = set()
    modern_owned: set[int] = set()
    failures: list[BaseException] = []

    def poll_loop(consumer: Consumer, stop: threading.Event, owned: set[int] | None) -> None:
        """One member's loop on a thread of its own, as applications run consumers. A member's
        synchronous commit can wait behind its own JoinGroup (a connection's requests are
        answered in order, in Kafka too), and that rebalance may need the other members to
        poll: with every member on one thread, the wait lasted until the commit timed out."""
        try:
            while not stop.is_set():
                messages = [m for m in consumer.consume(100, timeout=0.05) if m.error() is None]
                if messages:
                    values = [m.value() for m in messages]
                    received.extend(values)  # type: ignore[arg-type]
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException as error:
                        # A classic member's commit racing its own rejoin carries the generation
                        # it is leaving (ILLEGAL_GENERATION, as in Kafka): those records may be
                        # read again.
                        assert error.args[0].code() in (KafkaError.ILLEGAL_GENERATION,
                                                        KafkaError.REBALANCE_IN_PROGRESS), error
                        uncommitted.update(values)  # type: ignore[arg-type]
                if owned is not None:
                    owned.update(tp.partition for tp in consumer.assignment())
        except BaseException as error:  # noqa: BLE001 - the test's thread reports it
            failures.append(error)
        finally:
            try:
                leave_then_close(consumer)  # closed while the broker is up, even on a failure
            except AssertionError as error:
                failures.append(error)

    running: dict[str, tuple[threading.Thread, threading.Event]] = {}

    def start(name: str, consumer: Consumer, owned: set[int] | None = None) -> None:
        consumer.subscribe([topic])
        stop = threading.Event()
        thread = threading.Thread(target=poll_loop, args=(consumer, stop, owned), name=name, daemon=True)
        thread.start()
        running[name] = (thread, stop)

    def stop(name: str) -> None:
        thread, stopping = running.pop(name)
        stopping.set()
        thread.join(90)
        assert not thread.is_alive(), f"{name} did not stop"

    # The consumer protocol member joins at 1.5 s and leaves once it has owned partitions
    # and the group was listed as a consumer group (a cooperative hand-over takes a few
    # heartbeats, longer on a loaded machine), or after 25 s, which fails below.
    joined = left = False
    next_listing = 0.0
    started = time.monotonic()
    try:
        start("c1", classic("c1"))
        start("c2", classic("c2"))
        while True:
            elapsed = time.monotonic() - started
            if not joined and elapsed >= 1.5:
                start("modern", Consumer(member_config(bootstrap, group, **{"client.id": "modern"})), modern_owned)
                joined = True
            elif joined and not left and ((modern_owned and "CONSUMER" in types_seen) or elapsed > 25):
                stop("modern")
                left = True
            if elapsed >= next_listing:
                next_listing = elapsed + 0.5
                listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
                if group in listed:
                    types_seen.add(listed[group].type.name)
            assert not failures, failures
            if left and not writer.is_alive() and len(received) >= len(committed):
                break
            assert time.monotonic() - started < 60, f"read {len(received)} of {len(committed)} committed records"
            time.sleep(0.02)
        description = admin.describe_consumer_groups([group])[group].result(10)
    finally:
        for name in list(running):
            stop(name)
    assert not failures, failures
    duplicates = {value for value, n in Counter(received).items() if n > 1}
    assert duplicates <= uncommitted  # only what a refused commit left uncommitted is read again
    assert set(received) == set(committed)
    assert types_seen == {"CLASSIC", "CONSUMER"}  # upgraded, and downgraded back
    assert modern_owned  # the classic members gave it partitions
    assert description.type == ConsumerGroupType.CLASSIC


def test_killed_consume_transform_produce_member_writes_each_record_once(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, **{"ctp-in": 3, "ctp-out": 3})
    inputs = 3000
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(inputs):
        producer.produce("ctp-in", f"order-{i}".encode(), key=str(i % 31).encode())
    assert producer.flush(30) == 0

    command = [sys.executable, "-c", CTP_APP, bootstrap, "ctp", "ctp-app", "ctp-in", "ctp-out"]
    rng = random.Random(848)
    kills = 0
    while kills < 4:
        app = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert app.stdout is not None
        lines = [app.stdout.readline() for _ in range(rng.randint(1, 4))]
        if not all(lines):
            app.wait()
            break
        time.sleep(rng.uniform(0.0, 0.05))  # inside a transaction, between two, or while committing
        app.kill()
        app.wait()
        kills += 1
    finisher = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert finisher.returncode == 0, finisher.stderr
    assert kills == 4, "the input must outlast the kills"

    output = Counter(read_committed(bootstrap, "ctp-out", 3))
    assert {value: n for value, n in output.items() if n > 1} == {}
    assert set(output) == {f"enriched:order-{i}".encode() for i in range(inputs)}
    assert committed_offsets(bootstrap, "ctp", "ctp-in", 3) == stable_offsets(bootstrap, "ctp-in", 3)


def test_consumer_and_classic_groups_are_listed_and_described_together(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, described=3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    modern = [Consumer(member_config(bootstrap, "modern", **{"client.id": f"m{i}"})) for i in range(2)]
    for consumer in modern:
        consumer.subscribe(["described"])
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": "old-style", "session.timeout.ms": 6000})
    classic.subscribe(["described"])

    def settled() -> bool:
        for consumer in (*modern, classic):
            consumer.poll(0.05)
        description = admin.describe_consumer_groups(["modern"])["modern"].result(10)
        owned = sorted(tp.partition for m in description.members for tp in m.assignment.topic_partitions)
        return description.state == ConsumerGroupState.STABLE and owned == [0, 1, 2] and bool(classic.assignment())

    wait_until(settled, timeout=20, message="both groups settled")
    description = admin.describe_consumer_groups(["modern"])["modern"].result(10)
    assert description.type == ConsumerGroupType.CONSUMER
    assert sorted(m.client_id for m in description.members) == ["m0", "m1"]
    assert all(m.assignment.topic_partitions for m in description.members)
    old = admin.describe_consumer_groups(["old-style"])["old-style"].result(10)
    assert old.type == ConsumerGroupType.CLASSIC and old.state == ConsumerGroupState.STABLE

    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert listed["modern"].type == ConsumerGroupType.CONSUMER
    assert listed["old-style"].type == ConsumerGroupType.CLASSIC
    only_consumer = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10).valid
    assert "modern" in {g.group_id for g in only_consumer}
    assert "old-style" not in {g.group_id for g in only_consumer}
    leave_then_close(*modern, classic)


def test_static_member_comes_back_to_its_partitions_and_a_regex_picks_its_topics(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, **{"static-a": 2, "static-b": 2, "unrelated": 1})

    def members(*instances: str) -> list[Consumer]:
        started = [Consumer(member_config(bootstrap, "statics", **{"group.instance.id": i})) for i in instances]
        for consumer in started:
            consumer.subscribe(["^static-.*"])
        return started

    def owned(consumer: Consumer) -> list[tuple[str | None, int]]:
        return sorted((tp.topic, tp.partition) for tp in consumer.assignment())

    first, second = members("i-1", "i-2")

    def balanced() -> bool:
        for consumer in (first, second):
            consumer.poll(0.05)
        return len(owned(first)) == 2 and len(owned(second)) == 2

    wait_until(balanced, timeout=15, message="the regex resolved and both members got two partitions")
    assert {topic for consumer in (first, second) for topic, _ in owned(consumer)} == {"static-a", "static-b"}
    before = owned(first)
    first.close()  # a static member leaves for now (epoch -2): nobody takes its partitions
    (again,) = members("i-1")

    def back() -> bool:
        again.poll(0.05)
        second.poll(0.05)
        return owned(again) == before

    wait_until(back, timeout=15, message="the static member got its partitions back")
    assert len(owned(second)) == 2
    leave_then_close(again, second)


def test_group_survives_a_broker_killed_and_restarted(tmp_path):
    with BrokerProcess(tmp_path / "data", {**BROKER_CONFIG, "group.consumer.session.timeout.ms": "20000",
                                           "group.consumer.max.session.timeout.ms": "20000"}) as process:
        bootstrap = process.bootstrap_servers
        create_topics(bootstrap, durable=3)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(30):
            producer.produce("durable", str(i).encode(), partition=i % 3)
        assert producer.flush(10) == 0
        consumer = Consumer(member_config(bootstrap, "durable-group"))
        consumer.subscribe(["durable"])
        received: list[bytes] = []

        def read(count: int) -> bool:
            messages = [m for m in consumer.consume(50, timeout=0.1) if m.error() is None]
            if messages:
                received.extend(m.value() for m in messages)  # type: ignore[misc]
                consumer.commit(asynchronous=False)
            return len(received) >= count

        wait_until(lambda: read(30), timeout=20, message="first records read")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        before = admin.describe_consumer_groups(["durable-group"])["durable-group"].result(10)
        process.kill()
        process.start()
        for i in range(30, 45):
            producer.produce("durable", str(i).encode(), partition=i % 3)
        assert producer.flush(20) == 0
        wait_until(lambda: read(45), timeout=30, message="records produced after the restart")
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
        after = admin.describe_consumer_groups(["durable-group"])["durable-group"].result(10)
        consumer.close()
        assert sorted(received, key=int) == [str(i).encode() for i in range(45)]  # nothing read twice
        # The same member in the same epoch: the group and its assignment were rebuilt from the log.
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert committed_offsets(bootstrap, "durable-group", "durable", 3) == [15, 15, 15]


def test_java_client_consume_transform_produce_in_a_rebalancing_consumer_group(broker, java_tools, tmp_path):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, **{"java-in": 4, "java-out": 4})
    inputs = 2000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(inputs):
        producer.produce("java-in", f"j-{i}".encode(), key=str(i % 13).encode())
    assert producer.flush(30) == 0
    program = JavaProgram(java_tools, tmp_path / "classes", JAVA_SOURCE)
    run = program.run(bootstrap, "java-in", "java-out", "java-ctp", str(inputs), timeout=120)
    results = run.scenario("ctp")
    assert results["group_type"] == "Consumer", results
    assert results["members_while_both_run"] == "2"
    assert results["group_state_while_both_run"] in ("Stable", "Reconciling")
    output = Counter(read_committed(bootstrap, "java-out", 4))
    assert {value: n for value, n in output.items() if n > 1} == {}
    assert set(output) == {f"enriched:j-{i}".encode() for i in range(inputs)}
    assert committed_offsets(bootstrap, "java-ctp", "java-in", 4) == stable_offsets(bootstrap, "java-in", 4)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert listed["java-ctp"].type == ConsumerGroupType.CONSUMER


@pytest.mark.slow  # `make groups-faults` (~17 s: a 3-broker cluster and a kill)
def test_consume_transform_produce_through_a_group_coordinator_failover(tmp_path):
    """Cluster mode: the broker coordinating the group (the leader of its
    `__consumer_offsets` partition) is killed while the loop runs; the next leader loads
    the group's records, the member carries on in its epoch, and each record is written once."""
    settings = {**BROKER_CONFIG, "group.consumer.session.timeout.ms": "20000",
                "group.consumer.max.session.timeout.ms": "20000", "min.insync.replicas": "2",
                "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}
    with ClusterProcess(tmp_path, 3, settings) as cluster:
        bootstrap = cluster.bootstrap_servers
        create(cluster, "fo-in", 3)
        create(cluster, "fo-out", 3)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

        def produce(first: int, count: int) -> None:
            for i in range(first, first + count):
                producer.produce("fo-in", f"fo-{i}".encode(), key=str(i % 7).encode())
            assert producer.flush(60) == 0

        produce(0, 600)
        app = subprocess.Popen([sys.executable, "-c", CTP_APP, bootstrap, "fo", "fo-app", "fo-in", "fo-out", "60",
                                "1200"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert app.stdout is not None
        def wait_for_progress(count: int) -> None:
            assert app.stdout is not None
            while (line := app.stdout.readline()) and int(line.split()[1]) < count:
                pass
            assert line, app.stderr.read() if app.stderr else "the application stopped"

        wait_for_progress(300)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        before = admin.describe_consumer_groups(["fo"], request_timeout=30)["fo"].result(30)
        victim = before.coordinator.id
        assert cluster.leader_of(CONSUMER_OFFSETS, partition_for("fo", 3)) == victim
        cluster.kill(victim)
        cluster.wait_for_leader(CONSUMER_OFFSETS, partition_for("fo", 3), not_on=victim)
        produce(600, 600)
        wait_for_progress(900)
        after = admin.describe_consumer_groups(["fo"], request_timeout=30)["fo"].result(30)
        _, err = app.communicate(timeout=120)
        assert app.returncode == 0, err[-3000:]
        assert after.coordinator.id != victim
        # The same member: it was not fenced, the new coordinator had its records.
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]

        output = Counter(read_committed(bootstrap, "fo-out", 3))
        assert {value: n for value, n in output.items() if n > 1} == {}
        assert set(output) == {f"enriched:fo-{i}".encode() for i in range(1200)}
        assert committed_offsets(bootstrap, "fo", "fo-in", 3) == stable_offsets(bootstrap, "fo-in", 3)


def test_heartbeat_needs_group_read_and_topic_describe_and_describe_needs_group_describe(tmp_path):
    with secured_broker(tmp_path / "secured", BROKER_CONFIG) as secured:
        for topic in ("visible", "guarded"):
            secured.create_topic(topic, 2)
        secured.allow("alice", ResourceType.GROUP, "acl-group", AclOperation.READ, AclOperation.DESCRIBE)
        secured.allow("alice", ResourceType.TOPIC, "visible", AclOperation.DESCRIBE)
        with WireClient.connect(secured.bootstrap_servers) as client:
            assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
            assert client.request(SaslAuthenticateRequest(
                auth_bytes=f"\0alice\0{password('alice')}".encode())).error_code == ErrorCode.none
            assert client.request(FindCoordinatorRequest(key="acl-group", key_type=0)).error_code == ErrorCode.none

            def join(group: str, member_id: str, *, topics=None, regex=None):
                return client.request(ConsumerGroupHeartbeatRequest(
                    group_id=GroupId(group), member_id=member_id, member_epoch=i32(0),
                    rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), subscribed_topic_names=topics,
                    subscribed_topic_regex=regex, topic_partitions=()))

            assert join("other-group", "m1", topics=("visible",)).error_code == ErrorCode.group_authorization_failed
            refused = join("acl-group", "m1", topics=("visible", "guarded"))
            assert refused.error_code == ErrorCode.topic_authorization_failed
            assert "guarded" in refused.error_message and "visible" not in refused.error_message
            joined = join("acl-group", "m1", topics=("visible",))
            assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
            # A regex resolves only to the topics the member may see.
            regex = join("acl-group", "m2", regex="(visible|guarded)")
            assert regex.error_code == ErrorCode.none
            described = client.request(ConsumerGroupDescribeRequest(group_ids=("acl-group", "other-group"),
                                                                    include_authorized_operations=False))
            errors = [group.error_code for group in described.groups]
            assert errors == [ErrorCode.none, ErrorCode.group_authorization_failed]
            members = {m.member_id: m for m in described.groups[0].members}
            assert members["m2"].subscribed_topic_regex == "(visible|guarded)"
            topics = {t.topic_name for m in members.values() for t in m.target_assignment.topic_partitions}
            assert topics == {"visible"}


@pytest.mark.slow  # `make groups-faults` (~15 s; the librdkafka kill loop stays in the default run)
def test_java_consume_transform_produce_member_killed_again_and_again_writes_each_record_once(broker, java_tools,
                                                                                              tmp_path):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, **{"jkill-in": 3, "jkill-out": 3})
    inputs = 3000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(inputs):
        producer.produce("jkill-in", f"jk-{i}".encode(), key=str(i % 11).encode())
    assert producer.flush(30) == 0
    classes = tmp_path / "classes"
    JavaProgram(java_tools, classes, JAVA_SOURCE)  # compiled into `classes`
    _, java, classpath = java_tools
    command = [str(java), *JVM_OPTIONS, "-cp", os.pathsep.join([*map(str, classpath), str(classes)]),
               "ConsumerProtocolScenario", "loop", bootstrap, "jkill-in", "jkill-out", "jkill", "jkill-app"]
    rng = random.Random(4)
    kills = 0
    while kills < 3:
        app = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert app.stdout is not None
        wanted = rng.randint(1, 3)
        lines = [line for line in (app.stdout.readline() for _ in range(wanted)) if line.startswith("committed")]
        if len(lines) < wanted:
            app.wait()
            break
        time.sleep(rng.uniform(0.0, 0.05))
        app.kill()
        app.wait()
        kills += 1
    finisher = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert finisher.returncode == 0, finisher.stderr[-3000:]
    assert kills == 3, "the input must outlast the kills"
    output = Counter(read_committed(bootstrap, "jkill-out", 3))
    assert {value: n for value, n in output.items() if n > 1} == {}
    assert set(output) == {f"enriched:jk-{i}".encode() for i in range(inputs)}
    assert committed_offsets(bootstrap, "jkill", "jkill-in", 3) == stable_offsets(bootstrap, "jkill-in", 3)
