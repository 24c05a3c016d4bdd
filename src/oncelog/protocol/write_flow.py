"""Write flow control for an asyncio protocol.

The transport pauses the protocol's writer when its write buffer passes the high-water
mark (`pause_writing`) and resumes it below the low one (`resume_writing`); the writer
waits with `drained()`. asyncio keeps this in a private mixin (`FlowControlMixin`); the
broker's client connections (broker/server.py) and a broker's connections to its peers
(kernel/peer.py) both use this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class WriteFlow:
    """One connection's writer state. One writer at a time may wait in `drained` (the
    server's task per connection; a peer connection's requests are serialised)."""

    __slots__ = ("_waiter", "paused")

    def __init__(self) -> None:
        self.paused = False
        self._waiter: asyncio.Future[None] | None = None

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        """The connection is over: a writer waiting in `drained` gets `error`."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    async def drained(self, closed: Callable[[], BaseException | None]) -> None:
        """Once the transport takes more: at once unless paused. `closed()` is why the
        connection can take nothing more (raised here), or None while it can."""
        while self.paused:
            error = closed()
            if error is not None:
                raise error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
