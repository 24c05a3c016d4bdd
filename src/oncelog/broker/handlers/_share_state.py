"""Shared by the share coordinator's inter-broker APIs (ReadShareGroupState,
WriteShareGroupState, DeleteShareGroupState): the key each request partition names,
and the authorization Kafka's KafkaApis makes of them (CLUSTER_ACTION on the cluster:
only brokers send them)."""

from __future__ import annotations

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
