"""AlterPartitionReassignments (key 45), v0-v1.

- Every partition's replica list is [this broker], so the only assignment there is to
  move to is the current one: as Kafka's controller answers, [node id] is NONE (nothing
  to do), an empty list or one naming another broker INVALID_REPLICA_ASSIGNMENT (a
  broker named twice too), null (cancel) NO_REASSIGNMENT_IN_PROGRESS, a missing topic
  or partition UNKNOWN_TOPIC_OR_PARTITION, each with Kafka's message.
- v1 echoes `allow_replication_factor_change`; no valid assignment here changes the
  replication factor.
- Needs Cluster ALTER (Kafka's controller): else the top-level error is
  CLUSTER_AUTHORIZATION_FAILED and so is every partition's.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation

NO_REASSIGNMENT_MESSAGE = "No partition reassignment is in progress."
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."


@api(45, "AlterPartitionReassignments", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    topics = ctx.broker.logs.topics()
    node = ctx.broker.node_id
    allowed = ctx.authorize_cluster(AclOperation.ALTER)
    refused = (ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
    responses = []
    for topic in request.topics:
        await ctx.pace()
        info = topics.get(topic.name)
        partitions = []
        for wanted in topic.partitions:
            await ctx.pace()
            code, message = _alter(topic.name, info, wanted, node) if allowed else refused
            partitions.append(make("ReassignablePartitionResponse", partition_index=wanted.partition_index,
                                   error_code=code, error_message=message))
        responses.append(make("ReassignableTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return make(
        "AlterPartitionReassignmentsResponse",
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=getattr(request, "allow_replication_factor_change", True),
        error_code=ErrorCode.none if allowed else refused[0],
        error_message=None if allowed else refused[1],
        responses=tuple(responses),
    )


def _alter(name: str, info, wanted, node: int) -> tuple[ErrorCode, str | None]:
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {name}."
    if not 0 <= wanted.partition_index < info.num_partitions:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {name}:{wanted.partition_index}."
    if wanted.replicas is None:
        return ErrorCode.no_reassignment_in_progress, NO_REASSIGNMENT_MESSAGE
    if not wanted.replicas:
        return ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(wanted.replicas):
        if broker_id != node:
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
            )
        if broker_id == previous:
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        previous = broker_id
    return ErrorCode.none, None
