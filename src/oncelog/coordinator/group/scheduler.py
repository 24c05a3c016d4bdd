"""Clocks and timers for the group coordinator.

The coordinator asks a scheduler for the time and for delayed callbacks, so the same
code runs on the broker's event loop (`LoopScheduler`) and under a clock a test moves by
hand (`ManualScheduler`, like Kafka's MockTime). Callbacks always run on the loop that
owns the coordinator's state; nothing here uses threads.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Protocol

from oncelog import clock
from oncelog.coordinator.group.state import Cancellable

log = logging.getLogger("oncelog.group")


def _run_safely(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("group coordinator timer %s failed", getattr(callback, "__qualname__", callback))


class Scheduler(Protocol):
    """What the coordinator's parts need of a scheduler (either of the two below)."""

    def now_ms(self) -> int: ...
    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class LoopScheduler:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()

    def now_ms(self) -> int:
        return clock.now_ms()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.call_later(max(delay_ms, 0) / 1000, _run_safely, callback)


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "due_ms")

    def __init__(self, due_ms: int, callback: Callable[[], None]) -> None:
        self.due_ms = due_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Time moves only when `advance(ms)` is called; due timers then run in due order."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._timers: list[tuple[int, int, _ManualTimer]] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _ManualTimer:
        timer = _ManualTimer(self._now + max(delay_ms, 0), callback)
        heapq.heappush(self._timers, (timer.due_ms, next(self._sequence), timer))
        return timer

    def advance(self, delay_ms: int) -> None:
        target = self._now + delay_ms
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, due)
            if not timer.cancelled:
                timer.callback()  # a failing timer fails the test that moved the clock
        self._now = target
