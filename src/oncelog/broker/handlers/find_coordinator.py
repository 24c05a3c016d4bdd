"""FindCoordinator (key 10), v0-v4.

- key_type 0 (group) and 1 (transaction): the coordinator is the leader of the key's
  partition of `__consumer_offsets` / `__transaction_state` (created on first use);
  on a single node that is this broker, once the coordinator has loaded the partition
  (COORDINATOR_LOAD_IN_PROGRESS until then).
- v4 batches keys (`coordinator_keys`) and answers one entry per key; v0-v3 take one
  `key` and answer at the top level.
- A coordinator type the broker does not run yet, or key_type 2 (share groups), gets
  COORDINATOR_NOT_AVAILABLE / INVALID_REQUEST.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode

GROUP, TRANSACTION = 0, 1


@api(10, "FindCoordinator", range(0, 5))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    broker = ctx.broker
    key_type = getattr(request, "key_type", GROUP)
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, message = _locate(broker, key_type, key)
            coordinators.append(_coordinator(make, broker, key, code, message))
        return make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
    code, message = _locate(broker, key_type, request.key)
    ok = code == ErrorCode.none
    return make(
        "FindCoordinatorResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        node_id=broker.node_id if ok else -1,
        host=broker.host if ok else "",
        port=broker.port if ok else -1,
    )


def _locate(broker, key_type: int, key: str) -> tuple[ErrorCode, str | None]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, f"Unsupported key type {key_type}"
    coordinator = broker.coordinator_for(key_type)
    if coordinator is None:
        return ErrorCode.coordinator_not_available, "This coordinator type is not available."
    if not key and key_type == TRANSACTION:
        return ErrorCode.invalid_request, "Transactional id must not be empty."
    code = coordinator.find(key)
    return code, None if code == ErrorCode.none else code.name.upper()


def _coordinator(make, broker, key: str, code: ErrorCode, message: str | None) -> object:
    ok = code == ErrorCode.none
    return make(
        "Coordinator",
        key=key,
        node_id=broker.node_id if ok else -1,
        host=broker.host if ok else "",
        port=broker.port if ok else -1,
        error_code=code,
        error_message=message,
    )
