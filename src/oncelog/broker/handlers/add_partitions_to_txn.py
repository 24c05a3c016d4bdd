"""AddPartitionsToTxn (key 24), v0-v3.

- Adds partitions to the producer's transaction (Empty/Complete* -> Ongoing, persisted
  to `__transaction_state` before the answer). Re-adding partitions already in an
  Ongoing transaction succeeds without a write.
- Errors apply to every partition of the request: INVALID_PRODUCER_ID_MAPPING (unknown
  id or producer), PRODUCER_FENCED (old epoch; INVALID_PRODUCER_EPOCH below v2),
  CONCURRENT_TRANSACTIONS while the previous transaction is being completed.
- A partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION and the others
  OPERATION_NOT_ATTEMPTED, and nothing is added, as in Kafka.
- Clients of transaction version 2 (KIP-890 part 2) do not send it: Produce v12 and
  TxnOffsetCommit v5 add their partitions themselves (see those handlers). An id whose
  transaction was started by such an implicit add can still be added to with this API.
- Deviation: v4+ (batched, broker-to-coordinator verification and, with
  `verify_only` false, the add of Produce v12) is not offered: it is what brokers send
  to the transaction coordinator, and on a single node the Produce path asks its own
  coordinator in-process (KIP-890 parts 1 and 2).
"""

from __future__ import annotations

from oncelog.broker.broker import now_ms
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(24, "AddPartitionsToTxn", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    requested = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    missing = {tp for tp in requested if not ctx.broker.leadership.has_partition(*tp)}
    if missing:
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in missing else ErrorCode.operation_not_attempted
                  for tp in requested}
    else:
        error = ctx.broker.txn_coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            set(requested),
            now_ms(),
        )
        error = await once_replicated(ctx, request.v3_and_below_transactional_id, error)
        error = fenced_for_version(error, ctx.version, 2)
        errors = {tp: error for tp in requested}
    results = tuple(
        make(
            "AddPartitionsToTxnTopicResult",
            name=topic.name,
            results_by_partition=tuple(
                make("AddPartitionsToTxnPartitionResult", partition_index=p, partition_error_code=errors[(topic.name, p)])
                for p in topic.partitions
            ),
        )
        for topic in request.v3_and_below_topics
    )
    return make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=results)
