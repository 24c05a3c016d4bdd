"""Shared by the transaction handlers: version-dependent error codes."""

from __future__ import annotations

from oncelog.protocol.messages import ErrorCode


def fenced_for_version(error: ErrorCode, version: int, first_version_with_producer_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) is unknown to older request versions; Kafka answers those
    with INVALID_PRODUCER_EPOCH, which they handle the same way."""
    if error is ErrorCode.producer_fenced and version < first_version_with_producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return error
