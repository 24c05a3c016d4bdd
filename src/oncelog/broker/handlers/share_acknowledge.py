"""ShareAcknowledge (key 79), v1-v2: a share group member's acknowledgements of the
records it acquired, without fetching more (KIP-932; the share consumer's commitSync,
commitAsync and close).

- It continues the member's share session: the previous epoch plus one, or -1 to close
  it once the acknowledgements are applied (releasing what the member still holds);
  epoch 0 is INVALID_SHARE_SESSION_EPOCH, no session SHARE_SESSION_NOT_FOUND.
- Per partition, all or none: ACCEPT, RELEASE, REJECT, GAP (and RENEW at v2 with
  IsRenewAck); INVALID_RECORD_STATE for a record the member does not hold,
  INVALID_REQUEST for a malformed batch. Answered once the share partitions' state is
  written (coordinator/share/manager.py).
- Authorization, as Kafka's KafkaApis: Group READ, else GROUP_AUTHORIZATION_FAILED for
  the request; Topic READ per topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

import datetime

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._share import (
    by_topic,
    leader_and_epoch,
    partitions_of,
    request_refusal,
)
from oncelog.coordinator.share.manager import FINAL_EPOCH
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(79, "ShareAcknowledge", range(1, 3))
async def handle(ctx: RequestContext, request) -> object:
    refused = request_refusal(ctx, request)
    if refused is not None:
        return _error(ctx, *refused)
    group_id = request.group_id
    manager = ctx.broker.share_partitions
    outcome = manager.open_session(group_id, request.member_id, request.share_session_epoch, ctx.principal,
                                   fetching=False)
    if outcome.error is not ErrorCode.none:
        return _error(ctx, outcome.error, outcome.message)
    found = await partitions_of(ctx, request.topics)
    results = await manager.acknowledge(group_id, request.member_id, found.acknowledgements,
                                        renew_allowed=bool(getattr(request, "is_renew_ack", False)))
    if request.share_session_epoch == FINAL_EPOCH:
        manager.close_session(group_id, request.member_id)
        ctx.session.forget_at_close(("share-session", group_id, request.member_id))
    entries: dict = {}
    for (topic_id, partition), code in found.refused.items():
        entries[(topic_id, partition)] = _partition(ctx, None, partition, code, None)
    for tp, result in results.items():
        await ctx.pace()
        entries[(found.usable[tp], tp[1])] = _partition(ctx, tp[0], tp[1], result.acknowledge_error,
                                                        result.acknowledge_message)
    for tp in found.usable:  # partitions named without acknowledgements
        entries.setdefault((found.usable[tp], tp[1]), _partition(ctx, tp[0], tp[1], ErrorCode.none, None))
    make = ctx.response.make
    return make(
        "ShareAcknowledgeResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=datetime.timedelta(milliseconds=manager.lock_duration_ms(group_id)),
        responses=tuple(make("ShareAcknowledgeTopicResponse", topic_id=topic_id, partitions=tuple(partitions))
                        for topic_id, partitions in by_topic(entries)),
        node_endpoints=(),
    )


def _partition(ctx: RequestContext, topic: str | None, partition: int, code: ErrorCode,
               message: str | None) -> object:
    return ctx.response.make("PartitionData", partition_index=partition, error_code=code, error_message=message,
                             current_leader=leader_and_epoch(ctx, topic, partition))


def _error(ctx: RequestContext, code: ErrorCode, message: str | None = None) -> object:
    return ctx.response.make("ShareAcknowledgeResponse", throttle_time=NO_THROTTLE, error_code=code,
                             error_message=message, acquisition_lock_timeout=datetime.timedelta(0), responses=(),
                             node_endpoints=())
