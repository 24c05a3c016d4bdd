"""EndTxn (key 26), v0-v5 (v5 only with `transaction.version` finalized at 2).

- Ongoing -> PrepareCommit/PrepareAbort, persisted, then answered; the COMMIT/ABORT
  markers and the Complete* record follow right after (see the coordinator).
- Retries (v0-v4): the same outcome on a completed transaction succeeds; the opposite
  outcome is INVALID_TXN_STATE; while the markers are being written the same outcome
  gets CONCURRENT_TRANSACTIONS (the opposite one INVALID_TXN_STATE). Empty (nothing
  added) is INVALID_TXN_STATE.
- INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
- v4 has v3's wire format; it only says the client knows TRANSACTION_ABORTABLE, which
  EndTxn never answers. As in Kafka, v4 still ends the transaction the classic way.
- v5 (KIP-890 part 2, transaction version 2): ending bumps the producer epoch, and the
  response carries the producer id and epoch the client continues with (a new producer
  id at epoch 0 when the epoch is exhausted); the markers carry the bumped epoch. A
  retry names the epoch before the bump and gets the same answer; any other epoch but
  the current one is PRODUCER_FENCED, so a late EndTxn of an earlier transaction cannot
  end the current one. An abort with nothing to abort (Empty, Complete*) succeeds and
  bumps the epoch too. Errors carry producer id and epoch -1, as Kafka's do.
- Authorization (with an authorizer), first: WRITE on the transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in Kafka's KafkaApis.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.clock import now_ms
from oncelog.coordinator.txn.coordinator import EndTxnResult
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

FIRST_TRANSACTION_V2_VERSION = 5


@api(26, "EndTxn", range(0, 6), first_transaction_v2_version=FIRST_TRANSACTION_V2_VERSION)
async def handle(ctx: RequestContext, request) -> object:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ctx.response.make("EndTxnResponse", throttle_time=NO_THROTTLE,
                                 error_code=ErrorCode.transactional_id_authorization_failed,
                                 producer_id=-1, producer_epoch=-1)
    result = ctx.broker.txn_coordinator.end_transaction_result(
        request.transactional_id, request.producer_id, request.producer_epoch,
        commit=request.committed, now=now_ms(),
        transaction_version=2 if ctx.version >= FIRST_TRANSACTION_V2_VERSION else 0,
    )
    error = await once_replicated(ctx, request.transactional_id, result.error)
    if error is not ErrorCode.none:
        result = EndTxnResult(error)
    return ctx.response.make(
        "EndTxnResponse", throttle_time=NO_THROTTLE, error_code=fenced_for_version(result.error, ctx.version, 2),
        producer_id=result.producer_id, producer_epoch=result.producer_epoch,
    )
