"""ListOffsets by timestamp against a real broker: the answer is a record's offset and
timestamp, found inside (compressed, multi-record) batches; read_committed lookups stop at
the last stable offset; version rules for the special timestamps are Kafka's."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from crc32c import crc32c
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v6 import request as list_v6
from kio.schema.list_offsets.v7 import request as list_v7
from kio.schema.list_offsets.v8 import request as list_v8
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.protocol.client import WireClient
from tests.support.kafka import create_topic

T0 = 1_700_000_000_000
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def records_batch(timestamps: list[int], *, codec: int = 0) -> bytes:
    """One batch with a record per timestamp, built by kafka-python as producers do."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta, timestamp in enumerate(timestamps):
        builder.append(delta, timestamp=timestamp, key=None, value=b"x" * 50, headers=[])
    return bytes(builder.build())


def produce(client: WireClient, topic: str, records: bytes) -> int:
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(
            name=TopicName(topic),
            partition_data=(produce_v9.PartitionProduceData(index=i32(0), records=Records(records)),)),),
    )
    answer = client.request(request).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer
    return answer.base_offset


def list_offsets(client: WireClient, topic: str, timestamp: int, *, version=list_v8, isolation=READ_UNCOMMITTED,
                 partitions=(0,)):
    request = version.ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation,
        topics=(version.ListOffsetsTopic(name=topic, partitions=tuple(
            version.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
            for p in partitions)),),
    )
    return client.request(request).topics[0].partitions


def lookup(client: WireClient, topic: str, timestamp: int, **kwargs) -> tuple[int, int, int]:
    (answer,) = list_offsets(client, topic, timestamp, **kwargs)
    return answer.error_code, answer.offset, answer.timestamp


# -- the record, not the batch -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_offsets_for_times_finds_the_record_inside_a_linger_batched_compressed_batch(shared_broker, codec):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique(f"times-{codec}")
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 200,
                         "batch.num.messages": 1000})
    for i in range(100):
        producer.produce(topic, f"value-{i}".encode() * 5, key=f"k{i}".encode(), timestamp=T0 + i * 10)
    assert producer.flush(10) == 0
    with WireClient.connect(bootstrap) as client:
        # The records went out in few batches, so a batch-level answer would be wrong.
        assert lookup(client, topic, -3) == (ErrorCode.none, 99, T0 + 990)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g")})
    try:
        found = [consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)[0].offset
                 for target in (T0 + 255, T0, T0 + 991)]
        assert found == [26, 0, -1]
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partition = TopicPartition(topic, 0)
    by_time = admin.list_offsets({partition: OffsetSpec.for_timestamp(T0 + 501)})[partition].result(10)
    assert (by_time.offset, by_time.timestamp) == (51, T0 + 510)
    newest = admin.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(10)
    assert (newest.offset, newest.timestamp) == (99, T0 + 990)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=CODECS)
def test_wire_lookup_answers_the_first_record_at_or_after_the_target_with_its_timestamp(shared_broker, codec):
    topic = unique("wire-times")
    create_topic(shared_broker.bootstrap_servers, topic)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        produce(client, topic, records_batch([T0, T0 + 50, T0 + 20, T0 + 80, T0 + 80, T0 + 60], codec=codec))
        produce(client, topic, records_batch([T0 + 200, T0 + 100], codec=codec))
        assert lookup(client, topic, T0 + 10) == (ErrorCode.none, 1, T0 + 50)
        assert lookup(client, topic, T0 + 51) == (ErrorCode.none, 3, T0 + 80)
        assert lookup(client, topic, T0 + 81) == (ErrorCode.none, 6, T0 + 200)
        assert lookup(client, topic, T0 + 201) == (ErrorCode.none, -1, -1)
        # MAX_TIMESTAMP: the first record carrying the largest timestamp
        assert lookup(client, topic, -3) == (ErrorCode.none, 6, T0 + 200)


def test_log_append_time_topic_answers_the_first_record_with_the_append_time(shared_broker):
    topic = unique("append-time")
    create_topic(shared_broker.bootstrap_servers, topic, config={"message.timestamp.type": "LogAppendTime"})
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        produce(client, topic, records_batch([T0, T0 + 10, T0 + 20], codec=2))
        error, offset, timestamp = lookup(client, topic, -3)
        assert (error, offset) == (ErrorCode.none, 0)
        assert timestamp > T0 + 1_000_000  # the broker's clock, not the producer's timestamps
        assert lookup(client, topic, timestamp) == (ErrorCode.none, 0, timestamp)
        assert lookup(client, topic, timestamp + 1) == (ErrorCode.none, -1, -1)


# -- read_committed: nothing at or past the last stable offset -----------------------------


def test_read_committed_lookups_stop_at_the_last_stable_offset(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("lso-times")
    create_topic(bootstrap, topic)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(3):
        plain.produce(topic, b"committed", timestamp=T0 + i)
    assert plain.flush(10) == 0
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn"), "linger.ms": 0})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    for i in range(3):
        transactional.produce(topic, b"open", timestamp=T0 + 100 + i)
    assert transactional.flush(10) == 0
    with WireClient.connect(bootstrap) as client:
        assert lookup(client, topic, -1, isolation=READ_COMMITTED) == (ErrorCode.none, 3, -1)
        assert lookup(client, topic, T0 + 100, isolation=READ_UNCOMMITTED) == (ErrorCode.none, 3, T0 + 100)
        assert lookup(client, topic, T0 + 100, isolation=READ_COMMITTED) == (ErrorCode.none, -1, -1)
        assert lookup(client, topic, T0 + 1, isolation=READ_COMMITTED) == (ErrorCode.none, 1, T0 + 1)
        assert lookup(client, topic, -3, isolation=READ_UNCOMMITTED) == (ErrorCode.none, 5, T0 + 102)
        assert lookup(client, topic, -3, isolation=READ_COMMITTED) == (ErrorCode.none, -1, -1)
        transactional.commit_transaction(10)
        assert lookup(client, topic, T0 + 100, isolation=READ_COMMITTED) == (ErrorCode.none, 3, T0 + 100)
        # the COMMIT marker (offset 6) carries the broker's clock: now the largest timestamp
        error, offset, timestamp = lookup(client, topic, -3, isolation=READ_COMMITTED)
        assert (error, offset) == (ErrorCode.none, 6) and timestamp > T0 + 102


# -- versions and request errors -----------------------------------------------------------


def test_max_timestamp_needs_v7_and_earliest_local_v8(shared_broker):
    topic = unique("versions")
    create_topic(shared_broker.bootstrap_servers, topic)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        produce(client, topic, records_batch([T0, T0 + 5]))
        assert lookup(client, topic, -3, version=list_v6) == (ErrorCode.unsupported_version, -1, -1)
        assert lookup(client, topic, -3, version=list_v7) == (ErrorCode.none, 1, T0 + 5)
        assert lookup(client, topic, -4, version=list_v7)[0] == ErrorCode.unsupported_version
        assert lookup(client, topic, -4, version=list_v8) == (ErrorCode.none, 0, -1)
        # -5 (latest tiered, v9) and anything below are not timestamps this broker reads
        assert lookup(client, topic, -5, version=list_v8)[0] == ErrorCode.unsupported_version
        assert lookup(client, topic, -42, version=list_v8)[0] == ErrorCode.unsupported_version
        # an unsupported timestamp is refused before the partition is looked up
        assert lookup(client, "no-such-topic", -3, version=list_v6)[0] == ErrorCode.unsupported_version


def test_tiered_storage_timestamps_answer_no_offset_from_v9_and_v11(shared_broker):
    """-5 (latest tiered, v9) and -6 (earliest pending upload, v11) answer offset -1 as
    Kafka does for a topic without remote storage; v10 adds only a timeout."""
    from kio.schema.list_offsets.v9 import request as list_v9
    from kio.schema.list_offsets.v11 import request as list_v11

    topic = unique("tiered")
    create_topic(shared_broker.bootstrap_servers, topic)

    def ask(version, timestamp: int, **extra):
        request = version.ListOffsetsRequest(replica_id=-1, isolation_level=READ_UNCOMMITTED, topics=(
            version.ListOffsetsTopic(name=topic, partitions=(
                version.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp),)),),
            **extra)
        (answer,) = client.request(request).topics[0].partitions
        return answer.error_code, answer.offset, answer.timestamp, answer.leader_epoch

    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        produce(client, topic, records_batch([T0, T0 + 5]))
        assert ask(list_v9, -5) == (ErrorCode.none, -1, -1, -1)
        assert ask(list_v9, -6)[0] == ErrorCode.unsupported_version
        v11 = {"timeout": datetime.timedelta(seconds=5)}
        assert ask(list_v11, -6, **v11) == (ErrorCode.none, -1, -1, -1)
        assert ask(list_v11, -2, **v11) == (ErrorCode.none, 0, -1, 0)
        assert ask(list_v11, -1, **v11) == (ErrorCode.none, 2, -1, 0)
        assert ask(list_v11, -7, **v11)[0] == ErrorCode.unsupported_version


def test_a_partition_asked_twice_gets_one_invalid_request_answer(shared_broker):
    topic = unique("dupes")
    create_topic(shared_broker.bootstrap_servers, topic, partitions=2)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        answers = list_offsets(client, topic, -1, partitions=(0, 1, 0))
    assert [(a.partition_index, a.error_code) for a in answers] == [
        (0, ErrorCode.invalid_request), (1, ErrorCode.none),
    ]


def test_a_corrupt_stored_batch_found_by_a_lookup_is_corrupt_message(tmp_path):
    from oncelog import EmbeddedBroker

    with EmbeddedBroker(tmp_path / "b") as broker:
        create_topic(broker.bootstrap_servers, "damaged")
        data = bytearray(records_batch([T0, T0 + 10], codec=1))
        records_start = 61
        data[records_start:] = bytes(len(data) - records_start)  # not gzip any more...
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))  # ...but a valid CRC
        with WireClient.connect(broker.bootstrap_servers) as client:
            produce(client, "damaged", bytes(data))  # the broker does not decompress on produce
            assert lookup(client, "damaged", T0 + 5)[0] == ErrorCode.corrupt_message
            assert lookup(client, "damaged", -1) == (ErrorCode.none, 2, -1)
