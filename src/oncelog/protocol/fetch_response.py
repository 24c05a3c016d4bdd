"""The Fetch response (v4-v12), read by hand: every partition's records stay a view of
the response frame, where kio would copy each into a new bytes object. Read by the
client's fetcher (the Spark source) and by a follower's replica fetcher, for which a
copy of every replicated byte was a tenth of its CPU.

Layout (FetchResponse.json), v4-v11 classic, v12 flexible (compact lengths, tagged
fields after each struct and in the header):

  throttle_time_ms int32, [v7+] error_code int16, session_id int32,
  responses: [ topic string,
               partitions: [ partition_index int32, error_code int16, high_watermark int64,
                             last_stable_offset int64, [v5+] log_start_offset int64,
                             aborted_transactions: nullable [ producer_id int64, first_offset int64 ],
                             [v11+] preferred_read_replica int32, records nullable bytes,
                             [v12+ tag 0] diverging_epoch { epoch int32, end_offset int64 } ] ]
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncelog.protocol.framing import read_unsigned_varint, skip_tagged_fields


@dataclass(frozen=True)
class FetchedPartition:
    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset)
    records: bytes | memoryview  # a view of the response frame
    # (epoch, end offset) when the leader says a follower's log diverged (KIP-320, v12+).
    diverging_epoch: tuple[int, int] | None = None


@dataclass(frozen=True)
class FetchAnswer:
    error: int  # the top-level error code (v7+; 0 before)
    session_id: int  # the fetch session (KIP-227; 0 before v7)
    partitions: dict[tuple[str, int], FetchedPartition]


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")
_INT64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_EPOCH_END_OFFSET = struct.Struct(">iq")
_ERROR_AND_SESSION = struct.Struct(">hi")
_DIVERGING_EPOCH_TAG = 0


def read_fetch_response(version: int, body: bytes | bytearray | memoryview) -> FetchAnswer:
    """The Fetch response `body` (the frame after its correlation id: from v12 the
    header's tagged fields come first); raises struct.error, ValueError or IndexError
    (oncelog.protocol.framing's MalformedRequestError is a ValueError) when malformed."""
    body = memoryview(body)
    flexible = version >= 12
    position = skip_tagged_fields(body, 0) if flexible else 0
    position += 4  # throttle_time_ms
    error = session_id = 0
    if version >= 7:
        error, session_id = _ERROR_AND_SESSION.unpack_from(body, position)
        position += _ERROR_AND_SESSION.size
    answers: dict[tuple[str, int], FetchedPartition] = {}
    topics, position = _length(body, position, flexible)
    for _ in range(max(topics, 0)):
        topic, position = _string(body, position, flexible)
        partitions, position = _length(body, position, flexible)
        for _ in range(max(partitions, 0)):
            index, code, high, stable = _PARTITION_HEAD.unpack_from(body, position)
            position += _PARTITION_HEAD.size
            log_start = -1
            if version >= 5:
                (log_start,) = _INT64.unpack_from(body, position)
                position += 8
            aborted = []
            count, position = _length(body, position, flexible)
            for _ in range(max(count, 0)):
                aborted.append(_ABORTED.unpack_from(body, position))
                position += _ABORTED.size
                if flexible:
                    position = skip_tagged_fields(body, position)
            if version >= 11:
                position += 4  # preferred_read_replica
            size, position = _length(body, position, flexible)
            records = body[position:position + size] if size > 0 else b""
            if size > 0 and position + size > len(body):
                raise ValueError(f"records of {topic}-{index} run past the end of the response")
            position += max(size, 0)
            diverging = None
            if flexible:
                diverging, position = _partition_tags(body, position)
            answers[(topic, index)] = FetchedPartition(ErrorCode(code), high, stable, log_start,
                                                       tuple((p, f) for p, f in aborted), records, diverging)
        if flexible:
            position = skip_tagged_fields(body, position)
    return FetchAnswer(error, session_id, answers)


def _partition_tags(body: memoryview, position: int) -> tuple[tuple[int, int] | None, int]:
    """A partition's tagged fields: its diverging epoch, if given; the others are skipped."""
    diverging = None
    count, position = read_unsigned_varint(body, position)
    for _ in range(count):
        tag, position = read_unsigned_varint(body, position)
        size, position = read_unsigned_varint(body, position)
        if tag == _DIVERGING_EPOCH_TAG:
            diverging = _EPOCH_END_OFFSET.unpack_from(body, position)
        position += size
        if position > len(body):
            raise ValueError("a tagged field runs past the end of the response")
    return diverging, position


def _length(body: memoryview, position: int, flexible: bool) -> tuple[int, int]:
    """An array's or bytes' length (-1: null)."""
    if flexible:
        value, position = read_unsigned_varint(body, position)
        return value - 1, position
    return _INT32.unpack_from(body, position)[0], position + 4


def _string(body: memoryview, position: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        length, position = read_unsigned_varint(body, position)
        length -= 1
    else:
        (length,) = _INT16.unpack_from(body, position)
        position += 2
    return str(body[position:position + max(length, 0)], "utf-8"), position + max(length, 0)
