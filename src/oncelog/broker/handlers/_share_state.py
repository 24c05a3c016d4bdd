"""Shared by the share coordinator's inter-broker APIs (ReadShareGroupState,
WriteShareGroupState, DeleteShareGroupState): the key each request partition names,
and the authorization Kafka's KafkaApis makes of them (CLUSTER_ACTION on the cluster:
only brokers send them)."""

from __future__ import annotations

from collections.abc import Mapping

from oncelog.broker.dispatch import RequestContext
from oncelog.coordinator.share.records import StateKey
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import AclOperation


def refusal(ctx: RequestContext, group_id: str) -> ErrorCode:
    """CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION, INVALID_GROUP_ID for an empty
    group id, else NONE."""
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ErrorCode.cluster_authorization_failed
    return ErrorCode.invalid_group_id if not group_id else ErrorCode.none


def key_of(group_id: str, topic_id, partition: int) -> StateKey | None:
    return None if topic_id is None else StateKey(group_id, topic_id, partition)


async def each_partition(ctx: RequestContext, request, topic_entity: str, serve, *,
                         refused_fields: Mapping[str, object] | None = None) -> tuple:
    """The request's topics' partitions, each answered (a "PartitionResult") with what
    `serve(key, partition_data)` gives, (code, extra fields), or with the request's
    refusal or UNKNOWN_TOPIC_ID and `refused_fields`; grouped in `topic_entity`s."""
    make = ctx.response.make
    refused = refusal(ctx, request.group_id)
    results = []
    async for topic in ctx.paced(request.topics):
        partitions = []
        async for data in ctx.paced(topic.partitions):
            key = key_of(request.group_id, topic.topic_id, data.partition)
            fields = dict(refused_fields or {})
            if refused is not ErrorCode.none:
                code = refused
            elif key is None:
                code = ErrorCode.unknown_topic_id
            else:
                code, served = await serve(key, data)
                fields.update(served)
            partitions.append(make("PartitionResult", partition=data.partition, error_code=code, error_message=None,
                                   **fields))
        results.append(make(topic_entity, topic_id=topic.topic_id, partitions=tuple(partitions)))
    return tuple(results)
