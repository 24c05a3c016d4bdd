"""Request bodies with one field written as null, built from kio's schema classes.

`null_field_targets(cls)` names every array, string and bytes field of a request class
(at any depth, through structs and arrays of structs; tagged fields aside) and whether
the version lets it be null; `body_with_null(cls, path)` encodes the smallest body of
that class in which the field at `path` is null: every other array empty, every string
empty, every number zero, every nullable struct null, no tagged fields, and one element
in each array on the way to the field.

Built from the dataclasses and their `kafka_type` alone, not from the broker's guard
(protocol/guard.py), so a test of the guard does not check it against itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field

from oncelog.protocol.framing import unsigned_varint

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}


@dataclass(frozen=True)
class NullTarget:
    path: tuple[str, ...]  # field names from the request down to the field
    kind: str  # "array", "string" or "bytes"
    nullable: bool  # whether this version of the schema lets it be null

    def __str__(self) -> str:
        return ".".join(self.path)


def _is_nullable(annotation) -> bool:
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _untagged(cls: type) -> list[dataclasses.Field]:
    return [field for field in dataclasses.fields(cls) if "tag" not in field.metadata]


def _kind(field: dataclasses.Field) -> str:
    shape = classify_field(field)
    if isinstance(shape, (EntityTupleField, PrimitiveTupleField)):
        return "array"
    if isinstance(shape, EntityField):
        return "struct"
    kafka_type = field.metadata["kafka_type"]
    return {"string": "string", "bytes": "bytes", "records": "bytes"}.get(kafka_type, kafka_type)


def null_field_targets(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[NullTarget]:
    for field in _untagged(cls):
        kind = _kind(field)
        path = (*prefix, field.name)
        if kind in ("array", "string", "bytes"):
            yield NullTarget(path, kind, _is_nullable(field.type))
        shape = classify_field(field)
        if isinstance(shape, EntityTupleField) or (isinstance(shape, EntityField) and not _is_nullable(field.type)):
            yield from null_field_targets(shape.type_, path)


def body_with_null(cls: type, path: tuple[str, ...]) -> bytes:
    """The smallest body of `cls` with the field at `path` null."""
    return _struct(cls, path, bool(getattr(cls, "__flexible__", False)))


def _length(count: int, flexible: bool, width: int) -> bytes:
    if flexible:
        return unsigned_varint(count + 1)  # compact: 0 is null
    return count.to_bytes(width, "big", signed=True)


def _struct(cls: type, path: tuple[str, ...], flexible: bool) -> bytes:
    out = bytearray()
    for field in _untagged(cls):
        on_path = bool(path) and field.name == path[0]
        here = on_path and len(path) == 1
        below = path[1:] if on_path else ()
        kind = _kind(field)
        shape = classify_field(field)
        if kind == "array":
            if here:
                out += _length(-1, flexible, 4)
            elif on_path:  # one element, a struct holding the rest of the path
                out += _length(1, flexible, 4) + _struct(shape.type_, below, flexible)
            else:
                out += _length(0, flexible, 4)
        elif kind == "struct":
            if _is_nullable(field.type) and not on_path:
                out += b"\xff"  # KIP-893's null marker
            else:
                out += (b"\x01" if _is_nullable(field.type) else b"") + _struct(shape.type_, below, flexible)
        elif kind in ("string", "bytes"):
            out += _length(-1 if here else 0, flexible, 2 if kind == "string" else 4)
        elif kind in ("uvarint", "uvarlong"):
            out += b"\x00"
        else:
            out += bytes(_FIXED[kind])
    if flexible:
        out += b"\x00"  # no tagged fields
    return bytes(out)
