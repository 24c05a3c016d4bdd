"""AddOffsetsToTxn (key 25), v0-v3.

- Adds the group's `__consumer_offsets` partition to the producer's transaction, so the
  offsets sent with TxnOffsetCommit become visible with the COMMIT marker.
- Errors as AddPartitionsToTxn (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2).
- Authorization (with an authorizer), first, as Kafka's KafkaApis: WRITE on the
  transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
  (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.clock import now_ms
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(25, "AddOffsetsToTxn", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    else:
        error = ctx.broker.txn_coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, now_ms()
        )
        error = await once_replicated(ctx, request.transactional_id, error)
    return ctx.response.make(
        "AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE, error_code=fenced_for_version(error, ctx.version, 2)
    )
