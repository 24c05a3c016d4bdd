"""InitProducerId (key 22), v0-v5.

- Without a transactional id: a fresh producer id from the persisted id blocks, epoch 0,
  as Kafka does (a reconnecting idempotent producer is a new producer). In cluster mode
  the blocks are reserved in the metadata store; while none is at hand the answer is
  COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka's.
- With a transactional id: the transaction coordinator bumps the epoch (fencing older
  instances), aborts an Ongoing transaction left by a previous instance (answering
  CONCURRENT_TRANSACTIONS until that abort is complete), rotates the producer id when
  the epoch is exhausted, and refuses a timeout above `transaction.max.timeout.ms`
  (INVALID_TRANSACTION_TIMEOUT). CONCURRENT_TRANSACTIONS also while a transition is
  pending or the markers of PrepareCommit/PrepareAbort are being written.
- KIP-360 (v3+, the producer id and epoch the client had): accepted, as in Kafka, when
  they are the current producer id (its epoch bumped; a retry with the previous epoch
  gets the same answer again), when the id has no producer yet (it expired: a fresh
  producer id), or when they are the previous producer id with an exhausted epoch (a
  retry of the rotation); otherwise PRODUCER_FENCED.
- v6 (KIP-939): `enable2Pc` makes the transaction wait for its decision without a
  timeout (needs `transaction.two.phase.commit.enable=true`, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED); `keepPreparedTxn` keeps an Ongoing
  transaction instead of aborting it, bumps the epoch, and returns the kept
  transaction's producer id and epoch so the caller can commit or abort it with EndTxn.
- PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH below v4.
- Authorization (with an authorizer), before anything else, as Kafka's KafkaApis: a
  transactional id needs WRITE on it, and with `enable2Pc` (KIP-939) TWO_PHASE_COMMIT on
  it too, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an idempotent producer (no
  transactional id) needs IDEMPOTENT_WRITE on the cluster or, since KIP-679, WRITE on
  some topic, else CLUSTER_AUTHORIZATION_FAILED. Refusals carry producer id and epoch -1.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.clock import now_ms
from oncelog.coordinator.txn.coordinator import InitResult
from oncelog.kernel.node import ProducerIdsUnavailable
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(22, "InitProducerId", range(0, 7))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    refusal = _authorization_error(ctx, request)
    if refusal is not None:
        return make("InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=refusal,
                    producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None:
        try:
            producer_id = ctx.broker.producer_ids.next_producer_id()
        except ProducerIdsUnavailable:
            return make("InitProducerIdResponse", throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.coordinator_load_in_progress, producer_id=-1, producer_epoch=-1)
        return make(
            "InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
            producer_id=producer_id, producer_epoch=0,
        )
    result = ctx.broker.txn_coordinator.init_producer_id(
        request.transactional_id,
        int(request.transaction_timeout.total_seconds() * 1000),
        getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1),
        now_ms(),
        enable_2pc=getattr(request, "enable2_pc", False),
        keep_prepared=getattr(request, "keep_prepared_txn", False),
    )
    error = await once_replicated(ctx, request.transactional_id, result.error)
    if error is not ErrorCode.none:
        result = InitResult(error)
    return make(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=fenced_for_version(result.error, ctx.version, 4),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
        ongoing_txn_producer_id=result.ongoing_txn_producer_id,
        ongoing_txn_producer_epoch=result.ongoing_txn_producer_epoch,
    )


def _authorization_error(ctx: RequestContext, request) -> ErrorCode | None:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        if getattr(request, "enable2_pc", False) and not ctx.authorize(
                AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        return None
    acls = ctx.broker.acls
    if acls is None or ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE):
        return None
    if acls.authorizer.authorize_by_resource_type(ctx.principal, ctx.client_host, AclOperation.WRITE,
                                                  ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed
