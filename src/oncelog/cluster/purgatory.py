"""acks=all produce waiting for the high watermark: Kafka's DelayedProduce, one partition.

A leader appends, then awaits `wait(last_offset + 1, timeout)`. The answer is an error
code, as Kafka's `checkEnoughReplicasReachOffset` and `DelayedProduce` give it:

- the high watermark reaches the offset -> NONE;
- the ISR shrank below min.insync.replicas first -> NOT_ENOUGH_REPLICAS_AFTER_APPEND (the
  records are in the leader's log, but fewer replicas than required hold them);
- this broker lost the leadership -> NOT_LEADER_OR_FOLLOWER (`fail_all`);
- the request timeout passed -> REQUEST_TIMED_OUT.

Runs on the broker's event loop; no locks. Waiters sit in a heap by offset, so `advance`
touches only the ones it completes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from oncelog.protocol.messages import ErrorCode

# Rebuild the heap when timed-out or cancelled waiters are most of it (they are dropped
# lazily, when `advance` reaches them).
_COMPACT_MIN = 64


class HighWatermarkWaiters:
    def __init__(self, high_watermark: int = 0) -> None:
        self._high_watermark = high_watermark
        self._below_min_isr = False
        self._heap: list[tuple[int, int, asyncio.Future[ErrorCode]]] = []
        self._sequence = itertools.count()  # ties in offset complete in arrival order
        self._waiting = 0  # waiters whose coroutine has not returned yet; for compaction

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def __len__(self) -> int:
        """Waiters not yet answered."""
        return sum(1 for _, _, future in self._heap if not future.done())

    async def wait(self, offset: int, timeout_s: float) -> ErrorCode:
        """Until the high watermark reaches `offset` (the appended batch's last offset + 1)."""
        if self._below_min_isr:
            return ErrorCode.not_enough_replicas_after_append
        if offset <= self._high_watermark:
            return ErrorCode.none
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ErrorCode] = loop.create_future()
        heapq.heappush(self._heap, (offset, next(self._sequence), future))
        self._waiting += 1
        timer = loop.call_later(max(timeout_s, 0.0), _settle, future, ErrorCode.request_timed_out)
        try:
            return await future
        finally:
            timer.cancel()
            self._waiting -= 1
            if len(self._heap) > _COMPACT_MIN and len(self._heap) > 2 * self._waiting:
                self._heap = [entry for entry in self._heap if not entry[2].done()]
                heapq.heapify(self._heap)

    def advance(self, high_watermark: int) -> int:
        """The high watermark moved: answer NONE to every waiter it reached. Returns how
        many were answered. A lower value than before changes nothing."""
        if high_watermark <= self._high_watermark:
            return 0
        self._high_watermark = high_watermark
        completed = 0
        heap = self._heap
        while heap and heap[0][0] <= high_watermark:
            _, _, future = heapq.heappop(heap)
            completed += _settle(future, ErrorCode.none)
        return completed

    def check_min_isr(self, isr_size: int, min_isr: int) -> int:
        """After an ISR change: while `isr_size` (the maximal ISR) is below `min_isr` (the
        effective minimum), waiting and new waiters get NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        Returns how many waiting were answered."""
        self._below_min_isr = isr_size < min_isr
        if not self._below_min_isr:
            return 0
        return self.fail_all(ErrorCode.not_enough_replicas_after_append)

    def fail_all(self, code: ErrorCode) -> int:
        """Answer every waiter with `code` (NOT_LEADER_OR_FOLLOWER when leadership is lost)."""
        heap, self._heap = self._heap, []
        return sum(_settle(future, code) for _, _, future in heap)


def _settle(future: asyncio.Future[ErrorCode], code: ErrorCode) -> int:
    if future.done():  # timed out, cancelled or already answered
        return 0
    future.set_result(code)
    return 1
