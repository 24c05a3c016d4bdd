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
from oncelog.broker.handlers._share_state import key_of, refusal
from oncelog.protocol.messages import ErrorCode


@api(83, "InitializeShareGroupState", range(0, 1))
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
                if key is None:
                    code = ErrorCode.unknown_topic_id
                elif data.start_offset < 0:
                    code = ErrorCode.invalid_request
                else:
                    code = await ctx.broker.share_state.reset(key, data.start_offset, now_ms=clock.now_ms())
            partitions.append(make("PartitionResult", partition=data.partition, error_code=code, error_message=None))
        results.append(make("InitializeStateResult", topic_id=topic.topic_id, partitions=tuple(partitions)))
    return make("InitializeShareGroupStateResponse", results=tuple(results))
