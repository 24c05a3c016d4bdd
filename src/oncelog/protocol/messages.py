"""Kafka message entities: decode requests, encode responses, build entities by name.

The entities are kio's frozen dataclasses, generated from Kafka's own message schemas
(`clients/src/main/resources/common/message/*.json`), one class per API and version.
Handlers build responses through `ResponseBuilder`, which drops fields a version does
not have, so one handler body serves every version it supports.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

__all__ = ["ErrorCode", "ResponseBuilder", "NO_THROTTLE", "decode_request", "encode_response"]

NO_THROTTLE = datetime.timedelta(0)


@cache
def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(cls))


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


def decode_request(api_key: int, version: int, body: bytes | memoryview, offset: int = 0) -> Any:
    """Decode a request body; raises on malformed bytes (the caller closes the connection)."""
    cls = request_class(api_key, version)
    entity, size = _reader(cls)(body, offset)
    return entity


def encode_response(entity: Any) -> bytes:
    buffer = io.BytesIO()
    _writer(type(entity))(buffer, entity)
    return buffer.getvalue()


class ResponseBuilder:
    """Builds the entities of one API version's response by class name.

    `make("PartitionData", partition_index=0, ...)` fills the version's class with the
    keyword arguments it has and ignores the rest, so a handler can pass fields that
    only newer versions carry.
    """

    __slots__ = ("module", "version")

    def __init__(self, api_key: int, version: int) -> None:
        self.module: ModuleType = _response_module(api_key, version)
        self.version = version

    def make(self, class_name: str, **fields: Any) -> Any:
        cls = getattr(self.module, class_name)
        names = _field_names(cls)
        return cls(**{key: value for key, value in fields.items() if key in names})

    def has(self, class_name: str, field_name: str | None = None) -> bool:
        """Whether this version has the class (and, if given, the field)."""
        cls = getattr(self.module, class_name, None)
        return cls is not None and (field_name is None or field_name in _field_names(cls))


@cache
def _response_module(api_key: int, version: int) -> ModuleType:
    import sys

    return sys.modules[response_class(api_key, version).__module__]
