"""ElectLeaders (key 43), v0-v2.

- PREFERRED (0): each named partition's leadership goes to its preferred replica (the
  first of its replicas) when that one is live and in the ISR: NONE once this broker's
  metadata has the election, ELECTION_NOT_NEEDED when it leads already,
  PREFERRED_LEADER_NOT_AVAILABLE when it cannot lead. UNCLEAN (1): a partition with a
  leader needs no election; oncelog makes no unclean elections, so one without gets
  ELIGIBLE_LEADERS_NOT_AVAILABLE. A missing topic or partition is
  UNKNOWN_TOPIC_OR_PARTITION. With `topic_partitions` null every partition is tried and,
  as Kafka's controller answers, each topic is listed with only the partitions that
  needed an election (`kernel.topics.elect_each`).
- A standalone broker's partitions have one replica, which leads: ELECTION_NOT_NEEDED.
- v0 has no election type (preferred only) and no top-level error code.
- Needs Cluster ALTER (Kafka's controller): else the top-level error is
  CLUSTER_AUTHORIZATION_FAILED and so is every partition asked for (none when all were).
- Deviation: the request's timeout is not waited on; an election is written to the
  metadata quorum before the answer, or fails with REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.topics import PREFERRED_ELECTION
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation

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
    election_type = getattr(request, "election_type", PREFERRED_ELECTION)
    wanted = None if request.topic_partitions is None else [
        (topic.topic, topic.partitions) for topic in request.topic_partitions]
    outcomes = await ctx.broker.topics.elect_leaders(election_type, wanted, ctx.pace)
    return make("ElectLeadersResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                replica_election_results=tuple(
                    make("ReplicaElectionResult", topic=topic, partition_result=tuple(
                        make("PartitionResult", partition_id=index, error_code=code, error_message=message)
                        for index, code, message in results))
                    for topic, results in outcomes))
