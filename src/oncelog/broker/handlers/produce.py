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
  `oncelog.kernel.partitions.append_records` (size, CRC32C, compression, control bit).
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
from oncelog.clock import now_ms
from oncelog.kernel.partitions import ProduceOutcome, append_records, verify_with_remote_coordinator
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
    refused = await _refused_by_acls(ctx, request) if ctx.broker.acls is not None else {}
    verified = {}
    if acks in (-1, 0, 1) and request.transactional_id is not None:
        verified = await verify_with_remote_coordinator(
            ctx.broker, request.transactional_id,
            ((topic.name, data.index, data.records) for topic in request.topic_data
             if topic.name not in refused for data in topic.partition_data),
            ctx.version, pace=ctx.pace,
        )
    now = now_ms()
    outcomes: list[tuple[str, list[_Answer]]] = []
    failed = False
    for topic in request.topic_data:
        await ctx.pace()
        partitions = []
        refusal = refused.get(topic.name)
        for data in topic.partition_data:
            await ctx.pace()
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
            partitions.append((data.index, outcome, len(data.records or b"")))
        outcomes.append((topic.name, partitions))
    if acks == -1:
        outcomes = await _wait_for_replication(ctx, outcomes, request.timeout.total_seconds())
    # Counted for /metrics as the response is made: one more pass over the partitions only.
    stats = ctx.broker.topic_stats
    topics = []
    for name, partitions in outcomes:
        await ctx.pace()
        counts = stats.of(name)
        responses = []
        for index, outcome, record_bytes in partitions:
            await ctx.pace()
            _count(counts, outcome, record_bytes)
            if acks != 0:
                responses.append(make(
                    "PartitionProduceResponse",
                    index=index,
                    error_code=outcome.error_code,
                    base_offset=outcome.base_offset,
                    log_append_time=_datetime(outcome.log_append_time_ms),
                    log_start_offset=outcome.log_start_offset,
                    record_errors=(),
                    error_message=outcome.error_message,
                ))
        topics.append(make("TopicProduceResponse", name=name, partition_responses=tuple(responses)))
    if acks == 0:
        if failed:  # the only way to tell an acks=0 producer something went wrong
            raise CloseConnection("acks=0 produce request failed for at least one partition")
        return None
    return make("ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE)


# One partition's outcome: (index, outcome, the bytes of its records).
_Answer = tuple[int, ProduceOutcome, int]


async def _refused_by_acls(ctx: RequestContext, request) -> dict[str, ProduceOutcome]:
    """The topics of the request the principal may not write to, with their answer:
    all of them when the request has transactional batches and its transactional id
    may not be written (Kafka refuses the whole request then)."""
    names = {topic.name async for topic in ctx.paced(request.topic_data)}
    if await _has_transactional_records(ctx, request) and (
            request.transactional_id is None
            or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)):
        return dict.fromkeys(names, _TRANSACTIONAL_ID_REFUSED)
    return {name: _TOPIC_REFUSED async for name in ctx.paced(names)
            if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)}


async def _has_transactional_records(ctx: RequestContext, request) -> bool:
    """Whether a partition's batch is transactional, from its header's attributes, as
    Kafka's RequestUtils.hasTransactionalRecords (one batch per partition is all
    `append_records` accepts; a malformed one is refused there)."""
    for topic in request.topic_data:
        await ctx.pace()
        for data in topic.partition_data:
            await ctx.pace()
            records = data.records
            if (records is not None and len(records) > _ATTRIBUTES_LOW_BYTE and records[MAGIC_POSITION] == MAGIC
                    and records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_BIT):
                return True
    return False


def _count(counts, outcome: ProduceOutcome, record_bytes: int) -> None:
    """A partition's traffic, for /metrics (oncelog.broker.topic_stats)."""
    if outcome.error_code == ErrorCode.none:
        counts.bytes_in += record_bytes
        if outcome.base_offset >= 0 and outcome.end_offset > outcome.base_offset:
            counts.messages_in += outcome.end_offset - outcome.base_offset
    else:
        counts.failed_produce += 1


async def _wait_for_replication(ctx: RequestContext, outcomes: list[tuple[str, list[_Answer]]], timeout_s: float
                                ) -> list[tuple[str, list[_Answer]]]:
    """acks=all: answer each appended partition once its high watermark passes the
    batch, which a duplicate waits for too (its original may not be replicated yet).
    Kafka's DelayedProduce errors: the ISR shrank below min.insync.replicas
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND), leadership lost, or the request's timeout. A
    partition's batches are waited for one after the other, until one deadline for
    all (its later batches end later: the answers of concurrent waits)."""
    leadership = ctx.broker.leadership
    codes: dict[tuple[str, int], ErrorCode] = {}
    waiting: dict[tuple[str, int], list[int]] = {}  # end offsets, in the request's order
    for name, partitions in outcomes:
        await ctx.pace()
        for index, outcome, _bytes in partitions:
            await ctx.pace()
            if outcome.error_code == ErrorCode.none:
                reached = leadership.replication_reached(name, index, outcome.end_offset)
                if reached is None:
                    waiting.setdefault((name, index), []).append(outcome.end_offset)
                elif reached is not ErrorCode.none:
                    codes[(name, index)] = reached
    if waiting:  # only then a task per partition (always already replicated on a standalone broker)
        deadline = asyncio.get_running_loop().time() + timeout_s

        async def wait(tp: tuple[str, int], end_offsets: list[int]) -> None:
            for end_offset in end_offsets:
                await ctx.pace()
                remaining = max(0.0, deadline - asyncio.get_running_loop().time())
                code = await leadership.wait_for_replication(*tp, end_offset, remaining)
                if code is not ErrorCode.none:
                    codes[tp] = code

        await asyncio.gather(*(wait(tp, end_offsets) for tp, end_offsets in waiting.items()))
    if not codes:
        return outcomes
    answered = []
    for name, partitions in outcomes:
        await ctx.pace()
        answers = []
        for index, outcome, record_bytes in partitions:
            await ctx.pace()
            code = codes.get((name, index))
            answers.append((index, outcome if code is None else ProduceOutcome(code), record_bytes))
        answered.append((name, answers))
    return answered


def _datetime(epoch_ms: int) -> datetime.datetime | None:
    """kio carries log_append_time as an aware datetime; -1 (no time) is None."""
    if epoch_ms < 0:
        return None
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
