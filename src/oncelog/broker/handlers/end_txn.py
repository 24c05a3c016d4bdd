"""EndTxn (key 26), v0-v4.

- Ongoing -> PrepareCommit/PrepareAbort, persisted, then answered; the COMMIT/ABORT
  markers and the Complete* record follow right after (see the coordinator).
- Retries: the same outcome on a completed transaction succeeds; the opposite outcome
  is INVALID_TXN_STATE; while the markers are being written the same outcome gets
  CONCURRENT_TRANSACTIONS (the opposite one INVALID_TXN_STATE). Empty (nothing added)
  is INVALID_TXN_STATE.
- INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
- v4 has v3's wire format; it only says the client knows TRANSACTION_ABORTABLE, which
  EndTxn never answers. As in Kafka, v4 still ends the transaction the classic way.
- Deviation: v5 (KIP-890 part 2, an epoch bump on every transaction) is not offered.
"""

from __future__ import annotations

from oncelog.broker.broker import now_ms
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version
from oncelog.protocol.messages import NO_THROTTLE


@api(26, "EndTxn", range(0, 5))
async def handle(ctx: RequestContext, request) -> object:
    error = ctx.broker.txn_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch,
        commit=request.committed, now=now_ms(),
    )
    return ctx.response.make(
        "EndTxnResponse", throttle_time=NO_THROTTLE, error_code=fenced_for_version(error, ctx.version, 2)
    )
