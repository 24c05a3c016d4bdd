"""The compiled entity writers write exactly what kio's writer does, for every request and
response schema kio has (the broker's answers, and the requests it and its tools send)."""

import dataclasses
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.fetch.v12 import response as fetch_v12
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

from oncelog.protocol import entity_writer as compiled
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode, encode_response, encode_response_frame

# kio registers strategies for its primitive types but not for Records.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _schemas():
    for api_key, name in api_key_map.items():
        for version in schema_name_map[name]:
            for load in (load_request_schema, load_response_schema):
                try:
                    yield load(api_key, version)
                except UnknownEntity:  # a version kio has only one direction of
                    continue


SCHEMAS = sorted(set(_schemas()), key=lambda cls: (cls.__module__, cls.__qualname__))


def _kio(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _compiled(entity) -> bytes:
    parts: list = []
    cls: type = type(entity)
    compiled.compiled_writer(cls)(parts.append, entity)
    return b"".join(parts)


def test_every_schema_compiles_without_falling_back_to_kio():
    assert len(SCHEMAS) > 500
    for cls in SCHEMAS:
        compiled._Compiler(cls).compile()  # raises UnsupportedSchema for a field it cannot write


def _field_kind(cls, field) -> tuple:
    """What decides how a field is written: its Kafka type, shape, nullability, whether it
    is tagged, and whether its struct is flexible."""
    shape = classify_field(field)
    kafka_type = "struct" if isinstance(shape, EntityField | EntityTupleField) else get_schema_field_type(field)
    return (kafka_type, type(shape).__name__, is_optional(field), get_field_tag(field) is not None,
            bool(cls.__flexible__))


def _classes_by_field_kind() -> dict[tuple, type]:
    """For every kind of field the schemas have, the first struct (a whole message or one
    nested in it) that has one."""
    found: dict[tuple, type] = {}
    seen: set[type] = set()
    pending = list(SCHEMAS)
    while pending:
        cls = pending.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        for field in dataclasses.fields(cls):
            found.setdefault(_field_kind(cls, field), cls)
            shape = classify_field(field)
            if isinstance(shape, EntityField | EntityTupleField):
                pending.append(shape.type_)
    return found


BY_FIELD_KIND: dict[tuple, type] = _classes_by_field_kind()
# A value kio cannot write (an int out of range, a lone surrogate) must fail here too.
UNWRITABLE = (ValueError, TypeError, OverflowError, UnicodeEncodeError, AttributeError, struct.error)


def _name(cls: Any) -> str:
    return f"{cls.__module__.removeprefix('kio.schema.')}.{cls.__qualname__}"


@pytest.mark.parametrize("cls", sorted(set(BY_FIELD_KIND.values()), key=_name), ids=_name)
def test_compiled_writer_writes_what_kio_writes_for_every_kind_of_field(cls):
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def same_bytes(entity):
        try:
            expected = _kio(entity)
        except UNWRITABLE:
            with pytest.raises(UNWRITABLE):
                _compiled(entity)
            return
        assert _compiled(entity) == expected

    same_bytes()


def test_the_kinds_tested_include_the_rare_ones():
    kinds = set(BY_FIELD_KIND)
    assert ("struct", "EntityField", True, False, True) in kinds  # a nullable struct (KIP-893)
    assert ("bytes", "PrimitiveField", True, False, True) in kinds  # flexible nullable bytes
    assert ("float64", "PrimitiveField", False, False, True) in kinds
    assert ("uuid", "PrimitiveTupleField", True, True, True) in kinds  # a tagged array of uuids
    assert len(kinds) > 40


def test_large_records_are_emitted_by_reference_not_copied():
    records = bytes(1 << 20)
    response = fetch_v12.FetchResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=(
            fetch_v12.FetchableTopicResponse(topic="t", partitions=(fetch_v12.PartitionData(
                partition_index=0, error_code=ErrorCode.none, high_watermark=1, last_stable_offset=1,
                log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                records=records),)),))
    frame = encode_response_frame(7, response, flexible_header=True)
    assert any(part is records for part in frame)
    assert b"".join(frame)[4 + 4 + 1:] == _kio(response)  # after the size, correlation id and header tags


def test_encode_response_of_a_heartbeat():
    response = HeartbeatResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_not_available)
    assert encode_response(response) == b"\x00\x00\x00\x00\x00\x0f\x00"  # throttle 0, error 15, no tags
