"""InitializeShareGroupState (key 83), v0: a share partition set to start at an offset
at its share coordinator (AlterShareGroupOffsets' effect, sent by
coordinator/share/persister.py), with nothing in flight.

- The state epoch is the coordinator's own, one past the state it keeps (the request's
  is not used), which fences the partition leader's writes of the state before: it
  reloads. Answered once the state is on the ISR of `__share_group_state`.
- INVALID_REQUEST for a negative start offset, NOT_COORDINATOR where this broker does
  not lead the key's partition.
- Authorization, as Kafka's KafkaApis: CLUSTER_ACTION on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

from oncelog import clock
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_state import each_partition
from oncelog.protocol.messages import ErrorCode


@api(83, "InitializeShareGroupState", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    async def serve(key, data) -> tuple[ErrorCode, dict]:
        if data.start_offset < 0:
            return ErrorCode.invalid_request, {}
        return await ctx.broker.share_state.reset(key, data.start_offset, now_ms=clock.now_ms()), {}

    results = await each_partition(ctx, request, "InitializeStateResult", serve)
    return ctx.response.make("InitializeShareGroupStateResponse", results=results)
