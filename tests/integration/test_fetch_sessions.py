"""Incremental fetch sessions (KIP-227) at the wire and with real clients: a full fetch
opens a session, incremental fetches name only what changed and are answered only with
what changed, forgotten partitions leave the session, session errors as Kafka's, eviction
with `max.incremental.fetch.session.cache.slots`; librdkafka (sessionless), kafka-python
and the Java client (sessions) consume as before."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.java import JavaProgram
from tests.support.kafka import create_topic, produce_to_partitions
from tests.support.secured import password, secured_broker

FULL, SESSIONLESS = 0, -1  # session epochs of full fetches: opening a session, or not
BIG = 1 << 20


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _make(cls, **fields):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def fetch(client: WireClient, offsets: Mapping[tuple[str, int], int], *, session_id: int = 0, epoch: int = FULL,
          forgotten: Iterable[tuple[str, int]] = (), version: int = 12, min_bytes: int = 0, max_wait_ms: int = 0,
          max_bytes: int = BIG):
    """One Fetch naming `offsets` ((topic, partition) -> fetch offset) and forgetting `forgotten`."""
    module = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(_make(
            module.FetchPartition, partition=partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=BIG))
    forgotten_by_topic: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        forgotten_by_topic.setdefault(topic, []).append(partition)
    request = _make(
        module.FetchRequest, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=tuple(_make(module.FetchTopic, topic=topic, partitions=tuple(parts))
                     for topic, parts in by_topic.items()),
        forgotten_topics_data=tuple(_make(module.ForgottenTopic, topic=topic, partitions=tuple(parts))
                                    for topic, parts in forgotten_by_topic.items()),
        rack_id="",
    )
    return client.request(request)


def answered(response) -> dict[tuple[str, int], object]:
    return {(topic.topic, p.partition_index): p for topic in response.responses for p in topic.partitions}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("fetch-sessions")) as running:
        yield running


@pytest.fixture()
def topic(broker) -> str:
    name = unique("sessions")
    create_topic(broker.bootstrap_servers, name, partitions=4)
    return name


def positions(topic: str, offset: int = 0, partitions: Iterable[int] = range(4)) -> dict[tuple[str, int], int]:
    return {(topic, p): offset for p in partitions}


def open_session(client: WireClient, topic: str) -> int:
    response = fetch(client, positions(topic))
    assert response.error_code == ErrorCode.none
    assert response.session_id != 0
    assert set(answered(response)) == set(positions(topic))
    return response.session_id


def test_full_fetch_with_epoch_0_opens_a_session_and_answers_every_partition(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
    cache = broker.broker.fetch_sessions
    assert cache is not None and cache.get(session_id) is not None


def test_full_fetch_with_epoch_minus_1_is_sessionless_as_librdkafka_sends_it(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        response = fetch(client, positions(topic), epoch=SESSIONLESS)
    assert response.error_code == ErrorCode.none
    assert response.session_id == 0
    assert set(answered(response)) == set(positions(topic))


def test_fetch_below_v7_has_no_session(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        response = fetch(client, positions(topic), version=6)
    assert set(answered(response)) == set(positions(topic))


def test_incremental_fetch_answers_only_partitions_with_new_data(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
        nothing = fetch(client, {}, session_id=session_id, epoch=1)
        assert (nothing.error_code, nothing.session_id, nothing.responses) == (ErrorCode.none, session_id, ())
        produce_to_partitions(broker.bootstrap_servers, topic, [(2, b"x")])
        one = fetch(client, {}, session_id=session_id, epoch=2)
        assert list(answered(one)) == [(topic, 2)]
        assert answered(one)[topic, 2].high_watermark == 1
        assert answered(one)[topic, 2].records
        # The new position is all the next fetch names; nothing changed since.
        after = fetch(client, {(topic, 2): 1}, session_id=session_id, epoch=3)
        assert after.responses == ()


def test_incremental_fetch_with_nothing_new_long_polls_until_data_arrives(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
        started = time.monotonic()
        idle = fetch(client, {}, session_id=session_id, epoch=1, min_bytes=1, max_wait_ms=400)
        assert time.monotonic() - started >= 0.35
        assert idle.responses == ()
        producer = threading.Timer(0.3, produce_to_partitions, (broker.bootstrap_servers, topic, [(3, b"late")]))
        producer.start()
        started = time.monotonic()
        woken = fetch(client, {}, session_id=session_id, epoch=2, min_bytes=1, max_wait_ms=20_000)
        producer.join()
        assert time.monotonic() - started < 10
        assert list(answered(woken)) == [(topic, 3)]


def test_partition_added_by_an_incremental_fetch_is_answered_once(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        response = fetch(client, positions(topic, partitions=[0]))
        session_id = response.session_id
        added = fetch(client, {(topic, 1): 0}, session_id=session_id, epoch=1)
        assert list(answered(added)) == [(topic, 1)]
        assert fetch(client, {}, session_id=session_id, epoch=2).responses == ()


def test_forgotten_partitions_leave_the_session(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
        fetch(client, {}, session_id=session_id, epoch=1, forgotten=[(topic, 0), (topic, 1)])
        produce_to_partitions(broker.bootstrap_servers, topic, [(0, b"a"), (1, b"b"), (3, b"c")])
        response = fetch(client, {}, session_id=session_id, epoch=2)
        assert list(answered(response)) == [(topic, 3)]
        cache = broker.broker.fetch_sessions
        assert cache is not None
        session = cache.get(session_id)
        assert session is not None and set(session.partitions) == {(topic, 2), (topic, 3)}


def test_forgetting_every_partition_closes_the_session(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
        response = fetch(client, {}, session_id=session_id, epoch=1, forgotten=positions(topic))
        assert (response.error_code, response.session_id, response.responses) == (ErrorCode.none, 0, ())
        gone = fetch(client, {}, session_id=session_id, epoch=2)
    assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_wrong_epoch_is_invalid_fetch_session_epoch_and_the_session_goes_on(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
        for wrong in (2, 7):
            response = fetch(client, {}, session_id=session_id, epoch=wrong)
            assert (response.error_code, response.session_id, response.responses) == (
                ErrorCode.invalid_fetch_session_epoch, 0, ())
        assert fetch(client, {}, session_id=session_id, epoch=1).error_code == ErrorCode.none
        replayed = fetch(client, {}, session_id=session_id, epoch=1)
    assert replayed.error_code == ErrorCode.invalid_fetch_session_epoch


def test_unknown_session_id_is_fetch_session_id_not_found(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        response = fetch(client, positions(topic), session_id=123_456_789, epoch=1)
    assert (response.error_code, response.session_id, response.responses) == (
        ErrorCode.fetch_session_id_not_found, 0, ())


def test_full_fetch_naming_a_session_closes_it(broker, topic):
    with WireClient.connect(broker.bootstrap_servers) as client:
        closed_by_final = open_session(client, topic)
        response = fetch(client, positions(topic), session_id=closed_by_final, epoch=SESSIONLESS)
        assert (response.session_id, set(answered(response))) == (0, set(positions(topic)))
        assert fetch(client, {}, session_id=closed_by_final, epoch=1).error_code == ErrorCode.fetch_session_id_not_found
        replaced = open_session(client, topic)
        renewed = fetch(client, positions(topic), session_id=replaced, epoch=FULL)
        assert renewed.session_id not in (0, replaced)
        assert fetch(client, {}, session_id=replaced, epoch=1).error_code == ErrorCode.fetch_session_id_not_found
        assert fetch(client, {}, session_id=renewed.session_id, epoch=1).error_code == ErrorCode.none


def test_a_full_cache_answers_new_consumers_without_a_session(tmp_path):
    with EmbeddedBroker(tmp_path, {"max.incremental.fetch.session.cache.slots": "1"}) as one_slot:
        topic = unique("one-slot")
        create_topic(one_slot.bootstrap_servers, topic, partitions=4)
        with WireClient.connect(one_slot.bootstrap_servers) as first, \
                WireClient.connect(one_slot.bootstrap_servers) as second:
            session_id = open_session(first, topic)
            # The first session is neither idle nor old (Kafka's 120 s), and a consumer's
            # fetch may not evict another's before then, even with more partitions.
            bigger = fetch(second, positions(topic))
            assert (bigger.session_id, set(answered(bigger))) == (0, set(positions(topic)))
            assert fetch(first, {}, session_id=session_id, epoch=1).error_code == ErrorCode.none
        cache = one_slot.broker.fetch_sessions
        assert cache is not None and (len(cache), cache.evictions) == (1, 0)


def test_no_slots_means_every_fetch_is_sessionless(tmp_path):
    with EmbeddedBroker(tmp_path, {"max.incremental.fetch.session.cache.slots": "0"}) as no_slots:
        topic = unique("no-slots")
        create_topic(no_slots.bootstrap_servers, topic, partitions=2)
        with WireClient.connect(no_slots.bootstrap_servers) as client:
            response = fetch(client, positions(topic, partitions=range(2)))
    assert (response.session_id, len(answered(response))) == (0, 2)


def test_incremental_fetch_shares_the_byte_limit_out_in_turn(broker, topic):
    """Partitions that returned data go to the back of the session, so a small max_bytes
    serves each partition in turn (Kafka's order), not the first one forever."""
    with WireClient.connect(broker.bootstrap_servers) as client:
        session_id = open_session(client, topic)
        produce_to_partitions(broker.bootstrap_servers, topic, [(p, b"v" * 200) for p in range(4)])
        first = fetch(client, {}, session_id=session_id, epoch=1, max_bytes=1)
        with_records = [tp for tp, data in answered(first).items() if data.records]
        assert len(with_records) == 1
        offsets = dict.fromkeys(with_records, 1)
        second = fetch(client, offsets, session_id=session_id, epoch=2, max_bytes=1)
        again = [tp for tp, data in answered(second).items() if data.records]
    assert len(again) == 1 and again != with_records


def test_librdkafka_consumes_without_a_session(broker):
    topic = unique("librdkafka")
    create_topic(broker.bootstrap_servers, topic, partitions=8)
    produce_to_partitions(broker.bootstrap_servers, topic, [(p, f"r{p}".encode()) for p in range(8)])
    cache = broker.broker.fetch_sessions
    before = cache.created if cache is not None else 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("g"),
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(8)])
        values = set()
        deadline = time.monotonic() + 20
        while len(values) < 8 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
    finally:
        consumer.close()
    assert values == {f"r{p}".encode() for p in range(8)}
    cache = broker.broker.fetch_sessions
    assert (cache.created if cache is not None else 0) == before


def test_kafka_python_consumes_through_an_incremental_session(broker):
    topic = unique("kafka-python")
    partitions = 24
    create_topic(broker.bootstrap_servers, topic, partitions=partitions)
    produce_to_partitions(broker.bootstrap_servers, topic, [(p, f"r{p}".encode()) for p in range(partitions)])
    cache = broker.broker.fetch_sessions
    incremental_before = cache.incremental_fetches if cache is not None else 0
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                             fetch_max_wait_ms=100)
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        values = set()
        deadline = time.monotonic() + 20
        while len(values) < partitions and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.update(record.value for record in records)
        produce_to_partitions(broker.bootstrap_servers, topic, [(5, b"later")])
        while b"later" not in values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.update(record.value for record in records)
    finally:
        consumer.close()
    assert values == {f"r{p}".encode() for p in range(partitions)} | {b"later"}
    cache = broker.broker.fetch_sessions
    assert cache is not None and cache.incremental_fetches > incremental_before


JAVA_SOURCE = Path(__file__).resolve().parents[1] / "java" / "ManyPartitionsConsumer.java"
JAVA_PARTITIONS = 120


def test_java_client_consumes_many_partitions_through_a_session_and_changes_assignment_in_a_long_poll(
        broker, java_tools, tmp_path):
    topic = unique("java-many")
    create_topic(broker.bootstrap_servers, topic, partitions=JAVA_PARTITIONS)
    cache = broker.broker.fetch_sessions
    created_before = cache.created if cache is not None else 0
    incremental_before = cache.incremental_fetches if cache is not None else 0
    program = JavaProgram(java_tools, tmp_path, JAVA_SOURCE)
    run = program.run(broker.bootstrap_servers, topic, str(JAVA_PARTITIONS), timeout=180)
    results = run.scenario("many")
    assert results["first_read"] == str(JAVA_PARTITIONS)
    for round_ in range(1, 5):
        assert results[f"round_{round_}_read"] == str(JAVA_PARTITIONS // 2 if round_ % 2 else JAVA_PARTITIONS)
        assert results[f"round_{round_}_foreign"] == "0"
    output = run.stdout + run.stderr
    assert "invalid full fetch response" not in output
    assert "invalid incremental fetch response" not in output
    cache = broker.broker.fetch_sessions
    assert cache is not None
    assert cache.created > created_before
    assert cache.incremental_fetches > incremental_before


def test_incremental_fetches_are_authorized_anew_each_time(tmp_path):
    """READ on each topic is asked on every fetch, for every partition of the session,
    as Kafka does: a refused partition is answered every time, an allowed one once its
    ACL arrives, and a DENY takes effect on the next incremental fetch."""
    with secured_broker(tmp_path) as secured:
        secured.create_topic("session-allowed")
        secured.create_topic("session-refused")
        secured.allow("alice", ResourceType.TOPIC, "session-allowed", AclOperation.READ)
        with WireClient.connect(secured.bootstrap_servers) as client:
            assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
            assert client.request(SaslAuthenticateRequest(
                auth_bytes=f"\0alice\0{password('alice')}".encode())).error_code == ErrorCode.none
            allowed, refused = ("session-allowed", 0), ("session-refused", 0)
            full = fetch(client, {allowed: 0, refused: 0})
            assert {tp: data.error_code for tp, data in answered(full).items()} == {
                allowed: ErrorCode.none, refused: ErrorCode.topic_authorization_failed}
            session_id = full.session_id
            assert session_id != 0
            again = fetch(client, {}, session_id=session_id, epoch=1)
            assert {tp: data.error_code for tp, data in answered(again).items()} == {
                refused: ErrorCode.topic_authorization_failed}
            secured.allow("alice", ResourceType.TOPIC, "session-refused", AclOperation.READ)
            now_allowed = fetch(client, {}, session_id=session_id, epoch=2)
            assert {tp: data.error_code for tp, data in answered(now_allowed).items()} == {refused: ErrorCode.none}
            secured.allow("alice", ResourceType.TOPIC, "session-allowed", AclOperation.READ, deny=True)
            denied = fetch(client, {}, session_id=session_id, epoch=3)
            assert {tp: data.error_code for tp, data in answered(denied).items()} == {
                allowed: ErrorCode.topic_authorization_failed}
