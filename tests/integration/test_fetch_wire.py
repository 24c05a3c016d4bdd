"""Fetch at the wire: offset range, long polling (min_bytes / max_wait), the byte limits
(max_bytes, partition_max_bytes, the broker's fetch.max.bytes, at least one whole batch),
read_committed stopping at the last stable offset, and zstd topics for old versions."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import re
import socket
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog import EmbeddedBroker
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient, decode_response, encode_request
from oncelog.protocol.write_flow import WriteFlow
from tests.support.kafka import create_topic

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
BIG = 50 * 1024 * 1024


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def batch(count: int = 1, value_size: int = 100) -> bytes:
    return rb.build_batch([rb.Record(b"k", b"v" * value_size)] * count, timestamp_ms=1_700_000_000_000)


def compressed_batch(codec: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta in range(5):
        builder.append(delta, timestamp=1_700_000_000_000, key=None, value=b"z" * 100, headers=[])
    return bytes(builder.build())


def produce(bootstrap: str, topic: str, records: bytes, partition: int = 0) -> int:
    with WireClient.connect(bootstrap) as client:
        return produce_on(client, topic, records, partition)


def produce_on(client: WireClient, topic: str, records: bytes, partition: int = 0) -> int:
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(
            name=TopicName(topic),
            partition_data=(produce_v9.PartitionProduceData(index=i32(partition), records=Records(records)),)),),
    )
    answer = client.request(request).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer
    return answer.base_offset


def _make(cls, **fields):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def fetch(client: WireClient, topic: str, offsets: dict[int, int] | int = 0, **kwargs):
    """One Fetch of `topic` (`fetch_request`'s arguments): its partitions' answers."""
    return client.request(fetch_request(topic, offsets, **kwargs)).responses[0].partitions


def fetch_request(topic: str, offsets: dict[int, int] | int = 0, *, version: int = 12, max_bytes: int = BIG,
                  partition_max_bytes: int = BIG, min_bytes: int = 0, max_wait_ms: int = 0,
                  isolation: int = READ_UNCOMMITTED):
    """A Fetch request of `topic`; `offsets` maps partition -> fetch offset (an int: partition 0)."""
    module = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    if isinstance(offsets, int):
        offsets = {0: offsets}
    partitions = tuple(
        _make(module.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
              log_start_offset=-1, partition_max_bytes=partition_max_bytes)
        for p, o in offsets.items()
    )
    return _make(
        module.FetchRequest, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation, session_id=0, session_epoch=-1,
        topics=(module.FetchTopic(topic=topic, partitions=partitions),), forgotten_topics_data=(), rack_id="",
    )


def fetch_one(client: WireClient, topic: str, offset: int = 0, **kwargs):
    (partition,) = fetch(client, topic, offset, **kwargs)
    return partition


def offsets_in(records) -> list[int]:
    data = bytes(records or b"")
    return [o for header in rb.parse_batches(data) for o in range(header.base_offset, header.next_offset)]


# -- offsets --------------------------------------------------------------------------------


def test_fetch_offset_outside_the_log_is_offset_out_of_range(shared_broker):
    topic = unique("range")
    create_topic(shared_broker.bootstrap_servers, topic)
    produce(shared_broker.bootstrap_servers, topic, batch(3))
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        past_end = fetch_one(client, topic, 4)
        at_end = fetch_one(client, topic, 3)
        negative = fetch_one(client, topic, -1)
        inside = fetch_one(client, topic, 1)
    assert past_end.error_code == ErrorCode.offset_out_of_range
    assert negative.error_code == ErrorCode.offset_out_of_range
    assert (at_end.error_code, offsets_in(at_end.records), at_end.high_watermark) == (ErrorCode.none, [], 3)
    # the whole batch holding offset 1 comes back; clients skip the records before it
    assert (inside.error_code, offsets_in(inside.records)) == (ErrorCode.none, [0, 1, 2])


def test_an_out_of_range_partition_answers_at_once_despite_max_wait(shared_broker):
    topic = unique("range-wait")
    create_topic(shared_broker.bootstrap_servers, topic)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        started = time.monotonic()
        answer = fetch_one(client, topic, 7, min_bytes=1, max_wait_ms=5_000)
        assert time.monotonic() - started < 2
    assert answer.error_code == ErrorCode.offset_out_of_range


# -- long polling ---------------------------------------------------------------------------


def test_fetch_waits_max_wait_when_no_data_arrives(shared_broker):
    topic = unique("wait")
    create_topic(shared_broker.bootstrap_servers, topic)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        started = time.monotonic()
        answer = fetch_one(client, topic, 0, min_bytes=1, max_wait_ms=800)
        elapsed = time.monotonic() - started
    assert answer.error_code == ErrorCode.none and offsets_in(answer.records) == []
    assert 0.75 <= elapsed < 5


def _produce_later(bootstrap: str, topic: str, delays_and_batches: list[tuple[float, bytes]]) -> threading.Thread:
    def run():
        for delay, data in delays_and_batches:
            time.sleep(delay)
            produce(bootstrap, topic, data)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_fetch_returns_as_soon_as_an_append_brings_min_bytes(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("wake")
    create_topic(bootstrap, topic)
    with WireClient.connect(bootstrap) as client:
        producer = _produce_later(bootstrap, topic, [(0.3, batch(2))])
        started = time.monotonic()
        answer = fetch_one(client, topic, 0, min_bytes=1, max_wait_ms=10_000)
        elapsed = time.monotonic() - started
        producer.join()
    assert offsets_in(answer.records) == [0, 1]
    assert 0.25 <= elapsed < 5


def test_fetch_keeps_waiting_until_min_bytes_are_there(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("min-bytes")
    create_topic(bootstrap, topic)
    one = batch(1, value_size=300)
    with WireClient.connect(bootstrap) as client:
        producer = _produce_later(bootstrap, topic, [(0.2, one), (0.6, one)])
        started = time.monotonic()
        answer = fetch_one(client, topic, 0, min_bytes=len(one) + 1, max_wait_ms=10_000)
        elapsed = time.monotonic() - started
        producer.join()
    assert offsets_in(answer.records) == [0, 1]
    assert 0.7 <= elapsed < 5


# -- byte limits ----------------------------------------------------------------------------


def test_max_bytes_and_partition_max_bytes_return_whole_batches_up_to_the_limit(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("limits")
    create_topic(bootstrap, topic)
    one = batch(2, value_size=200)
    for _ in range(4):
        produce(bootstrap, topic, one)
    size = len(one)
    with WireClient.connect(bootstrap) as client:
        by_response = fetch_one(client, topic, 0, max_bytes=int(2.5 * size))
        by_partition = fetch_one(client, topic, 0, partition_max_bytes=int(1.5 * size))
        exact = fetch_one(client, topic, 2, max_bytes=3 * size)
    assert offsets_in(by_response.records) == [0, 1, 2, 3]
    assert offsets_in(by_partition.records) == [0, 1]
    assert offsets_in(exact.records) == [2, 3, 4, 5, 6, 7]


def test_a_batch_larger_than_every_limit_is_returned_whole_for_the_first_partition_only(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("oversized")
    create_topic(bootstrap, topic, partitions=2)
    large = batch(3, value_size=2_000)
    produce(bootstrap, topic, large, partition=0)
    produce(bootstrap, topic, large, partition=1)
    with WireClient.connect(bootstrap) as client:
        tiny_partition_limit = fetch(client, topic, {0: 0, 1: 0}, partition_max_bytes=10)
        tiny_response_limit = fetch(client, topic, {0: 0, 1: 0}, max_bytes=10)
        room_for_one = fetch(client, topic, {0: 0, 1: 0}, max_bytes=len(large) + 100)
    for answers in (tiny_partition_limit, tiny_response_limit, room_for_one):
        assert [offsets_in(a.records) for a in answers] == [[0, 1, 2], []]
        assert len(answers[0].records) == len(large) > 6_000
        assert [a.error_code for a in answers] == [ErrorCode.none, ErrorCode.none]
        assert [a.high_watermark for a in answers] == [3, 3]


def test_broker_fetch_max_bytes_caps_the_clients_max_bytes(tmp_path):
    one = batch(1, value_size=300)
    with EmbeddedBroker(tmp_path / "b", {"fetch.max.bytes": "1024"}) as broker:
        create_topic(broker.bootstrap_servers, "capped")
        for _ in range(6):
            produce(broker.bootstrap_servers, "capped", one)
        with WireClient.connect(broker.bootstrap_servers) as client:
            capped = fetch_one(client, "capped", 0, max_bytes=BIG)
            below_cap = fetch_one(client, "capped", 0, max_bytes=len(one))
    assert len(capped.records) == (1024 // len(one)) * len(one)
    assert offsets_in(capped.records) == list(range(1024 // len(one)))
    assert offsets_in(below_cap.records) == [0]


def test_fetch_max_bytes_below_kafkas_minimum_is_a_config_error(tmp_path):
    from oncelog.config.broker import BrokerConfig, ConfigError

    assert BrokerConfig({"fetch.max.bytes": "1024"})["fetch.max.bytes"] == 1024
    assert BrokerConfig({})["fetch.max.bytes"] == 57671680
    with pytest.raises(ConfigError, match=re.escape("fetch.max.bytes")):
        BrokerConfig({"fetch.max.bytes": "1023"})


# -- read_committed -------------------------------------------------------------------------


def test_read_committed_fetch_stops_at_the_last_stable_offset(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("lso")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, batch(3))
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn"), "linger.ms": 0})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    for _ in range(2):
        transactional.produce(topic, b"open")
    assert transactional.flush(10) == 0
    with WireClient.connect(bootstrap) as client:
        committed = fetch_one(client, topic, 0, isolation=READ_COMMITTED)
        uncommitted = fetch_one(client, topic, 0, isolation=READ_UNCOMMITTED)
        started = time.monotonic()
        at_lso = fetch_one(client, topic, 3, isolation=READ_COMMITTED, min_bytes=1, max_wait_ms=500)
        waited = time.monotonic() - started
        transactional.abort_transaction(10)
        after_abort = fetch_one(client, topic, 0, isolation=READ_COMMITTED)
    assert offsets_in(committed.records) == [0, 1, 2]
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 3)
    assert committed.aborted_transactions == ()
    assert offsets_in(uncommitted.records) == [0, 1, 2, 3, 4]
    # nothing below the LSO past offset 3: the fetch waits as for an empty partition
    assert offsets_in(at_lso.records) == [] and waited >= 0.45
    assert offsets_in(after_abort.records) == [0, 1, 2, 3, 4, 5]  # 5 is the ABORT marker
    assert after_abort.last_stable_offset == 6
    assert [a.first_offset for a in after_abort.aborted_transactions] == [3]


# -- zstd and old fetch versions --------------------------------------------------------------


def test_zstd_topic_is_unsupported_compression_type_below_fetch_v10(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("zstd-topic")
    create_topic(bootstrap, topic, config={"compression.type": "zstd"})
    produce(bootstrap, topic, compressed_batch(4))
    with WireClient.connect(bootstrap) as client:
        old = fetch_one(client, topic, 0, version=9)
        v4 = fetch_one(client, topic, 0, version=4)
        new = fetch_one(client, topic, 0, version=10)
    assert (old.error_code, old.high_watermark, bytes(old.records or b"")) == (
        ErrorCode.unsupported_compression_type, -1, b"")
    assert v4.error_code == ErrorCode.unsupported_compression_type
    assert (new.error_code, offsets_in(new.records)) == (ErrorCode.none, [0, 1, 2, 3, 4])


def test_zstd_batches_of_a_producer_compression_topic_are_served_to_old_versions_as_kafka_does(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("zstd-batches")
    create_topic(bootstrap, topic)  # compression.type=producer: Kafka checks the topic setting only
    produce(bootstrap, topic, compressed_batch(4))
    with WireClient.connect(bootstrap) as client:
        old = fetch_one(client, topic, 0, version=9)
    assert (old.error_code, offsets_in(old.records)) == (ErrorCode.none, [0, 1, 2, 3, 4])


# -- a client that reads slowly ------------------------------------------------------------


def test_a_client_that_reads_slowly_gets_its_large_fetch_answer_whole_and_the_next_one_after(shared_broker,
                                                                                             monkeypatch):
    """A 12 MB answer fills the socket and passes the connection's write high-water
    mark: the transport pauses the connection's writer (WriteFlow), whose task waits for
    it to drain before taking the next request; the client then reads both answers
    whole, in order."""
    pauses: list[WriteFlow] = []
    real_pause = WriteFlow.pause

    def counted_pause(flow: WriteFlow) -> None:
        pauses.append(flow)
        real_pause(flow)

    monkeypatch.setattr(WriteFlow, "pause", counted_pause)
    topic = unique("slow-reader")
    create_topic(shared_broker.bootstrap_servers, topic)
    records = batch(500, value_size=1000)  # ~500 KB
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        for _ in range(24):
            produce_on(client, topic, records)
    expected = shared_broker.call(lambda: shared_broker.broker.logs.partition(topic, 0).read(0, BIG).records)
    request = fetch_request(topic)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
        client.sock.sendall(encode_request(request, 1) + encode_request(request, 2))
        time.sleep(1.0)  # the broker meanwhile fills the socket and its transport's buffer
        assert pauses, "the broker's transport never paused its writer"
        for correlation_id in (1, 2):
            answer = decode_response(request, client.read_frame(), correlation_id).responses[0].partitions[0]
            assert answer.error_code == ErrorCode.none
            assert bytes(answer.records) == expected and len(expected) > 12_000_000
