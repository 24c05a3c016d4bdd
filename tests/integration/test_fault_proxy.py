"""The fault proxy itself: each fault kind happens, is counted, and has the effect on a
real broker that it claims (a dropped request is never written, a cut response was
written, a duplicate reaches the broker twice), first with exact wire-level requests,
then under a real client (confluent-kafka's idempotent producer) with every kind at once."""

from __future__ import annotations

import datetime
import gc
import socket
import struct
import time
from collections import defaultdict
from typing import Self

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v9 import response as produce_v9_response
from kio.schema.types import ProducerId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog import EmbeddedBroker
from oncelog.chaos.proxy import FaultPolicy, FaultProxy
from oncelog.local.process import free_port, wait_until
from oncelog.protocol import framing
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient, encode_request
from tests.support.certs import CertificateAuthority

TOPIC = "proxied"
PARTITIONS = 3
TIMEOUT = 10.0


@pytest.fixture
def proxied(tmp_path):
    """A broker that advertises a fault proxy's address; the proxy injects nothing until
    a test sets its policy."""
    proxy_port = free_port()
    config = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}
    with EmbeddedBroker(tmp_path / "broker", config) as broker:
        policy = FaultPolicy(enabled=False, seed=3, replay_delay_ms=50)
        with FaultProxy(("127.0.0.1", broker.port), policy, port=proxy_port) as proxy:
            admin = AdminClient({"bootstrap.servers": proxy.address})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(TIMEOUT)
            yield broker, proxy


def inject(proxy: FaultProxy, **faults: float) -> None:
    for name, value in faults.items():
        setattr(proxy.policy, name, value)
    proxy.policy.enabled = True


def log_end_offset(broker: EmbeddedBroker, partition: int = 0) -> int:
    partition_log = broker.broker.logs.partition(TOPIC, partition)
    return broker.call(lambda: partition_log.log_end_offset)


def plain_batch(value: bytes = b"v") -> bytes:
    return rb.build_batch([rb.Record(b"k", value)], timestamp_ms=int(time.time() * 1000))


def idempotent_batch(broker: EmbeddedBroker) -> bytes:
    with WireClient("127.0.0.1", broker.port, timeout=TIMEOUT) as client:
        answer = client.request(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            producer_id=ProducerId(-1), producer_epoch=i16(-1)))
    assert answer.error_code == ErrorCode.none
    return rb.build_batch([rb.Record(b"k", b"once")], timestamp_ms=int(time.time() * 1000),
                          producer_id=answer.producer_id, producer_epoch=answer.producer_epoch, base_sequence=0)


def produce_frame(batch: bytes, correlation_id: int, partition: int = 0) -> bytes:
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(
            name=TopicName(TOPIC),
            partition_data=(produce_v9.PartitionProduceData(index=i32(partition), records=Records(batch)),)),),
    )
    return encode_request(request, correlation_id)


def produce_answer(frame: bytes):
    """(error code, base offset) of a Produce v9 response frame (size prefix included)."""
    position = framing.skip_tagged_fields(frame, 8)
    response, _ = entity_reader(produce_v9_response.ProduceResponse)(frame, position)
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


class RawConnection:
    """A socket to the proxy that sends frames and reads exactly what comes back."""

    def __init__(self, proxy: FaultProxy, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_until_closed(self) -> bytes:
        received = bytearray()
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return bytes(received)
            if not chunk:
                return bytes(received)
            received += chunk

    def read_frame(self) -> bytes:
        prefix = self._exactly(4)
        return prefix + self._exactly(struct.unpack(">i", prefix)[0])

    def _exactly(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# -- request direction ------------------------------------------------------------------


def test_a_request_dropped_with_its_connection_never_reaches_the_broker(proxied):
    broker, proxy = proxied
    inject(proxy, drop_request_and_close=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 1))
        assert connection.read_until_closed() == b""
    assert proxy.stats["drop_request_and_close"] == 1
    assert log_end_offset(broker) == 0

    proxy.policy.enabled = False  # the client's retry on a new connection is written once
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 2))
        assert produce_answer(connection.read_frame()) == (ErrorCode.none, 0)
    assert log_end_offset(broker) == 1


def test_a_request_dropped_on_a_live_connection_times_out_and_later_ones_are_answered(proxied):
    _broker, proxy = proxied
    inject(proxy, drop_request=1.0)
    with RawConnection(proxy, timeout=1.0) as connection:
        connection.send(produce_frame(plain_batch(), 1))
        with pytest.raises(TimeoutError):
            connection.read_frame()
        assert proxy.stats["drop_request"] == 1
        proxy.policy.enabled = False
        connection.sock.settimeout(TIMEOUT)
        connection.send(produce_frame(plain_batch(), 2))
        answer = connection.read_frame()
    assert struct.unpack_from(">i", answer, 4)[0] == 2
    assert produce_answer(answer) == (ErrorCode.none, 0), "the dropped request was never written"


# -- response direction -----------------------------------------------------------------


def test_a_response_cut_part_way_arrives_as_a_prefix_then_the_connection_closes(proxied):
    broker, proxy = proxied
    inject(proxy, truncate_response=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 1))
        received = connection.read_until_closed()
    assert proxy.stats["truncate_response"] == 1
    assert len(received) > 0
    if len(received) >= 4:
        assert len(received) < 4 + struct.unpack_from(">i", received)[0], "a whole frame came through"
    assert log_end_offset(broker) == 1, "the broker processed the request"


def test_cut_points_vary_and_never_pass_a_whole_frame(proxied):
    _broker, proxy = proxied
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 0))
        whole = len(connection.read_frame())
    inject(proxy, truncate_response=1.0)
    lengths = []
    for correlation_id in range(1, 13):
        with RawConnection(proxy) as connection:
            connection.send(produce_frame(plain_batch(), correlation_id))
            lengths.append(len(connection.read_until_closed()))
    assert proxy.stats["truncate_response"] == 12
    assert all(1 <= length < whole for length in lengths), (lengths, whole)
    assert len(set(lengths)) > 1, lengths


def test_a_response_dropped_with_its_connection_was_still_written(proxied):
    broker, proxy = proxied
    inject(proxy, drop_response_and_close=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 1))
        assert connection.read_until_closed() == b""
    assert proxy.stats["drop_and_close"] == 1
    assert log_end_offset(broker) == 1


def test_a_delayed_response_comes_after_the_delay(proxied):
    _broker, proxy = proxied
    inject(proxy, delay_response=1.0, delay_ms=400)
    with RawConnection(proxy) as connection:
        started = time.monotonic()
        connection.send(produce_frame(plain_batch(), 1))
        answer = connection.read_frame()
        elapsed = time.monotonic() - started
    assert proxy.stats["delay"] == 1
    assert elapsed >= 0.4
    assert produce_answer(answer) == (ErrorCode.none, 0)


def test_untargeted_apis_pass_untouched(proxied):
    _broker, proxy = proxied
    inject(proxy, drop_request_and_close=1.0, drop_response_and_close=1.0)  # Produce only
    with WireClient("127.0.0.1", proxy.port, timeout=TIMEOUT) as client:
        assert client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code \
            == ErrorCode.none
    assert sum(proxy.stats[kind] for kind in ("drop_request_and_close", "drop_and_close", "forward")) == 0


# -- duplicates in time -------------------------------------------------------------------


def test_a_duplicated_plain_produce_is_written_twice(proxied):
    """Without idempotence a duplicate is a second write: proof that the copy reached
    the broker, after the original had been answered."""
    broker, proxy = proxied
    inject(proxy, duplicate_request=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 1))
        assert produce_answer(connection.read_frame()) == (ErrorCode.none, 0)
    wait_until(lambda: proxy.stats["replay_answered"] == 1, TIMEOUT, message="the copy answered")
    assert proxy.stats["duplicate_request"] == 1
    (replay,) = proxy.replays
    assert (replay.kind, replay.api_key, replay.correlation_id) == ("duplicate_request", 0, 1)
    assert produce_answer(replay.response) == (ErrorCode.none, 1)
    assert log_end_offset(broker) == 2


def test_a_duplicated_idempotent_produce_is_answered_with_the_original_offset_and_not_written(proxied):
    broker, proxy = proxied
    batch = idempotent_batch(broker)
    inject(proxy, duplicate_request=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(batch, 1))
        assert produce_answer(connection.read_frame()) == (ErrorCode.none, 0)
    wait_until(lambda: proxy.stats["replay_answered"] == 1, TIMEOUT, message="the copy answered")
    assert produce_answer(proxy.replays[0].response) == (ErrorCode.none, 0)
    assert log_end_offset(broker) == 1


def test_a_refused_request_is_not_duplicated(proxied):
    _broker, proxy = proxied
    inject(proxy, duplicate_request=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 1, partition=PARTITIONS + 5))
        error_code, _ = produce_answer(connection.read_frame())
    assert error_code == ErrorCode.unknown_topic_or_partition
    assert proxy.stats["duplicate_skipped"] == 1
    time.sleep(0.3)  # well past replay_delay_ms
    assert proxy.stats["duplicate_request"] == 0 and proxy.replays == []


@pytest.mark.parametrize("idempotent, copies_in_log", [(True, 1), (False, 2)])
def test_a_late_request_arrives_after_the_clients_retry(proxied, idempotent, copies_in_log):
    """The original is held back and its connection closed; the client retries on a new
    connection (answered), then the original reaches the broker on its own connection."""
    broker, proxy = proxied
    batch = idempotent_batch(broker) if idempotent else plain_batch()
    proxy.policy.replay_delay_ms = 500
    inject(proxy, late_request=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(batch, 1))
        assert connection.read_until_closed() == b""
    assert proxy.stats["late_request"] == 1
    proxy.policy.enabled = False
    with RawConnection(proxy) as retry:
        retry.send(produce_frame(batch, 2))
        assert produce_answer(retry.read_frame()) == (ErrorCode.none, 0)
    assert proxy.replays == [], "the late original is still held back"
    wait_until(lambda: proxy.stats["replay_answered"] == 1, TIMEOUT, message="the late original answered")
    (late,) = proxy.replays
    assert (late.kind, late.correlation_id) == ("late_request", 1)
    expected_offset = 0 if idempotent else 1  # a duplicate gets the original's offset
    assert produce_answer(late.response) == (ErrorCode.none, expected_offset)
    assert log_end_offset(broker) == copies_in_log


def test_only_duplicate_api_keys_are_duplicated(proxied):
    broker, proxy = proxied
    proxy.policy.duplicate_api_keys = frozenset()
    inject(proxy, duplicate_request=1.0, late_request=1.0)
    with RawConnection(proxy) as connection:
        connection.send(produce_frame(plain_batch(), 1))
        assert produce_answer(connection.read_frame()) == (ErrorCode.none, 0)
    time.sleep(0.3)
    assert proxy.stats["duplicate_request"] == proxy.stats["late_request"] == 0
    assert log_end_offset(broker) == 1


# -- a real client through every fault ------------------------------------------------------


def read_values(bootstrap: str) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=TIMEOUT)[1]
                for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        values: dict[int, list[int]] = defaultdict(list)
        deadline = time.monotonic() + 60
        while sum(map(len, values.values())) < sum(ends.values()) and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=0.5):
                assert message.error() is None
                partition, value = message.partition(), message.value()
                assert partition is not None and value is not None  # a record the test wrote
                values[partition].append(int(value))
        return values
    finally:
        consumer.close()


def test_an_idempotent_producer_writes_each_message_once_in_order_through_every_fault(proxied):
    broker, proxy = proxied
    inject(proxy, drop_request_and_close=0.03, duplicate_request=0.08, late_request=0.03,
           drop_response_and_close=0.03, truncate_response=0.03, delay_response=0.03, delay_ms=50)
    producer = Producer({
        "bootstrap.servers": proxy.address,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 20,  # many small requests: many chances for a fault
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 100,
        "request.timeout.ms": 3000,
        "message.timeout.ms": 120_000,
        "retry.backoff.ms": 20,
    })
    failures = []
    count = 6000
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS,
                                 on_delivery=lambda error, _message: error and failures.append(error))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 200 == 0:
            producer.poll(0.01)  # spread the messages over many requests
    assert producer.flush(120) == 0
    proxy.policy.enabled = False
    wait_until(lambda: proxy.stats["replay_answered"] + proxy.stats["replay_failed"]
               == proxy.stats["duplicate_request"] + proxy.stats["late_request"], TIMEOUT,
               message="every copy delivered")
    assert failures == []
    for kind in ("drop_request_and_close", "duplicate_request", "late_request", "drop_and_close",
                 "truncate_response", "delay"):
        assert proxy.stats[kind] > 0, (kind, proxy.stats)
    assert proxy.stats["replay_answered"] > 0, proxy.stats
    values = read_values(broker.bootstrap_servers)
    for partition in range(PARTITIONS):
        assert values[partition] == list(range(partition, count, PARTITIONS)), f"partition {partition}"


def test_stopping_while_a_connection_still_waits_for_its_broker_logs_no_error(caplog):
    """The soak's end: the proxy stops while a client's connection is still connecting to
    a broker that does not answer (paused, or cut off). Its task is cancelled there; that
    must end it quietly, not as asyncio's "Exception in callback" with a traceback, nor
    as a task destroyed while pending."""
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(0)
    queue_fillers = []
    for _ in range(4):  # fill the accept queue: the next connect hangs
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(upstream.getsockname())
        except BlockingIOError:
            pass
        queue_fillers.append(filler)
    time.sleep(0.2)
    proxy = FaultProxy(upstream.getsockname()).start()
    clients: list[socket.socket] = []
    try:
        clients = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(3)]
        wait_until(lambda: proxy.stats["connections"] == len(clients), TIMEOUT)
        with caplog.at_level("ERROR", logger="asyncio"):
            proxy.stop()
            gc.collect()  # a task destroyed while pending is reported when it is collected
    finally:
        proxy.stop()
        for sock in (*clients, *queue_fillers, upstream):
            sock.close()
    assert not [record.getMessage() for record in caplog.records if record.name == "asyncio"]


def test_an_opaque_proxy_passes_tls_through_untouched_whatever_its_policy(tmp_path):
    """A secured cluster's chaos run: the proxy cannot read TLS frames, so it passes the
    bytes on and never asks its policy, even one that drops every response."""
    ca = CertificateAuthority.create(tmp_path / "certs")
    server = ca.issue("broker", "CN=localhost", server=True)
    proxy_port = free_port()
    config = {"listeners": "SSL://127.0.0.1:0", "advertised.listeners": f"SSL://127.0.0.1:{proxy_port}",
              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.combined)}
    with EmbeddedBroker(tmp_path / "broker", config) as broker:
        policy = FaultPolicy(drop_response=1.0, seed=3)
        with FaultProxy(("127.0.0.1", broker.port), policy, port=proxy_port, opaque=True) as proxy:
            tls = {"bootstrap.servers": proxy.address, "security.protocol": "SSL",
                   "ssl.ca.location": str(ca.certificate)}
            producer = Producer({**tls, "enable.idempotence": True})
            for number in range(50):
                producer.produce(TOPIC, str(number).encode())
            assert producer.flush(TIMEOUT) == 0
            assert log_end_offset(broker) == 50
            assert proxy.stats["connections"] >= 1
            assert not set(proxy.stats) - {"connections"}  # no fault decided, none counted
