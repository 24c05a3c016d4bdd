"""AlterReplicaLogDirs (key 34), v1-v2.

- A destination that is not one of the broker's log dirs (compared as absolute paths)
  is LOG_DIR_NOT_FOUND; a partition that does not exist REPLICA_NOT_AVAILABLE, as
  Kafka's ReplicaManager answers; a partition already in the destination NONE (a no-op).
- Deviation: moving a partition to another of the broker's log dirs is not implemented
  (Kafka copies it with a future log and swaps); it is answered with INVALID_REQUEST
  and the partition stays where it is.
- Needs Cluster ALTER: else every partition asked for gets CLUSTER_AUTHORIZATION_FAILED
  (one result per destination and topic, as Kafka's error response).
"""

from __future__ import annotations

from pathlib import Path

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation


@api(34, "AlterReplicaLogDirs", range(1, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return make("AlterReplicaLogDirsResponse", throttle_time=NO_THROTTLE, results=tuple([
            make("AlterReplicaLogDirTopicResult", topic_name=topic.name, partitions=tuple([
                make("AlterReplicaLogDirPartitionResult", partition_index=index,
                     error_code=ErrorCode.cluster_authorization_failed)
                async for index in ctx.paced(topic.partitions)]))
            async for destination in ctx.paced(request.dirs) async for topic in ctx.paced(destination.topics)]))
    logs = ctx.broker.logs
    configured = {directory.absolute(): directory for directory in logs.log_dirs}
    results: dict[str, list] = {}
    for destination in request.dirs:
        await ctx.pace()
        target = configured.get(Path(destination.path).absolute())  # noqa: ASYNC240 (no disk access, only getcwd)
        for topic in destination.topics:
            await ctx.pace()
            for index in topic.partitions:
                await ctx.pace()
                current = logs.log_dir_of(topic.name, index)
                if target is None:
                    code = ErrorCode.log_dir_not_found
                elif current is None:
                    code = ErrorCode.replica_not_available
                elif current.absolute() == target.absolute():
                    code = ErrorCode.none
                else:
                    code = ErrorCode.invalid_request
                results.setdefault(topic.name, []).append(
                    make("AlterReplicaLogDirPartitionResult", partition_index=index, error_code=code))
    return make(
        "AlterReplicaLogDirsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple([make("AlterReplicaLogDirTopicResult", topic_name=name, partitions=tuple(partitions))
                       async for name, partitions in ctx.paced(results.items())]),
    )
