"""ListTransactions (key 66), v0-v2.

- Filters: states (by Kafka's state names; unknown names are returned in
  `unknown_state_filters`), producer ids, `duration_filter` (v1, as Kafka applies it:
  in every state, ids whose last transaction started more than that many ms ago; an id
  that never started one counts as started at -1 and is kept) and
  `transactional_id_pattern` (v2: a regular expression).
- With an authorizer, only the transactional ids the principal may DESCRIBE are listed,
  as in Kafka's KafkaApis.
"""

from __future__ import annotations

import re

from oncelog.broker.dispatch import RequestContext, api
from oncelog.clock import now_ms
from oncelog.coordinator.txn.state import TransactionState
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(66, "ListTransactions", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    states, unknown = set(), []
    for name in request.state_filters:
        await ctx.pace()
        state = TransactionState.from_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    if unknown and not states:
        found = []  # only unknown states asked for: nothing can match
    else:
        duration = request.duration_filter if ctx.version >= 1 else -1
        producer_ids = {producer_id async for producer_id in ctx.paced(request.producer_id_filters)}
        found = ctx.broker.txn_coordinator.list(states or None, producer_ids or None, duration, now_ms())
    pattern = getattr(request, "transactional_id_pattern", None)
    if pattern:
        try:
            compiled = re.compile(pattern)
        except re.error:
            return make("ListTransactionsResponse", throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.invalid_regular_expression,
                        unknown_state_filters=(), transaction_states=())
        found = [m async for m in ctx.paced(found) if compiled.fullmatch(m.transactional_id)]
    if ctx.broker.acls is not None:
        found = [m async for m in ctx.paced(found)
                 if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id)]
    return make(
        "ListTransactionsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple([
            make("TransactionState", transactional_id=m.transactional_id, producer_id=m.producer_id,
                 transaction_state=m.state.display_name)
            async for m in ctx.paced(found)
        ]),
    )
