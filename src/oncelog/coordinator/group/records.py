"""The records the group coordinator keeps in `__consumer_offsets`, in Kafka's own formats.

Each record key and value starts with an int16 version. The key's version says which
record it is, as in Kafka's group-coordinator message schemas
(`group-coordinator/src/main/resources/common/message/*.json`):

    key version 0, 1   OffsetCommitKey     group string, topic string, partition int32
    key version 2      GroupMetadataKey    group string
    other versions     records of newer group types (KIP-848, share, streams): skipped

Values (a null value is a tombstone: the offset or the group is deleted):

    OffsetCommitValue v3       offset int64, leaderEpoch int32, metadata string,
                               commitTimestamp int64
      v1 (written for an explicit retention) offset int64, metadata string,
                               commitTimestamp int64, expireTimestamp int64
      (read also: v0 = v1 without expireTimestamp; v2 = v0)
    GroupMetadataValue v3      protocolType string, generation int32,
                               protocol nullable string, leader nullable string,
                               currentStateTimestamp int64, members [MemberMetadata]
      MemberMetadata v3        memberId string, groupInstanceId nullable string,
                               clientId string, clientHost string, rebalanceTimeout int32,
                               sessionTimeout int32, subscription bytes, assignment bytes
      (read also: v0 without currentStateTimestamp, groupInstanceId and rebalanceTimeout;
       v1 adds rebalanceTimeout; v2 adds currentStateTimestamp)

Encoding is Kafka's non-flexible one: strings as int16 length + UTF-8 (-1 for null),
bytes as int32 length, arrays as int32 count. oncelog writes key v1 / v2 and value v3
(v1 with an expiry), what Kafka writes, so Kafka's tools can read an oncelog
`__consumer_offsets`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value in `__consumer_offsets` that does not decode."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1 when the client did not say
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # only value v1 carries it


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadataValue, ...]


# ---- writing ---------------------------------------------------------------------------


class _Writer:
    __slots__ = ("out",)

    def __init__(self, version: int) -> None:
        self.out = bytearray(_INT16.pack(version))

    def int32(self, value: int) -> _Writer:
        self.out += _INT32.pack(value)
        return self

    def int64(self, value: int) -> _Writer:
        self.out += _INT64.pack(value)
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            self.out += _INT16.pack(-1)
        else:
            encoded = value.encode()
            self.out += _INT16.pack(len(encoded)) + encoded
        return self

    def bytes_(self, value: bytes) -> _Writer:
        self.out += _INT32.pack(len(value)) + value
        return self

    def done(self) -> bytes:
        return bytes(self.out)


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return _Writer(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic).int32(key.partition).done()


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return _Writer(GROUP_METADATA_KEY_VERSION).string(key.group).done()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp_ms >= 0:
        # An explicit retention (OffsetCommit v2-v4) needs v1, the only version with
        # expireTimestamp; it has no leader epoch (those requests carry none). Kafka does the same.
        return (
            _Writer(OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION)
            .int64(value.offset)
            .string(value.metadata)
            .int64(value.commit_timestamp_ms)
            .int64(value.expire_timestamp_ms)
            .done()
        )
    return (
        _Writer(OFFSET_COMMIT_VALUE_VERSION)
        .int64(value.offset)
        .int32(value.leader_epoch)
        .string(value.metadata)
        .int64(value.commit_timestamp_ms)
        .done()
    )


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    writer = (
        _Writer(GROUP_METADATA_VALUE_VERSION)
        .string(value.protocol_type)
        .int32(value.generation)
        .string(value.protocol)
        .string(value.leader)
        .int64(value.current_state_timestamp_ms)
        .int32(len(value.members))
    )
    for member in value.members:
        (
            writer.string(member.member_id)
            .string(member.group_instance_id)
            .string(member.client_id)
            .string(member.client_host)
            .int32(member.rebalance_timeout_ms)
            .int32(member.session_timeout_ms)
            .bytes_(member.subscription)
            .bytes_(member.assignment)
        )
    return writer.done()


# ---- reading ---------------------------------------------------------------------------


class RecordReader:
    """Fields of a non-flexible record, in order (consumer_records.py extends it with the
    flexible versions' compact fields)."""

    __slots__ = ("data", "position")

    def __init__(self, data: bytes, position: int = 0) -> None:
        self.data = data
        self.position = position

    def _take(self, size: int) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise RecordFormatError(f"field of {size} bytes runs past the end of a {len(self.data)}-byte record")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        try:
            return self._take(length).decode()
        except UnicodeDecodeError as error:
            raise RecordFormatError(f"string is not UTF-8: {error}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null in a non-nullable string field")
        return value

    def bytes_(self) -> bytes:
        length = self.int32()
        return b"" if length == -1 else self._take(length)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a `__consumer_offsets` record; None for record types this coordinator
    does not own (newer group types)."""
    reader = RecordReader(data)
    version = reader.int16()
    if version in (0, 1):
        return OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string())
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = RecordReader(data)
    version = reader.int16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unsupported OffsetCommitValue version {version}")
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.int64()
    expire_timestamp = reader.int64() if version == 1 else -1
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = RecordReader(data)
    version = reader.int16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    current_state_timestamp = reader.int64() if version >= 2 else -1
    count = reader.int32()
    members = []
    for _ in range(max(count, 0)):
        member_id = reader.string()
        group_instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        session_timeout_first = version == 0
        rebalance_timeout = reader.int32() if not session_timeout_first else -1
        session_timeout = reader.int32()
        if session_timeout_first:
            rebalance_timeout = session_timeout  # v0 had one timeout for both, as Kafka reads it
        members.append(MemberMetadataValue(
            member_id, group_instance_id, client_id, client_host, rebalance_timeout, session_timeout,
            reader.bytes_(), reader.bytes_(),
        ))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))
