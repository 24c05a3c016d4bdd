"""AddPartitionsToTxn (key 24), v0-v5.

- v0-v3 (clients): adds partitions to the producer's transaction (Empty/Complete* ->
  Ongoing, persisted to `__transaction_state` before the answer). Re-adding partitions
  already in an Ongoing transaction succeeds without a write.
- Errors apply to every partition of the request: INVALID_PRODUCER_ID_MAPPING (unknown
  id or producer), PRODUCER_FENCED (old epoch; INVALID_PRODUCER_EPOCH below v2),
  CONCURRENT_TRANSACTIONS while the previous transaction is being completed,
  NOT_COORDINATOR when this broker does not coordinate the id.
- A partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION and the others
  OPERATION_NOT_ATTEMPTED, and nothing is added, as in Kafka.
- Clients of transaction version 2 (KIP-890 part 2) do not send it: Produce v12 and
  TxnOffsetCommit v5 add their partitions themselves (see those handlers). An id whose
  transaction was started by such an implicit add can still be added to with this API.
- v4-v5 (brokers, KIP-890): what a partition leader sends to the coordinator of a
  transactional id on another broker (coordinator/txn/verification.py), batched:
  `transactions`, each answered in `results_by_transaction`, all at once.
  `verify_only` true (part 1): per partition, whether it is in the producer's ongoing
  transaction (Kafka's handleVerifyPartitionsInTransaction): NONE, or
  TRANSACTION_ABORTABLE (in v4 too, as Kafka's coordinator answers), or for every
  partition INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS
  (being completed), NOT_COORDINATOR. `verify_only` false (part 2, for Produce v12 and
  TxnOffsetCommit v5): the add of v0-v3 under transaction version 2, answered once
  replicated. An empty transactional id is INVALID_REQUEST. The top-level error code is
  NONE but for CLUSTER_AUTHORIZATION_FAILED (below).
- Authorization (with an authorizer), as Kafka's KafkaApis. v0-v3: WRITE on the
  transactional id, else every partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
  then WRITE on each topic, else its partitions get TOPIC_AUTHORIZATION_FAILED, asked
  before whether they exist, the rest OPERATION_NOT_ATTEMPTED, and nothing is added.
  Internal topics (`__consumer_offsets`, `__transaction_state`) are never authorized
  here, with or without an authorizer, as in Kafka: a group's offsets join a
  transaction through AddOffsetsToTxn. v4-v5 come from brokers: CLUSTER_ACTION on the
  cluster, else the top-level error CLUSTER_AUTHORIZATION_FAILED and no results.
- Offered at every `transaction.version`, as in Kafka: verification is part 1.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.clock import now_ms
from oncelog.names import INTERNAL_TOPICS, TopicPartition
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

FIRST_BATCHED_VERSION = 4
IMPLICIT_ADD_TRANSACTION_VERSION = 2  # Kafka: a request above v3 comes from a transaction version 2 path


@api(24, "AddPartitionsToTxn", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if ctx.version >= FIRST_BATCHED_VERSION:
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
        answers = [await _answer_transaction(ctx, transaction) async for transaction in ctx.paced(request.transactions)]
        await _once_replicated(ctx, answers)
        return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                    results_by_transaction=tuple([
                        make("AddPartitionsToTxnResult", transactional_id=transaction.transactional_id,
                             topic_results=await _topic_results(ctx, transaction.topics, answer.errors))
                        async for transaction, answer in ctx.paced(zip(request.transactions, answers, strict=True))
                    ]))
    requested = [(t.name, p) async for t in ctx.paced(request.v3_and_below_topics)
                 async for p in ctx.paced(t.partitions)]
    errors: dict[TopicPartition, ErrorCode] | None
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        errors = {tp: ErrorCode.transactional_id_authorization_failed async for tp in ctx.paced(requested)}
    else:
        errors = await _refused_partitions(ctx, requested,
                                           await _unwritable_topics(ctx, request.v3_and_below_topics))
    if errors is None:
        error = ctx.broker.txn_coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            {tp async for tp in ctx.paced(requested)},  # every one exists: as many as the cluster has
            now_ms(),
        )
        error = await once_replicated(ctx, request.v3_and_below_transactional_id, error)
        error = fenced_for_version(error, ctx.version, 2)
        errors = {tp: error async for tp in ctx.paced(requested)}
    return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=await _topic_results(ctx, request.v3_and_below_topics, errors))


@dataclass(slots=True)
class _Answer:
    """One transaction of a v4+ request: its partitions' errors, and whether its add
    waits for the id's `__transaction_state` write to be replicated."""

    transactional_id: str
    errors: dict[TopicPartition, ErrorCode]
    added: bool = False


async def _answer_transaction(ctx: RequestContext, transaction) -> _Answer:
    """One transaction of a v4+ request: verified partition by partition, or added (its
    answer then waits for `_once_replicated`)."""
    transactional_id = transaction.transactional_id
    requested = [(t.name, p) async for t in ctx.paced(transaction.topics) async for p in ctx.paced(t.partitions)]
    if not transactional_id:
        return _Answer(transactional_id, {tp: ErrorCode.invalid_request async for tp in ctx.paced(requested)})
    errors = await _refused_partitions(ctx, requested, frozenset())
    if errors is not None:
        return _Answer(transactional_id, errors)
    coordinator = ctx.broker.txn_coordinator
    if transaction.verify_only:
        errors = {}
        async for tp in ctx.paced(requested):
            error = coordinator.verify_partition(transactional_id, transaction.producer_id,
                                                 transaction.producer_epoch, tp)
            if error is ErrorCode.invalid_txn_state:
                error = ErrorCode.transaction_abortable  # Kafka's coordinator's own answer
            errors[tp] = error
        return _Answer(transactional_id, errors)
    error = coordinator.add_partitions(transactional_id, transaction.producer_id, transaction.producer_epoch,
                                       {tp async for tp in ctx.paced(requested)}, now_ms(),
                                       transaction_version=IMPLICIT_ADD_TRANSACTION_VERSION)
    return _Answer(transactional_id, {tp: error async for tp in ctx.paced(requested)},
                   added=error is ErrorCode.none)


async def _once_replicated(ctx: RequestContext, answers: list[_Answer]) -> None:
    """The added transactions' answers, once their writes are on the ISR (NOT_COORDINATOR
    or COORDINATOR_NOT_AVAILABLE when they are not): one wait per `__transaction_state`
    partition, all at once, after every transaction of the request was added."""
    coordinator = ctx.broker.txn_coordinator
    by_partition: dict[int, list[_Answer]] = {}
    async for answer in ctx.paced(answers):
        if answer.added:
            by_partition.setdefault(coordinator.partition_of(answer.transactional_id), []).append(answer)
    replicated = await asyncio.gather(*(coordinator.replicated(added[0].transactional_id)
                                        for added in by_partition.values()))
    for added, error in zip(by_partition.values(), replicated, strict=True):
        if error is ErrorCode.none:
            continue
        async for answer in ctx.paced(added):
            answer.errors = {tp: error async for tp in ctx.paced(answer.errors)}


async def _unwritable_topics(ctx: RequestContext, topics) -> frozenset[str]:
    """The topics a client's request may not add: internal ones, and those the principal
    may not WRITE to (one authorization per topic)."""
    names = {topic.name async for topic in ctx.paced(topics)}
    return frozenset([name async for name in ctx.paced(names)
                      if name in INTERNAL_TOPICS or not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)])


async def _refused_partitions(ctx: RequestContext, requested: list[TopicPartition],
                              unauthorized: frozenset[str]) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka refuses the whole transaction when a partition may not be written
    (TOPIC_AUTHORIZATION_FAILED) or does not exist (UNKNOWN_TOPIC_OR_PARTITION): the
    others get OPERATION_NOT_ATTEMPTED. None when every partition may be added."""
    refused = {}
    async for tp in ctx.paced(requested):
        if tp[0] in unauthorized:
            refused[tp] = ErrorCode.topic_authorization_failed
        elif not ctx.broker.leadership.has_partition(*tp):
            refused[tp] = ErrorCode.unknown_topic_or_partition
    if not refused:
        return None
    return {tp: refused.get(tp, ErrorCode.operation_not_attempted) async for tp in ctx.paced(requested)}


async def _topic_results(ctx: RequestContext, topics, errors: dict[TopicPartition, ErrorCode]) -> tuple:
    make = ctx.response.make
    return tuple([
        make(
            "AddPartitionsToTxnTopicResult",
            name=topic.name,
            results_by_partition=tuple([
                make("AddPartitionsToTxnPartitionResult", partition_index=p,
                     partition_error_code=errors[(topic.name, p)])
                async for p in ctx.paced(topic.partitions)
            ]),
        )
        async for topic in ctx.paced(topics)
    ])
