"""Producer id allocation in blocks, persisted so that no id is ever handed out twice.

Like Kafka's ProducerIdManager: ids come from blocks of `BLOCK_SIZE`; before the first id
of a block is used, the end of that block is written durably to `producer-ids.meta`.
After a restart or a crash allocation resumes after the last block recorded, so ids of
a partly used block are skipped, never reused.

File layout (big-endian): magic b"OLPI", version int16 = 1, CRC32C uint32 of the
payload, payload = next_block_start int64. Written to a temporary file, fsynced, renamed.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from crc32c import crc32c

BLOCK_SIZE = 1000
MAGIC = b"OLPI"
VERSION = 1
_HEADER = struct.Struct(">4shI")
_PAYLOAD = struct.Struct(">q")
FILE_NAME = "producer-ids.meta"


class ProducerIdManager:
    """Hands out producer ids; the only writer of `producer-ids.meta`."""

    def __init__(self, directory: Path, block_size: int = BLOCK_SIZE) -> None:
        self.path = directory / FILE_NAME
        self.block_size = block_size
        self._next_block_start = self._read()
        self._next_id = 0
        self._block_end = 0  # nothing allocated in this process yet

    def next_producer_id(self) -> int:
        if self._next_id >= self._block_end:
            start = self._next_block_start
            self._write(start + self.block_size)  # durable before any id of the block is used
            self._next_block_start = start + self.block_size
            self._next_id, self._block_end = start, start + self.block_size
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    def _read(self) -> int:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        magic, version, crc = _HEADER.unpack_from(data)
        payload = data[_HEADER.size :]
        if magic != MAGIC or version != VERSION or crc32c(payload) != crc:
            raise RuntimeError(f"{self.path} is corrupt: refusing to risk reusing producer ids")
        return _PAYLOAD.unpack(payload)[0]

    def _write(self, next_block_start: int) -> None:
        payload = _PAYLOAD.pack(next_block_start)
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "wb") as file:
            file.write(_HEADER.pack(MAGIC, VERSION, crc32c(payload)) + payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
