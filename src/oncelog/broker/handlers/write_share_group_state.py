"""WriteShareGroupState (key 85), v0-v1: a share partition's leader persisting its state
with its share coordinator (coordinator/share/persister.py sends it).

- Per partition: the state (state epoch, start offset, state batches) replaces the one
  kept, answered once it is on the ISR of the key's `__share_group_state` partition;
  FENCED_LEADER_EPOCH from a leader older than the last writer, NOT_COORDINATOR where
  this broker does not lead that partition, INVALID_REQUEST for a state no leader could
  have written (batches out of order or overlapping, before the start offset, unknown
  states, spanning more than twice group.share.partition.max.record.locks).
- Authorization, as Kafka's KafkaApis: CLUSTER_ACTION on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

from oncelog import clock
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share_state import each_partition
from oncelog.coordinator.share.partition import RecordState, ShareState, StateBatch
from oncelog.protocol.messages import ErrorCode

_STATES = {int(state) for state in RecordState}


@api(85, "WriteShareGroupState", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    limit = ctx.broker.config["group.share.partition.max.record.locks"]

    async def serve(key, data) -> tuple[ErrorCode, dict]:
        batches = data.state_batches
        if not _valid(data.start_offset, batches, limit):
            return ErrorCode.invalid_request, {}
        state = ShareState(data.start_offset, tuple(
            StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
            for b in batches), data.state_epoch)
        return await ctx.broker.share_state.write(key, state, data.leader_epoch, now_ms=clock.now_ms()), {}

    results = await each_partition(ctx, request, "WriteStateResult", serve)
    return ctx.response.make("WriteShareGroupStateResponse", results=results)


def _valid(start_offset: int, batches, limit: int) -> bool:
    """A state a partition leader could have written: batches in order, not overlapping,
    from the start offset, with known states and counts, spanning no more than the
    window of in-flight records can (twice group.share.partition.max.record.locks, for a
    leader configured with more): anything else could cost the next leader unbounded
    work to load."""
    if start_offset < 0 or len(batches) > limit:
        return False
    previous_last = start_offset - 1
    for batch in batches:
        if not (previous_last < batch.first_offset <= batch.last_offset and batch.delivery_state in _STATES
                and batch.delivery_count >= 0):
            return False
        previous_last = batch.last_offset
    return previous_last - start_offset < 2 * limit
