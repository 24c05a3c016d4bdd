"""ReadShareGroupState (key 84), v0: a share partition leader taking over a share
partition asks its share coordinator (the leader of the key's `__share_group_state`
partition) for the persisted state (coordinator/share/persister.py sends it).

- Per partition: the state epoch, start offset and state batches, or start offset -1
  for a share partition never initialized. A leader epoch newer than the last writer's
  is recorded (its predecessor's late writes are then fenced); an older one is
  FENCED_LEADER_EPOCH. NOT_COORDINATOR where this broker does not lead the key's
  partition.
- Authorization, as Kafka's KafkaApis: CLUSTER_ACTION on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

from oncelog import clock
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_state import key_of, refusal
from oncelog.coordinator.share.persister import NO_STATE
from oncelog.protocol.messages import ErrorCode


@api(84, "ReadShareGroupState", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    refused = refusal(ctx, request.group_id)
    results = []
    async for topic in ctx.paced(request.topics):
        partitions = []
        async for wanted in ctx.paced(topic.partitions):
            code, state = refused, None
            key = key_of(request.group_id, topic.topic_id, wanted.partition)
            if code is ErrorCode.none:
                if key is None:
                    code = ErrorCode.unknown_topic_id
                else:
                    code, state = await ctx.broker.share_state.read_for_leader(key, wanted.leader_epoch,
                                                                              now_ms=clock.now_ms())
            partitions.append(make(
                "PartitionResult", partition=wanted.partition, error_code=code, error_message=None,
                state_epoch=-1 if state is None else state.state_epoch,
                start_offset=NO_STATE if state is None else state.start_offset,
                state_batches=() if state is None else tuple(
                    make("StateBatch", first_offset=b.first, last_offset=b.last, delivery_state=int(b.state),
                         delivery_count=b.delivery_count) for b in state.batches)))
        results.append(make("ReadStateResult", topic_id=topic.topic_id, partitions=tuple(partitions)))
    return make("ReadShareGroupStateResponse", results=tuple(results))
