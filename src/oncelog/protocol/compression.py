"""The record-batch compression codecs, as Kafka frames them, through cramjam (one
well-kept wheel with gzip, snappy, lz4 and zstd).

- gzip: a gzip member.
- snappy: a raw snappy block, or Kafka's "xerial" framing (the magic header, then
  length-prefixed raw blocks), which the Java client writes and every client reads.
- lz4: the LZ4 frame format with independent blocks and no content size or checksum, the
  form Kafka's own LZ4 stream reads.
- zstd: one zstd frame.

`decompress` returns a buffer (bytes-like); `compress` returns bytes.
"""

from __future__ import annotations

import struct

import cramjam

from oncelog.protocol.record_batch import Compression, CorruptRecordError

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_INT32 = struct.Struct(">i")


def decompress(codec: int, data) -> bytes | memoryview:
    """The records of a batch payload compressed with `codec` (the attributes' low bits)."""
    if codec == Compression.NONE:
        return data
    try:
        if codec == Compression.GZIP:
            return memoryview(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            if bytes(data[: len(_XERIAL_MAGIC)]) == _XERIAL_MAGIC:
                return _decompress_xerial(memoryview(data))
            return memoryview(cramjam.snappy.decompress_raw(data))
        if codec == Compression.LZ4:
            return memoryview(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return memoryview(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as error:
        raise CorruptRecordError(f"cannot decompress records with {Compression(codec).name.lower()}: {error}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _decompress_xerial(data: memoryview) -> bytes:
    blocks = []
    position = _XERIAL_HEADER.size
    while position < len(data):
        if position + 4 > len(data):
            raise CorruptRecordError("xerial snappy block length runs past the end of the payload")
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise CorruptRecordError("xerial snappy block runs past the end of the payload")
        blocks.append(bytes(cramjam.snappy.decompress_raw(data[position:position + length])))
        position += length
    return b"".join(blocks)


def compress(codec: int, data, *, xerial: bool = False) -> bytes:
    """`data` compressed with `codec`; snappy in xerial framing when `xerial` (as the
    original payload of a batch being rewritten was)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        if xerial:
            return _XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1) + _INT32.pack(len(block)) + block
        return block
    if codec == Compression.LZ4:
        compressor = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def is_xerial(payload) -> bool:
    return bytes(payload[: len(_XERIAL_MAGIC)]) == _XERIAL_MAGIC
