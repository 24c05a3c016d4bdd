"""Shared by the transaction handlers: version-dependent error codes, and answering
only once the coordinator's write is replicated."""

from __future__ import annotations

from oncelog.protocol.messages import ErrorCode


async def once_replicated(ctx, transactional_id: str, error: ErrorCode) -> ErrorCode:
    """`error`, or, when the coordinator accepted the request, the outcome of waiting
    for its write to reach the ISR of the id's `__transaction_state` partition
    (NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE when it does not)."""
    if error is not ErrorCode.none:
        return error
    return await ctx.broker.txn_coordinator.replicated(transactional_id)


def fenced_for_version(error: ErrorCode, version: int, first_version_with_producer_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) is unknown to older request versions; Kafka answers those
    with INVALID_PRODUCER_EPOCH, which they handle the same way."""
    if error is ErrorCode.producer_fenced and version < first_version_with_producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return error
