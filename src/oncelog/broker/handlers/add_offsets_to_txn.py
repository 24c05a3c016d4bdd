"""AddOffsetsToTxn (key 25), v0-v3.

- Adds the group's `__consumer_offsets` partition to the producer's transaction, so the
  offsets sent with TxnOffsetCommit become visible with the COMMIT marker.
- Errors as AddPartitionsToTxn (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._txn import fenced_for_version, once_replicated
from oncelog.clock import now_ms
from oncelog.protocol.messages import NO_THROTTLE


@api(25, "AddOffsetsToTxn", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    error = ctx.broker.txn_coordinator.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, now_ms()
    )
    error = await once_replicated(ctx, request.transactional_id, error)
    return ctx.response.make(
        "AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE, error_code=fenced_for_version(error, ctx.version, 2)
    )
