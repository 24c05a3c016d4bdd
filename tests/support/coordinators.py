"""What a client's first FindCoordinator does to a broker, for tests that speak to the
coordinators directly (wire-level requests, or calls on the broker's loop)."""

from __future__ import annotations

from dataclasses import replace

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


def change_transaction(coordinator, transactional_id: str, **fields) -> None:
    """Change a transactional id's metadata in memory only (call it on the broker's loop):
    a test's shortcut to a state, such as an exhausted epoch, that takes thousands of
    requests to reach."""
    entry = coordinator._entries[transactional_id]
    entry.current = replace(entry.current, **fields)
