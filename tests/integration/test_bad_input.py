"""Bad input on the wire: each gets Kafka's error code or a closed connection, and the
broker keeps serving everyone else."""

import datetime
import struct
import zlib

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9

from oncelog import EmbeddedBroker
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient, encode_request


def api_versions_works(bootstrap):
    with WireClient.connect(bootstrap) as client:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        return response.error_code == ErrorCode.none and len(response.api_keys) > 5


def produce(client, topic, records, partition=0):
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce_v9.TopicProduceData(
            name=topic, partition_data=(produce_v9.PartitionProduceData(index=partition, records=records),)),),
    )
    response = client.request(request)
    return response.responses[0].partition_responses[0]


@pytest.fixture
def strict_broker(tmp_path):
    config = {"auto.create.topics.enable": "false", "socket.request.max.bytes": "100000", "message.max.bytes": "5000"}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)
        yield broker


def batch(value=b"v", count=1):
    return rb.build_batch([rb.Record(b"k", value)] * count, timestamp_ms=1000)


def test_garbage_frame_closes_only_that_connection(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        client.send_raw(struct.pack(">i", 3) + b"\x01\x02\x03")
        assert client.is_closed()
    assert api_versions_works(strict_broker.bootstrap_servers)


def test_unknown_api_key_closes_the_connection(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        header = struct.pack(">hhih", 999, 0, 1, -1)
        client.send_raw(struct.pack(">i", len(header)) + header)
        assert client.is_closed()
    assert api_versions_works(strict_broker.bootstrap_servers)


def test_unsupported_produce_version_closes_the_connection(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        header = struct.pack(">hhih", 0, 99, 1, -1)
        client.send_raw(struct.pack(">i", len(header) + 4) + header + b"\x00\x00\x00\x00")
        assert client.is_closed()


def test_unsupported_api_versions_version_gets_a_v0_answer_with_the_supported_range(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        header = struct.pack(">hhih", 18, 77, 42, -1)
        client.send_raw(struct.pack(">i", len(header) + 2) + header + b"\x00\x00")
        frame = client.read_frame()
        correlation, error, count, key, low, high = struct.unpack_from(">ihihhh", frame)
        assert (correlation, error, count, key, low, high) == (42, ErrorCode.unsupported_version, 1, 18, 0, 3)


def test_frame_above_socket_request_max_bytes_closes_the_connection(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        client.send_raw(struct.pack(">i", 100_001))
        assert client.is_closed()
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        client.send_raw(struct.pack(">i", -7))
        assert client.is_closed()
    assert api_versions_works(strict_broker.bootstrap_servers)


def test_truncated_body_closes_the_connection(strict_broker):
    frame = encode_request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 1)
    body = frame[4:-3]
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.is_closed()


def test_bad_crc_is_corrupt_message_and_nothing_is_written(strict_broker):
    data = bytearray(batch())
    data[-2] ^= 0x55
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        assert produce(client, "t", bytes(data)).error_code == ErrorCode.corrupt_message
        good = produce(client, "t", batch())
        assert good.error_code == ErrorCode.none and good.base_offset == 0


def test_batch_above_max_message_bytes_is_message_too_large(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        result = produce(client, "t", batch(b"x" * 6000))
        assert result.error_code == ErrorCode.message_too_large
        assert "max.message.bytes=5000" in result.error_message


def test_two_batches_in_one_partition_are_an_invalid_record(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        assert produce(client, "t", batch() + batch()).error_code == ErrorCode.invalid_record


def legacy_message(magic: int, value: bytes = b"v") -> bytes:
    """A magic 0 or 1 message set entry (offset, size, crc, magic, attributes, [timestamp],
    null key, value), what pre-0.11 clients send."""
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 1000) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body


@pytest.mark.parametrize("magic", [0, 1])
def test_magic_0_and_1_message_sets_are_an_invalid_record_as_in_kafka(strict_broker, magic):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        result = produce(client, "t", legacy_message(magic))
        assert result.error_code == ErrorCode.invalid_record
        assert "magic version 2" in result.error_message
        assert produce(client, "t", batch()).base_offset == 0  # nothing was written


@pytest.mark.parametrize("magic", [3, -1])
def test_a_magic_above_2_or_negative_is_corrupt_message(strict_broker, magic):
    data = bytearray(batch())
    data[16] = magic & 0xFF
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        assert produce(client, "t", bytes(data)).error_code == ErrorCode.corrupt_message


def test_control_batch_from_a_client_is_an_invalid_record(strict_broker):
    marker = rb.build_control_batch(rb.ControlType.COMMIT, producer_id=1, producer_epoch=0,
                                    coordinator_epoch=0, timestamp_ms=1)
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        assert produce(client, "t", marker).error_code == ErrorCode.invalid_record


def test_produce_to_missing_topic_with_auto_create_off(strict_broker):
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        assert produce(client, "nope", batch()).error_code == ErrorCode.unknown_topic_or_partition
        assert produce(client, "t", batch(), partition=5).error_code == ErrorCode.unknown_topic_or_partition


def test_header_that_lies_about_its_length_is_corrupt(strict_broker):
    data = bytearray(batch())
    struct.pack_into(">i", data, 8, 10_000)
    with WireClient.connect(strict_broker.bootstrap_servers) as client:
        assert produce(client, "t", bytes(data)).error_code == ErrorCode.corrupt_message
