"""Decoding a large request one field and one array element at a time.

kio's decoder is native code that holds the GIL from the first byte of a request to the
last: a 10 MB Metadata request naming a million topics holds it for 0.7 s. Decoded on a
worker thread it would still stop the broker's event loop for all that time. This reader
builds the same kio entity (tests/unit/test_stepwise_reader.py compares the two on
generated requests of every API and version) from many short steps: kio's native reader
of each primitive field, a Python loop over every array's elements and nested structs.
A thread running it gives the GIL back at the interpreter's switch interval (5 ms), so
the loop keeps answering other clients while a large request is decoded (the server
uses it for request frames above `HEAVY_REQUEST_BYTES`, after `protocol/guard.py` has
checked every declared length, on its worker thread: `broker/heavy_work.py`).

It never reserves memory from a declared length: arrays grow as elements are read, and a
length that runs past the body fails with `MalformedRequestError`, as does a request of
more than `max_elements` array elements in all (what a request costs in memory once
decoded is about a hundred times its element count in bytes, not its size on the wire).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial._parse import get_field_reader, get_reader
from kio.serial.errors import BufferUnderflow

from oncelog.protocol.framing import MalformedRequestError, read_unsigned_varint

Reader = Callable[[Any, int], tuple[Any, int]]

# A struct's plan: one step per untagged field, in order: (kind, field name, detail).
_PRIMITIVE, _PRIMITIVE_ARRAY, _ENTITY, _NULLABLE_ENTITY, _ENTITY_ARRAY = range(5)
_I32 = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    cls: type
    flexible: bool
    steps: tuple[tuple[int, str, Any], ...]
    tagged: dict[int, tuple[str, Callable[..., Any]]]  # tag -> (field name, read(data, start, end, budget))
    tag_defaults: dict[str, Any]


class TooManyElements(MalformedRequestError):
    """A request whose arrays hold more elements in all than the reader accepts."""


def read_entity(cls: type, data: memoryview | bytes, position: int, *,
                max_elements: int = 2**31 - 1) -> tuple[Any, int]:
    """The entity of class `cls` at `position` of `data`, and the position after it."""
    try:
        return _read(_plan(cls), data, position, [max_elements, max_elements])
    except BufferUnderflow:
        raise MalformedRequestError("the request body ends inside a field") from None


def _read(plan: _Plan, data: Any, position: int, budget: list[int]) -> tuple[Any, int]:
    """`budget`: [the array elements the rest of the request may still have, the limit]."""
    values: dict[str, Any] = {}
    for step in plan.steps:
        values[step[1]], position = _value(step, data, position, budget, plan.flexible)
    if plan.flexible:
        position = _read_tags(plan, data, position, values, budget)
    return plan.cls(**values), position


def _value(step: tuple[int, str, Any], data: Any, position: int, budget: list[int],
           flexible: bool) -> tuple[Any, int]:
    """One field's value at `position`, and the position after it."""
    kind, _name, detail = step
    if kind == _PRIMITIVE:
        value, size = detail(data, position)
        return value, position + size
    if kind == _ENTITY:
        return _read(detail, data, position, budget)
    if kind == _NULLABLE_ENTITY:
        if position >= len(data):
            raise MalformedRequestError("a nullable struct's marker runs past the end of the request")
        if data[position] == 0xFF:  # int8 -1: null
            return None, position + 1
        return _read(detail, data, position + 1, budget)
    count, position = _array_length(data, position, flexible)
    budget[0] -= max(count, 0)
    if budget[0] < 0:
        raise TooManyElements(f"the request holds more than {budget[1]} array elements in all")
    if count < 0:
        return None, position
    items = []
    if kind == _ENTITY_ARRAY:
        for _ in range(count):
            item, position = _read(detail, data, position, budget)
            items.append(item)
    else:
        for _ in range(count):
            item, size = detail(data, position)
            position += size
            items.append(item)
    return tuple(items), position


def _array_length(data: Any, position: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (-1: null), checked against the bytes that remain (every
    element takes at least one)."""
    if flexible:
        encoded, position = read_unsigned_varint(data, position)
        count = encoded - 1
    else:
        if position + 4 > len(data):
            raise MalformedRequestError("an array length runs past the end of the request")
        count, position = _I32.unpack_from(data, position)[0], position + 4
    if count > len(data) - position:
        raise MalformedRequestError(f"an array declares {count} elements, {len(data) - position} bytes remain")
    return count, position


def _read_tags(plan: _Plan, data: Any, position: int, values: dict[str, Any], budget: list[int]) -> int:
    count, position = read_unsigned_varint(data, position)
    if count > len(data) - position:
        raise MalformedRequestError(f"{count} tagged fields cannot fit in {len(data) - position} bytes")
    for _ in range(count):
        tag, position = read_unsigned_varint(data, position)
        size, position = read_unsigned_varint(data, position)
        end = position + size
        if end > len(data):
            raise MalformedRequestError(f"tagged field {tag} of {size} bytes runs past the end of the request")
        known = plan.tagged.get(tag)
        if known is not None:
            name, read = known
            values[name] = read(data, position, end, budget)
        position = end
    for name, default in plan.tag_defaults.items():
        values.setdefault(name, default)
    return position


@cache
def _plan(cls: type) -> _Plan:
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[tuple[int, str, Any]] = []
    tagged: dict[int, tuple[str, Callable[..., Any]]] = {}
    tag_defaults: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        if tag is None:
            steps.append(_step(cls, field, flexible, tagged=False))
            continue
        tagged[int(tag)] = (field.name, _tagged_reader(_step(cls, field, flexible, tagged=True), flexible))
        tag_defaults[field.name] = (field.default if field.default is not dataclasses.MISSING
                                    else get_tagged_field_default(field))
    return _Plan(cls, flexible, tuple(steps), tagged, tag_defaults)


def _step(cls: type, field: dataclasses.Field, flexible: bool, *, tagged: bool) -> tuple[int, str, Any]:
    shape = classify_field(field)
    if isinstance(shape, EntityTupleField):
        return (_ENTITY_ARRAY, field.name, _plan(shape.type_))
    if isinstance(shape, EntityField):  # a tagged struct's presence is its tag: no null marker
        nullable = is_optional(field) and not tagged
        return (_NULLABLE_ENTITY if nullable else _ENTITY, field.name, _plan(shape.type_))
    if isinstance(shape, PrimitiveTupleField):
        return (_PRIMITIVE_ARRAY, field.name, get_reader(get_schema_field_type(field), flexible, False))
    return (_PRIMITIVE, field.name, get_field_reader(cls, field, False, tagged))


def _tagged_reader(step: tuple[int, str, Any], flexible: bool) -> Callable[..., Any]:
    """read(data, start, end, budget): a tagged field's value, which fills [start, end)."""

    def read(data: Any, start: int, end: int, budget: list[int]) -> Any:
        return _value(step, memoryview(data)[:end], start, budget, flexible)[0]

    return read
