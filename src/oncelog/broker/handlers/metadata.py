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
- Authorization, as Kafka's KafkaApis: a topic needs Topic DESCRIBE. Listing every topic
  leaves the others out; a topic asked for by name gets TOPIC_AUTHORIZATION_FAILED
  whether it exists or not (by id, the same with a null name: ids are not secret).
  Auto-creating a topic also needs Cluster CREATE or Topic CREATE, else
  TOPIC_AUTHORIZATION_FAILED.
- v8+ `include_topic_authorized_operations`: each topic's operations for the principal
  (every topic operation without an authorizer); refused and unknown-id entries keep
  AUTHORIZED_OPERATIONS_OMITTED, as in Kafka. v8-v10
  `include_cluster_authorized_operations`: the cluster's operations, 0 without Cluster
  DESCRIBE.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.topics import TopicRequestError
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_NAME, AclOperation, ResourceType
from oncelog.storage.errors import InvalidTopicError
from oncelog.storage.manager import validate_topic_name

TOPIC = ResourceType.TOPIC


@api(3, "Metadata", range(0, 13))
async def handle(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    make = ctx.response.make
    topics = broker.logs.topics()

    list_all = request.topics is None or (ctx.version == 0 and not request.topics)
    wanted: Iterable[tuple[Any, Any]]  # (name, topic id) as the request gives them (the request is untyped)
    if list_all:
        wanted = [(name, None) for name in sorted(topics)]
    else:
        wanted = ((getattr(t, "name", None), _topic_id(t)) for t in request.topics)
    auto_create = broker.config["auto.create.topics.enable"] and getattr(
        request, "allow_auto_topic_creation", True
    )
    with_operations = getattr(request, "include_topic_authorized_operations", False)

    def operations(name: str) -> int:
        return ctx.authorized_operations(TOPIC, name) if with_operations else AUTHORIZED_OPERATIONS_OMITTED

    results = []
    for name, topic_id in wanted:
        await ctx.pace()
        if name is None and topic_id is not None:
            info = broker.logs.topic_by_id(topic_id)
            if info is None:
                results.append(_topic_error(make, ErrorCode.unknown_topic_id, None, topic_id))
                continue
            if not ctx.authorize(AclOperation.DESCRIBE, TOPIC, info.name):
                results.append(_topic_error(make, ErrorCode.topic_authorization_failed, None, topic_id))
                continue
        else:
            # Refused before looking the topic up: the answer must not tell whether it exists.
            if not ctx.authorize(AclOperation.DESCRIBE, TOPIC, name):
                if not list_all:
                    results.append(_topic_error(make, ErrorCode.topic_authorization_failed, name, None))
                continue
            info = topics.get(name)
        if info is None and auto_create:
            if not (ctx.authorize_cluster(AclOperation.CREATE) or ctx.authorize(AclOperation.CREATE, TOPIC, name)):
                results.append(_topic_error(make, ErrorCode.topic_authorization_failed, name, None,
                                            is_internal=name in INTERNAL_TOPICS))
                continue
            if name not in INTERNAL_TOPICS:
                try:
                    info = await broker.topics.create(name, -1, -1, {})
                except TopicRequestError as error:
                    code = error.code
                    if code == ErrorCode.topic_already_exists:
                        info = broker.logs.topics().get(name)
                    else:
                        results.append(_topic_error(make, code, name, None, operations(name)))
                        continue
        if info is None:
            results.append(_topic_error(make, _missing_topic_code(name), name, None, operations(name)))
            continue
        results.append(_topic(ctx, info, operations(info.name)))

    return make(
        "MetadataResponse",
        throttle_time=NO_THROTTLE,
        brokers=tuple(make("MetadataResponseBroker", node_id=b.node_id, host=b.host, port=b.port, rack=None)
                      for b in broker.leadership.live_brokers(ctx.listener)),
        cluster_id=broker.cluster_id,
        controller_id=broker.leadership.controller_id,
        topics=tuple(results),
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _cluster_operations(ctx: RequestContext, request) -> int:
    """v8-v10: the cluster's authorized operations when asked for; 0 without Cluster
    DESCRIBE, as Kafka answers."""
    if not getattr(request, "include_cluster_authorized_operations", False):
        return AUTHORIZED_OPERATIONS_OMITTED
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


def _topic(ctx: RequestContext, info, operations: int) -> object:
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
        topic_authorized_operations=operations,
    )


def _topic_error(make, code: ErrorCode, name, topic_id, operations: int = AUTHORIZED_OPERATIONS_OMITTED, *,
                 is_internal: bool = False) -> object:
    return make(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=is_internal,
        partitions=(),
        topic_authorized_operations=operations,
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
