"""Fetches waiting for data (a Fetch's `max_wait_ms`, Kafka's delayed fetch purgatory):
woken when a partition they watch is appended to, or when they time out."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable

from oncelog.names import TopicPartition
from oncelog.pacing import Pace, unpaced


class FetchWaiters:
    """The waiting fetches, by the partitions they watch; owned by the broker's loop."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)

    def partition_appended(self, topic: str, partition: int) -> None:
        """Wake the fetches waiting on this partition."""
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_for_append(self, partitions: list[TopicPartition], timeout_s: float, *, pace: Pace = unpaced,
                              appended: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Return when any of `partitions` gets new data, or after `timeout_s`. The
        partitions are watched at `pace`; `appended`, asked once they all are, tells
        whether data came before (while the fetch read them, at its pace): then this
        returns at once."""
        if timeout_s <= 0:
            return
        waiter = asyncio.get_running_loop().create_future()
        try:
            for key in partitions:
                await pace()
                self._waiters[key].add(waiter)
            if appended is None or not await appended():
                async with asyncio.timeout(timeout_s):
                    await waiter
        except TimeoutError:
            pass
        finally:
            for key in partitions:
                await pace()
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]

    def waiting(self) -> int:
        """How many fetches wait, for /metrics."""
        return len({id(waiter) for waiters in self._waiters.values() for waiter in waiters})

    def cancel_all(self) -> None:
        """The broker stops: every waiting fetch ends."""
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.cancel()
