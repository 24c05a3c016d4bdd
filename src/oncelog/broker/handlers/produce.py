"""Produce (key 0), v3-v12 (v12 only with `transaction.version` finalized at 2).

- Authorization (with an authorizer), first, as Kafka's KafkaApis: a request carrying
  transactional batches needs WRITE on its transactional id, else every partition gets
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended; each topic needs WRITE,
  else its partitions get TOPIC_AUTHORIZATION_FAILED, asked before whether the topic
  exists (an unknown topic one may not write is not revealed as unknown). One
  authorization per topic per request. acks=0 gets no answer, so a refusal closes the
  connection, as every other failure does.
- acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS for every partition); acks=0 gets
  no response at all, and the connection is closed if any partition failed. On a
  single node acks=-1 and acks=1 are acknowledged after the same append (the ISR is
  this broker).
- Cluster mode: only the partition's leader appends (else NOT_LEADER_OR_FOLLOWER, or
  LEADER_NOT_AVAILABLE while it has none), stamping its leader epoch into the batch.
  acks=-1 is refused with NOT_ENOUGH_REPLICAS when the ISR is below the topic's
  `min.insync.replicas`, and is answered once the high watermark passes the batch:
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
  NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT after the request's
  timeout. A duplicate of a recent batch waits for its original the same way.
- Each partition's records must be exactly one magic-2 batch: checked in
  `oncelog.broker.partitions.append_records` (size, CRC32C, compression, control bit).
  A magic 0/1 message set is INVALID_RECORD, a magic above 2 CORRUPT_MESSAGE, as in Kafka.
- Writes to internal topics (`__consumer_offsets`, `__transaction_state`) get
  INVALID_TOPIC_EXCEPTION unless the client id is `__admin_client`, as in Kafka.
- Produce never auto-creates topics (Kafka creates them only from Metadata).
- A record without a key on a compacted topic (cleanup.policy has compact) is
  INVALID_RECORD with Kafka's message; only then are records decoded (decompressed).
- A transactional batch must belong to the producer's ongoing transaction (KIP-890
  part 1, checked in `append_records`): a partition not added gets INVALID_TXN_STATE, a
  fenced epoch INVALID_PRODUCER_EPOCH, a transaction whose markers are being written
  NOT_ENOUGH_REPLICAS (retried). v12 (KIP-890 part 2, a transaction version 2 client,
  which sends no AddPartitionsToTxn) adds the partition to the transaction instead,
  after the same producer id and epoch checks; as the epoch is bumped at the end of
  every transaction, a late batch of an earlier transaction gets INVALID_PRODUCER_EPOCH.
- Cluster mode, the transactional id coordinated by another broker: before appending,
  the leader asks that coordinator in one AddPartitionsToTxn v5 (`verify_only` below
  v12, an add from v12) about the partitions whose transaction is not open here yet
  (coordinator/txn/verification.py), as Kafka's AddPartitionsToTxnManager does. The
  answers reach the producer as above; a coordinator that moved, is loading or does
  not answer gives NOT_ENOUGH_REPLICAS (retried). A transaction that ends between the
  answer and the append (its marker lands first) refuses the batch INVALID_TXN_STATE.
- Deviation: a transactional batch that repeats the sequence numbers of a batch from a
  transaction that has ended (its marker is written) is OUT_OF_ORDER_SEQUENCE_NUMBER,
  where Kafka answers it as a duplicate with the old offsets: no client may retry an
  ended transaction's batch, and librdkafka reuses the sequences of aborted records in
  the same epoch, whose new records would otherwise be lost from the next transaction
  (storage/producer_state.py).
- Deviation: otherwise records inside a batch are not decompressed or validated one by
  one; the batch header and CRC are.
"""

from __future__ import annotations

import asyncio
import datetime

from oncelog.broker.dispatch import CloseConnection, RequestContext, api
from oncelog.broker.partitions import ProduceOutcome, append_records, verify_with_remote_coordinator
from oncelog.clock import now_ms
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.protocol.record_batch import ATTRIBUTES_POSITION, MAGIC, MAGIC_POSITION, TRANSACTIONAL_BIT
from oncelog.security.acl import AclOperation, ResourceType

# Kafka lets only this client id (its old AdminUtils' id) write to internal topics.
ADMIN_CLIENT_ID = "__admin_client"
# The attributes' low byte, which holds the transactional bit.
_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_POSITION + 1
_TRANSACTIONAL_ID_REFUSED = ProduceOutcome(ErrorCode.transactional_id_authorization_failed,
                                           error_message="Transactional Id authorization failed.")
_TOPIC_REFUSED = ProduceOutcome(ErrorCode.topic_authorization_failed)


@api(0, "Produce", range(3, 13), first_transaction_v2_version=12)
async def handle(ctx: RequestContext, request) -> object | None:
    make = ctx.response.make
    acks = request.acks
    refused = _refused_by_acls(ctx, request) if ctx.broker.acls is not None else {}
    verified = {}
    if acks in (-1, 0, 1) and request.transactional_id is not None:
        verified = await verify_with_remote_coordinator(
            ctx.broker, request.transactional_id,
            [(topic.name, data.index, data.records) for topic in request.topic_data
             if topic.name not in refused for data in topic.partition_data],
            ctx.version,
        )
    now = now_ms()
    outcomes: list[tuple[str, list[tuple[int, ProduceOutcome]]]] = []
    failed = False
    for topic in request.topic_data:
        partitions = []
        refusal = refused.get(topic.name)
        for data in topic.partition_data:
            verification = verified.get((topic.name, data.index))
            if refusal is not None:
                outcome = refusal
            elif acks not in (-1, 0, 1):
                outcome = ProduceOutcome(ErrorCode.invalid_required_acks)
            elif isinstance(verification, ProduceOutcome):
                outcome = verification
            else:
                outcome = append_records(
                    ctx.broker, topic.name, data.index, data.records,
                    produce_version=ctx.version, now_ms=now, transactional_id=request.transactional_id,
                    internal_topics_allowed=ctx.client_id == ADMIN_CLIENT_ID, acks=acks,
                    verification_guard=verification,
                )
            failed = failed or outcome.error_code != ErrorCode.none
            partitions.append((data.index, outcome))
        outcomes.append((topic.name, partitions))
    if acks == -1:
        outcomes = await _wait_for_replication(ctx, outcomes, request.timeout.total_seconds())
    _count(ctx, request, outcomes)
    if acks == 0:
        if failed:  # the only way to tell an acks=0 producer something went wrong
            raise CloseConnection("acks=0 produce request failed for at least one partition")
        return None
    topics = tuple(
        make("TopicProduceResponse", name=name, partition_responses=tuple(
            make(
                "PartitionProduceResponse",
                index=index,
                error_code=outcome.error_code,
                base_offset=outcome.base_offset,
                log_append_time=_datetime(outcome.log_append_time_ms),
                log_start_offset=outcome.log_start_offset,
                record_errors=(),
                error_message=outcome.error_message,
            )
            for index, outcome in partitions
        ))
        for name, partitions in outcomes
    )
    return make("ProduceResponse", responses=topics, throttle_time=NO_THROTTLE)


def _refused_by_acls(ctx: RequestContext, request) -> dict[str, ProduceOutcome]:
    """The topics of the request the principal may not write to, with their answer:
    all of them when the request has transactional batches and its transactional id
    may not be written (Kafka refuses the whole request then)."""
    names = {topic.name for topic in request.topic_data}
    if _has_transactional_records(request) and (
            request.transactional_id is None
            or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)):
        return dict.fromkeys(names, _TRANSACTIONAL_ID_REFUSED)
    return {name: _TOPIC_REFUSED for name in names if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)}


def _has_transactional_records(request) -> bool:
    """Whether a partition's batch is transactional, from its header's attributes, as
    Kafka's RequestUtils.hasTransactionalRecords (one batch per partition is all
    `append_records` accepts; a malformed one is refused there)."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            records = data.records
            if (records is not None and len(records) > _ATTRIBUTES_LOW_BYTE and records[MAGIC_POSITION] == MAGIC
                    and records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_BIT):
                return True
    return False


def _count(ctx: RequestContext, request, outcomes) -> None:
    """Per-topic traffic for /metrics (oncelog.broker.topic_stats)."""
    sizes = {(topic.name, data.index): len(data.records or b"") for topic in request.topic_data
             for data in topic.partition_data}
    stats = ctx.broker.topic_stats
    for name, partitions in outcomes:
        counts = stats.of(name)
        for index, outcome in partitions:
            if outcome.error_code == ErrorCode.none:
                counts.bytes_in += sizes.get((name, index), 0)
                if outcome.base_offset >= 0 and outcome.end_offset > outcome.base_offset:
                    counts.messages_in += outcome.end_offset - outcome.base_offset
            else:
                counts.failed_produce += 1


async def _wait_for_replication(ctx: RequestContext, outcomes, timeout_s: float):
    """acks=all: answer each appended partition once its high watermark passes the
    batch, which a duplicate waits for too (its original may not be replicated yet).
    Kafka's DelayedProduce errors: the ISR shrank below min.insync.replicas
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND), leadership lost, or the request's timeout."""
    leadership = ctx.broker.leadership
    codes: dict[tuple[str, int], ErrorCode] = {}
    waiting: list[tuple[str, int, int]] = []
    for name, partitions in outcomes:
        for index, outcome in partitions:
            if outcome.error_code == ErrorCode.none:
                reached = leadership.replication_reached(name, index, outcome.end_offset)
                if reached is None:
                    waiting.append((name, index, outcome.end_offset))
                elif reached is not ErrorCode.none:
                    codes[(name, index)] = reached
    if waiting:  # only then a task per partition (always already replicated on a standalone broker)
        answers = await asyncio.gather(*(leadership.wait_for_replication(name, index, end_offset, timeout_s)
                                         for name, index, end_offset in waiting))
        codes.update(((name, index), code) for (name, index, _end), code in zip(waiting, answers, strict=True)
                     if code is not ErrorCode.none)
    if not codes:
        return outcomes
    return [
        (name, [
            (index, outcome if (name, index) not in codes else ProduceOutcome(codes[(name, index)]))
            for index, outcome in partitions
        ])
        for name, partitions in outcomes
    ]


def _datetime(epoch_ms: int) -> datetime.datetime | None:
    """kio carries log_append_time as an aware datetime; -1 (no time) is None."""
    if epoch_ms < 0:
        return None
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
