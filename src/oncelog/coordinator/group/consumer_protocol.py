"""The consumer embedded protocol (protocol type "consumer") as the coordinator reads and
writes it: a classic member's subscription (its JoinGroup protocol metadata) and the
assignment a SyncGroup hands out.

    ConsumerProtocolSubscription: version int16, topics [string], userData nullable bytes,
    ownedPartitions [topic string, partitions [int32]] (v1+), generationId int32 (v2+),
    rackId nullable string (v3+)
    ConsumerProtocolAssignment: version int16, assignedPartitions [topic string,
    partitions [int32]], userData nullable bytes (the same in every version)

Classic groups only need the topic list (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC, expiry
of offsets of topics nobody subscribes to); a consumer group with classic members
(KIP-848's online migration) reads the whole subscription and writes their assignments,
as Kafka's group coordinator does. Encoding is Kafka's non-flexible one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

CONSUMER_PROTOCOL_TYPE = "consumer"
MAX_ASSIGNMENT_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """Metadata that is not a ConsumerProtocolSubscription."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    __slots__ = ("data", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, size: int) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise ConsumerProtocolError("the consumer protocol metadata ends early")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        try:
            return self._take(length).decode()
        except UnicodeDecodeError as error:
            raise ConsumerProtocolError(f"a string is not UTF-8: {error}") from None

    def bytes_(self) -> bytes | None:
        length = self.int32()
        return None if length < 0 else self._take(length)

    @property
    def at_end(self) -> bool:
        return self.position >= len(self.data)


def parse_subscription(metadata: bytes) -> Subscription:
    """The ConsumerProtocolSubscription; ConsumerProtocolError when it does not parse.
    Fields a newer version added are read only when present."""
    reader = _Reader(metadata)
    version = reader.int16()
    topics = tuple(reader.string() or "" for _ in range(max(reader.int32(), 0)))
    if reader.at_end:
        return Subscription(version, topics)
    reader.bytes_()  # user data: the client's assignor's business
    owned: list[tuple[str, tuple[int, ...]]] = []
    generation, rack = -1, None
    if version >= 1 and not reader.at_end:
        for _ in range(max(reader.int32(), 0)):
            topic = reader.string() or ""
            owned.append((topic, tuple(reader.int32() for _ in range(max(reader.int32(), 0)))))
    if version >= 2 and not reader.at_end:
        generation = reader.int32()
    if version >= 3 and not reader.at_end:
        rack = reader.string()
    return Subscription(version, topics, tuple(owned), generation, rack)


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics in a ConsumerProtocolSubscription, or None if it does not parse."""
    try:
        return frozenset(parse_subscription(metadata).topics)
    except (ConsumerProtocolError, struct.error):
        return None


def subscription_version(metadata: bytes) -> int:
    try:
        return _INT16.unpack_from(metadata, 0)[0]
    except struct.error:
        return 0


def encode_assignment(partitions: Iterable[tuple[str, Iterable[int]]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (no user data), in the member's subscription version
    (capped at the newest one), as Kafka's prepareAssignment writes it."""
    entries = sorted((topic, sorted(parts)) for topic, parts in partitions)
    out = bytearray(_INT16.pack(min(max(version, 0), MAX_ASSIGNMENT_VERSION)))
    out += _INT32.pack(len(entries))
    for topic, parts in entries:
        encoded = topic.encode()
        out += _INT16.pack(len(encoded)) + encoded + _INT32.pack(len(parts))
        for partition in parts:
            out += _INT32.pack(partition)
    out += _INT32.pack(-1)
    return bytes(out)


def parse_assignment(data: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The assigned partitions of a ConsumerProtocolAssignment (empty bytes: none)."""
    if not data:
        return ()
    reader = _Reader(data)
    reader.int16()
    return tuple(
        (reader.string() or "", tuple(reader.int32() for _ in range(max(reader.int32(), 0))))
        for _ in range(max(reader.int32(), 0))
    )
