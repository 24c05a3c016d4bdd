"""What a client's first FindCoordinator does to a broker, for tests that speak to the
coordinators directly (wire-level requests, or calls on the broker's loop)."""

from __future__ import annotations

from oncelog import EmbeddedBroker
from oncelog.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.protocol.messages import ErrorCode


def find_coordinators(broker: EmbeddedBroker) -> EmbeddedBroker:
    """Create `__consumer_offsets` and `__transaction_state` as FindCoordinator does; the
    broker then leads, so coordinates, every partition of them. Returns `broker`."""
    for name in (CONSUMER_OFFSETS, TRANSACTION_STATE):
        code, reason = broker.call(broker.broker.topics.ensure_internal, name)
        assert code is ErrorCode.none, reason
    return broker
