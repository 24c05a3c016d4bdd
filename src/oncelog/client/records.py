"""Kafka record batches (magic 2) to Arrow columns and back, a column at a time.

Reading (`decode_fetched`): the batches of one Fetch response for one partition become
columns of the records a reader keeps: keys and values (Arrow binary arrays), offsets,
timestamps and timestamp types (numpy), headers (Python lists, only for records that
have them). Batch headers are looked at one by one (there are few); the only loop over
records is the one that finds where each record starts, because a record's position
depends on the lengths of those before it (in C, `_record_starts.c`, where it was built;
else in Python). Every field after that is read for all
records at once with numpy, and keys and values are gathered into Arrow arrays by Arrow
itself (a binary_view array over the fetched bytes, cast to binary).

- Control batches are never returned. Under read_committed, batches of aborted
  transactions are skipped with Kafka's consumer rule: a transactional batch of producer
  P is aborted from the first offset the Fetch response lists for P until P's ABORT marker.
- Only records with offsets in [start, end) are kept; `next_offset` is where the next
  Fetch starts (past every complete batch seen, control and aborted ones included).
- A partial batch at the end of the response (the broker cuts at the size limit) is
  left for the next Fetch.

Writing (`encode_records`): rows become the records payloads of batches of at most
`max_batch_bytes`, with offset deltas from 0 in each; `RecordSet.batch()` puts the
header (producer id, epoch, base sequence, CRC32C) around a payload when it is sent.

Record layout (inside a batch): length varint, attributes int8, timestampDelta varlong,
offsetDelta varint, keyLength varint (-1: null), key, valueLength varint, value,
headerCount varint, then per header keyLength varint, key, valueLength varint, value.
Varints are zigzag-encoded, as in Kafka.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c
from numpy.lib.stride_tricks import as_strided

from oncelog.protocol import compression
from oncelog.protocol.record_batch import (
    ATTRIBUTES_POSITION,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_POSITION,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    ControlType,
    CorruptRecordError,
    read_control_record,
)

CREATE_TIME = 0
LOG_APPEND_TIME = 1

_BATCH_START = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_AFTER_MAGIC = struct.Struct(">Ihiqqqhii")  # crc, attributes, lastOffsetDelta, timestamps, producer, count
_AFTER_CRC = struct.Struct(">hiqqqhii")
_VARINT_SHIFTS = np.arange(10, dtype=np.uint64) * np.uint64(7)

_native_record_starts: Callable[[bytes | bytearray | memoryview, int, int, int], bytes] | None
try:  # the record-start loop in C (setup.py builds it where a compiler is); else Python's
    from oncelog.client._record_starts import record_starts as _native_record_starts
except ImportError:  # pragma: no cover (depends on the machine that installed oncelog)
    _native_record_starts = None


@dataclass
class DecodedRecords:
    """The kept records of a Fetch response, in offset order."""

    keys: pa.Array  # binary, null for a null key
    values: pa.Array  # binary, null for a tombstone
    offsets: np.ndarray  # int64
    timestamps_ms: np.ndarray  # int64
    timestamp_types: np.ndarray  # int32: 0 CreateTime, 1 LogAppendTime
    headers: list | None  # per record: list of (key str, value bytes | None), or None; None: none at all
    next_offset: int

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def size_bytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes


@dataclass(frozen=True)
class _Batch:
    payload_start: int  # where its records start in the arena
    payload_end: int
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    timestamp_type: int
    count: int


# -- reading ---------------------------------------------------------------------------------


def next_fetch_offset(records, position: int) -> int:
    """Where the Fetch after this response starts: past the last complete batch, or
    `position` when the response holds none. Only batch headers are read."""
    view = memoryview(records)
    cursor = 0
    while cursor + LOG_OVERHEAD <= len(view):
        base_offset, length = struct.unpack_from(">qi", view, cursor)
        end = cursor + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > len(view):
            break
        (last_delta,) = struct.unpack_from(">i", view, cursor + 23)
        position = max(position, base_offset + last_delta + 1)
        cursor = end
    return position


def decode_fetched(records, *, start: int, end: int, read_committed: bool,
                   aborted: Iterable[tuple[int, int]] = (), with_headers: bool = False,
                   verify_crc: bool = True) -> DecodedRecords:
    """The records in [start, end) of one Fetch response's `records` for one partition.
    `aborted`: the response's (producer id, first offset) pairs. Raises CorruptRecordError
    on a bad CRC or malformed records."""
    view = memoryview(records)
    batches, arena, next_offset = _kept_batches(view, start, end, read_committed, aborted, verify_crc)
    if not batches:
        return _empty(next_offset)
    return _decode_records(arena, batches, start, end, with_headers, next_offset)


def _kept_batches(view: memoryview, start: int, end: int, read_committed: bool,
                  aborted: Iterable[tuple[int, int]], verify_crc: bool):
    """The batches whose records a reader gets, the buffer their records are in (the
    response itself, or the decompressed records of every kept batch one after another),
    and the offset after the last complete batch."""
    pending_aborts = sorted((first_offset, producer_id) for producer_id, first_offset in aborted)
    aborted_producers: set[int] = set()
    kept: list[tuple[int, int, int, int, int, int, int]] = []
    next_offset = start
    cursor = 0
    compressed = False
    while cursor + HEADER_SIZE <= len(view):
        base_offset, length, _leader_epoch, magic = _BATCH_START.unpack_from(view, cursor)
        batch_end = cursor + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or batch_end > len(view):
            break  # a partial batch: the next Fetch returns it whole
        if magic != MAGIC:
            raise CorruptRecordError(
                f"batch at offset {base_offset} has message format v{magic}; only v2 (Kafka 0.11+) is read")
        crc, attributes, last_delta, base_ts, max_ts, producer_id, _epoch, _sequence, count = \
            _AFTER_MAGIC.unpack_from(view, cursor + CRC_POSITION)
        if count < 0:
            raise CorruptRecordError(f"batch at offset {base_offset} has a negative record count ({count})")
        if verify_crc and crc32c(view[cursor + ATTRIBUTES_POSITION:batch_end]) != crc:
            raise CorruptRecordError(f"batch at offset {base_offset} fails its CRC32C check")
        last_offset = base_offset + last_delta
        next_offset = max(next_offset, last_offset + 1)
        payload_start, payload_end = cursor + HEADER_SIZE, batch_end
        cursor = batch_end
        if base_offset >= end:
            break
        if read_committed and producer_id >= 0:
            while pending_aborts and pending_aborts[0][0] <= last_offset:
                aborted_producers.add(heapq.heappop(pending_aborts)[1])
            if attributes & CONTROL_BIT:
                if _control_type(view[payload_start:payload_end]) == ControlType.ABORT:
                    aborted_producers.discard(producer_id)
                continue
            if attributes & TRANSACTIONAL_BIT and producer_id in aborted_producers:
                continue
        if attributes & CONTROL_BIT or last_offset < start or count == 0:
            continue
        compressed |= bool(attributes & COMPRESSION_MASK)
        kept.append((payload_start, payload_end, attributes, base_offset, base_ts, max_ts, count))
    if not compressed:
        return [_batch(*fields) for fields in kept], view, next_offset
    # Some batches are compressed: their records, decompressed, and the others' go into
    # one buffer so the record columns can be read in one pass.
    parts = []
    batches = []
    size = 0
    for payload_start, payload_end, attributes, *rest in kept:
        data = compression.decompress(attributes & COMPRESSION_MASK, view[payload_start:payload_end])
        parts.append(data)
        batches.append(_batch(size, size + len(data), attributes, *rest))
        size += len(data)
    return batches, memoryview(b"".join(parts)), next_offset


def _batch(payload_start: int, payload_end: int, attributes: int, base_offset: int, base_timestamp: int,
           max_timestamp: int, count: int) -> _Batch:
    timestamp_type = LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME
    return _Batch(payload_start, payload_end, base_offset, base_timestamp, max_timestamp, timestamp_type, count)


def _control_type(payload) -> ControlType | None:
    try:
        return read_control_record(payload)[0]
    except (CorruptRecordError, ValueError, struct.error):
        return None


def _empty(next_offset: int) -> DecodedRecords:
    return DecodedRecords(
        keys=pa.array([], pa.binary()), values=pa.array([], pa.binary()),
        offsets=np.empty(0, np.int64), timestamps_ms=np.empty(0, np.int64),
        timestamp_types=np.empty(0, np.int32), headers=None, next_offset=next_offset,
    )


def _record_starts(arena, batches: Sequence[_Batch]) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's attributes byte is, and where the record ends. The loop over
    records notes only where each record's length field is (where a record starts
    depends on the lengths of all before it); the fields are then read for all at once."""
    if _native_record_starts is None:
        positions = np.array(_length_positions(arena, batches), dtype=np.int64)
    else:
        pieces = []
        for batch in batches:
            try:
                pieces.append(_native_record_starts(arena, batch.payload_start, batch.payload_end, batch.count))
            except ValueError as error:
                raise CorruptRecordError(f"records of the batch at offset {batch.base_offset} {error}") from None
        positions = np.frombuffer(b"".join(pieces), dtype=np.int64)
    lengths, starts = _read_varints(np.frombuffer(arena, dtype=np.uint8), positions, 10)
    if (lengths < 0).any():
        raise CorruptRecordError("a record has a negative length")
    return starts, starts + lengths


def _length_positions(arena, batches: Sequence[_Batch]) -> list[int]:
    """The loop of `_record_starts` in Python, where the C module was not built."""
    fields: list[int] = []
    note = fields.append
    for batch in batches:
        position = batch.payload_start
        stop = batch.payload_end
        try:
            for _ in range(batch.count):
                note(position)
                byte = arena[position]
                if byte < 0x80:
                    position += 1 + (byte >> 1)  # a zigzag varint: the length is byte / 2
                else:
                    second = arena[position + 1]
                    if second < 0x80:  # records of 64 bytes to 8 KB
                        position += 2 + (((byte & 0x7F) | (second << 7)) >> 1)
                    else:
                        length, position = _slow_varint(arena, position)
                        position += length >> 1
        except IndexError:
            raise CorruptRecordError(f"records of the batch at offset {batch.base_offset} run past its end") from None
        if position != stop:
            raise CorruptRecordError(f"records of the batch at offset {batch.base_offset} do not fill it")
    return fields


def _slow_varint(arena, position: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        byte = arena[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def _read_varints(data: np.ndarray, positions: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at `positions` of `data` (uint8), for all at once: (values,
    positions after them)."""
    first = data[np.minimum(positions, len(data) - 1)]
    if not (first & 0x80).any():  # the common case: every varint is one byte
        values = first.astype(np.int64)
        return (values >> 1) ^ -(values & 1), positions + 1
    second = data[np.minimum(positions + 1, len(data) - 1)]
    long = (first & 0x80) != 0
    if not (second[long] & 0x80).any():  # none longer than two bytes (values below 8,192)
        values = np.where(long, (first & 0x7F).astype(np.int64) | (second.astype(np.int64) << 7), first)
        return (values >> 1) ^ -(values & 1), positions + 1 + long
    window = data[np.minimum(positions[:, None] + np.arange(width), len(data) - 1)]
    continues = (window & 0x80) != 0
    sizes = np.argmin(continues, axis=1) + 1
    if continues.all(axis=1).any():
        raise CorruptRecordError(f"varint longer than {width} bytes")
    used = np.arange(width) < sizes[:, None]
    raw = (((window & 0x7F).astype(np.uint64) << _VARINT_SHIFTS[:width]) * used).sum(axis=1)
    values = raw.astype(np.int64)
    return (values >> 1) ^ -(values & 1), positions + sizes


def _decode_records(arena, batches: Sequence[_Batch], start: int, end: int, with_headers: bool,
                    next_offset: int) -> DecodedRecords:
    data = np.frombuffer(arena, dtype=np.uint8)
    starts, ends = _record_starts(arena, batches)
    counts = [batch.count for batch in batches]
    base_offsets = np.repeat(np.array([b.base_offset for b in batches], np.int64), counts)
    base_times = np.repeat(np.array([b.base_timestamp for b in batches], np.int64), counts)
    max_times = np.repeat(np.array([b.max_timestamp for b in batches], np.int64), counts)
    types = np.repeat(np.array([b.timestamp_type for b in batches], np.int32), counts)
    time_deltas, cursor = _read_varints(data, starts + 1, 10)
    offset_deltas, cursor = _read_varints(data, cursor, 5)
    key_lengths, cursor = _read_varints(data, cursor, 5)
    key_starts = cursor
    value_lengths, cursor = _read_varints(data, cursor + np.maximum(key_lengths, 0), 5)
    value_starts = cursor
    header_at = cursor + np.maximum(value_lengths, 0)
    if (header_at >= ends).any() or (key_lengths < -1).any() or (value_lengths < -1).any():
        raise CorruptRecordError("a record's fields run past its length")
    offsets = base_offsets + offset_deltas
    keep = (offsets >= start) & (offsets < end)
    if not keep.all():
        keep_index = np.flatnonzero(keep)
        offsets, starts, ends = offsets[keep_index], starts[keep_index], ends[keep_index]
        header_at = header_at[keep_index]
        key_starts, key_lengths = key_starts[keep_index], key_lengths[keep_index]
        value_starts, value_lengths = value_starts[keep_index], value_lengths[keep_index]
        time_deltas, base_times = time_deltas[keep_index], base_times[keep_index]
        max_times, types = max_times[keep_index], types[keep_index]
    timestamps = np.where(types == LOG_APPEND_TIME, max_times, base_times + time_deltas)
    headers = None
    if with_headers:
        no_headers = (data[np.minimum(header_at, len(data) - 1)] == 0) & (header_at + 1 == ends)
        if not no_headers.all():
            headers = _headers(arena, header_at, ends, no_headers)
    return DecodedRecords(
        keys=binary_column(arena, key_starts, key_lengths),
        values=binary_column(arena, value_starts, value_lengths),
        offsets=offsets, timestamps_ms=timestamps, timestamp_types=types,
        headers=headers, next_offset=next_offset,
    )


def _headers(arena, header_at: np.ndarray, ends: np.ndarray, none: np.ndarray) -> list:
    """Per record: None when it has no headers, else its (key, value) list."""
    result: list = [None] * len(header_at)
    for index in np.flatnonzero(~none).tolist():
        end = int(ends[index])
        try:
            result[index] = _record_headers(arena, int(header_at[index]), end) or None
        except IndexError:
            raise CorruptRecordError("a record's headers run past the records") from None
    return result


def _record_headers(arena, position: int, end: int) -> list:
    count, position = _zigzag(arena, position)
    if count < 0:
        raise CorruptRecordError("a record has a negative header count")
    pairs = []
    for _ in range(count):
        key_length, position = _zigzag(arena, position)
        if key_length < 0:
            raise CorruptRecordError("a record header has a null key")
        key = bytes(arena[position:position + key_length]).decode("utf-8", "replace")
        position += key_length
        value_length, position = _zigzag(arena, position)
        value = None if value_length < 0 else bytes(arena[position:position + value_length])
        position += max(value_length, 0)
        if position > end:
            break
        pairs.append((key, value))
    if position != end:
        raise CorruptRecordError("a record's headers do not end where the record does")
    return pairs


def _zigzag(arena, position: int) -> tuple[int, int]:
    raw, position = _slow_varint(arena, position)
    return (raw >> 1) ^ -(raw & 1), position


def binary_column(arena, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """An Arrow binary array of the byte ranges [start, start + length) of `arena`; a
    negative length is a null. Built as a binary_view array over `arena` (16 bytes per
    value: its length, then the value itself when it has up to 12 bytes, else its first 4
    bytes, buffer 0 and its offset) and cast to binary, which copies the values once, in
    C++. The views are filled a field at a time, from strided views of `arena` (numpy
    copies a row of 4 or 12 bytes per value, with no index matrix)."""
    count = len(starts)
    if count == 0:
        return pa.array([], pa.binary())
    valid = lengths >= 0
    all_valid = bool(valid.all())
    if not all_valid and not valid.any():
        return pa.nulls(count, pa.binary())
    data = np.frombuffer(arena, dtype=np.uint8)
    sizes = (lengths if all_valid else np.where(valid, lengths, 0)).astype("<i4")
    views = np.zeros((count, 4), dtype="<i4")  # length, prefix, buffer index, offset
    views[:, 0] = sizes
    inline = sizes <= 12
    if not inline.all():
        outside = slice(None) if not inline.any() else np.flatnonzero(~inline)
        # A value longer than 12 bytes starts at least 12 bytes before the end of `arena`.
        quads = as_strided(data, shape=(len(data) - 3, 4), strides=(1, 1))
        views[outside, 1] = quads[starts[outside]].view("<i4")[:, 0]
        views[outside, 3] = starts[outside]
    if inline.any():
        inside = slice(None) if inline.all() else np.flatnonzero(inline)
        views.view(np.uint8)[inside, 4:16] = _inline_bytes(data, starts[inside], sizes[inside])
    validity = None
    null_count = 0
    if not all_valid:
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int(count - valid.sum())
    array = pa.Array.from_buffers(pa.binary_view(), count, [validity, pa.py_buffer(views), pa.py_buffer(arena)],
                                  null_count=null_count)
    return array.cast(pa.binary())


def _inline_bytes(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The up to 12 bytes of each short value, zero-padded to 12 (Arrow's inline view)."""
    if len(data) >= 12 and starts.max() <= len(data) - 12:
        window = as_strided(data, shape=(len(data) - 11, 12), strides=(1, 1))[starts]
    else:  # a value in the last 12 bytes: read byte by byte, clamped to the buffer
        window = data[np.minimum(starts[:, None] + np.arange(12), max(len(data) - 1, 0))] if len(data) else \
            np.zeros((len(starts), 12), np.uint8)
    window *= np.arange(12) < sizes[:, None]
    return window


# -- writing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordSet:
    """The records payload of one batch to be, and what its header needs."""

    payload: bytes | memoryview  # the records, uncompressed or compressed
    count: int
    attributes: int  # compression codec bits (the producer adds the transactional bit)
    timestamp_ms: int
    size: int  # uncompressed bytes of the records

    def batch(self, *, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool) -> bytes:
        """The whole RecordBatch, base offset 0 (the broker assigns offsets)."""
        attributes = self.attributes | (TRANSACTIONAL_BIT if transactional else 0)
        after_crc = _AFTER_CRC.pack(attributes, self.count - 1, self.timestamp_ms, self.timestamp_ms,
                                    producer_id, producer_epoch, base_sequence, self.count)
        checksum = crc32c(self.payload, crc32c(after_crc))
        length = HEADER_SIZE - LOG_OVERHEAD + len(self.payload)
        return b"".join((struct.pack(">qiibI", 0, length, -1, MAGIC, checksum), after_crc, self.payload))


def _zigzag_encode(values: np.ndarray) -> np.ndarray:
    values = values.astype(np.int64)
    return ((values << 1) ^ (values >> 63)).astype(np.uint64)


def _varint_sizes(unsigned: np.ndarray) -> np.ndarray:
    sizes = np.ones(len(unsigned), dtype=np.int64)
    for bits in range(7, 64, 7):
        sizes += unsigned >= np.uint64(1 << bits)
    return sizes


def _varint_bytes(unsigned: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Each value's varint bytes, left-aligned in a [n, width] matrix, and their counts."""
    sizes = _varint_sizes(unsigned)
    groups = ((unsigned[:, None] >> _VARINT_SHIFTS[:width]) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(width) < (sizes - 1)[:, None]
    return groups | (more.astype(np.uint8) << 7), sizes


def _pack(pieces: Sequence[tuple[np.ndarray, np.ndarray]]) -> pa.Array:
    """Per row, the used bytes of each (matrix, sizes) piece in turn, as a binary array."""
    matrix = np.concatenate([m for m, _ in pieces], axis=1)
    used = np.concatenate([np.arange(m.shape[1]) < s[:, None] for m, s in pieces], axis=1)
    lengths = np.sum([s for _, s in pieces], axis=0)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = matrix[used]
    return pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _lengths(column: pa.Array | None, rows: int) -> np.ndarray:
    """Byte lengths of a binary column's values, -1 for nulls (all -1 without a column)."""
    if column is None:
        return np.full(rows, -1, dtype=np.int64)
    return pc.fill_null(pc.binary_length(column), -1).to_numpy().astype(np.int64)


def encode_headers(pairs) -> bytes:
    """One record's headers section: count, then each key and value (None: no headers)."""
    if not pairs:
        return b"\x00"
    out = bytearray(_varint(len(pairs)))
    for key, value in pairs:
        encoded = key.encode() if isinstance(key, str) else bytes(key)
        out += _varint(len(encoded)) + encoded
        if value is None:
            out += _varint(-1)
        else:
            encoded = value.encode() if isinstance(value, str) else bytes(value)
            out += _varint(len(encoded)) + encoded
    return bytes(out)


def _varint(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def encode_records(keys: pa.Array | None, values: pa.Array, headers: pa.Array | None, *,
                   max_batch_bytes: int, timestamp_ms: int, codec: int = 0) -> list[RecordSet]:
    """Rows as the record payloads of consecutive batches, each at most `max_batch_bytes`
    (a single larger record gets a batch of its own). `keys`, `values`: binary arrays
    (null key: no key; null value: a tombstone); `headers`: list<struct<key, value>> or None."""
    rows = len(values)
    if rows == 0:
        return []
    key_lengths = _lengths(keys, rows)
    value_lengths = _lengths(values, rows)
    header_bytes = _header_column(headers, rows)
    header_sizes = (np.ones(rows, dtype=np.int64) if header_bytes is None
                    else _lengths(header_bytes, rows))
    key_zigzag = _zigzag_encode(key_lengths)
    value_zigzag = _zigzag_encode(value_lengths)
    # Bodies without the offset delta; split into batches assuming the widest delta (3
    # bytes hold deltas up to 2^20), then encode each batch's deltas exactly.
    fixed = (2 + _varint_sizes(key_zigzag) + np.maximum(key_lengths, 0) + _varint_sizes(value_zigzag)
             + np.maximum(value_lengths, 0) + header_sizes)
    estimate = fixed + 3 + _varint_sizes(_zigzag_encode(fixed + 3))
    boundaries = _batch_boundaries(estimate, max_batch_bytes - HEADER_SIZE)
    index = np.arange(rows, dtype=np.int64)
    batch_starts = np.repeat(boundaries[:-1], np.diff(boundaries))
    delta_zigzag = _zigzag_encode(index - batch_starts)
    delta_bytes, delta_sizes = _varint_bytes(delta_zigzag, 4)
    bodies = fixed + delta_sizes
    length_bytes, length_sizes = _varint_bytes(_zigzag_encode(bodies), 5)
    zeros = np.zeros((rows, 2), dtype=np.uint8)  # attributes, timestamp delta
    key_varint, key_varint_sizes = _varint_bytes(key_zigzag, 5)
    prefix = _pack([(length_bytes, length_sizes), (zeros, np.full(rows, 2)), (delta_bytes, delta_sizes),
                    (key_varint, key_varint_sizes)])
    middle = _pack([_varint_bytes(value_zigzag, 5)])
    suffix = header_bytes if header_bytes is not None else _constant_binary(b"\x00", rows)
    empty = pa.scalar(b"", pa.binary())
    joined = pc.binary_join_element_wise(
        prefix, _as_binary(keys, rows), middle, _as_binary(values, rows), suffix, empty,
        null_handling="replace", null_replacement=b"")
    record_offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32, count=rows + 1, offset=joined.offset * 4)
    data = joined.buffers()[2]
    sets = []
    for first, last in zip(boundaries[:-1].tolist(), boundaries[1:].tolist(), strict=True):
        begin, stop = int(record_offsets[first]), int(record_offsets[last])
        payload: bytes | memoryview = memoryview(data)[begin:stop]
        size = stop - begin
        if codec:
            payload = compression.compress(codec, payload)
        sets.append(RecordSet(payload, last - first, codec, timestamp_ms, size))
    return sets


def _batch_boundaries(sizes: np.ndarray, limit: int) -> np.ndarray:
    """Row indices where batches start, plus the row count: consecutive rows whose sizes
    add up to at most `limit` (a row larger than that alone)."""
    boundaries = [0]
    total = np.cumsum(sizes)
    rows = len(sizes)
    start = 0
    base = 0
    while start < rows:
        stop = int(np.searchsorted(total, base + limit, side="right"))
        stop = max(stop, start + 1)
        boundaries.append(stop)
        base = int(total[stop - 1])
        start = stop
    return np.array(boundaries, dtype=np.int64)


def _as_binary(column: pa.Array | None, rows: int) -> pa.Array:
    if column is None:
        return pa.nulls(rows, pa.binary())
    if pa.types.is_binary(column.type):
        return column
    return column.cast(pa.binary())


def _constant_binary(value: bytes, rows: int) -> pa.Array:
    offsets = np.arange(rows + 1, dtype=np.int32) * len(value)
    return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(value * rows)])


def _header_column(headers: pa.Array | None, rows: int) -> pa.Array | None:
    """Each row's encoded headers section, or None when no row has headers."""
    if headers is None or headers.null_count == rows:
        return None
    if not pc.any(pc.greater(pc.list_value_length(headers), 0)).as_py():
        return None
    encoded = [encode_headers(None if row is None else [(h["key"], h["value"]) for h in row])
               for row in headers.to_pylist()]
    return pa.array(encoded, pa.binary())
