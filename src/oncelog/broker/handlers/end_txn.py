"""EndTxn (key 26), v0-v3.

- Ongoing -> PrepareCommit/PrepareAbort, persisted, then answered; the COMMIT/ABORT
  markers and the Complete* record follow right after (see the coordinator).
- Retries: the same outcome on a completed transaction succeeds; the opposite outcome
  is INVALID_TXN_STATE; while the markers are being written the same outcome gets
  CONCURRENT_TRANSACTIONS. Empty (nothing added) is INVALID_TXN_STATE.
- INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
- Deviation: v4 (TRANSACTION_ABORTABLE) and v5 (KIP-890 part 2) are not offered.
"""

from __future__ import annotations

from oncelog.broker.broker import now_ms
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version
from oncelog.protocol.messages import NO_THROTTLE


@api(26, "EndTxn", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    error = ctx.broker.txn_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch,
        commit=request.committed, now=now_ms(),
    )
    return ctx.response.make(
        "EndTxnResponse", throttle_time=NO_THROTTLE, error_code=fenced_for_version(error, ctx.version, 2)
    )
