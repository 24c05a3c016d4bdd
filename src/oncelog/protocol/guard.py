"""Length checks on a request body before kio's native decoder sees it.

kio's decoder reserves memory for an array as soon as it reads the declared length, so
a 20-byte request declaring four billion elements aborts the whole process (an
allocation failure cannot be caught). `check_lengths` walks the same schema first and
refuses any array, string or byte field whose declared length cannot fit in the bytes
that remain, and any tagged field that runs past its struct. It reads lengths only:
fixed-size fields and the contents of strings and records are skipped, so a 1 MB
Produce costs the same as a small one.

It also refuses a null (a negative length) for a field its version does not let be
null, as Kafka's generated readers do ("non-nullable field X was serialized as null"):
kio's reader hands a null array on as None, and a dozen handlers raised TypeError on it,
one ERROR traceback per request. Refused here, the request is malformed and the
connection closes, as Kafka closes it when a request cannot be parsed.

The walk follows kio's generated dataclasses: field order, `kafka_type`, whether the
version is flexible (compact lengths, tagged fields), which fields are tagged, and which
may be null: kio generates one class per version and types a field `X | None` in exactly
the versions Kafka's schema lists in `nullableVersions`.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
)

from oncelog.protocol.codegen import generated_function
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

# One step of a struct's plan: (kind, detail, field name)
#   ("fixed", size) | ("uvarint", None)
#   | ("string", None) | ("bytes", None) | ("array", element step): a null is refused
#   | ("nullable string", None) | ("nullable bytes", None) | ("nullable array", element step)
#   | ("entity", class)
#   | ("nullable entity", class): KIP-893's nullable struct, an int8 marker (-1: null) first
# An array's element step is named "<field> element", as Kafka's readers name it.
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
    name = field.name
    nullable = _is_nullable(field.type)
    if isinstance(shape, EntityTupleField):
        return (_maybe_nullable("array", nullable), ("entity", shape.type_, f"{name} element"), name)
    if isinstance(shape, EntityField):
        # A tagged struct's presence is its tag; an untagged nullable one has a marker.
        if not tagged and nullable:
            return ("nullable entity", shape.type_, name)
        return ("entity", shape.type_, name)
    if isinstance(shape, PrimitiveTupleField):
        (element_type, _ellipsis) = get_args(_without_none(field.type))
        element = _scalar(kind, _is_nullable(element_type), f"{name} element")
        return (_maybe_nullable("array", nullable), element, name)
    return _scalar(kind, nullable, name)


def _is_nullable(annotation) -> bool:
    """Whether kio typed this value `X | None` (for an array: the array itself, not its elements)."""
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _without_none(annotation):
    if not _is_nullable(annotation):
        return annotation
    (inner,) = [arg for arg in get_args(annotation) if arg is not NoneType]
    return inner


def _maybe_nullable(kind: str, nullable: bool) -> str:
    return f"nullable {kind}" if nullable else kind


def _scalar(kind: str | None, nullable: bool, name: str) -> tuple:
    if kind in _FIXED_SIZES:
        return ("fixed", _FIXED_SIZES[kind], name)
    if kind == "string":
        return (_maybe_nullable("string", nullable), None, name)
    if kind in ("bytes", "records"):
        return (_maybe_nullable("bytes", nullable), None, name)
    if kind in ("uvarint", "uvarlong"):
        return ("uvarint", None, name)
    raise ValueError(f"no length rule for kafka_type {kind!r}")


def check_lengths(cls: type, data: bytes | memoryview, position: int) -> None:
    """Raise MalformedRequestError if a declared length in the body cannot be right."""
    end = _checker(cls)(data, position, len(data))
    if end > len(data):
        raise MalformedRequestError("request body is shorter than its fields")


# -- the walk, compiled once per class ---------------------------------------------------
#
# Every request not decoded by hand goes through this check before kio's decoder, so
# the walk is generated as one straight-line function per class (the plan's steps as
# code: consecutive fixed-size fields one addition, no dispatch per field). Profiled on
# a Heartbeat, walking the plan step by step took two thirds of its decoding.


def _too_long_array(count: int, remain: int) -> MalformedRequestError:
    return MalformedRequestError(f"an array declares {count} elements, {remain} bytes remain")


def _too_long_field(size: int, remain: int) -> MalformedRequestError:
    return MalformedRequestError(f"a field declares {size} bytes, {remain} remain")


def _null(name: str) -> MalformedRequestError:
    return MalformedRequestError(f"non-nullable field {name} was serialized as null")


def _classic_length(data, position: int, codec: struct.Struct) -> tuple[int, int]:
    """A classic (int16 or int32) length (-1 = null) and the position after it."""
    if position + codec.size > len(data):
        raise MalformedRequestError("length runs past the end of the request")
    return codec.unpack_from(data, position)[0], position + codec.size


def _walk_tags(data, position: int, limit: int, tagged: dict) -> int:
    """A flexible struct's tagged fields: each within its declared size, the known
    ones walked by their checker."""
    count, position = read_unsigned_varint(data, position)
    if count > limit - position:
        raise MalformedRequestError(f"{count} tagged fields cannot fit in {limit - position} bytes")
    for _ in range(count):
        tag, position = read_unsigned_varint(data, position)
        size, position = read_unsigned_varint(data, position)
        if size > limit - position:
            raise MalformedRequestError(f"tagged field {tag} of {size} bytes runs past its struct")
        check = tagged.get(tag)
        if check is not None:
            check(data, position, position + size)
        position += size
    return position


@cache
def _checker(cls: type):
    """`check(data, position, limit) -> end` for a struct of `cls`."""
    flexible, steps, tagged = _plan(cls)
    source = _Source(flexible)
    for step in steps:
        source.step(step, 1)
    if flexible:
        source.flush(1)
        source.names["_tagged"] = {tag: _step_checker(step, flexible, f"{cls.__qualname__} tag {tag}")
                                   for tag, step in tagged.items()}
        source.lines.append("    p = _walk_tags(data, p, limit, _tagged)")
    return source.function(f"check of {cls.__module__}.{cls.__qualname__}")


def _step_checker(step: tuple, flexible: bool, name: str):
    """`check(data, position, limit) -> end` for one tagged field's value."""
    source = _Source(flexible)
    source.step(step, 1)
    return source.function(f"check of {name}")


class _Source:
    """The generated code of one checker: `p` is the position, `limit` the struct's end."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.lines: list[str] = []
        self.skip = 0  # fixed-size bytes not yet added to p
        self.names: dict = {
            "_uvarint": read_unsigned_varint, "_classic_length": _classic_length, "_I16": _I16, "_I32": _I32,
            "_walk_tags": _walk_tags, "Malformed": MalformedRequestError, "_too_long_array": _too_long_array,
            "_too_long_field": _too_long_field, "_null": _null,
        }

    def function(self, name: str):
        self.flush(1)
        return generated_function("check(data, p, limit)", [*self.lines, "    return p"], self.names, name)

    def flush(self, indent: int) -> None:
        if self.skip:
            self.add(indent, f"p += {self.skip}")
            self.skip = 0

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def length(self, indent: int, wide: bool) -> str:
        """Read a declared length (-1 = null) into a variable of this depth; its name."""
        n = f"n{indent}"
        if self.flexible:
            self.add(indent, f"{n}, p = _uvarint(data, p)")
            self.add(indent, f"{n} -= 1")
        else:
            self.add(indent, f"{n}, p = _classic_length(data, p, {'_I32' if wide else '_I16'})")
        return n

    def step(self, step: tuple, indent: int) -> None:
        kind, detail, name = step
        if kind == "fixed":
            self.skip += detail
            return
        self.flush(indent)
        nullable = kind.startswith("nullable ")
        kind = kind.removeprefix("nullable ")
        if kind == "uvarint":
            self.add(indent, "p = _uvarint(data, p)[1]")
        elif kind in ("string", "bytes"):
            n = self.length(indent, wide=kind == "bytes")
            self.add(indent, f"if {n} > limit - p:")
            self.add(indent + 1, f"raise _too_long_field({n}, limit - p)")
            self.add(indent, f"if {n} > 0:")
            self.add(indent + 1, f"p += {n}")
            if not nullable:
                self.add(indent, f"elif {n} < 0:")
                self.add(indent + 1, f"raise _null({name!r})")
        elif kind == "entity" and not nullable:
            self.add(indent, f"p = {self.checker_of(detail)}(data, p, limit)")
        elif kind == "entity":
            self.add(indent, "if p >= limit:")
            self.add(indent + 1, "raise Malformed(\"a nullable struct's marker runs past the end of the request\")")
            self.add(indent, "if data[p] == 0xFF:")  # int8 -1: null
            self.add(indent + 1, "p += 1")
            self.add(indent, "else:")
            self.add(indent + 1, f"p = {self.checker_of(detail)}(data, p + 1, limit)")
        else:  # an array
            self.array(detail, indent, None if nullable else name)

    def array(self, element: tuple, indent: int, non_nullable: str | None) -> None:
        """`non_nullable`: the array's name if a null is refused, else None."""
        n = self.length(indent, wide=True)
        self.add(indent, f"if {n} > limit - p:")  # every element takes at least one byte
        self.add(indent + 1, f"raise _too_long_array({n}, limit - p)")
        if non_nullable is not None:
            self.add(indent, f"if {n} < 0:")
            self.add(indent + 1, f"raise _null({non_nullable!r})")
        if element[0] == "fixed":
            self.add(indent, f"if {n} > 0:")
            self.add(indent + 1, f"p += {n} * {element[1]}")
            return
        self.add(indent, f"for _ in range({n}):")  # nothing for a null (-1) or empty array
        self.step(element, indent + 1)
        self.flush(indent + 1)
        self.add(indent + 1, "if p > limit:")
        self.add(indent + 2, "raise Malformed(\"array elements run past the end of the request\")")

    def checker_of(self, cls: type) -> str:
        name = f"_check{len(self.names)}"
        self.names[name] = _checker(cls)
        return name
