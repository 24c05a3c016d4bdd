"""queued.max.request.bytes: the pool's admission rule (Kafka's non-strict memory pool)
and the configuration check; the broker's use of it is in
tests/integration/test_resource_limits.py."""

import re
from typing import TYPE_CHECKING, cast

import pytest

from oncelog.broker.server import RequestMemoryPool
from oncelog.config.broker import BrokerConfig, ConfigError

if TYPE_CHECKING:
    from oncelog.broker.server import _Connection

MIB = 1 << 20


class WaitingConnection:
    """Stands in for a connection: on `memory_available` it asks for its next frame."""

    def __init__(self, pool: RequestMemoryPool, name: str, frames: list[int]) -> None:
        self.pool, self.name, self.frames = pool, name, list(frames)
        self.admitted: list[int] = []

    def ask(self) -> bool:
        if self.frames and self.pool.try_reserve(self.frames[0], cast("_Connection", self)):  # a stand-in
            self.admitted.append(self.frames.pop(0))
            return True
        return False

    def memory_available(self) -> None:
        while self.frames and self.ask():
            pass


def test_an_unbounded_pool_admits_everything():
    pool = RequestMemoryPool(-1)
    for _ in range(100):
        assert pool.try_reserve(100 * MIB, object())
    assert pool.used == pool.peak == 10_000 * MIB and pool.waiting == 0


def test_a_reservation_succeeds_while_anything_is_left_so_the_total_passes_the_bound_by_less_than_a_frame():
    pool = RequestMemoryPool(10 * MIB)
    first = WaitingConnection(pool, "first", [6 * MIB, 6 * MIB, 6 * MIB])
    assert first.ask() and first.ask()  # 6 MiB used: below the bound, so 12 MiB is admitted
    assert pool.used == 12 * MIB
    assert not first.ask()  # at or above the bound: refused, and the connection waits
    assert pool.waiting == 1 and pool.refusals == 1


def test_released_memory_resumes_waiting_connections_in_the_order_they_were_refused():
    pool = RequestMemoryPool(4 * MIB)
    holder = WaitingConnection(pool, "holder", [4 * MIB])
    assert holder.ask()
    early = WaitingConnection(pool, "early", [2 * MIB, 2 * MIB])
    late = WaitingConnection(pool, "late", [2 * MIB])
    assert not early.ask() and not late.ask()
    pool.release(4 * MIB)
    # early takes the room first; late finds the pool full again and keeps waiting.
    assert early.admitted == [2 * MIB, 2 * MIB] and late.admitted == []
    assert pool.waiting == 1
    pool.release(4 * MIB)
    assert late.admitted == [2 * MIB] and pool.waiting == 0 and pool.used == 2 * MIB


def test_a_forgotten_connection_is_not_resumed():
    pool = RequestMemoryPool(MIB)
    assert pool.try_reserve(MIB, object())
    gone = WaitingConnection(pool, "gone", [MIB])
    assert not gone.ask()
    pool.forget(gone)
    pool.release(MIB)
    assert gone.admitted == [] and pool.used == 0


def test_releasing_more_than_was_reserved_is_a_broken_invariant():
    pool = RequestMemoryPool(MIB)
    assert pool.try_reserve(10, object())
    with pytest.raises(AssertionError):
        pool.release(11)


def test_queued_max_request_bytes_defaults_to_kafkas_unbounded_minus_one():
    assert BrokerConfig({})["queued.max.request.bytes"] == -1


def test_queued_max_request_bytes_below_the_largest_request_is_refused_as_in_kafka():
    refusal = "queued.max.request.bytes: must be at least socket.request.max.bytes"
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        BrokerConfig({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "999"})
    assert BrokerConfig({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "1000"})
    assert BrokerConfig({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "0"})
