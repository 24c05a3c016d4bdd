"""DeleteRecords (key 21), v0-v2.

- Moves each partition's log start offset up to the requested offset (-1: the high
  watermark) and deletes the segments wholly below it; the answer's low watermark is
  the new log start offset (it never moves back: asking for less answers the current
  one). Consumers then see the records below it as gone (Fetch OFFSET_OUT_OF_RANGE,
  ListOffsets earliest).
- As Kafka's ReplicaManager: an offset below -1 or past the high watermark is
  OFFSET_OUT_OF_RANGE; a topic whose cleanup.policy lacks `delete` POLICY_VIOLATION; the
  internal topics INVALID_TOPIC_EXCEPTION; a missing topic or partition
  UNKNOWN_TOPIC_OR_PARTITION. Failed partitions answer low watermark -1.
- In cluster mode only the partition's leader deletes (NOT_LEADER_OR_FOLLOWER
  elsewhere); followers take the new log start offset from their next fetch.
  Deviation: the answer does not wait for them (Kafka's waits, up to `timeout_ms`,
  until every replica has moved its log start offset).
- The new log start offset reaches its checkpoint file on the periodic checkpoint, as
  in Kafka (log.flush.start.offset.checkpoint.interval.ms).
- Authorization, as Kafka's KafkaApis: each topic needs Topic DELETE, checked first;
  the partitions of a refused topic get TOPIC_AUTHORIZATION_FAILED (low watermark -1),
  whether they exist or not.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.topics import error_code_for
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.errors import LogError

INVALID_LOW_WATERMARK = -1


@api(21, "DeleteRecords", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    topics = []
    for topic in request.topics:
        await ctx.pace()
        allowed = ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        partitions = []
        for wanted in topic.partitions:
            await ctx.pace()
            if allowed:
                code, low_watermark = _delete(ctx, topic.name, wanted.partition_index, wanted.offset)
            else:
                code, low_watermark = ErrorCode.topic_authorization_failed, INVALID_LOW_WATERMARK
            partitions.append(make(
                "DeleteRecordsPartitionResult", partition_index=wanted.partition_index,
                low_watermark=low_watermark, error_code=code,
            ))
        topics.append(make("DeleteRecordsTopicResult", name=topic.name, partitions=tuple(partitions)))
    return make("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _delete(ctx: RequestContext, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
    log_ = ctx.broker.logs.partition(topic, partition)
    if log_ is None:
        return ErrorCode.unknown_topic_or_partition, INVALID_LOW_WATERMARK
    code, _epoch = ctx.broker.leadership.leader_epoch(topic, partition)
    if code is not ErrorCode.none:
        return code, INVALID_LOW_WATERMARK
    if topic in INTERNAL_TOPICS:
        return ErrorCode.invalid_topic_exception, INVALID_LOW_WATERMARK
    if not log_.config.deletes_old_segments:
        return ErrorCode.policy_violation, INVALID_LOW_WATERMARK
    try:
        return ErrorCode.none, log_.delete_records_before(offset)
    except LogError as error:
        return error_code_for(error), INVALID_LOW_WATERMARK
