"""ListPartitionReassignments (key 46), v0.

- A single node never reassigns a partition (see AlterPartitionReassignments), so no
  reassignment is ever in progress: the answer lists no topics, whether `topics` is
  null (all) or names topics, existing or not, as Kafka's controller answers then.
- Needs Cluster DESCRIBE (Kafka's controller): else the top-level error is
  CLUSTER_AUTHORIZATION_FAILED, and the partitions asked for are listed back with no
  replicas, as Kafka's error response.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation


@api(46, "ListPartitionReassignments", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return make("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", topics=tuple([
                        make("OngoingTopicReassignment", name=topic.name, partitions=tuple([
                            make("OngoingPartitionReassignment", partition_index=index)
                            async for index in ctx.paced(topic.partition_indexes)]))
                        async for topic in ctx.paced(request.topics or ())]))
    return make("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, topics=())
