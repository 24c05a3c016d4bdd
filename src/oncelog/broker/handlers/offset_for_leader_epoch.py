"""OffsetForLeaderEpoch (key 23), v2-v4 (Kafka 4.0 removed v0-v1; kio has v2+).

- For each partition: (the largest leader epoch <= the requested one that this log
  knows, the offset where it ended), from the partition's leader epoch cache
  (`PartitionLog.end_offset_for_epoch`, Kafka's endOffsetFor): the latest epoch ends at
  the log end offset; an epoch below every known one answers itself and the first
  entry's start offset; -1 or an epoch above every known one answers (-1, -1) with no
  error. Followers (KIP-101) and KIP-320 clients (librdkafka's offset validation after
  a leader change) use it to find where their log diverged.
- Only the partition's leader answers, whatever the replica id: Kafka's ReplicaManager
  always asks the partition for its leader's log (fetchOnlyFromLeader), so v3's replica
  id -2 ("debugging") reads no follower there either. Others get NOT_LEADER_OR_FOLLOWER (or
  LEADER_NOT_AVAILABLE while the partition has no leader); a `current_leader_epoch`
  (v2+) older than the leader's is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH; an
  unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION. Errors carry epoch -1, offset -1.
- A standalone broker leads every partition at leader epoch 0.
- Authorization (with an authorizer), as Kafka's KafkaApis: CLUSTER_ACTION on the
  cluster (what followers have) answers every topic; otherwise (KIP-320 consumers) each
  topic needs DESCRIBE, else its partitions get TOPIC_AUTHORIZATION_FAILED. As in Kafka
  the replica id does not choose the check: a replica without CLUSTER_ACTION is asked
  for DESCRIBE like a consumer.
- Deviation: an empty log that was never appended to has no epoch entry yet, so it
  answers (-1, -1); Kafka's leader assigns its epoch at the log end on election and
  answers (epoch, 0). Clients treat both as "nothing to truncate".
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


@api(23, "OffsetForLeaderEpoch", range(2, 5))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    topics = []
    cluster_action = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    for topic in request.topics:
        await ctx.pace()
        allowed = cluster_action or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        partitions = []
        for wanted in topic.partitions:
            await ctx.pace()
            if allowed:
                code, epoch, end_offset = _end_offset(ctx, topic.topic, wanted)
            else:
                code, epoch, end_offset = ErrorCode.topic_authorization_failed, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            partitions.append(make("EpochEndOffset", error_code=code, partition=wanted.partition,
                                   leader_epoch=epoch, end_offset=end_offset))
        topics.append(make("OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(partitions)))
    return make("OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _end_offset(ctx: RequestContext, topic: str, wanted) -> tuple[ErrorCode, int, int]:
    """(error, epoch, end offset) for one partition."""
    code, _leader_epoch = ctx.broker.leadership.leader_epoch(topic, wanted.partition,
                                                             getattr(wanted, "current_leader_epoch", -1))
    if code is not ErrorCode.none:
        return code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    partition_log = ctx.broker.logs.partition(topic, wanted.partition)
    if partition_log is None:
        return ErrorCode.unknown_topic_or_partition, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    epoch, end_offset = partition_log.end_offset_for_epoch(wanted.leader_epoch)
    return ErrorCode.none, epoch, end_offset
