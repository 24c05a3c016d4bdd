"""Which partition each keyed row goes to, for a whole column of keys at once.

`murmur2` is Kafka's (Utils.murmur2, the Java producer's default partitioner, which
Spark's Kafka sink uses and librdkafka calls `murmur2_random`): partition =
(murmur2(key) & 0x7fffffff) % partitions. `crc32` is librdkafka's `consistent` /
`consistent_random` (CRC32 of the key modulo partitions). Keys are hashed with numpy
over a padded key matrix, 4 bytes of every key per step.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of each non-null binary key, as uint32 (nulls give 0)."""
    rows = len(keys)
    lengths = pc.fill_null(pc.binary_length(keys), 0).to_numpy().astype(np.int64)
    if rows == 0:
        return np.zeros(0, dtype=np.uint32)
    width = int(lengths.max()) if rows else 0
    padded = (width + 3) // 4 * 4 or 4
    matrix = _key_matrix(keys, lengths, padded)
    with np.errstate(over="ignore"):
        h = _SEED ^ lengths.astype(np.uint32)
        words = matrix.view("<u4")  # [rows, padded / 4], little-endian as Kafka reads
        blocks = lengths // 4
        for index in range(padded // 4):
            active = blocks > index
            if not active.any():
                break
            k = words[:, index] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            mixed = (h * _M) ^ k
            h = np.where(active, mixed, h)
        tail = lengths % 4
        base = blocks * 4
        row = np.arange(rows)
        extra = np.zeros(rows, dtype=np.uint32)
        for byte in (2, 1, 0):
            has = tail > byte
            values = matrix[row, np.minimum(base + byte, padded - 1)].astype(np.uint32)
            extra ^= np.where(has, values << np.uint32(8 * byte), np.uint32(0))
        h = np.where(tail > 0, (h ^ extra) * _M, h)
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h.astype(np.uint32)


def _key_matrix(keys: pa.Array, lengths: np.ndarray, width: int) -> np.ndarray:
    """[rows, width] uint8: each key's bytes, zero-padded."""
    binary = keys.cast(pa.binary()) if not pa.types.is_binary(keys.type) else keys
    binary = pc.fill_null(binary, b"")
    offsets = np.frombuffer(binary.buffers()[1], dtype=np.int32, count=len(binary) + 1, offset=binary.offset * 4)
    data = np.frombuffer(binary.buffers()[2], dtype=np.uint8) if binary.buffers()[2] is not None else \
        np.zeros(1, np.uint8)
    positions = offsets[:-1, None].astype(np.int64) + np.arange(width)
    inside = np.arange(width) < lengths[:, None]
    matrix = data[np.minimum(positions, max(len(data) - 1, 0))]
    matrix *= inside
    return np.ascontiguousarray(matrix)


def partition_by_murmur2(keys: pa.Array, partitions: int) -> np.ndarray:
    return ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)).astype(np.int32)


def partition_by_crc32(keys: pa.Array, partitions: int) -> np.ndarray:
    hashes = [0 if key is None else zlib.crc32(key) for key in keys.cast(pa.binary()).to_pylist()]
    return (np.array(hashes, dtype=np.uint64) % partitions).astype(np.int32)
