"""Pacing: long passes over what one request lists give the event loop to other work.

Everything runs on the broker's one asyncio loop, so a request naming a million topics
must not hold it for the whole of its work. A handler hands the domain a `Pace` with such
a collection (`RequestContext.pace`): awaited between items, it returns at once until the
request has held the loop for its slice, then lets the loop serve every other client once.
`unpaced` is the pace of callers that serve no client (start-up, timers, tests).

A paced pass may see the state it reads change at each pace; an owner whose answer must
be one moment's (a group's offsets, a transaction's partitions) reads what it needs first
and paces over that, or claims what it changes before its first pace.

Domain functions that other callers run at once (tests, tools) are written as `Steps`: a
generator that yields between items and returns its result; `run_steps` runs one to its
end, `run_paced` with a pace at each step.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

T = TypeVar("T")
Pace = Callable[[], Awaitable[None]]
Steps = Generator[None, None, T]  # work that yields between its items, then returns its result

# How many items `sorted_paced` sorts at once (about a millisecond of work), and how many
# it merges between two paces.
SORT_RUN = 4096
MERGE_STRIDE = 256


def time_sliced(slice_s: float = 0.005) -> Pace:
    """A pace for work that serves no request of its own (the console's reads on the loop):
    it gives the loop away once the work has held it for `slice_s`, as a request's pace does."""
    started = time.perf_counter()

    async def pace() -> None:
        nonlocal started
        if time.perf_counter() - started >= slice_s:
            await asyncio.sleep(0)
            started = time.perf_counter()

    return pace


async def unpaced() -> None:
    """The pace of work that serves no client: never gives the loop away."""


def run_steps(steps: Steps[T]) -> T:
    """Run `steps` to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def run_paced(steps: Steps[T], pace: Pace) -> T:
    """Run `steps` to its end, with `pace` at each of its steps."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await pace()


async def paced(items: Iterable[T], pace: Pace) -> AsyncIterator[T]:
    """`items`, with `pace` awaited before each (`items` must not change meanwhile: a
    request's own collection, or a copy)."""
    for item in items:
        await pace()
        yield item


async def sorted_paced(items: Iterable[T], pace: Pace, *,
                       key: Callable[[T], SupportsRichComparison] | None = None) -> list[T]:
    """`sorted(items, key=key)`, pacing as it goes (`sorted_steps`)."""
    return await run_paced(sorted_steps(items, key=key), pace)


def sorted_steps(items: Iterable[T], *, key: Callable[[T], SupportsRichComparison] | None = None) -> Steps[list[T]]:
    """`sorted(items, key=key)` as steps: `items` is read at once (so it may be a
    collection that changes at a pace), runs of SORT_RUN items are sorted, then merged
    (stable, as `sorted`: equal items keep their order)."""
    values = list(items)
    if len(values) <= SORT_RUN:
        values.sort(key=key)
        return values
    runs: list[list[T]] = []
    for start in range(0, len(values), SORT_RUN):
        yield
        run = values[start:start + SORT_RUN]
        run.sort(key=key)
        runs.append(run)
    del values
    merged: list[T] = []
    merging: Iterable[T] = heapq.merge(*runs) if key is None else heapq.merge(*runs, key=key)  # type: ignore[type-var]
    for count, item in enumerate(merging):
        if count % MERGE_STRIDE == 0:
            yield
        merged.append(item)
    return merged
