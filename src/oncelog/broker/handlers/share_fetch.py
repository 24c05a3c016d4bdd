"""ShareFetch (key 78), v1-v2: records of share partitions for a share group's member,
and the acknowledgements of those it had (KIP-932).

- The share session: epoch 0 opens one for the member (acknowledgements with it are
  INVALID_REQUEST), each next request carries the previous epoch plus one
  (INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND without a session),
  -1 acknowledges and closes it, releasing the member's acquired records; at
  group.share.max.share.sessions, SHARE_SESSION_LIMIT_REACHED. Its partitions are those
  ever fetched with it, less `forgotten_topics_data`; a fetch reads all of them. A
  session ends with the connection that opened it, as in Kafka, and what its member
  held goes back to the others at once.
- Acknowledgements are applied first, per partition all or none (the partition's
  `acknowledge_error_code`: INVALID_RECORD_STATE for a record the member does not hold,
  INVALID_REQUEST for a malformed batch or type; RENEW, type 4, only at v2 with
  IsRenewAck). Then up to MaxRecords records are acquired over the partitions, in
  request order, each with the group's lock (share.record.lock.duration.ms, answered as
  AcquisitionLockTimeoutMs); the answer carries their batches and the acquired ranges
  with delivery counts. With nothing to acquire the request waits up to MaxWaitMs for
  an append. The work is coordinator/share/manager.py's.
- Partitions answered: those with records, an error or acknowledgements, and on the
  session's first request every partition it names. Each fetch starts one partition
  further on than the one before, so that one busy partition cannot starve the others.
- Authorization, as Kafka's KafkaApis: Group READ, else GROUP_AUTHORIZATION_FAILED for
  the request; Topic READ per topic, else TOPIC_AUTHORIZATION_FAILED for its partitions,
  checked again on every request for every partition of the session.
  A topic id this broker does not know is UNKNOWN_TOPIC_ID, a partition it does not
  lead NOT_LEADER_OR_FOLLOWER with the leader it knows.
- Deviation: MaxRecords is never exceeded (Kafka may round it up to a batch boundary),
  and MinBytes is read as "at least one record".
"""

from __future__ import annotations

import datetime

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share import (
    by_topic,
    has_acknowledgements,
    leader_and_epoch,
    partitions_of,
    request_refusal,
)
from oncelog.coordinator.share.manager import FINAL_EPOCH, INITIAL_EPOCH, PartitionResult
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(78, "ShareFetch", range(1, 3))
async def handle(ctx: RequestContext, request) -> object:
    refused = request_refusal(ctx, request)
    if refused is not None:
        return _error(ctx, *refused)
    group_id = request.group_id
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH and has_acknowledgements(request.topics):
        return _error(ctx, ErrorCode.invalid_request, "Acknowledge data present on initial fetch request.")
    manager = ctx.broker.share_partitions
    outcome = manager.open_session(group_id, request.member_id, epoch, ctx.principal, fetching=True)
    if outcome.error is not ErrorCode.none or outcome.session is None:
        return _error(ctx, outcome.error, outcome.message)
    session = outcome.session
    if epoch == INITIAL_EPOCH:  # the session ends with its connection, as in Kafka
        ctx.session.at_close(("share-session", group_id, request.member_id),
                             lambda: manager.close_session(group_id, request.member_id, session))
    found = await partitions_of(ctx, request.topics)
    renew = bool(getattr(request, "is_renew_ack", False))
    acknowledged = await manager.acknowledge(group_id, request.member_id, found.acknowledgements,
                                             renew_allowed=renew) if found.acknowledgements else {}
    fetched: dict = {}
    if epoch == FINAL_EPOCH:
        manager.close_session(group_id, request.member_id)
        ctx.session.forget_at_close(("share-session", group_id, request.member_id))
        lock_ms = manager.lock_duration_ms(group_id)
    else:
        session.partitions.update(found.usable)
        async for topic in ctx.paced(getattr(request, "forgotten_topics_data", ())):
            info = ctx.broker.logs.topic_by_id(topic.topic_id) if topic.topic_id is not None else None
            if info is not None:
                for partition in topic.partitions:
                    session.partitions.pop((info.name, partition), None)
        max_bytes = min(request.max_bytes, ctx.broker.config["fetch.max.bytes"])
        wanted = await _fetchable(ctx, session.partitions, found.refused)
        if wanted:  # each fetch starts one partition further on: a busy one cannot starve the rest
            turn = session.next_epoch % len(wanted)
            wanted = wanted[turn:] + wanted[:turn]
        fetched, lock_ms = await manager.fetch(
            group_id, request.member_id, wanted, max_records=max(0, request.max_records),
            max_bytes=max(0, max_bytes), max_wait_ms=max(0, round(request.max_wait.total_seconds() * 1000)))
    make = ctx.response.make
    entries: dict = {}
    for (topic_id, partition), code in found.refused.items():
        entries[(topic_id, partition)] = _partition(ctx, None, partition, PartitionResult(code))
    answered = set(found.usable) if epoch == INITIAL_EPOCH else set()
    answered.update(acknowledged)
    answered.update(tp for tp, result in fetched.items() if result.acquired or result.error is not ErrorCode.none)
    stats = ctx.broker.topic_stats
    for tp in [tp for tp in session.partitions if tp in answered] + [tp for tp in acknowledged
                                                                     if tp not in session.partitions]:
        await ctx.pace()
        result = fetched.get(tp) or PartitionResult()
        ack = acknowledged.get(tp)
        if ack is not None:
            result.acknowledge_error, result.acknowledge_message = ack.acknowledge_error, ack.acknowledge_message
        topic_id = session.partitions.get(tp) or found.usable.get(tp)
        entries[(topic_id, tp[1])] = _partition(ctx, tp[0], tp[1], result)
        if result.records:
            stats.of(tp[0]).bytes_out += len(result.records)
    return make(
        "ShareFetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
        responses=tuple(make("ShareFetchableTopicResponse", topic_id=topic_id, partitions=tuple(partitions))
                        for topic_id, partitions in by_topic(entries)),
        node_endpoints=(),
    )


async def _fetchable(ctx: RequestContext, partitions, refused: dict) -> list:
    """The session's partitions this fetch reads, checked again as Kafka checks every
    partition of a share session on every request: Topic READ (TOPIC_AUTHORIZATION_FAILED)
    and the topic id still the topic's (UNKNOWN_TOPIC_ID: deleted, or made anew); the
    refused ones go into `refused`."""
    wanted = []
    logs = ctx.broker.logs
    async for tp, topic_id in ctx.paced(list(partitions.items())):
        info = logs.topic(tp[0])
        if info is None or info.topic_id != topic_id:
            refused.setdefault((topic_id, tp[1]), ErrorCode.unknown_topic_id)
        elif not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, tp[0]):
            refused.setdefault((topic_id, tp[1]), ErrorCode.topic_authorization_failed)
        else:
            wanted.append((tp, topic_id))
    return wanted


def _partition(ctx: RequestContext, topic: str | None, partition: int, result: PartitionResult) -> object:
    make = ctx.response.make
    return make(
        "PartitionData",
        partition_index=partition,
        error_code=result.error,
        error_message=result.error_message,
        acknowledge_error_code=result.acknowledge_error,
        acknowledge_error_message=result.acknowledge_message,
        current_leader=leader_and_epoch(ctx, topic, partition),
        records=result.records,
        acquired_records=tuple(make("AcquiredRecords", first_offset=run.first, last_offset=run.last,
                                    delivery_count=run.delivery_count) for run in result.acquired),
    )


def _error(ctx: RequestContext, code: ErrorCode, message: str | None = None) -> object:
    make = ctx.response.make
    return make("ShareFetchResponse", throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                acquisition_lock_timeout=datetime.timedelta(0), responses=(), node_endpoints=())
