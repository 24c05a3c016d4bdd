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
- Fetch sessions (KIP-227, broker/fetch_sessions.py): a full fetch with epoch 0 opens a
  session when the cache (`max.incremental.fetch.session.cache.slots`) has or can make
  room; an incremental fetch reads every partition of its session (with the fetch
  positions the session holds) and answers only the changed ones; epoch -1 is a full
  fetch without a session. Session errors (FETCH_SESSION_ID_NOT_FOUND,
  INVALID_FETCH_SESSION_EPOCH) are answered at once, with no partitions. Authorization
  and leadership are checked on every request for every partition read, so an
  incremental fetch repeats a refused or failing partition each time, as Kafka does.
  The session cache is the broker's (`Broker.fetch_sessions`).
- Deviation: a session is its principal's (`ctx.principal`): another principal naming
  its id gets FETCH_SESSION_ID_NOT_FOUND and cannot close it (Kafka lets any client
  that knows an id continue or close the session).
- Deviation: the response never ends with a partial batch (Kafka may truncate the last
  batch at the byte limit; clients skip such a tail, so whole batches are equivalent).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog import clock
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.fetch_sessions import (
    FINAL_EPOCH,
    NO_SESSION_ID,
    PartitionAnswer,
    PartitionRequest,
)
from oncelog.names import TopicPartition
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from oncelog.storage.log import PartitionLog

READ_COMMITTED = 1
ZSTD_MIN_FETCH_VERSION = 10


@api(1, "Fetch", range(4, 13))
async def handle(ctx: RequestContext, request) -> object:
    loop = asyncio.get_running_loop()
    max_wait_s = request.max_wait.total_seconds()
    deadline = loop.time() + max_wait_s
    replica_id = _replica_id(request)
    from_replica = ctx.broker.leadership.is_replica_fetch(replica_id)
    context = ctx.broker.fetch_sessions.open(
        getattr(request, "session_id", NO_SESSION_ID), getattr(request, "session_epoch", FINAL_EPOCH),
        _wanted(request), _forgotten(request), principal=ctx.principal, privileged=from_replica,
        now_ms=clock.now_ms())
    if context.error is not ErrorCode.none:
        return _response(ctx, context.error, NO_SESSION_ID, ())
    wanted = context.partitions
    topics = {topic for (topic, _), _ in wanted}
    refused = _refused_by_acls(ctx, replica_id, topics) if ctx.broker.acls is not None else frozenset()
    watched = [tp for tp, _ in wanted if tp[0] not in refused]
    max_bytes = min(request.max_bytes, ctx.broker.config["fetch.max.bytes"])
    min_bytes = min(request.min_bytes, max_bytes)
    read_committed = request.isolation_level == READ_COMMITTED and not from_replica
    while True:
        reads, total_bytes, failed = _read_all(ctx, replica_id, from_replica, read_committed, wanted, max_bytes,
                                               refused)
        remaining = deadline - loop.time()
        if failed or total_bytes >= min_bytes or remaining <= 0 or not watched:
            break
        await ctx.broker.wait_for_append(watched, remaining)
    outcome = context.complete({tp: read.answer for tp, read in reads.items()}, clock.now_ms())
    make = ctx.response.make
    response = _response(ctx, outcome.error, outcome.session_id,
                         [(tp, _partition_data(ctx, make, tp[1], reads[tp], read_committed))
                          for tp in outcome.partitions])
    if not from_replica:
        _count(ctx, response)
    return response


def _wanted(request) -> dict[TopicPartition, PartitionRequest]:
    """The request's partitions, in its order."""
    return {
        (topic.topic, wanted.partition): PartitionRequest(
            fetch_offset=wanted.fetch_offset,
            partition_max_bytes=wanted.partition_max_bytes,
            current_leader_epoch=getattr(wanted, "current_leader_epoch", -1),
            last_fetched_epoch=getattr(wanted, "last_fetched_epoch", -1),
            log_start_offset=getattr(wanted, "log_start_offset", -1),
        )
        for topic in request.topics
        for wanted in topic.partitions
    }


def _forgotten(request) -> list[TopicPartition]:
    return [(topic.topic, partition) for topic in getattr(request, "forgotten_topics_data", ())
            for partition in topic.partitions]


def _response(ctx: RequestContext, code: ErrorCode, session_id: int, partitions) -> object:
    """The FetchResponse of `partitions` ((topic, partition), PartitionData), in order; a
    topic's consecutive partitions share one entry, as in Kafka's FetchResponse.of."""
    make = ctx.response.make
    topics: list[tuple[str, list]] = []
    for (topic, _), data in partitions:
        if not topics or topics[-1][0] != topic:
            topics.append((topic, []))
        topics[-1][1].append(data)
    return make(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        session_id=session_id,
        responses=tuple(make("FetchableTopicResponse", topic=topic, partitions=tuple(datas))
                        for topic, datas in topics),
    )


def _refused_by_acls(ctx: RequestContext, replica_id: int, names: set[str]) -> frozenset[str]:
    """The topics the request may not read: all of them for a replica without
    CLUSTER_ACTION, else those the consumer may not READ."""
    if replica_id >= 0:  # Kafka's isFromFollower
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


@dataclass(slots=True)
class _PartitionRead:
    """One partition's read: what the session compares (`answer`) and what the response
    entity needs besides; entities are built only for the partitions answered."""

    answer: PartitionAnswer
    records: bytes | memoryview = b""
    log: PartitionLog | None = None
    fetch_offset: int = 0
    upper_bound: int = 0
    diverging: tuple[int, int] | None = None


def _failed(code: ErrorCode) -> _PartitionRead:
    return _PartitionRead(PartitionAnswer(code, -1, -1, -1, 0))


def _read_all(ctx: RequestContext, replica_id: int, from_replica: bool, read_committed: bool,
              wanted: list[tuple[TopicPartition, PartitionRequest]], max_bytes: int,
              refused: frozenset[str]) -> tuple[dict[TopicPartition, _PartitionRead], int, bool]:
    """Read every wanted partition: the reads, the record bytes, whether one failed."""
    logs = ctx.broker.logs
    leadership = ctx.broker.leadership
    zstd_unsupported = ctx.version < ZSTD_MIN_FETCH_VERSION
    budget = max_bytes
    total = 0
    failed = False
    reads: dict[TopicPartition, _PartitionRead] = {}
    for tp, position in wanted:
        topic, partition = tp
        if topic in refused:
            reads[tp] = _failed(ErrorCode.topic_authorization_failed)
            continue
        code, _epoch = leadership.leader_epoch(topic, partition, position.current_leader_epoch)
        log_ = logs.partition(topic, partition)
        if code is not ErrorCode.none or log_ is None:
            failed = True
            reads[tp] = _failed(code if code is not ErrorCode.none else ErrorCode.unknown_topic_or_partition)
            continue
        if from_replica:
            diverging = _diverging_epoch(log_, position)
            if diverging is not None:
                failed = True  # answer at once: the follower truncates before fetching on
                reads[tp] = _PartitionRead(
                    PartitionAnswer(ErrorCode.none, log_.high_watermark, log_.last_stable_offset,
                                    log_.log_start_offset, 0, diverging=True), diverging=diverging)
                continue
            code = leadership.follower_fetched(topic, partition, replica_id, position.fetch_offset)
            if code is not ErrorCode.none:
                failed = True
                reads[tp] = _failed(code)
                continue
            stable = log_.log_end_offset
        else:
            stable = log_.last_stable_offset if read_committed else log_.high_watermark
        records: bytes | memoryview = b""
        code = ErrorCode.none
        try:
            if budget > 0:
                result = log_.read(
                    position.fetch_offset,
                    min(position.partition_max_bytes, budget),
                    upper_bound=stable,
                    min_one_batch=total == 0,
                )
                records = result.records
            elif not log_.log_start_offset <= position.fetch_offset <= log_.log_end_offset:
                raise OffsetOutOfRangeError(f"{topic}-{partition}", position.fetch_offset,
                                            log_.log_start_offset, log_.log_end_offset)
        except OffsetOutOfRangeError:
            code = ErrorCode.offset_out_of_range
            failed = True
        total += len(records)
        budget -= len(records)
        if zstd_unsupported and log_.config.compression_type == "zstd":
            reads[tp] = _failed(ErrorCode.unsupported_compression_type)
            continue
        reads[tp] = _PartitionRead(
            PartitionAnswer(code, log_.high_watermark, log_.last_stable_offset, log_.log_start_offset, len(records)),
            records, log_, position.fetch_offset, stable)
    return reads, total, failed


def _partition_data(ctx: RequestContext, make, partition: int, read: _PartitionRead, read_committed: bool) -> object:
    """The response's PartitionData of one read."""
    answer = read.answer
    extra = {}
    if read.diverging is not None:
        epoch, end_offset = read.diverging
        extra["diverging_epoch"] = make("EpochEndOffset", epoch=epoch, end_offset=end_offset)
    return make(
        "PartitionData",
        partition_index=partition,
        error_code=answer.error_code,
        high_watermark=answer.high_watermark,
        last_stable_offset=answer.last_stable_offset,
        log_start_offset=answer.log_start_offset,
        aborted_transactions=(
            _aborted(ctx, read.log, read.fetch_offset, read.upper_bound, read.records)
            if read_committed and read.log is not None else None
        ),
        preferred_read_replica=-1,
        records=read.records,
        **extra,
    )


def _aborted(ctx: RequestContext, log_, fetch_offset: int, upper_bound: int,
             records: bytes | memoryview) -> tuple:
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


def _diverging_epoch(log_, wanted: PartitionRequest) -> tuple[int, int] | None:
    """Kafka's check of a follower's last fetched epoch (v12+): when this log's epoch at
    or below it ends before the fetch offset, or is older, the follower's log diverged
    there: (epoch, end offset) to truncate to, else None."""
    last_fetched_epoch = wanted.last_fetched_epoch
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = log_.end_offset_for_epoch(last_fetched_epoch)
    if end_offset < wanted.fetch_offset or epoch < last_fetched_epoch:
        return epoch, end_offset
    return None
