"""The records of consumer groups (KIP-848) in `__consumer_offsets`, in Kafka's formats.

Kafka's group coordinator keeps a consumer group as these records
(`group-coordinator/src/main/resources/common/message/ConsumerGroup*.json`); the key's
version says which record it is:

    key v3   ConsumerGroupMetadataKey              group      value: Epoch int32 (the group epoch)
    key v4   ConsumerGroupPartitionMetadataKey     group      value: Topics [TopicId uuid,
                                                   TopicName string, NumPartitions int32,
                                                   PartitionMetadata [Partition int32, Racks [string]]]
    key v5   ConsumerGroupMemberMetadataKey        group, member   value: InstanceId?, RackId?,
                                                   ClientId, ClientHost, SubscribedTopicNames [string],
                                                   SubscribedTopicRegex?, RebalanceTimeoutMs int32,
                                                   ServerAssignor?, tag 0: ClassicMemberMetadata?
                                                   {SessionTimeoutMs int32, SupportedProtocols
                                                   [Name string, Metadata bytes]}
    key v6   ConsumerGroupTargetAssignmentMetadataKey  group  value: AssignmentEpoch int32
    key v7   ConsumerGroupTargetAssignmentMemberKey    group, member  value: TopicPartitions
                                                   [TopicId uuid, Partitions [int32]]
    key v8   ConsumerGroupCurrentMemberAssignmentKey   group, member  value: MemberEpoch int32,
                                                   PreviousMemberEpoch int32, State int8,
                                                   AssignedPartitions [TopicPartitions],
                                                   PartitionsPendingRevocation [TopicPartitions]
    key v16  ConsumerGroupRegularExpressionKey     group, regex   value: Topics [string],
                                                   Version int64, Timestamp int64

Keys are non-flexible (int16 version, then int16-length strings). Values are an int16
version (0) and a flexible body: compact strings and arrays (unsigned varint of length
+ 1, 0 for null), 16-byte uuids, and a tagged-field section after every struct. A null
value is a tombstone. Tagged fields this coordinator does not know (added by newer
Kafkas, e.g. MetadataHash) are skipped when read.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from oncelog.coordinator.group.records import RecordFormatError, RecordReader

GROUP_METADATA_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_ASSIGNMENT_METADATA_KEY = 6
TARGET_ASSIGNMENT_MEMBER_KEY = 7
CURRENT_MEMBER_ASSIGNMENT_KEY = 8
REGULAR_EXPRESSION_KEY = 16
VALUE_VERSION = 0

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a consumer group record: its type (the key version), the group, and the
    member id or regular expression it is about (None for group-level records)."""

    version: int
    group: str
    member: str | None = None  # the member id (v5, v7, v8) or the regular expression (v16)


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadataValue:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadataValue, ...]


@dataclass(frozen=True, slots=True)
class ClassicMetadataValue:
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMetadataValue | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


@dataclass(frozen=True, slots=True)
class RegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


ConsumerGroupValue = (
    GroupEpochValue | PartitionMetadataValue | MemberMetadataValue | TargetAssignmentEpochValue
    | TargetAssignmentMemberValue | CurrentAssignmentValue | RegularExpressionValue
)

_VALUE_TYPES: dict[int, type] = {
    GROUP_METADATA_KEY: GroupEpochValue,
    PARTITION_METADATA_KEY: PartitionMetadataValue,
    MEMBER_METADATA_KEY: MemberMetadataValue,
    TARGET_ASSIGNMENT_METADATA_KEY: TargetAssignmentEpochValue,
    TARGET_ASSIGNMENT_MEMBER_KEY: TargetAssignmentMemberValue,
    CURRENT_MEMBER_ASSIGNMENT_KEY: CurrentAssignmentValue,
    REGULAR_EXPRESSION_KEY: RegularExpressionValue,
}
KEY_VERSIONS = frozenset(_VALUE_TYPES)
_KEYS_WITH_MEMBER = frozenset({MEMBER_METADATA_KEY, TARGET_ASSIGNMENT_MEMBER_KEY, CURRENT_MEMBER_ASSIGNMENT_KEY,
                               REGULAR_EXPRESSION_KEY})


# ---- writing ---------------------------------------------------------------------------


class _Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray(_INT16.pack(VALUE_VERSION))

    def uvarint(self, value: int) -> _Writer:
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)
        return self

    def int8(self, value: int) -> _Writer:
        self.out += _INT8.pack(value)
        return self

    def int32(self, value: int) -> _Writer:
        self.out += _INT32.pack(value)
        return self

    def int64(self, value: int) -> _Writer:
        self.out += _INT64.pack(value)
        return self

    def uuid(self, value: uuid.UUID) -> _Writer:
        self.out += value.bytes
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            return self.uvarint(0)
        encoded = value.encode()
        self.uvarint(len(encoded) + 1)
        self.out += encoded
        return self

    def bytes_(self, value: bytes) -> _Writer:
        self.uvarint(len(value) + 1)
        self.out += value
        return self

    def array_length(self, length: int) -> _Writer:
        return self.uvarint(length + 1)

    def no_tags(self) -> _Writer:
        return self.uvarint(0)

    def topic_partitions(self, value: TopicPartitions) -> _Writer:
        self.array_length(len(value))
        for topic_id, partitions in value:
            self.uuid(topic_id).array_length(len(partitions))
            for partition in partitions:
                self.int32(partition)
            self.no_tags()
        return self

    def done(self) -> bytes:
        return bytes(self.out)


def encode_key(key: ConsumerGroupKey) -> bytes:
    out = bytearray(_INT16.pack(key.version))
    names = [key.group] if key.version not in _KEYS_WITH_MEMBER else [key.group, key.member or ""]
    for name in names:
        encoded = name.encode()
        out += _INT16.pack(len(encoded)) + encoded
    return bytes(out)


def encode_value(value: ConsumerGroupValue) -> bytes:
    writer = _Writer()
    if isinstance(value, GroupEpochValue):
        writer.int32(value.epoch)
    elif isinstance(value, PartitionMetadataValue):
        writer.array_length(len(value.topics))
        for topic in value.topics:
            # PartitionMetadata (racks) is not used after Kafka 4.0: an empty list.
            writer.uuid(topic.topic_id).string(topic.name).int32(topic.num_partitions).array_length(0).no_tags()
    elif isinstance(value, MemberMetadataValue):
        writer.string(value.instance_id).string(value.rack_id).string(value.client_id).string(value.client_host)
        writer.array_length(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            writer.string(name)
        writer.string(value.subscribed_topic_regex).int32(value.rebalance_timeout_ms).string(value.server_assignor)
        if value.classic is None:
            return writer.no_tags().done()
        tagged = _Writer()
        tagged.out.clear()
        # A nullable struct starts with an int8: -1 null, 1 present.
        tagged.int8(1).int32(value.classic.session_timeout_ms).array_length(len(value.classic.supported_protocols))
        for name, metadata in value.classic.supported_protocols:
            tagged.string(name).bytes_(metadata).no_tags()
        tagged.no_tags()
        writer.uvarint(1).uvarint(0).uvarint(len(tagged.out))  # one tagged field: tag 0, its size
        writer.out += tagged.out
        return writer.done()
    elif isinstance(value, TargetAssignmentEpochValue):
        writer.int32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        writer.topic_partitions(value.partitions)
    elif isinstance(value, CurrentAssignmentValue):
        writer.int32(value.member_epoch).int32(value.previous_member_epoch).int8(value.state)
        writer.topic_partitions(value.assigned).topic_partitions(value.pending_revocation)
    elif isinstance(value, RegularExpressionValue):
        writer.array_length(len(value.topics))
        for name in value.topics:
            writer.string(name)
        writer.int64(value.version).int64(value.timestamp_ms)
    else:
        raise TypeError(f"not a consumer group record value: {value!r}")
    return writer.no_tags().done()


# ---- reading ---------------------------------------------------------------------------


class _Reader(RecordReader):
    """RecordReader with the flexible versions' compact strings, bytes and arrays."""

    __slots__ = ()

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("unsigned varint longer than 5 bytes")

    def int8(self) -> int:
        return _INT8.unpack(self._take(1))[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def nullable_string(self) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            return None
        try:
            return self._take(length).decode()
        except UnicodeDecodeError as error:
            raise RecordFormatError(f"string is not UTF-8: {error}") from None

    def bytes_(self) -> bytes:
        length = self.uvarint() - 1
        return b"" if length < 0 else self._take(length)

    def array_length(self) -> int:
        return max(self.uvarint() - 1, 0)

    def tags(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self._take(self.uvarint())
        return fields

    def topic_partitions(self) -> TopicPartitions:
        result = []
        for _ in range(self.array_length()):
            topic_id = self.uuid()
            partitions = tuple(self.int32() for _ in range(self.array_length()))
            self.tags()
            result.append((topic_id, partitions))
        return tuple(result)


def decode_key(data: bytes) -> ConsumerGroupKey | None:
    """The key of a consumer group record, or None for other record types."""
    reader = _Reader(data)
    version = reader.int16()
    if version not in KEY_VERSIONS:
        return None

    def string() -> str:
        length = reader.int16()
        try:
            return reader._take(length).decode()
        except UnicodeDecodeError as error:
            raise RecordFormatError(f"string is not UTF-8: {error}") from None

    group = string()
    return ConsumerGroupKey(version, group, string() if version in _KEYS_WITH_MEMBER else None)


def decode_value(key: ConsumerGroupKey, data: bytes) -> ConsumerGroupValue:
    reader = _Reader(data)
    version = reader.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unsupported value version {version} of consumer group record type {key.version}")
    kind = key.version
    value: ConsumerGroupValue
    if kind == GROUP_METADATA_KEY:
        value = GroupEpochValue(reader.int32())
    elif kind == PARTITION_METADATA_KEY:
        topics = []
        for _ in range(reader.array_length()):
            topic_id, name, partitions = reader.uuid(), reader.string(), reader.int32()
            for _ in range(reader.array_length()):  # racks per partition: not used
                reader.int32()
                for _ in range(reader.array_length()):
                    reader.string()
                reader.tags()
            reader.tags()
            topics.append(TopicMetadataValue(topic_id, name, partitions))
        value = PartitionMetadataValue(tuple(topics))
    elif kind == MEMBER_METADATA_KEY:
        instance_id, rack_id = reader.nullable_string(), reader.nullable_string()
        client_id, client_host = reader.string(), reader.string()
        names = tuple(reader.string() for _ in range(reader.array_length()))
        regex, rebalance_timeout, assignor = reader.nullable_string(), reader.int32(), reader.nullable_string()
        classic = None
        tagged = reader.tags().get(0)
        if tagged is not None:
            classic = _classic_metadata(tagged)
        return MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout,
                                   assignor, classic)
    elif kind == TARGET_ASSIGNMENT_METADATA_KEY:
        value = TargetAssignmentEpochValue(reader.int32())
    elif kind == TARGET_ASSIGNMENT_MEMBER_KEY:
        value = TargetAssignmentMemberValue(reader.topic_partitions())
    elif kind == CURRENT_MEMBER_ASSIGNMENT_KEY:
        value = CurrentAssignmentValue(reader.int32(), reader.int32(), reader.int8(), reader.topic_partitions(),
                                       reader.topic_partitions())
    else:  # REGULAR_EXPRESSION_KEY
        topics_ = tuple(reader.string() for _ in range(reader.array_length()))
        value = RegularExpressionValue(topics_, reader.int64(), reader.int64())
    reader.tags()
    return value


def _classic_metadata(data: bytes) -> ClassicMetadataValue | None:
    reader = _Reader(data)
    if reader.int8() < 0:  # a null struct
        return None
    session_timeout = reader.int32()
    protocols = []
    for _ in range(reader.array_length()):
        name, metadata = reader.string(), reader.bytes_()
        reader.tags()
        protocols.append((name, metadata))
    return ClassicMetadataValue(session_timeout, tuple(protocols))
