"""DeleteShareGroupState (key 86), v0: share partitions forgotten at their share
coordinator (DeleteShareGroupOffsets' and DeleteGroups' effect, sent by
coordinator/share/persister.py): each starts again where share.auto.offset.reset says,
at a new state epoch that fences its leader's writes of the state before; answered once
that is on the ISR of `__share_group_state`. NOT_COORDINATOR where this broker does not
lead the key's partition. CLUSTER_ACTION on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from oncelog import clock
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_state import each_partition
from oncelog.coordinator.share.partition import UNINITIALIZED
from oncelog.protocol.messages import ErrorCode


@api(86, "DeleteShareGroupState", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    async def serve(key, _data) -> tuple[ErrorCode, dict]:
        return await ctx.broker.share_state.reset(key, UNINITIALIZED, now_ms=clock.now_ms()), {}

    results = await each_partition(ctx, request, "DeleteStateResult", serve)
    return ctx.response.make("DeleteShareGroupStateResponse", results=results)
