"""Request and response headers (the bytes around a message body).

Request header v1: api_key int16, api_version int16, correlation_id int32,
client_id nullable string (int16 length). v2 (flexible APIs) adds tagged fields.
Response header v0: correlation_id int32; v1 (flexible) adds tagged fields.
ApiVersions responses always use header v0 so that a client that does not yet know the
broker's versions can read them.
"""

from __future__ import annotations

import struct

_HEADER_FIXED = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")
_SIZE_CORRELATION_TAGS = struct.Struct(">iiB")  # header v1: no tagged fields

API_VERSIONS_KEY = 18


class MalformedRequestError(ValueError):
    """The frame cannot be parsed: Kafka closes such a connection."""


def read_request_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int, str | None, int]:
    """The v1 part of the header: (api_key, api_version, correlation_id, client_id, end)."""
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequestError(f"request frame of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, client_id_length = _HEADER_FIXED.unpack_from(frame, 0)
    position = _HEADER_FIXED.size
    if client_id_length < 0:
        return api_key, api_version, correlation_id, None, position
    end = position + client_id_length
    if end > len(frame):
        raise MalformedRequestError("client_id runs past the end of the frame")
    try:
        client_id = bytes(frame[position:end]).decode()
    except UnicodeDecodeError as error:
        raise MalformedRequestError("client_id is not UTF-8") from error
    return api_key, api_version, correlation_id, client_id, end


def skip_tagged_fields(frame: bytes | bytearray | memoryview, position: int) -> int:
    """Skip a tagged-field section (header v2); returns the position after it."""
    count, position = read_unsigned_varint(frame, position)
    for _ in range(count):
        _tag, position = read_unsigned_varint(frame, position)
        size, position = read_unsigned_varint(frame, position)
        position += size
        if position > len(frame):
            raise MalformedRequestError("tagged field runs past the end of the frame")
    return position


_ONE_BYTE_VARINTS = tuple(bytes((n,)) for n in range(0x80))


def unsigned_varint(value: int) -> bytes:
    """Kafka's unsigned varint: lengths and counts of compact fields, tags; the records'
    zig-zag varints are this of the zig-zag value."""
    if 0 <= value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    if value < 0:
        raise ValueError(f"an unsigned varint cannot hold {value}")
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_unsigned_varint(frame: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if position >= len(frame):
            raise MalformedRequestError("varint runs past the end of the frame")
        byte = frame[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise MalformedRequestError("varint longer than 5 bytes")


def response_frame(correlation_id: int, body: bytes, *, flexible_header: bool) -> bytes:
    """A whole response: size prefix, header v0 or v1, body."""
    return response_prefix(correlation_id, len(body), flexible_header=flexible_header) + body


def response_prefix(correlation_id: int, body_size: int, *, flexible_header: bool) -> bytes:
    """What precedes a response body of `body_size` bytes: size prefix and header v0 or v1."""
    if flexible_header:
        return _SIZE_CORRELATION_TAGS.pack(body_size + 5, correlation_id, 0)
    return _SIZE_CORRELATION.pack(body_size + 4, correlation_id)


def read_size(prefix: bytes) -> int:
    return _SIZE.unpack(prefix)[0]
