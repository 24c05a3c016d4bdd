"""Writers for kio's entities, compiled once per class into straight-line Python.

kio's own writer (`kio.serial.entity_writer`) serializes an entity field by field
through a closure per field, and each integer through its own `struct.pack` and
`buffer.write`. Every request the broker answers and every request it sends (a
follower's Fetch, a leader's AlterPartition) goes through it, so its calls are part of
the floor under every request: profiled on a Heartbeat, kio's writer made a fifth of
the broker's Python calls.

`compiled_writer(cls)` reads the same schema kio does (the fields' `kafka_type`, tag
and nullability, through kio's introspection) and generates one function per class.
The function packs each run of fixed-size fields with one precompiled `struct.Struct`,
writes strings and arrays inline, and calls the compiled writers of nested entities.
Output is byte for byte kio's: tests/unit/test_entity_writer.py checks that every
request and response schema kio has compiles, and compares the two writers on
generated entities of a struct holding each kind of field the schemas use (its Kafka
type, shape, nullability, taggedness and flexibility).

A writer is called as `write(emit, entity)`, where `emit(buffer)` takes each piece in
order: large byte fields (a Fetch answer's records) are passed as they are, without a
copy, as kio's writer does.
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
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import uuid_zero

from oncelog.protocol.codegen import generated_function
from oncelog.protocol.framing import unsigned_varint

__all__ = ["Emit", "compiled_writer"]

Emit = Callable[[Any], Any]
EntityWriter = Callable[[Emit, Any], None]

# Fixed-size Kafka types: struct format and the expression that turns the entity's
# value (`{}`) into what struct packs.
_FIXED: dict[str, tuple[str, str]] = {
    "int8": ("b", "{}"),
    "int16": ("h", "{}"),
    "int32": ("i", "{}"),
    "int64": ("q", "{}"),
    "uint8": ("B", "{}"),
    "uint16": ("H", "{}"),
    "uint32": ("I", "{}"),
    "uint64": ("Q", "{}"),
    "float64": ("d", "{}"),
    "bool": ("?", "{}"),
    "error_code": ("h", "{}.value"),
    "timedelta_i32": ("i", "round({}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({}.timestamp() * 1000)"),
}
# The nullable fixed-size type kio writes (-1 for None); a uuid is written as the zero
# uuid when None, nullable or not.
_NULLABLE_DATETIME = ("q", "(-1 if {0} is None else round({0}.timestamp() * 1000))")
_UUID = ("16s", "(_UUID_ZERO if {0} is None else {0}.bytes)")


class UnsupportedSchema(Exception):
    """A field of a kind this compiler does not write (none in the pinned kio)."""


@cache
def compiled_writer(cls: type) -> EntityWriter:
    """The writer of entity class `cls`: `write(emit, entity)`."""
    return _Compiler(cls).compile()


@cache
def _nullable_writer(cls: type) -> EntityWriter:
    """A nullable struct field (KIP-893): int8 -1 for None, else 1 and the entity."""
    write = compiled_writer(cls)

    def write_nullable(emit: Emit, entity: Any) -> None:
        if entity is None:
            emit(b"\xff")
        else:
            emit(b"\x01")
            write(emit, entity)

    return write_nullable


class _Compiler:
    """Generates the source of one class's writer."""

    def __init__(self, cls: Any) -> None:
        self.cls = cls
        self.flexible = bool(cls.__flexible__)
        self.names: dict[str, Any] = {"_uvarint": unsigned_varint, "_UUID_ZERO": uuid_zero.bytes}
        self.lines: list[str] = []
        self.run_format = ""  # the pending run of fixed-size fields
        self.run_values: list[str] = []
        self.temporaries = 0

    def compile(self) -> EntityWriter:
        if self.cls.__name__ == "RequestHeader":
            raise UnsupportedSchema("kio writes RequestHeader's client_id specially")
        tagged = []
        for field in dataclasses.fields(self.cls):
            tag = get_field_tag(field)
            if tag is not None:
                tagged.append((int(tag), field))
            else:
                self._field(field, f"e.{field.name}", optional=is_optional(field), indent=1)
        if self.flexible:
            if tagged:
                self._flush(1)
                self.names["_write_tags"] = self._tag_writer(sorted(tagged, key=lambda item: item[0]))
                self.lines.append("    _write_tags(emit, e)")
            elif self.run_format:
                self.run_format += "x"  # no tagged fields: a zero count, packed with the run
            else:
                self._line(1, "emit(b'\\x00')")  # no tagged fields: a zero count
        elif tagged:
            raise UnsupportedSchema("tagged fields on a non-flexible entity")
        self._flush(1)
        return generated_function("write(emit, e)", self.lines, self.names,
                                  f"writer of {self.cls.__module__}.{self.cls.__qualname__}")

    # -- fields ---------------------------------------------------------------------

    def _field(self, field: dataclasses.Field, value: str, *, optional: bool, indent: int) -> None:
        kind = classify_field(field)
        if kind.is_array:
            self._array(field, kind, value, indent)
            return
        if isinstance(kind, EntityField):
            self._flush(indent)
            writer = _nullable_writer(kind.type_) if optional else compiled_writer(kind.type_)
            self._line(indent, f"{self._name('W', writer)}(emit, {value})")
            return
        assert isinstance(kind, PrimitiveField)
        self._primitive(get_schema_field_type(field), value, optional=optional, indent=indent)

    def _primitive(self, kafka_type: str, value: str, *, optional: bool, indent: int,
                   local: str | None = None) -> None:
        """Write a primitive; `local`: a variable already holding the value (an array item)."""
        if kafka_type == "uuid":
            fixed: tuple[str, str] | None = _UUID
        elif optional:
            fixed = _NULLABLE_DATETIME if kafka_type == "datetime_i64" else None
        else:
            fixed = _FIXED.get(kafka_type)
        if fixed is not None:
            struct_format, expression = fixed
            self.run_format += struct_format
            self.run_values.append(expression.format(value))
            return
        if kafka_type not in ("string", "bytes", "records"):
            raise UnsupportedSchema(f"{kafka_type} (nullable={optional})")
        self._flush(indent)
        pad = "    " * indent
        if local is None:
            local = self._temporary()
            self.lines.append(f"{pad}{local} = {value}")
        if optional:
            null = ("b'\\x00'" if self.flexible
                    else "b'\\xff\\xff'" if kafka_type == "string" else "b'\\xff\\xff\\xff\\xff'")
            self.lines.append(f"{pad}if {local} is None:")
            self.lines.append(f"{pad}    emit({null})")
            self.lines.append(f"{pad}else:")
            pad += "    "
        if kafka_type == "string":
            # kio's compact string writer also takes bytes; its classic one does not.
            encoded = (f"({local}.encode() if isinstance({local}, str) else {local})" if self.flexible
                       else f"{local}.encode()")
            self.lines.append(f"{pad}{local} = {encoded}")
            length = f"_uvarint(len({local}) + 1)" if self.flexible else f"{self._struct('h')}.pack(len({local}))"
            self.lines.append(f"{pad}emit({length} + {local})")
        else:  # bytes and records: emitted as they are (a Fetch answer's records by reference)
            if self.flexible:  # kio's compact writer encodes a str given for bytes
                self.lines.append(f"{pad}if isinstance({local}, str):")
                self.lines.append(f"{pad}    {local} = {local}.encode()")
            length = f"_uvarint(len({local}) + 1)" if self.flexible else f"{self._struct('i')}.pack(len({local}))"
            self.lines.append(f"{pad}emit({length})")
            self.lines.append(f"{pad}emit({local})")

    def _array(self, field: dataclasses.Field, kind: Any, value: str, indent: int) -> None:
        self._flush(indent)
        pad = "    " * indent
        items = self._temporary()
        self.lines.append(f"{pad}{items} = {value}")
        self.lines.append(f"{pad}if {items} is None:")
        self.lines.append(f"{pad}    emit({self._null_array()})")
        self.lines.append(f"{pad}else:")
        length = f"_uvarint(len({items}) + 1)" if self.flexible else f"{self._struct('i')}.pack(len({items}))"
        self.lines.append(f"{pad}    emit({length})")
        kafka_type = None if isinstance(kind, EntityTupleField) else get_schema_field_type(field)
        if kafka_type in _FIXED and _FIXED[kafka_type][1] == "{}":  # plain numbers: one pack for all
            self.lines.append(f"{pad}    emit(_pack(f'>{{len({items})}}{_FIXED[kafka_type][0]}', *{items}))")
            self.names["_pack"] = struct.pack
            return
        item = self._temporary()
        self.lines.append(f"{pad}    for {item} in {items}:")
        if kafka_type is None:
            self.lines.append(f"{pad}        {self._name('W', compiled_writer(kind.type_))}(emit, {item})")
            return
        assert isinstance(kind, PrimitiveTupleField)
        self._primitive(kafka_type, item, optional=False, indent=indent + 2, local=item)
        self._flush(indent + 2)

    def _null_array(self) -> str:
        return "b'\\x00'" if self.flexible else "b'\\xff\\xff\\xff\\xff'"

    def _tag_writer(self, tagged: list[tuple[int, dataclasses.Field]]) -> Callable[[Emit, Any], None]:
        """Tagged fields (KIP-482) in tag order, each written only when it differs from
        its default, as kio does; a tagged field's value is never null on the wire."""
        entries = []
        for tag, field in tagged:
            default = field.default if field.default is not dataclasses.MISSING else get_tagged_field_default(field)
            entries.append((unsigned_varint(tag), field.name, default, _value_writer(self.cls, field)))

        def write_tags(emit: Emit, entity: Any) -> None:
            written = []
            for encoded_tag, name, default, write_value in entries:
                value = getattr(entity, name)
                if value == default:
                    continue
                parts: list = []
                write_value(parts.append, value)
                data = b"".join(parts)
                written.append(encoded_tag + unsigned_varint(len(data)) + data)
            emit(unsigned_varint(len(written)) + b"".join(written))

        return write_tags

    # -- code generation --------------------------------------------------------------

    def _flush(self, indent: int) -> None:
        """Write the pending run of fixed-size fields with one struct."""
        if not self.run_format:
            return
        packer = self._struct(self.run_format)
        self._line(indent, f"emit({packer}.pack({', '.join(self.run_values)}))")
        self.run_format, self.run_values = "", []

    def _line(self, indent: int, statement: str) -> None:
        self.lines.append("    " * indent + statement)

    def _struct(self, struct_format: str) -> str:
        return self._name("S", struct.Struct(">" + struct_format))

    def _name(self, prefix: str, value: Any) -> str:
        name = f"_{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def _temporary(self) -> str:
        self.temporaries += 1
        return f"v{self.temporaries}"


def _value_writer(cls: type, field: dataclasses.Field) -> EntityWriter:
    """A writer of one tagged field's value on its own (`write(emit, value)`)."""
    compiler = _Compiler(cls)
    compiler._field(field, "e", optional=False, indent=1)
    compiler._flush(1)
    return generated_function("write(emit, e)", compiler.lines, compiler.names,
                              f"tag writer of {cls.__qualname__}.{field.name}")
