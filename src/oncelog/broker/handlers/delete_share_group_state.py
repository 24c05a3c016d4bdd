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
from oncelog.broker.handlers._share_state import key_of, refusal
from oncelog.coordinator.share.partition import UNINITIALIZED
from oncelog.protocol.messages import ErrorCode


@api(86, "DeleteShareGroupState", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    refused = refusal(ctx, request.group_id)
    results = []
    async for topic in ctx.paced(request.topics):
        partitions = []
        async for data in ctx.paced(topic.partitions):
            code = refused
            key = key_of(request.group_id, topic.topic_id, data.partition)
            if code is ErrorCode.none:
                code = ErrorCode.unknown_topic_id if key is None else await ctx.broker.share_state.reset(
                    key, UNINITIALIZED, now_ms=clock.now_ms())
            partitions.append(make("PartitionResult", partition=data.partition, error_code=code, error_message=None))
        results.append(make("DeleteStateResult", topic_id=topic.topic_id, partitions=tuple(partitions)))
    return make("DeleteShareGroupStateResponse", results=tuple(results))
