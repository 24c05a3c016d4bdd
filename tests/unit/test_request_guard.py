"""Declared lengths are checked before kio's native decoder reserves memory for them."""

import datetime
import io

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v3 import request as produce_v3
from kio.schema.produce.v9 import request as produce_v9
from kio.serial import entity_writer

from oncelog.protocol import framing
from oncelog.protocol.guard import check_lengths


def body(entity):
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def test_the_fuzzers_process_killing_metadata_request_is_refused():
    frame = bytes.fromhex("000000140003000c00000007000466757a7a00ffffffff0f")[4:]
    _api_key, _version, _corr, _client, position = framing.read_request_header(frame)
    position = framing.skip_tagged_fields(frame, position)
    with pytest.raises(framing.MalformedRequestError, match="array declares"):
        check_lengths(MetadataRequest, frame, position)


def test_well_formed_requests_pass():
    check_lengths(MetadataRequest, body(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="a"),),
                                                        allow_auto_topic_creation=True,
                                                        include_topic_authorized_operations=False)), 0)
    for module in (produce_v3, produce_v9):
        request = module.ProduceRequest(
            transactional_id="t", acks=-1, timeout=datetime.timedelta(seconds=1),
            topic_data=(module.TopicProduceData(name="x", partition_data=(
                module.PartitionProduceData(index=0, records=b"r" * 5000),)),),
        )
        check_lengths(type(request), body(request), 0)


def test_legacy_array_length_of_two_billion_is_refused():
    request = produce_v3.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1), topic_data=())
    data = bytearray(body(request))
    data[-4:] = (2**31 - 1).to_bytes(4, "big")  # the topic_data array length
    with pytest.raises(framing.MalformedRequestError):
        check_lengths(produce_v3.ProduceRequest, bytes(data), 0)


def test_records_longer_than_the_request_are_refused():
    request = produce_v3.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
        topic_data=(produce_v3.TopicProduceData(name="x", partition_data=(
            produce_v3.PartitionProduceData(index=0, records=b"abc"),)),))
    data = bytearray(body(request))
    data[-7:-3] = (10**9).to_bytes(4, "big")  # the records length
    with pytest.raises(framing.MalformedRequestError, match="declares"):
        check_lengths(produce_v3.ProduceRequest, bytes(data), 0)


def test_a_null_or_present_nullable_struct_passes_and_a_lying_one_is_refused():
    """KIP-893 nullable structs (DescribeTopicPartitions' cursor) start with an int8
    marker; read as a string length it made kafka-python's null cursor look malformed."""
    from kio.schema.describe_topic_partitions.v0.request import (
        Cursor,
        DescribeTopicPartitionsRequest,
        TopicRequest,
    )

    for cursor in (None, Cursor(topic_name="abc", partition_index=2)):
        request = DescribeTopicPartitionsRequest(topics=(TopicRequest(name="abc"),), response_partition_limit=1,
                                                 cursor=cursor)
        check_lengths(DescribeTopicPartitionsRequest, body(request), 0)
    present = body(DescribeTopicPartitionsRequest(topics=(), response_partition_limit=1,
                                                  cursor=Cursor(topic_name="abc", partition_index=2)))
    with pytest.raises(framing.MalformedRequestError, match="declares"):
        check_lengths(DescribeTopicPartitionsRequest, present[:6] + b"\x7f" + present[7:], 0)  # the name's length
