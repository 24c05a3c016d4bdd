"""ListOffsets (key 2), v1-v8.

- timestamp -1 (latest): the high watermark, or the last stable offset when the
  request's isolation level is read_committed (v2+).
- -2 (earliest) and -4 (earliest local, v8): the log start offset.
- -3 (max timestamp, v7+): the batch holding the largest timestamp.
- Any other timestamp: the first batch whose max timestamp is at least the target
  (offset -1, timestamp -1 when there is none).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
READ_COMMITTED = 1


@api(2, "ListOffsets", range(1, 9))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            code, timestamp, offset = _lookup(ctx, topic.name, wanted, read_committed)
            partitions.append(
                make(
                    "ListOffsetsPartitionResponse",
                    partition_index=wanted.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=0 if code == ErrorCode.none and offset >= 0 else -1,
                )
            )
        topics.append(make("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return make("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _lookup(ctx: RequestContext, topic: str, wanted, read_committed: bool) -> tuple[ErrorCode, int, int]:
    log_ = ctx.broker.logs.partition(topic, wanted.partition_index)
    if log_ is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    epoch = getattr(wanted, "current_leader_epoch", -1)
    if epoch not in (-1, 0):
        return (ErrorCode.unknown_leader_epoch if epoch > 0 else ErrorCode.fenced_leader_epoch), -1, -1
    target = wanted.timestamp
    if target == LATEST:
        return ErrorCode.none, -1, log_.last_stable_offset if read_committed else log_.high_watermark
    if target in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, -1, log_.log_start_offset
    if target == MAX_TIMESTAMP:
        found = log_.max_timestamp_and_offset()
    elif target < 0:
        return ErrorCode.unsupported_version, -1, -1
    else:
        found = log_.offset_for_timestamp(target)
    if found is None:
        return ErrorCode.none, -1, -1
    offset, timestamp = found
    return ErrorCode.none, timestamp, offset
