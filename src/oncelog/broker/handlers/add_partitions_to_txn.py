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
        answers = await asyncio.gather(*(_answer_transaction(ctx, transaction) for transaction in request.transactions))
        return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                    results_by_transaction=tuple(
                        make("AddPartitionsToTxnResult", transactional_id=transaction.transactional_id,
                             topic_results=_topic_results(make, transaction.topics, errors))
                        for transaction, errors in zip(request.transactions, answers, strict=True)
                    ))
    requested = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors: dict[TopicPartition, ErrorCode] | None
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        errors = dict.fromkeys(requested, ErrorCode.transactional_id_authorization_failed)
    else:
        errors = _refused_partitions(ctx, requested, _unwritable_topics(ctx, request.v3_and_below_topics))
    if errors is None:
        error = ctx.broker.txn_coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            set(requested),
            now_ms(),
        )
        error = await once_replicated(ctx, request.v3_and_below_transactional_id, error)
        error = fenced_for_version(error, ctx.version, 2)
        errors = dict.fromkeys(requested, error)
    return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=_topic_results(make, request.v3_and_below_topics, errors))


async def _answer_transaction(ctx: RequestContext, transaction) -> dict[TopicPartition, ErrorCode]:
    """One transaction of a v4+ request: verified partition by partition, or added."""
    requested = [(t.name, p) for t in transaction.topics for p in t.partitions]
    if not transaction.transactional_id:
        return dict.fromkeys(requested, ErrorCode.invalid_request)
    errors = _refused_partitions(ctx, requested, frozenset())
    if errors is not None:
        return errors
    coordinator = ctx.broker.txn_coordinator
    if transaction.verify_only:
        errors = {}
        for tp in requested:
            error = coordinator.verify_partition(transaction.transactional_id, transaction.producer_id,
                                                 transaction.producer_epoch, tp)
            if error is ErrorCode.invalid_txn_state:
                error = ErrorCode.transaction_abortable  # Kafka's coordinator's own answer
            errors[tp] = error
        return errors
    error = coordinator.add_partitions(transaction.transactional_id, transaction.producer_id,
                                       transaction.producer_epoch, set(requested), now_ms(),
                                       transaction_version=IMPLICIT_ADD_TRANSACTION_VERSION)
    error = await once_replicated(ctx, transaction.transactional_id, error)
    return dict.fromkeys(requested, error)


def _unwritable_topics(ctx: RequestContext, topics) -> frozenset[str]:
    """The topics a client's request may not add: internal ones, and those the principal
    may not WRITE to (one authorization per topic)."""
    names = {topic.name for topic in topics}
    return frozenset(name for name in names
                     if name in INTERNAL_TOPICS or not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name))


def _refused_partitions(ctx: RequestContext, requested: list[TopicPartition],
                        unauthorized: frozenset[str]) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka refuses the whole transaction when a partition may not be written
    (TOPIC_AUTHORIZATION_FAILED) or does not exist (UNKNOWN_TOPIC_OR_PARTITION): the
    others get OPERATION_NOT_ATTEMPTED. None when every partition may be added."""
    refused = {}
    for tp in requested:
        if tp[0] in unauthorized:
            refused[tp] = ErrorCode.topic_authorization_failed
        elif not ctx.broker.leadership.has_partition(*tp):
            refused[tp] = ErrorCode.unknown_topic_or_partition
    if not refused:
        return None
    return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in requested}


def _topic_results(make, topics, errors: dict[TopicPartition, ErrorCode]) -> tuple:
    return tuple(
        make(
            "AddPartitionsToTxnTopicResult",
            name=topic.name,
            results_by_partition=tuple(
                make("AddPartitionsToTxnPartitionResult", partition_index=p,
                     partition_error_code=errors[(topic.name, p)])
                for p in topic.partitions
            ),
        )
        for topic in topics
    )
