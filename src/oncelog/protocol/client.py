"""A minimal Kafka wire client: send any request entity, or raw bytes.

Used by the CLI for APIs the standard clients lack (DescribeProducers, ...) and by
tests that must send what real clients never do (a bad CRC, a huge length prefix).
"""

from __future__ import annotations

import socket
import struct
from typing import Self

from oncelog.protocol import framing
from oncelog.protocol.messages import encode_response, is_flexible, response_class

_HEADER = struct.Struct(">hhi")


def encode_request(entity, correlation_id: int, client_id: str | None = "oncelog-tests") -> bytes:
    """A whole request frame (size prefix included) for a kio request entity."""
    api_key, version = int(entity.__api_key__), int(entity.__version__)
    header = _HEADER.pack(api_key, version, correlation_id)
    if client_id is None:
        header += struct.pack(">h", -1)
    else:
        encoded = client_id.encode()
        header += struct.pack(">h", len(encoded)) + encoded
    if is_flexible(api_key, version):
        header += b"\x00"  # no tagged fields
    body = encode_response(entity)  # the compiled entity writers serve requests and responses alike
    return struct.pack(">i", len(header) + len(body)) + header + body


def check_correlation(frame: bytes | bytearray | memoryview, correlation_id: int) -> None:
    """ConnectionError unless the response `frame` (without its size prefix) answers the
    request sent with `correlation_id`."""
    (correlation,) = struct.unpack_from(">i", frame, 0)
    if correlation != correlation_id:
        raise ConnectionError(f"response correlation id {correlation} does not match the request's {correlation_id}")


def decode_response(entity, frame: bytes | bytearray | memoryview, correlation_id: int):
    """The response entity in `frame` (a response without its size prefix) to the
    request `entity` sent with `correlation_id`."""
    from kio.serial import entity_reader

    api_key, version = int(entity.__api_key__), int(entity.__version__)
    check_correlation(frame, correlation_id)
    position = 4
    if is_flexible(api_key, version) and api_key != framing.API_VERSIONS_KEY:
        position = framing.skip_tagged_fields(frame, position)
    response, _ = entity_reader(response_class(api_key, version))(frame, position)
    return response


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation = 0

    @classmethod
    def connect(cls, bootstrap: str, timeout: float = 10.0) -> WireClient:
        host, _, port = bootstrap.rpartition(":")
        return cls(host, int(port), timeout)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = framing.read_size(self._read_exactly(4))
        return self._read_exactly(size)

    def request(self, entity):
        """Send `entity`, return the decoded response entity."""
        self._correlation += 1
        self.send_raw(encode_request(entity, self._correlation))
        return decode_response(entity, self.read_frame(), self._correlation)

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True when the broker has closed the connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
