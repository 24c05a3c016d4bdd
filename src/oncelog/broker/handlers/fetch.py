"""Fetch (key 1), v4-v12.

- Authorization (with an authorizer), as Kafka's KafkaApis, once per request (not again
  while long polling): a fetch from a replica (`replica_id` >= 0) needs CLUSTER_ACTION
  on the cluster, else every partition gets TOPIC_AUTHORIZATION_FAILED; a consumer's
  needs READ on each topic, else that topic's partitions get TOPIC_AUTHORIZATION_FAILED,
  asked before whether the topic exists. Refused partitions do not end a long poll early
  (Kafka merges them into the answer of the others).
- Reads whole batches from the segment files (bytes only, never records), starting
  with the batch that holds `fetch_offset`, up to the high watermark
  (read_uncommitted) or the last stable offset (read_committed, isolation_level 1).
- Size limits: `partition_max_bytes` per partition and `max_bytes` for the response,
  the latter capped by the broker's `fetch.max.bytes` (and `min_bytes` by the result),
  as Kafka does; the first partition with data always returns at least one whole
  batch, so a batch larger than the limits still makes progress (KIP-74).
- Long polling: when fewer than `min_bytes` are available the request waits up to
  `max_wait` for an append to any of its partitions, then answers with what exists.
- `fetch_offset` outside [log start offset, log end offset] gets OFFSET_OUT_OF_RANGE.
- Below v10 a partition of a topic whose `compression.type` is zstd gets
  UNSUPPORTED_COMPRESSION_TYPE (Kafka's KafkaApis check, made on the topic's setting
  after the read: zstd batches in a `producer`-compression topic are served as is).
- read_committed responses always carry the AbortedTransactions list.
- Leadership: a partition this broker does not lead gets NOT_LEADER_OR_FOLLOWER
  (LEADER_NOT_AVAILABLE while it has no leader); a `current_leader_epoch` older than
  the leader's FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH. Standalone, the epoch is 0.
- Fetches from replicas (cluster mode; `replica_id` >= 0) read up to the log end
  offset, move the follower's state at the leader (high watermark, ISR), and get
  `diverging_epoch` when the follower's `last_fetched_epoch` shows its log diverged.
- Fetch sessions (KIP-227): the broker answers session_id 0, which tells clients it
  keeps no session, so every request is a full fetch.
- Deviation: the response never ends with a partial batch (Kafka may truncate the last
  batch at the byte limit; clients skip such a tail, so whole batches are equivalent).
"""

from __future__ import annotations

import asyncio

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.errors import OffsetOutOfRangeError

READ_COMMITTED = 1
ZSTD_MIN_FETCH_VERSION = 10


@api(1, "Fetch", range(4, 13))
async def handle(ctx: RequestContext, request) -> object:
    loop = asyncio.get_running_loop()
    max_wait_s = request.max_wait.total_seconds()
    deadline = loop.time() + max_wait_s
    refused = _refused_by_acls(ctx, request) if ctx.broker.acls is not None else frozenset()
    watched = [(t.topic, p.partition) for t in request.topics if t.topic not in refused for p in t.partitions]
    max_bytes = min(request.max_bytes, ctx.broker.config["fetch.max.bytes"])
    min_bytes = min(request.min_bytes, max_bytes)
    while True:
        response, total_bytes, failed = _read_all(ctx, request, max_bytes, refused)
        remaining = deadline - loop.time()
        if failed or total_bytes >= min_bytes or remaining <= 0 or not watched:
            if not ctx.broker.leadership.is_replica_fetch(_replica_id(request)):
                _count(ctx, response)
            return response
        await ctx.broker.wait_for_append(watched, remaining)


def _refused_by_acls(ctx: RequestContext, request) -> frozenset[str]:
    """The topics the request may not read: all of them for a replica without
    CLUSTER_ACTION, else those the consumer may not READ."""
    names = {topic.topic for topic in request.topics}
    if _replica_id(request) >= 0:  # Kafka's isFromFollower
        return frozenset() if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) else frozenset(names)
    return frozenset(name for name in names if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name))


def _count(ctx: RequestContext, response) -> None:
    """A consumer's traffic, per topic, for /metrics (oncelog.broker.topic_stats)."""
    stats = ctx.broker.topic_stats
    for topic in response.responses:
        counts = stats.of(topic.topic)
        for partition in topic.partitions:
            if partition.error_code == ErrorCode.none:
                counts.bytes_out += len(partition.records or b"")
            else:
                counts.failed_fetch += 1


def _read_all(ctx: RequestContext, request, max_bytes: int, refused: frozenset[str]) -> tuple[object, int, bool]:
    make = ctx.response.make
    logs = ctx.broker.logs
    leadership = ctx.broker.leadership
    replica_id = _replica_id(request)
    from_replica = leadership.is_replica_fetch(replica_id)
    read_committed = request.isolation_level == READ_COMMITTED and not from_replica
    budget = max_bytes
    total = 0
    failed = False
    topics = []
    for topic in request.topics:
        if topic.topic in refused:
            topics.append(make("FetchableTopicResponse", topic=topic.topic, partitions=tuple(
                _error(make, wanted.partition, ErrorCode.topic_authorization_failed) for wanted in topic.partitions)))
            continue
        partitions = []
        for wanted in topic.partitions:
            code, _epoch = leadership.leader_epoch(topic.topic, wanted.partition,
                                                   getattr(wanted, "current_leader_epoch", -1))
            log_ = logs.partition(topic.topic, wanted.partition)
            if code is not ErrorCode.none or log_ is None:
                failed = True
                partitions.append(_error(make, wanted.partition,
                                         code if code is not ErrorCode.none else ErrorCode.unknown_topic_or_partition))
                continue
            if from_replica:
                diverging = _diverging_epoch(log_, wanted)
                if diverging is not None:
                    failed = True  # answer at once: the follower truncates before fetching on
                    partitions.append(_diverged(make, log_, wanted.partition, *diverging))
                    continue
                code = leadership.follower_fetched(topic.topic, wanted.partition, replica_id, wanted.fetch_offset)
                if code is not ErrorCode.none:
                    failed = True
                    partitions.append(_error(make, wanted.partition, code))
                    continue
                stable = log_.log_end_offset
            else:
                stable = log_.last_stable_offset if read_committed else log_.high_watermark
            records = b""
            code = ErrorCode.none
            try:
                if budget > 0:
                    result = log_.read(
                        wanted.fetch_offset,
                        min(wanted.partition_max_bytes, budget),
                        upper_bound=stable,
                        min_one_batch=total == 0,
                    )
                    records = result.records
                elif not log_.log_start_offset <= wanted.fetch_offset <= log_.log_end_offset:
                    raise OffsetOutOfRangeError(f"{topic.topic}-{wanted.partition}", wanted.fetch_offset,
                                                log_.log_start_offset, log_.log_end_offset)
            except OffsetOutOfRangeError:
                code = ErrorCode.offset_out_of_range
                failed = True
            total += len(records)
            budget -= len(records)
            if ctx.version < ZSTD_MIN_FETCH_VERSION and log_.config.compression_type == "zstd":
                partitions.append(_error(make, wanted.partition, ErrorCode.unsupported_compression_type))
                continue
            partitions.append(
                make(
                    "PartitionData",
                    partition_index=wanted.partition,
                    error_code=code,
                    high_watermark=log_.high_watermark,
                    last_stable_offset=log_.last_stable_offset,
                    log_start_offset=log_.log_start_offset,
                    aborted_transactions=(
                        _aborted(ctx, log_, wanted.fetch_offset, stable, records) if read_committed else None
                    ),
                    preferred_read_replica=-1,
                    records=records,
                )
            )
        topics.append(make("FetchableTopicResponse", topic=topic.topic, partitions=tuple(partitions)))
    response = make(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(topics),
    )
    return response, total, failed


def _aborted(ctx: RequestContext, log_, fetch_offset: int, upper_bound: int, records: bytes) -> tuple:
    """Aborted transactions overlapping the fetched range (filled by the transaction index)."""
    collect = getattr(log_, "aborted_transactions", None)
    if collect is None or not records:
        return ()
    make = ctx.response.make
    return tuple(
        make("AbortedTransaction", producer_id=producer_id, first_offset=first_offset)
        for producer_id, first_offset in collect(fetch_offset, upper_bound)
    )


def _replica_id(request) -> int:
    """The fetching replica's id (-1 for consumers): a field up to v14, then in replica_state."""
    replica_id = getattr(request, "replica_id", None)
    if replica_id is None:
        state = getattr(request, "replica_state", None)
        replica_id = state.replica_id if state is not None else -1
    return replica_id


def _diverging_epoch(log_, wanted) -> tuple[int, int] | None:
    """Kafka's check of a follower's last fetched epoch (v12+): when this log's epoch at
    or below it ends before the fetch offset, or is older, the follower's log diverged
    there: (epoch, end offset) to truncate to, else None."""
    last_fetched_epoch = getattr(wanted, "last_fetched_epoch", -1)
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = log_.end_offset_for_epoch(last_fetched_epoch)
    if end_offset < wanted.fetch_offset or epoch < last_fetched_epoch:
        return epoch, end_offset
    return None


def _diverged(make, log_, partition: int, epoch: int, end_offset: int) -> object:
    return make(
        "PartitionData",
        partition_index=partition,
        error_code=ErrorCode.none,
        high_watermark=log_.high_watermark,
        last_stable_offset=log_.last_stable_offset,
        log_start_offset=log_.log_start_offset,
        diverging_epoch=make("EpochEndOffset", epoch=epoch, end_offset=end_offset),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )


def _error(make, partition: int, code: ErrorCode) -> object:
    return make(
        "PartitionData",
        partition_index=partition,
        error_code=code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )
