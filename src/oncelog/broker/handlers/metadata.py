"""Metadata (key 3), v0-v12.

- Lists the live brokers and, for the topics asked for (all of them when the list is
  null, or empty in v0), their partitions.
- Auto-creates a missing topic when `auto.create.topics.enable` is true and the request
  allows it (v4+ `allow_auto_topic_creation`; always allowed below v4), with
  `num.partitions` partitions. The created topic is returned in the same response.
- A missing topic that is not created gets UNKNOWN_TOPIC_OR_PARTITION, or
  INVALID_TOPIC_EXCEPTION when its name is not a legal topic name (with auto-creation
  on or off), as Kafka answers.
- Topics named by id (v10+) that do not exist get UNKNOWN_TOPIC_ID.
- Standalone, this broker is the only one and leads every partition at leader epoch 0.
  In cluster mode brokers, controller, leaders, leader epochs, replicas, ISR and offline
  replicas come from the cluster metadata; a partition without a leader has
  LEADER_NOT_AVAILABLE and leader -1.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.topics import TopicRequestError
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.storage.errors import InvalidTopicError
from oncelog.storage.manager import validate_topic_name

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@api(3, "Metadata", range(0, 13))
async def handle(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    make = ctx.response.make
    topics = broker.logs.topics()

    wanted: list[tuple[Any, Any]]  # (name, topic id) as the request gives them (the request is untyped)
    if request.topics is None or (ctx.version == 0 and not request.topics):
        wanted = [(name, None) for name in sorted(topics)]
    else:
        wanted = [(getattr(t, "name", None), _topic_id(t)) for t in request.topics]
    auto_create = broker.config["auto.create.topics.enable"] and getattr(
        request, "allow_auto_topic_creation", True
    )

    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            info = broker.logs.topic_by_id(topic_id)
            if info is None:
                results.append(_topic_error(make, ErrorCode.unknown_topic_id, None, topic_id))
                continue
        else:
            info = topics.get(name)
        if info is None and auto_create and name not in INTERNAL_TOPICS:
            try:
                info = await broker.topics.create(name, -1, -1, {})
            except TopicRequestError as error:
                code = error.code
                if code == ErrorCode.topic_already_exists:
                    info = broker.logs.topics().get(name)
                else:
                    results.append(_topic_error(make, code, name, None))
                    continue
        if info is None:
            results.append(_topic_error(make, _missing_topic_code(name), name, None))
            continue
        results.append(_topic(ctx, info))

    return make(
        "MetadataResponse",
        throttle_time=NO_THROTTLE,
        brokers=tuple(make("MetadataResponseBroker", node_id=b.node_id, host=b.host, port=b.port, rack=None)
                      for b in broker.leadership.live_brokers(ctx.listener)),
        cluster_id=broker.cluster_id,
        controller_id=broker.leadership.controller_id,
        topics=tuple(results),
    )


def _topic(ctx: RequestContext, info) -> object:
    make = ctx.response.make
    describe = ctx.broker.leadership.describe_partition
    partitions = []
    for index in range(info.num_partitions):
        view = describe(info.name, index)
        partitions.append(make(
            "MetadataResponsePartition",
            error_code=ErrorCode.none if view.leader >= 0 else ErrorCode.leader_not_available,
            partition_index=index,
            leader_id=view.leader,
            leader_epoch=view.leader_epoch,
            replica_nodes=view.replicas,
            isr_nodes=view.isr,
            offline_replicas=view.offline,
        ))
    return make(
        "MetadataResponseTopic",
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=tuple(partitions),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _topic_error(make, code: ErrorCode, name, topic_id) -> object:
    return make(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _missing_topic_code(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


def _topic_id(requested):
    """The requested topic id, or None for the all-zero id clients send with a name."""
    topic_id = getattr(requested, "topic_id", None)
    return topic_id if topic_id is not None and topic_id.int else None
