"""The bits of the consumer embedded protocol the coordinator reads (protocol type
"consumer"): the topics a member subscribes to, from its JoinGroup protocol metadata.

    ConsumerProtocolSubscription: version int16, topics [string], userData nullable bytes,
    ownedPartitions (v1+), generationId (v2+), rackId (v3+)

Only the topic list is needed (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC, expiry of
offsets of topics nobody subscribes to). Assignment and the rest stay the clients' business.
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics in a ConsumerProtocolSubscription, or None if it does not parse."""
    try:
        position = 2  # version: every version starts with the topic list
        (count,) = _INT32.unpack_from(metadata, position)
        position += 4
        topics = []
        for _ in range(count):
            (length,) = _INT16.unpack_from(metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position : position + length].decode())
            position += length
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None
