"""ListPartitionReassignments (key 46), v0.

- A single node never reassigns a partition (see AlterPartitionReassignments), so no
  reassignment is ever in progress: the answer lists no topics, whether `topics` is
  null (all) or names topics, existing or not, as Kafka's controller answers then.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(46, "ListPartitionReassignments", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    return ctx.response.make("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                             error_code=ErrorCode.none, error_message=None, topics=())
