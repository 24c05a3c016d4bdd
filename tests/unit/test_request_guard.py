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
from oncelog.protocol.guard import _checker, _plan, check_lengths
from oncelog.protocol.messages import decode_request
from tests.support.null_fields import body_with_null, null_field_targets


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


# -- nulls: refused where Kafka's schema forbids them, as Kafka's generated readers refuse them --


def test_a_null_array_where_the_version_forbids_it_is_refused_naming_the_field():
    from kio.schema.list_offsets.v1.request import ListOffsetsRequest

    body = (-1).to_bytes(4, "big", signed=True) + (-1).to_bytes(4, "big", signed=True)  # replica_id, topics: null
    with pytest.raises(framing.MalformedRequestError, match="non-nullable field topics was serialized as null"):
        check_lengths(ListOffsetsRequest, body, 0)


def test_a_null_nested_array_is_refused_where_the_version_forbids_it_and_passes_where_it_allows_it():
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequest

    check_lengths(OffsetFetchRequest, body_with_null(OffsetFetchRequest, ("groups", "topics")), 0)  # nullable in v8
    with pytest.raises(framing.MalformedRequestError, match="field partition_indexes was serialized as null"):
        check_lengths(OffsetFetchRequest,
                      body_with_null(OffsetFetchRequest, ("groups", "topics", "partition_indexes")), 0)


def test_metadata_topics_may_be_null_from_v1_but_not_in_v0():
    from kio.schema.metadata.v0.request import MetadataRequest as MetadataV0
    from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1

    assert decode_request(3, 1, body_with_null(MetadataV1, ("topics",))).topics is None  # all topics
    with pytest.raises(framing.MalformedRequestError, match="non-nullable field topics"):
        decode_request(3, 0, body_with_null(MetadataV0, ("topics",)))


def test_every_request_schema_refuses_each_non_nullable_field_as_null_and_accepts_each_nullable_one():
    refused_wrongly, accepted_wrongly = [], []
    for cls in REQUEST_SCHEMAS:
        for target in null_field_targets(cls):
            body = body_with_null(cls, target.path)
            try:
                check_lengths(cls, body, 0)
            except framing.MalformedRequestError as error:
                if target.nullable:
                    refused_wrongly.append(f"{cls.__module__} {target}: {error}")
            else:
                if not target.nullable:
                    accepted_wrongly.append(f"{cls.__module__} {target}")
    assert not refused_wrongly
    assert not accepted_wrongly


def test_the_hand_decoded_produce_request_refuses_nulls_kafka_refuses_and_keeps_the_nullable_ones():
    for version in range(3, 13):
        cls = load_request_schema(0, version)
        for target in null_field_targets(cls):
            body = body_with_null(cls, target.path)
            if target.nullable:
                decode_request(0, version, body)
            else:
                with pytest.raises(ValueError, match="null"):
                    decode_request(0, version, body)


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


# The walk as it was written before it was generated as code: the reference the
# generated checkers must agree with, valid bodies and lying ones alike.


def _reference_entity(cls, data, position: int, limit: int) -> int:
    flexible, steps, tagged = _plan(cls)
    for step in steps:
        position = _reference_step(step, flexible, data, position, limit)
    if flexible:
        count, position = framing.read_unsigned_varint(data, position)
        if count > limit - position:
            raise framing.MalformedRequestError(f"{count} tagged fields cannot fit in {limit - position} bytes")
        for _ in range(count):
            tag, position = framing.read_unsigned_varint(data, position)
            size, position = framing.read_unsigned_varint(data, position)
            if size > limit - position:
                raise framing.MalformedRequestError(f"tagged field {tag} of {size} bytes runs past its struct")
            if tag in tagged:
                _reference_step(tagged[tag], flexible, data, position, position + size)
            position += size
    return position


def _reference_length(flexible: bool, data, position: int, wide: bool) -> tuple[int, int]:
    if flexible:
        raw, position = framing.read_unsigned_varint(data, position)
        return raw - 1, position
    size = 4 if wide else 2
    if position + size > len(data):
        raise framing.MalformedRequestError("length runs past the end of the request")
    return int.from_bytes(data[position:position + size], "big", signed=True), position + size


def _reference_step(step: tuple, flexible: bool, data, position: int, limit: int) -> int:
    kind, detail, name = step
    nullable = kind.startswith("nullable ")
    kind = kind.removeprefix("nullable ")
    if kind == "fixed":
        return position + detail
    if kind == "uvarint":
        return framing.read_unsigned_varint(data, position)[1]
    if kind in ("string", "bytes"):
        size, position = _reference_length(flexible, data, position, wide=kind == "bytes")
        if size > limit - position:
            raise framing.MalformedRequestError(f"a field declares {size} bytes, {limit - position} remain")
        if size < 0 and not nullable:
            raise framing.MalformedRequestError(f"non-nullable field {name} was serialized as null")
        return position + max(size, 0)
    if kind == "entity" and not nullable:
        return _reference_entity(detail, data, position, limit)
    if kind == "entity":
        if position >= limit:
            raise framing.MalformedRequestError("a nullable struct's marker runs past the end of the request")
        return position + 1 if data[position] == 0xFF else _reference_entity(detail, data, position + 1, limit)
    count, position = _reference_length(flexible, data, position, wide=True)
    if count > limit - position:
        raise framing.MalformedRequestError(f"an array declares {count} elements, {limit - position} bytes remain")
    if count < 0 and not nullable:
        raise framing.MalformedRequestError(f"non-nullable field {name} was serialized as null")
    if count <= 0:
        return position
    if detail[0] == "fixed":
        return position + count * detail[1]
    for _ in range(count):
        position = _reference_step(detail, flexible, data, position, limit)
        if position > limit:
            raise framing.MalformedRequestError("array elements run past the end of the request")
    return position


def _outcome(walk) -> tuple:
    try:
        return ("end", walk())
    except framing.MalformedRequestError as error:
        return ("refused", str(error))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(REQUEST_SCHEMAS).flatmap(st.from_type), st.data())
def test_the_generated_check_agrees_with_the_reference_walk_on_valid_cut_and_corrupted_bodies(request, data):
    try:
        encoded = body(request)
    except (ValueError, TypeError, OverflowError, UnicodeEncodeError):
        return  # a value kio cannot write
    cls = type(request)
    assert _checker(cls)(encoded, 0, len(encoded)) == len(encoded)  # a valid body is walked to its end
    if not encoded:
        return
    cut = encoded[:data.draw(st.integers(0, len(encoded) - 1), label="cut")]
    with pytest.raises(framing.MalformedRequestError):
        check_lengths(cls, cut, 0)
    corrupted = bytearray(encoded)
    for position in data.draw(st.lists(st.integers(0, len(encoded) - 1), min_size=1, max_size=4), label="bytes"):
        corrupted[position] = data.draw(st.integers(0, 255), label="value")
    assert _outcome(lambda: _checker(cls)(bytes(corrupted), 0, len(corrupted))) == \
        _outcome(lambda: _reference_entity(cls, bytes(corrupted), 0, len(corrupted)))
