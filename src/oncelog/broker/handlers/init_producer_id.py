"""InitProducerId (key 22), v0-v5, for idempotent producers.

- Without a transactional id: a fresh producer id from the persisted id blocks, epoch 0,
  as Kafka does (a reconnecting idempotent producer is a new producer).
- `transaction_timeout_ms` is not checked for idempotent producers, as in Kafka.
- With a transactional id: answered by the transaction coordinator once it exists;
  until then COORDINATOR_NOT_AVAILABLE (FindCoordinator is not advertised either).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(22, "InitProducerId", range(0, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if request.transactional_id is not None:
        return make(
            "InitProducerIdResponse", throttle_time=NO_THROTTLE,
            error_code=ErrorCode.coordinator_not_available, producer_id=-1, producer_epoch=-1,
        )
    return make(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=ctx.broker.producer_ids.next_producer_id(),
        producer_epoch=0,
    )
