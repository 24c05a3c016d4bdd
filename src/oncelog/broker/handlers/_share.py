"""Shared by ShareFetch and ShareAcknowledge: the request's partitions by name (its
topic ids resolved, its topics authorized), its acknowledgement batches, the share
session it continues, and the answer's partition entries."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from oncelog.broker.dispatch import RequestContext
from oncelog.coordinator.share.partition import Acknowledgement
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@dataclass(slots=True)
class RequestPartitions:
    """A request's partitions: those it may use, by name, and those refused."""

    usable: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)
    acknowledgements: dict[TopicPartition, tuple[uuid.UUID, list[Acknowledgement]]] = field(default_factory=dict)
    refused: dict[tuple[uuid.UUID | None, int], ErrorCode] = field(default_factory=dict)


async def partitions_of(ctx: RequestContext, topics, *, batches_field: str = "acknowledgement_batches"
                        ) -> RequestPartitions:
    """The request's topics (ShareFetch's FetchTopic or ShareAcknowledge's
    AcknowledgeTopic): each topic id resolved (UNKNOWN_TOPIC_ID), READ on each topic
    (TOPIC_AUTHORIZATION_FAILED), each partition known to this broker
    (UNKNOWN_TOPIC_OR_PARTITION) and led here (NOT_LEADER_OR_FOLLOWER)."""
    found = RequestPartitions()
    logs = ctx.broker.logs
    async for topic in ctx.paced(topics):
        info = logs.topic_by_id(topic.topic_id) if topic.topic_id is not None else None
        code = ErrorCode.none
        if info is None:
            code = ErrorCode.unknown_topic_id
        elif not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, info.name):
            code = ErrorCode.topic_authorization_failed
        async for partition in ctx.paced(topic.partitions):
            index = partition.partition_index
            if code is not ErrorCode.none or info is None:
                found.refused[(topic.topic_id, index)] = code
                continue
            leader_code, _epoch = ctx.broker.leadership.leader_epoch(info.name, index)
            if leader_code is not ErrorCode.none:
                found.refused[(topic.topic_id, index)] = leader_code
                continue
            tp = (info.name, index)
            found.usable[tp] = info.topic_id
            batches = getattr(partition, batches_field, ())
            if batches:
                acknowledgements = found.acknowledgements.setdefault(tp, (info.topic_id, []))[1]
                acknowledgements.extend(Acknowledgement(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                                        for b in batches)
    return found


def has_acknowledgements(topics, batches_field: str = "acknowledgement_batches") -> bool:
    return any(getattr(partition, batches_field, ()) for topic in topics for partition in topic.partitions)


def leader_and_epoch(ctx: RequestContext, topic: str | None, partition: int) -> object:
    make = ctx.response.make
    if topic is None:
        return make("LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1)
    leader = ctx.broker.leadership.leader_of(topic, partition)
    _code, epoch = ctx.broker.leadership.leader_epoch(topic, partition)
    return make("LeaderIdAndEpoch", leader_id=-1 if leader is None else leader, leader_epoch=epoch)


def by_topic(entries: dict[tuple[uuid.UUID | None, int], object]) -> list[tuple[uuid.UUID | None, list[object]]]:
    """(topic id, its partition entries) in the order the entries came."""
    topics: dict[uuid.UUID | None, list[object]] = defaultdict(list)
    for (topic_id, _partition), entry in entries.items():
        topics[topic_id].append(entry)
    return list(topics.items())


def request_refusal(ctx: RequestContext, request) -> tuple[ErrorCode, str | None] | None:
    """A ShareFetch's or ShareAcknowledge's error for the whole request, as Kafka's
    KafkaApis checks it: Group READ, then a group id and a member id; None to go on."""
    group_id = request.group_id or ""
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    if not group_id:
        return ErrorCode.invalid_group_id, "The group id is empty."
    if not request.member_id:
        return ErrorCode.invalid_request, "The member id is empty."
    return None
