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
  NONE (Kafka sets it only for CLUSTER_AUTHORIZATION_FAILED; oncelog has no ACLs).
- Offered at every `transaction.version`, as in Kafka: verification is part 1.
"""

from __future__ import annotations

import asyncio

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.clock import now_ms
from oncelog.names import TopicPartition
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode

FIRST_BATCHED_VERSION = 4
IMPLICIT_ADD_TRANSACTION_VERSION = 2  # Kafka: a request above v3 comes from a transaction version 2 path



@api(24, "AddPartitionsToTxn", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if ctx.version >= FIRST_BATCHED_VERSION:
        answers = await asyncio.gather(*(_answer_transaction(ctx, transaction) for transaction in request.transactions))
        return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                    results_by_transaction=tuple(
                        make("AddPartitionsToTxnResult", transactional_id=transaction.transactional_id,
                             topic_results=_topic_results(make, transaction.topics, errors))
                        for transaction, errors in zip(request.transactions, answers, strict=True)
                    ))
    requested = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors = _missing_partitions(ctx, requested)
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
    errors = _missing_partitions(ctx, requested)
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


def _missing_partitions(ctx: RequestContext, requested: list[TopicPartition]) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka refuses the whole transaction when a partition does not exist."""
    missing = {tp for tp in requested if not ctx.broker.leadership.has_partition(*tp)}
    if not missing:
        return None
    return {tp: ErrorCode.unknown_topic_or_partition if tp in missing else ErrorCode.operation_not_attempted
            for tp in requested}


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
