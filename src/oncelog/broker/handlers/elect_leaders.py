"""ElectLeaders (key 43), v0-v2.

- Every partition has one replica, this broker, which leads it: a preferred (0) or
  unclean (1) election is never needed. As Kafka's controller answers: each named
  partition gets ELECTION_NOT_NEEDED, a missing topic or partition
  UNKNOWN_TOPIC_OR_PARTITION; with `topic_partitions` null (every partition) each topic
  is listed with no partition results, since partitions that already have their
  leader are left out.
- v0 has no election type (preferred only) and no top-level error code.
- Needs Cluster ALTER (Kafka's controller): else the top-level error is
  CLUSTER_AUTHORIZATION_FAILED and so is every partition asked for (none when all were).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation

ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."


@api(43, "ElectLeaders", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.ALTER):
        refused = ErrorCode.cluster_authorization_failed
        return make("ElectLeadersResponse", throttle_time=NO_THROTTLE, error_code=refused,
                    replica_election_results=tuple([
                        make("ReplicaElectionResult", topic=wanted.topic, partition_result=tuple([
                            make("PartitionResult", partition_id=index, error_code=refused,
                                 error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
                            async for index in ctx.paced(wanted.partitions)]))
                        async for wanted in ctx.paced(request.topic_partitions or ())]))
    topics = ctx.broker.logs.topics()
    results = []
    if request.topic_partitions is None:
        for name in sorted(topics):
            await ctx.pace()
            results.append(make("ReplicaElectionResult", topic=name, partition_result=()))
    else:
        for wanted in request.topic_partitions:
            await ctx.pace()
            info = topics.get(wanted.topic)
            partitions = []
            for index in wanted.partitions:
                await ctx.pace()
                if info is None:
                    code, message = ErrorCode.unknown_topic_or_partition, f"No such topic as {wanted.topic}"
                elif not 0 <= index < info.num_partitions:
                    code, message = ErrorCode.unknown_topic_or_partition, f"No such partition as {wanted.topic}-{index}"
                else:
                    code, message = ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
                partitions.append(make("PartitionResult", partition_id=index, error_code=code, error_message=message))
            results.append(make("ReplicaElectionResult", topic=wanted.topic, partition_result=tuple(partitions)))
    return make("ElectLeadersResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                replica_election_results=tuple(results))
