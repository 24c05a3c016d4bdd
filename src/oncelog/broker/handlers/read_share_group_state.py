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
from oncelog.broker.handlers._share_state import each_partition
from oncelog.coordinator.share.partition import UNINITIALIZED
from oncelog.protocol.messages import ErrorCode


@api(84, "ReadShareGroupState", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make

    async def serve(key, wanted) -> tuple[ErrorCode, dict]:
        code, state = await ctx.broker.share_state.read_for_leader(key, wanted.leader_epoch, now_ms=clock.now_ms())
        if state is None:
            return code, {}
        return code, {"state_epoch": state.state_epoch, "start_offset": state.start_offset, "state_batches": tuple(
            make("StateBatch", first_offset=b.first, last_offset=b.last, delivery_state=int(b.state),
                 delivery_count=b.delivery_count) for b in state.batches)}

    results = await each_partition(ctx, request, "ReadStateResult", serve, refused_fields={
        "state_epoch": -1, "start_offset": UNINITIALIZED, "state_batches": ()})
    return make("ReadShareGroupStateResponse", results=results)
