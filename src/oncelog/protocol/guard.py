"""Length checks on a request body before kio's native decoder sees it.

kio's decoder reserves memory for an array as soon as it reads the declared length, so
a 20-byte request declaring four billion elements aborts the whole process (an
allocation failure cannot be caught). `check_lengths` walks the same schema first and
refuses any array, string or byte field whose declared length cannot fit in the bytes
that remain, and any tagged field that runs past its struct. It reads lengths only:
fixed-size fields and the contents of strings and records are skipped, so a 1 MB
Produce costs the same as a small one.

The walk follows kio's generated dataclasses: field order, `kafka_type`, whether the
version is flexible (compact lengths, tagged fields), and which fields are tagged.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from oncelog.protocol.framing import MalformedRequestError, read_unsigned_varint

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# One step of a struct's plan: (kind, detail)
#   ("fixed", size) | ("string", None) | ("bytes", None) | ("uvarint", None)
#   | ("array", element plan or element size) | ("entity", plan)
#   | ("nullable entity", plan): KIP-893's nullable struct, an int8 marker (-1: null) first
_Plan = tuple


@cache
def _plan(cls: type) -> tuple[bool, tuple, dict]:
    """(flexible, steps for the untagged fields, {tag: steps} for tagged fields)."""
    flexible = bool(getattr(cls, "__flexible__", False))
    steps, tagged = [], {}
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        step = _step(field, flexible, tagged=tag is not None)
        if tag is None:
            steps.append(step)
        else:
            tagged[tag] = step
    return flexible, tuple(steps), tagged


def _step(field: dataclasses.Field, flexible: bool, *, tagged: bool = False) -> tuple:
    kind = field.metadata.get("kafka_type")
    shape = classify_field(field)
    if isinstance(shape, EntityTupleField):
        return ("array", ("entity", shape.type_))
    if isinstance(shape, EntityField):
        # A tagged struct's presence is its tag; an untagged nullable one has a marker.
        if not tagged and is_optional(field):
            return ("nullable entity", shape.type_)
        return ("entity", shape.type_)
    element = _scalar(kind)
    if isinstance(shape, PrimitiveTupleField):
        return ("array", element)
    return element


def _scalar(kind: str | None) -> tuple:
    if kind in _FIXED_SIZES:
        return ("fixed", _FIXED_SIZES[kind])
    if kind == "string":
        return ("string", None)
    if kind in ("bytes", "records"):
        return ("bytes", None)
    if kind in ("uvarint", "uvarlong"):
        return ("uvarint", None)
    raise ValueError(f"no length rule for kafka_type {kind!r}")


def check_lengths(cls: type, data: bytes | memoryview, position: int) -> None:
    """Raise MalformedRequestError if a declared length in the body cannot be right."""
    end = _walk_entity(cls, data, position, len(data))
    if end > len(data):
        raise MalformedRequestError("request body is shorter than its fields")


def _walk_entity(cls: type, data, position: int, limit: int) -> int:
    flexible, steps, tagged = _plan(cls)
    for step in steps:
        position = _walk(step, flexible, data, position, limit)
    if flexible:
        count, position = read_unsigned_varint(data, position)
        if count > limit - position:
            raise MalformedRequestError(f"{count} tagged fields cannot fit in {limit - position} bytes")
        for _ in range(count):
            tag, position = read_unsigned_varint(data, position)
            size, position = read_unsigned_varint(data, position)
            if size > limit - position:
                raise MalformedRequestError(f"tagged field {tag} of {size} bytes runs past its struct")
            step = tagged.get(tag)
            if step is not None:
                _walk(step, flexible, data, position, position + size)
            position += size
    return position


def _length(flexible: bool, data, position: int, wide: bool) -> tuple[int, int]:
    """A declared length (-1 = null) and the position after it."""
    if flexible:
        raw, position = read_unsigned_varint(data, position)
        return raw - 1, position
    codec = _I32 if wide else _I16
    if position + codec.size > len(data):
        raise MalformedRequestError("length runs past the end of the request")
    return codec.unpack_from(data, position)[0], position + codec.size


def _walk(step: tuple, flexible: bool, data, position: int, limit: int) -> int:
    kind, detail = step
    if kind == "fixed":
        return position + detail
    if kind == "uvarint":
        return read_unsigned_varint(data, position)[1]
    if kind in ("string", "bytes"):
        size, position = _length(flexible, data, position, wide=kind == "bytes")
        if size > limit - position:
            raise MalformedRequestError(f"a field declares {size} bytes, {limit - position} remain")
        return position + max(size, 0)
    if kind == "entity":
        return _walk_entity(detail, data, position, limit)
    if kind == "nullable entity":
        if position >= limit:
            raise MalformedRequestError("a nullable struct's marker runs past the end of the request")
        if data[position] == 0xFF:  # int8 -1: null
            return position + 1
        return _walk_entity(detail, data, position + 1, limit)
    # an array
    count, position = _length(flexible, data, position, wide=True)
    if count > limit - position:  # every element takes at least one byte
        raise MalformedRequestError(f"an array declares {count} elements, {limit - position} bytes remain")
    if count <= 0:
        return position
    if detail[0] == "fixed":
        return position + count * detail[1]
    for _ in range(count):
        position = _walk(detail, flexible, data, position, limit)
        if position > limit:
            raise MalformedRequestError("array elements run past the end of the request")
    return position
