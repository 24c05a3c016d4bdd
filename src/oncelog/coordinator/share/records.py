"""The records of `__share_group_state`: one per share partition, keyed by (group, topic
id, partition), whose value is the partition's whole persisted state (start offset and
in-flight batches, the state epoch, the writer's leader epoch); a tombstone (no value)
deletes it.

Kafka's share coordinator writes ShareSnapshot and ShareUpdate records in its own schema;
oncelog writes one full snapshot per change, as JSON with a version, since no tool reads
this topic but the broker itself. A snapshot is small: the window holds at most
group.share.partition.max.record.locks records, stored as runs.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from oncelog.coordinator.share.partition import RecordState, ShareState, StateBatch

VERSION = 0


@dataclass(frozen=True, slots=True, order=True)
class StateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def routing_key(self) -> str:
        """What decides the `__share_group_state` partition: Kafka's "group:topicId:partition"."""
        return f"{self.group_id}:{self.topic_id}:{self.partition}"


def encode_key(key: StateKey) -> bytes:
    return json.dumps({"v": VERSION, "group": key.group_id, "topic_id": str(key.topic_id),
                       "partition": key.partition}, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class StoredState:
    """A share partition's state as the share coordinator keeps it: with the leader epoch
    of the partition leader that wrote it last (or read it to take it over), below which
    writes are fenced."""

    state: ShareState
    leader_epoch: int = -1


def encode_value(stored: StoredState) -> bytes:
    state = stored.state
    return json.dumps({
        "v": VERSION, "state_epoch": state.state_epoch, "leader_epoch": stored.leader_epoch,
        "start": state.start_offset,
        "batches": [[b.first, b.last, int(b.state), b.delivery_count] for b in state.batches],
    }, separators=(",", ":")).encode()


def decode_key(data: bytes) -> StateKey:
    document = json.loads(data)
    if document.get("v") != VERSION:
        raise ValueError(f"unknown share state key version {document.get('v')!r}")
    return StateKey(str(document["group"]), uuid.UUID(document["topic_id"]), int(document["partition"]))


def decode_value(data: bytes) -> StoredState:
    document = json.loads(data)
    if document.get("v") != VERSION:
        raise ValueError(f"unknown share state value version {document.get('v')!r}")
    batches = tuple(StateBatch(int(first), int(last), RecordState(int(state)), int(count))
                    for first, last, state, count in document["batches"])
    return StoredState(ShareState(int(document["start"]), batches, int(document.get("state_epoch", 0))),
                       int(document.get("leader_epoch", -1)))
