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
- Fetch sessions (KIP-227, kernel/fetch_sessions.py): a full fetch with epoch 0 opens a
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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from oncelog import clock
from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.fetch_sessions import (
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
    context = await ctx.broker.fetch_sessions.open(
        getattr(request, "session_id", NO_SESSION_ID), getattr(request, "session_epoch", FINAL_EPOCH),
        await _wanted(ctx, request), await _forgotten(ctx, request), principal=ctx.principal,
        privileged=from_replica, now_ms=clock.now_ms(), pace=ctx.pace)
    if context.error is not ErrorCode.none:
        return await _response(ctx, context.error, NO_SESSION_ID, ())
    wanted = context.partitions
    refused = await _refused_by_acls(ctx, replica_id, wanted) if ctx.broker.acls is not None else frozenset()
    max_bytes = min(request.max_bytes, ctx.broker.config["fetch.max.bytes"])
    min_bytes = min(request.min_bytes, max_bytes)
    read_committed = request.isolation_level == READ_COMMITTED and not from_replica
    watched: list[TopicPartition] | None = None
    while True:
        reads, answers, total_bytes, failed = await _read_all(ctx, replica_id, from_replica, read_committed, wanted,
                                                              max_bytes, refused)
        remaining = deadline - loop.time()
        if failed or total_bytes >= min_bytes or remaining <= 0:
            break
        if watched is None:
            watched = [tp async for tp in ctx.paced(wanted) if tp[0] not in refused]
        if not watched:
            break
        await ctx.broker.wait_for_append(watched, remaining, pace=ctx.pace,
                                         appended=partial(_appended_since, ctx, reads, from_replica, read_committed))
    outcome = await context.complete(answers, clock.now_ms(), pace=ctx.pace)
    return await _answer(ctx, outcome, reads, read_committed, from_replica)


async def _wanted(ctx: RequestContext, request) -> dict[TopicPartition, PartitionRequest]:
    """The request's partitions, in its order."""
    return {
        (topic.topic, wanted.partition): PartitionRequest(
            fetch_offset=wanted.fetch_offset,
            partition_max_bytes=wanted.partition_max_bytes,
            current_leader_epoch=getattr(wanted, "current_leader_epoch", -1),
            last_fetched_epoch=getattr(wanted, "last_fetched_epoch", -1),
            log_start_offset=getattr(wanted, "log_start_offset", -1),
        )
        async for topic in ctx.paced(request.topics)
        async for wanted in ctx.paced(topic.partitions)
    }


async def _forgotten(ctx: RequestContext, request) -> list[TopicPartition]:
    return [(topic.topic, partition) async for topic in ctx.paced(getattr(request, "forgotten_topics_data", ()))
            async for partition in ctx.paced(topic.partitions)]


async def _answer(ctx: RequestContext, outcome, reads: dict[TopicPartition, _PartitionRead], read_committed: bool,
                  from_replica: bool) -> object:
    """The FetchResponse of the session's outcome; a consumer's traffic counted per topic
    for /metrics (oncelog.broker.topic_stats) as it is made."""
    make = ctx.response.make
    stats = ctx.broker.topic_stats
    # A topic's consecutive partitions share one entry, as in Kafka's FetchResponse.of.
    topics: list[tuple[str, list]] = []
    counts = None
    for tp in outcome.partitions:
        await ctx.pace()
        topic, partition = tp
        if not topics or topics[-1][0] != topic:
            topics.append((topic, []))
            counts = None if from_replica else stats.of(topic)
        read = reads[tp]
        topics[-1][1].append(_partition_data(ctx, make, partition, read, read_committed))
        if counts is not None:
            if read.answer.error_code == ErrorCode.none:
                counts.bytes_out += len(read.records)
            else:
                counts.failed_fetch += 1
    return await _response(ctx, outcome.error, outcome.session_id, topics)


async def _response(ctx: RequestContext, code: ErrorCode, session_id: int, topics) -> object:
    """The FetchResponse of `topics` ((topic, its PartitionData), in order)."""
    make = ctx.response.make
    return make(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        session_id=session_id,
        responses=tuple([make("FetchableTopicResponse", topic=topic, partitions=tuple(datas))
                         async for topic, datas in ctx.paced(topics)]),
    )


async def _refused_by_acls(ctx: RequestContext, replica_id: int,
                           wanted: Mapping[TopicPartition, PartitionRequest]) -> frozenset[str]:
    """The topics the request may not read: all of them for a replica without
    CLUSTER_ACTION, else those the consumer may not READ."""
    names = {topic async for topic, _ in ctx.paced(wanted)}
    if replica_id >= 0:  # Kafka's isFromFollower
        return frozenset() if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) else frozenset(names)
    return frozenset([name async for name in ctx.paced(names)
                      if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)])


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


async def _read_all(ctx: RequestContext, replica_id: int, from_replica: bool, read_committed: bool,
                    wanted: Mapping[TopicPartition, PartitionRequest], max_bytes: int, refused: frozenset[str]
                    ) -> tuple[dict[TopicPartition, _PartitionRead], dict[TopicPartition, PartitionAnswer], int, bool]:
    """Read every wanted partition: the reads, their answers (for the session), the record
    bytes, whether one failed."""
    budget = max_bytes
    total = 0
    failed = False
    reads: dict[TopicPartition, _PartitionRead] = {}
    answers: dict[TopicPartition, PartitionAnswer] = {}
    for tp, position in wanted.items():
        await ctx.pace()
        read, read_bytes, read_failed = _read(ctx, replica_id, from_replica, read_committed, tp, position, budget,
                                              total == 0, refused)
        reads[tp] = read
        answers[tp] = read.answer
        total += read_bytes
        budget -= read_bytes
        failed = failed or read_failed
    return reads, answers, total, failed


def _read(ctx: RequestContext, replica_id: int, from_replica: bool, read_committed: bool, tp: TopicPartition,
          position: PartitionRequest, budget: int, first: bool, refused: frozenset[str]
          ) -> tuple[_PartitionRead, int, bool]:
    """One partition's read, the bytes it took of the budget, and whether it failed (which
    answers the fetch at once). `first`: no partition before it returned records."""
    topic, partition = tp
    if topic in refused:
        return _failed(ErrorCode.topic_authorization_failed), 0, False
    leadership = ctx.broker.leadership
    code, _epoch = leadership.leader_epoch(topic, partition, position.current_leader_epoch)
    log_ = ctx.broker.logs.partition(topic, partition)
    if code is not ErrorCode.none or log_ is None:
        return _failed(code if code is not ErrorCode.none else ErrorCode.unknown_topic_or_partition), 0, True
    if from_replica:
        diverging = _diverging_epoch(log_, position)
        if diverging is not None:
            # answer at once: the follower truncates before fetching on
            return _PartitionRead(PartitionAnswer(ErrorCode.none, log_.high_watermark, log_.last_stable_offset,
                                                  log_.log_start_offset, 0, diverging=True),
                                  diverging=diverging), 0, True
        code = leadership.follower_fetched(topic, partition, replica_id, position.fetch_offset)
        if code is not ErrorCode.none:
            return _failed(code), 0, True
    stable = _upper_bound(log_, from_replica, read_committed)
    records: bytes | memoryview = b""
    code = ErrorCode.none
    failed = False
    try:
        if budget > 0:
            result = log_.read(
                position.fetch_offset,
                min(position.partition_max_bytes, budget),
                upper_bound=stable,
                min_one_batch=first,
            )
            records = result.records
        elif not log_.log_start_offset <= position.fetch_offset <= log_.log_end_offset:
            raise OffsetOutOfRangeError(f"{topic}-{partition}", position.fetch_offset,
                                        log_.log_start_offset, log_.log_end_offset)
    except OffsetOutOfRangeError:
        code = ErrorCode.offset_out_of_range
        failed = True
    if ctx.version < ZSTD_MIN_FETCH_VERSION and log_.config.compression_type == "zstd":
        return _failed(ErrorCode.unsupported_compression_type), len(records), failed
    return _PartitionRead(
        PartitionAnswer(code, log_.high_watermark, log_.last_stable_offset, log_.log_start_offset, len(records)),
        records, log_, position.fetch_offset, stable), len(records), failed


async def _appended_since(ctx: RequestContext, reads: dict[TopicPartition, _PartitionRead], from_replica: bool,
                          read_committed: bool) -> bool:
    """Whether a partition read got new data to fetch since (its upper bound moved): the
    read paced itself, so an append may have come after a partition was read, before
    the fetch watched it."""
    for read in list(reads.values()):
        await ctx.pace()
        if read.log is not None and _upper_bound(read.log, from_replica, read_committed) > read.upper_bound:
            return True
    return False


def _upper_bound(log_: PartitionLog, from_replica: bool, read_committed: bool) -> int:
    """Where a fetch's read of the partition ends: a follower's the log end offset, a
    consumer's the high watermark (read_committed: the last stable offset)."""
    if from_replica:
        return log_.log_end_offset
    return log_.last_stable_offset if read_committed else log_.high_watermark


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
