"""ListOffsets (key 2), v1-v11.

- Authorization (with an authorizer): DESCRIBE on each topic, else every partition asked
  of it gets TOPIC_AUTHORIZATION_FAILED (offset -1, timestamp -1), before anything else
  is looked at, as in Kafka's KafkaApis.
- timestamp -1 (latest): the high watermark, or the last stable offset when the
  request's isolation level is read_committed (v2+).
- -2 (earliest) and -4 (earliest local, v8+): the log start offset.
- -5 (latest tiered, v9+) and -6 (earliest pending upload, v11+): offset -1, timestamp
  -1, as Kafka answers for a topic without remote (tiered) storage, which oncelog
  never has. v10's timeout only bounds remote-storage lookups: there are none to wait for.
- -3 (max timestamp, v7+): the first record carrying the largest timestamp, with it.
- Any other timestamp: the first record whose timestamp is at least the target, with
  that record's timestamp. The batch the headers point to is decoded (decompressed if
  need be) to find the record, off the produce/fetch path; LogAppendTime batches answer
  from their header (every record has the batch's time).
- As in Kafka's ReplicaManager, a timestamp lookup (and -3) whose record lies at or past
  the last fetchable offset (high watermark; last stable offset for read_committed)
  answers offset -1, timestamp -1. Requests from a replica id other than -1 (consumer)
  have no isolation level: their bound and "latest" are the log end offset.
- A negative timestamp this version cannot carry (-3 before v7, -4 before v8, -5 before
  v9, -6 before v11, any other below -6) gets UNSUPPORTED_VERSION; a partition asked
  for twice INVALID_REQUEST.
- Only the partition's leader answers (cluster mode: else NOT_LEADER_OR_FOLLOWER); a
  `current_leader_epoch` older than the leader's is FENCED_LEADER_EPOCH, newer
  UNKNOWN_LEADER_EPOCH. The answer's leader epoch is the current one for "latest",
  else the epoch of the batch holding the offset (0 on a standalone broker).
- Deviation: -3 raises the offset to the log start offset when the record with the
  largest timestamp was deleted by DeleteRecords (Kafka returns the deleted offset).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.topics import error_code_for
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.errors import LogError

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
# The first version that may carry each special timestamp (Kafka's
# ReplicaManager.timestampMinSupportedVersion); other negative values are unsupported.
_MIN_VERSION = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                EARLIEST_PENDING_UPLOAD: 11}
# Offsets that only remote (tiered) storage has: none here.
_REMOTE_STORAGE_TARGETS = (LATEST_TIERED, EARLIEST_PENDING_UPLOAD)


@api(2, "ListOffsets", range(1, 12))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if getattr(request, "replica_id", CONSUMER_REPLICA_ID) != CONSUMER_REPLICA_ID:
        isolation = None  # a replica or a debugging tool: bounded by the log end offset
    else:
        isolation = getattr(request, "isolation_level", 0)
    asked: set[tuple[str, int]] = set()
    duplicated: set[tuple[str, int]] = set()  # asked for more than once
    for topic in request.topics:
        await ctx.pace()
        for wanted in topic.partitions:
            await ctx.pace()
            key = (topic.name, wanted.partition_index)
            if key in asked:
                duplicated.add(key)
            asked.add(key)
    topics = []
    for topic in request.topics:
        await ctx.pace()
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
            topics.append(make("ListOffsetsTopicResponse", name=topic.name, partitions=tuple([
                make("ListOffsetsPartitionResponse", partition_index=wanted.partition_index,
                     error_code=ErrorCode.topic_authorization_failed, timestamp=-1, offset=-1, leader_epoch=-1)
                async for wanted in ctx.paced(topic.partitions)])))
            continue
        partitions = []
        answered: set[int] = set()
        for wanted in topic.partitions:
            await ctx.pace()
            if wanted.partition_index in answered:
                continue  # a duplicate gets one answer, as Kafka keys its answers by partition
            answered.add(wanted.partition_index)
            if (topic.name, wanted.partition_index) in duplicated:
                code, timestamp, offset, epoch = ErrorCode.invalid_request, -1, -1, -1
            else:
                code, timestamp, offset, epoch = _lookup(ctx, topic.name, wanted, isolation)
            partitions.append(
                make(
                    "ListOffsetsPartitionResponse",
                    partition_index=wanted.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch if code == ErrorCode.none and offset >= 0 else -1,
                )
            )
        topics.append(make("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return make("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _lookup(ctx: RequestContext, topic: str, wanted, isolation: int | None) -> tuple[ErrorCode, int, int, int]:
    """(error, timestamp, offset, leader epoch of the offset) for one partition."""
    code, timestamp, offset, leader_epoch = _find(ctx, topic, wanted, isolation)
    if code is not ErrorCode.none or offset < 0:
        return code, timestamp, offset, -1
    if wanted.timestamp == LATEST:
        return code, timestamp, offset, leader_epoch
    partition_log = ctx.broker.logs.partition(topic, wanted.partition_index)
    assert partition_log is not None  # _find found the offset in it
    epoch = partition_log.leader_epoch_cache.epoch_for_offset(offset)
    return code, timestamp, offset, epoch if epoch >= 0 else leader_epoch


def _find(ctx: RequestContext, topic: str, wanted, isolation: int | None) -> tuple[ErrorCode, int, int, int]:
    """(error, timestamp, offset, the leader's current epoch)."""
    target = wanted.timestamp
    if target < 0 and ctx.version < _MIN_VERSION.get(target, ctx.version + 1):
        return ErrorCode.unsupported_version, -1, -1, -1
    code, leader_epoch = ctx.broker.leadership.leader_epoch(topic, wanted.partition_index,
                                                            getattr(wanted, "current_leader_epoch", -1))
    if code is not ErrorCode.none:
        return code, -1, -1, leader_epoch
    log_ = ctx.broker.logs.partition(topic, wanted.partition_index)
    if log_ is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, leader_epoch
    if isolation is None:
        last_fetchable = log_.log_end_offset
    elif isolation == READ_COMMITTED:
        last_fetchable = log_.last_stable_offset
    else:
        last_fetchable = log_.high_watermark
    if target == LATEST:
        return ErrorCode.none, -1, last_fetchable, leader_epoch
    if target in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, -1, log_.log_start_offset, leader_epoch
    if target in _REMOTE_STORAGE_TARGETS:
        return ErrorCode.none, -1, -1, leader_epoch
    try:
        found = log_.max_timestamp_and_offset() if target == MAX_TIMESTAMP else log_.offset_for_timestamp(target)
    except LogError as error:
        return error_code_for(error), -1, -1, leader_epoch
    if found is None:
        return ErrorCode.none, -1, -1, leader_epoch
    offset, timestamp = found
    if offset >= last_fetchable:
        return ErrorCode.none, -1, -1, leader_epoch
    return ErrorCode.none, timestamp, offset, leader_epoch
