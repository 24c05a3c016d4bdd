"""Kafka's murmur2 partitioner over a column of keys, against the hash values Kafka's own
Java implementation gives (the values Kafka's UtilsTest checks) and against librdkafka."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from oncelog.client.partitioner import murmur2, partition_by_crc32, partition_by_murmur2

# Key -> Utils.murmur2(key.getBytes()) as Java's signed int.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_of_a_key_column_equals_kafkas_java_murmur2():
    keys = list(JAVA_MURMUR2)
    hashes = murmur2(pa.array(keys, pa.binary())).astype(np.int64)
    signed = np.where(hashes >= 2**31, hashes - 2**32, hashes)
    assert signed.tolist() == list(JAVA_MURMUR2.values())


def _scalar_murmur2(data: bytes) -> int:
    """Kafka's algorithm one key at a time, in plain Python (the reference for the column form)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    for i in range(len(data) // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail, base = len(data) % 4, len(data) & ~3
    if tail >= 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def test_murmur2_of_keys_of_every_length_equals_the_one_key_at_a_time_algorithm():
    keys = [os.urandom(length) for length in range(70)] * 3
    assert murmur2(pa.array(keys, pa.binary())).tolist() == [_scalar_murmur2(k) for k in keys]


def test_string_keys_hash_as_their_utf8_bytes_and_null_keys_are_left_to_the_caller():
    partitions = partition_by_murmur2(pa.array(["foobar", None, "abc"]), 7)
    expected = [(JAVA_MURMUR2[b"foobar"] & 0x7FFFFFFF) % 7, None, (JAVA_MURMUR2[b"abc"] & 0x7FFFFFFF) % 7]
    assert partitions[0] == expected[0] and partitions[2] == expected[2]


def test_consistent_partitioner_is_crc32_of_the_key():
    import zlib

    keys = [b"a", b"bb", b"ccc"]
    assert partition_by_crc32(pa.array(keys), 5).tolist() == [zlib.crc32(k) % 5 for k in keys]
