"""Large requests, decoded and answered off the event loop, so that one of them never
keeps every other client waiting (Kafka runs such a request on one of its I/O threads;
the others keep serving).

A request frame of `HEAVY_REQUEST_BYTES` or more (a Produce only when it names more than
`INLINE_PRODUCE_ELEMENTS` topics and partitions) is heavy. Its three costs are spread:

- decoding runs on this module's worker thread: the length checks (`protocol/guard.py`)
  and the stepwise reader (`protocol/stepwise_reader.py`), which gives the GIL back at
  the interpreter's switch interval, so the loop keeps its turn (kio's native reader
  would hold the GIL for the whole request);
- the handler runs on the loop, as every handler does (the state it reads is the loop's
  alone), and gives the loop to others between slices of its work (`RequestContext.pace`);
- encoding the response and counting its error codes run on the worker thread again.

The worker is one thread: heavy requests are decoded and encoded one at a time, and at
most `MAX_HEAVY_IN_FLIGHT` are past their decoding at once (a decoded request costs far
more memory than its frame); the rest wait their turn, each on its own connection. A
request of more than `MAX_REQUEST_ELEMENTS` array elements in all is malformed (Kafka has
no such bound: a deviation; no client sends a thousandth of it). The worker's CPU time is
charged to the request's `request_percentage` quota with the handler's loop time, so a
principal that repeats such requests is throttled.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from oncelog.protocol.error_counts import count_errors
from oncelog.protocol.framing import MalformedRequestError
from oncelog.protocol.guard import check_lengths
from oncelog.protocol.messages import (
    PRODUCE_KEY,
    TooManyPartitions,
    decode_produce_request,
    encode_response_frame,
    request_class,
)
from oncelog.protocol.stepwise_reader import read_entity

HEAVY_REQUEST_BYTES = 32 * 1024
INLINE_PRODUCE_ELEMENTS = 1000
MAX_HEAVY_IN_FLIGHT = 2
MAX_REQUEST_ELEMENTS = 2_000_000


class HeavyTurn:
    """One heavy request's turn: what it decoded and answered, to be freed off the loop."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list = []

    def dispose(self, *values: Any) -> None:
        self.values.extend(values)


class HeavyWork:
    """The broker's worker thread for heavy requests (one per server)."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncelog-heavy-requests")
        self._in_flight: asyncio.Semaphore | None = None  # made on the loop, at first use
        self._turns = 0  # heavy requests in their turn, or whose objects are still being freed
        self._collector_was_enabled = True
        self._ending: set[asyncio.Task] = set()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[HeavyTurn]:
        """Held by a heavy request from its decoding to its encoded response. While any
        heavy request is in its turn, the cyclic garbage collector does not run: a million
        decoded entities would make each full collection scan them all, 80-130 ms at a time
        with the GIL held (measured); they hold no cycles and are freed by their reference
        counts. They are freed on the worker thread (`HeavyTurn.dispose`: a million
        entities take 100 ms to free), and the collector runs again once the last of them
        is gone."""
        if self._in_flight is None:
            self._in_flight = asyncio.Semaphore(MAX_HEAVY_IN_FLIGHT)
        async with self._in_flight:
            if self._turns == 0:
                self._collector_was_enabled = gc.isenabled()
                gc.disable()
            self._turns += 1
            turn = HeavyTurn()
            try:
                yield turn
            finally:
                values, turn.values = turn.values, []
                task = asyncio.get_running_loop().create_task(self._end_turn(values))
                self._ending.add(task)
                task.add_done_callback(self._ending.discard)

    async def _end_turn(self, values: list) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, _drop, values)
        except RuntimeError:
            pass  # the executor was shut down: the broker is stopping
        finally:
            del values
            self._turns -= 1
            if self._turns == 0 and self._collector_was_enabled:
                gc.enable()

    async def decode(self, api_key: int, version: int, body: bytearray, position: int) -> tuple[Any, float]:
        """The request entity, and the worker's CPU seconds for it."""
        return await self._run(_decode, api_key, version, body, position)

    async def encode(self, correlation_id: int, response: Any, *,
                     flexible_header: bool) -> tuple[tuple[list, dict[int, int]], float]:
        """The response frame's buffers and its error counts, and the worker's CPU seconds."""
        return await self._run(_encode, correlation_id, response, flexible_header)

    async def _run(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, _timed, function, args)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _drop(values: list) -> None:
    """Runs on the worker thread: the last references to a heavy request's objects go here."""
    values.clear()


def _timed(function: Any, args: tuple) -> tuple[Any, float]:
    started = time.thread_time()
    result = function(*args)
    return result, time.thread_time() - started


def _decode(api_key: int, version: int, body: bytearray, position: int) -> Any:
    if api_key == PRODUCE_KEY:  # records stay views of the frame
        try:
            return decode_produce_request(version, body, position, max_partitions=MAX_REQUEST_ELEMENTS)
        except TooManyPartitions as error:
            raise MalformedRequestError(f"the request holds {error}") from None
    view = memoryview(body).toreadonly()
    cls = request_class(api_key, version)
    check_lengths(cls, view, position)
    return read_entity(cls, view, position, max_elements=MAX_REQUEST_ELEMENTS)[0]


def _encode(correlation_id: int, response: Any, flexible_header: bool) -> tuple[list, dict[int, int]]:
    errors: dict[int, int] = {}
    count_errors(response, errors)
    return encode_response_frame(correlation_id, response, flexible_header=flexible_header), errors
