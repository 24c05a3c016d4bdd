"""Declared lengths are checked before kio's native decoder reserves memory for them."""

import datetime
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v3 import request as produce_v3
from kio.schema.produce.v9 import request as produce_v9
from kio.serial import entity_writer
from kio.static.primitive import Records

from oncelog.protocol import framing
from oncelog.protocol.guard import _checker, check_lengths


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


# -- every request schema: the generated check walks a valid body to its exact end ------------


def _request_schemas():
    for api_key, name in api_key_map.items():
        for version in schema_name_map[name]:
            try:
                yield load_request_schema(api_key, version)
            except UnknownEntity:  # a version kio has no request for
                continue


REQUEST_SCHEMAS = sorted(set(_request_schemas()), key=lambda cls: cls.__module__)
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))  # kio registers none for Records


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(REQUEST_SCHEMAS).flatmap(st.from_type), st.data())
def test_a_valid_request_of_any_schema_is_walked_to_its_end_and_a_cut_one_is_refused(request, data):
    try:
        encoded = body(request)
    except (ValueError, TypeError, OverflowError, UnicodeEncodeError):
        return  # a value kio cannot write
    assert _checker(type(request))(encoded, 0, len(encoded)) == len(encoded)
    if encoded:
        cut = encoded[:data.draw(st.integers(0, len(encoded) - 1), label="cut")]
        with pytest.raises((framing.MalformedRequestError, IndexError)):
            check_lengths(type(request), cut, 0)
