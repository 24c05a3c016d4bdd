"""Kafka message entities: decode requests, encode responses, build entities by name.

The entities are kio's frozen dataclasses, generated from Kafka's own message schemas
(`clients/src/main/resources/common/message/*.json`), one class per API and version.
Handlers build responses through `ResponseBuilder`, which drops fields a version does
not have, so one handler body serves every version it supports.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import sys
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.protocol import RequestPayload, ResponsePayload

from oncelog.protocol import framing
from oncelog.protocol.entity_writer import compiled_writer
from oncelog.protocol.guard import check_lengths

__all__ = [
    "NO_THROTTLE", "ErrorCode", "RequestBuilder", "ResponseBuilder", "decode_request", "encode_response",
    "encode_response_frame",
]

NO_THROTTLE = datetime.timedelta(0)


@cache
def request_class(api_key: int, version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(cls))


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


def decode_request(api_key: int, version: int, body: bytes | bytearray | memoryview, offset: int = 0, *,
                   max_partitions: int | None = None) -> Any:
    """Decode a request body; raises on malformed bytes (the caller closes the connection).

    Produce requests are decoded here rather than by kio so that their records stay a
    view of `body`: a writable one when `body` is a bytearray, which the log then
    rewrites and writes without a copy (see `decode_produce_request`; `max_partitions`
    bounds their partitions, TooManyPartitions past it).
    """
    if api_key == PRODUCE_KEY and version in PRODUCE_VERSIONS:
        return decode_produce_request(version, body, offset, max_partitions=max_partitions)
    if not isinstance(body, bytes):
        body = memoryview(body).toreadonly()  # kio reads read-only buffers only
    cls = request_class(api_key, version)
    check_lengths(cls, body, offset)  # before kio's reader reserves memory for any length
    entity, _size = _reader(cls)(body, offset)
    return entity


# ---- Produce requests: the hot path, decoded by hand ---------------------------------
#
# kio's reader copies each partition's records into a new bytes object, and the log
# needs a writable buffer (it stamps offsets into the batch header), which cost a second
# copy. Profiling a 1 KB-record produce load put these copies at ~8% of the broker's
# CPU; decoding the few Produce fields here leaves the records as a view of the frame.
# Layout (ProduceRequest.json), v3-v8 classic, v9-v12 flexible (compact lengths, tagged
# fields after every struct):
#
#     transactional_id  nullable string
#     acks              int16
#     timeout_ms        int32
#     topic_data        array of { name string,
#                                  partition_data array of { index int32,
#                                                            records nullable bytes } }

PRODUCE_KEY = 0
PRODUCE_VERSIONS = range(3, 13)
FIRST_FLEXIBLE_PRODUCE_VERSION = 9

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_AND_TIMEOUT = struct.Struct(">hi")


class MalformedProduceRequest(ValueError):
    """A Produce request body that does not follow its version's layout."""


class TooManyPartitions(Exception):
    """A Produce request of more topics and partitions than the caller decodes here (the
    server then decodes it off the event loop)."""


def decode_produce_request(version: int, body: bytes | bytearray | memoryview, position: int, *,
                           max_partitions: int | None = None) -> Any:
    """The kio ProduceRequest entity of `version`, with each partition's records a
    memoryview into `body` (None for null records)."""
    elements_left = max_partitions if max_partitions is not None else len(body)  # topics and partitions
    cls: Any = request_class(PRODUCE_KEY, version)  # the ProduceRequest of this version
    module = sys.modules[cls.__module__]
    topic_class, partition_class = module.TopicProduceData, module.PartitionProduceData
    view = memoryview(body)
    if version >= FIRST_FLEXIBLE_PRODUCE_VERSION:
        read_string, read_length, skip_tags = _read_compact_string, _read_compact_length, _skip_tags
    else:
        read_string, read_length, skip_tags = _read_classic_string, _read_classic_length, _no_tags
    transactional_id, position = read_string(view, position)
    acks, timeout_ms = _ACKS_AND_TIMEOUT.unpack_from(view, position)
    position += _ACKS_AND_TIMEOUT.size
    topic_count, position = read_length(view, position)
    if topic_count < 0:
        raise MalformedProduceRequest("topic_data is null")
    elements_left -= topic_count
    if elements_left < 0:
        if max_partitions is not None:
            raise TooManyPartitions(f"more than {max_partitions} topics and partitions")
        raise MalformedProduceRequest("the request declares more topics than it has bytes")
    topics = []
    for _ in range(topic_count):
        name, position = read_string(view, position)
        if name is None:
            raise MalformedProduceRequest("a topic name is null")
        partition_count, position = read_length(view, position)
        if partition_count < 0:
            raise MalformedProduceRequest(f"partition_data of topic {name!r} is null")
        elements_left -= partition_count
        if elements_left < 0:
            if max_partitions is not None:
                raise TooManyPartitions(f"more than {max_partitions} topics and partitions")
            raise MalformedProduceRequest("the request declares more topics and partitions than it has bytes")
        partitions = []
        for _ in range(partition_count):
            (index,) = _INT32.unpack_from(view, position)
            size, position = read_length(view, position + 4)
            if size < 0:
                records = None
            else:
                end = position + size
                if end > len(view):
                    raise MalformedProduceRequest(f"records of {name}-{index} run past the end of the request")
                records, position = view[position:end], end
            position = skip_tags(view, position)
            partitions.append(partition_class(index=index, records=records))
        position = skip_tags(view, position)
        topics.append(topic_class(name=name, partition_data=tuple(partitions)))
    skip_tags(view, position)
    return cls(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(topics),
    )


def _read_classic_length(view: memoryview, position: int) -> tuple[int, int]:
    """int32 length of an array or bytes; -1 is null."""
    return _INT32.unpack_from(view, position)[0], position + 4


def _read_compact_length(view: memoryview, position: int) -> tuple[int, int]:
    """unsigned varint length + 1 of a compact array or bytes; 0 is null (-1 here)."""
    encoded, position = framing.read_unsigned_varint(view, position)
    return encoded - 1, position


def _read_classic_string(view: memoryview, position: int) -> tuple[str | None, int]:
    (length,) = _INT16.unpack_from(view, position)
    return _string_at(view, position + 2, length)


def _read_compact_string(view: memoryview, position: int) -> tuple[str | None, int]:
    length, position = _read_compact_length(view, position)
    return _string_at(view, position, length)


def _string_at(view: memoryview, position: int, length: int) -> tuple[str | None, int]:
    if length < 0:
        return None, position
    end = position + length
    if end > len(view):
        raise MalformedProduceRequest("a string runs past the end of the request")
    return str(view[position:end], "utf-8"), end


def _skip_tags(view: memoryview, position: int) -> int:
    return framing.skip_tagged_fields(view, position)


def _no_tags(view: memoryview, position: int) -> int:
    return position


def encode_response(entity: ResponsePayload) -> bytes:
    parts: list = []
    compiled_writer(type(entity))(parts.append, entity)
    return b"".join(parts)


def encode_response_frame(correlation_id: int, entity: ResponsePayload, *, flexible_header: bool) -> list:
    """A whole response frame as buffers to write in order (`transport.writelines`).

    Large byte fields, Fetch records above all, stay the objects the handler gave
    rather than being copied into one frame (profiled: joining a Fetch response into
    one bytes object took ~15% of the broker's CPU per consumed MB).
    """
    sink = _FrameSink()
    compiled_writer(type(entity))(sink.write, entity)
    parts = sink.finish()
    prefix = framing.response_prefix(correlation_id, sink.size, flexible_header=flexible_header)
    if len(parts) == 1 and len(parts[0]) < _BY_REFERENCE_BYTES:
        return [prefix + parts[0]]
    return [prefix, *parts]


# Writes at least this large are kept by reference; smaller ones are joined.
_BY_REFERENCE_BYTES = 16 << 10


class _FrameSink:
    """Collects the pieces an entity writer emits into a response frame's buffers."""

    __slots__ = ("_parts", "_small", "size")

    def __init__(self) -> None:
        self._parts: list = []
        self._small = bytearray()
        self.size = 0

    def write(self, data) -> int:
        size = len(data)
        self.size += size
        if size >= _BY_REFERENCE_BYTES:
            if self._small:
                self._parts.append(bytes(self._small))
                self._small.clear()
            self._parts.append(data)
        else:
            self._small += data
        return size

    def finish(self) -> list:
        if self._small or not self._parts:
            self._parts.append(bytes(self._small))
            self._small.clear()
        return self._parts


class ResponseBuilder:
    """Builds the entities of one API version's response by class name.

    `make("PartitionData", partition_index=0, ...)` fills the version's class with the
    keyword arguments it has and ignores the rest, so a handler can pass fields that
    only newer versions carry.
    """

    __slots__ = ("module", "version")

    def __init__(self, api_key: int, version: int) -> None:
        self.module: ModuleType = self._module(api_key, version)
        self.version = version

    @staticmethod
    def _module(api_key: int, version: int) -> ModuleType:
        return _response_module(api_key, version)

    def make(self, class_name: str, **fields: Any) -> Any:
        cls = getattr(self.module, class_name)
        names = _field_names(cls)
        return cls(**{key: value for key, value in fields.items() if key in names})

    def has(self, class_name: str, field_name: str | None = None) -> bool:
        """Whether this version has the class (and, if given, the field)."""
        cls = getattr(self.module, class_name, None)
        return cls is not None and (field_name is None or field_name in _field_names(cls))


class RequestBuilder(ResponseBuilder):
    """`ResponseBuilder` for the request entities of one API version (what a client sends)."""

    __slots__ = ()

    @staticmethod
    def _module(api_key: int, version: int) -> ModuleType:
        return sys.modules[request_class(api_key, version).__module__]


@cache
def _response_module(api_key: int, version: int) -> ModuleType:
    return sys.modules[response_class(api_key, version).__module__]
