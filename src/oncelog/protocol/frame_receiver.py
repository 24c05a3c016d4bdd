"""Kafka's size-prefixed frames out of the bytes an `asyncio.BufferedProtocol` receives:
the broker's client connections (requests) and a broker's connections to its peers
(responses) both read through it.

The socket reads into the buffer `get_buffer` offers. Frames that fit the 64 KiB receive
buffer are cut from it; a larger one gets a bytearray of exactly its size, allocated once
the size prefix is in (as Kafka's NetworkReceive does), and the socket fills that
directly, so its bytes are never copied in user space. Each frame is handed to `deliver`
as a bytearray (writable: the broker lets the log stamp offsets into a Produce request's
batches in place) without its size prefix, and is never reused.

`reserve(size)` may refuse a new frame (the broker's request memory pool): the frame then
waits, unparsed, until `parse` is called again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

RECEIVE_BUFFER = 64 * 1024
_SIZE = struct.Struct(">i")


class FrameSizeError(ValueError):
    """A size prefix outside [0, max_size]: the stream cannot be framed any further."""



def _always(_size: int) -> bool:
    return True


class FrameReceiver:
    def __init__(self, deliver: Callable[[bytearray], None], *, max_size: int = 2**31 - 1,
                 reserve: Callable[[int], bool] = _always, what: str = "frame", limit: str = "") -> None:
        """`what` names the frames and `limit` the setting behind `max_size` in a
        FrameSizeError ("request", "socket.request.max.bytes")."""
        self._deliver = deliver
        self._reserve = reserve
        self._max_size = max_size
        self._bounds = f"[0, {limit}={max_size}]" if limit else f"[0, {max_size}]"
        self._what = what
        # Bytes not yet framed are _receive[_start:_end]; a frame too large for this buffer
        # is received into _frame, of exactly its size, from _filled on.
        self._receive = bytearray(RECEIVE_BUFFER)
        self._view = memoryview(self._receive)
        self._start = 0
        self._end = 0
        self._frame: bytearray | None = None
        self._filled = 0

    def get_buffer(self) -> memoryview:
        """Where the socket's next read goes (`BufferedProtocol.get_buffer`)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        if self._end == len(self._receive):
            self._compact()
        return self._view[self._end:]

    def received(self, nbytes: int) -> None:
        """`nbytes` landed in the last buffer given (`BufferedProtocol.buffer_updated`):
        deliver every frame now whole. Raises FrameSizeError."""
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                frame, self._frame = self._frame, None
                self._deliver(frame)
            return
        self._end += nbytes
        self.parse()

    def parse(self) -> None:
        """Deliver the whole frames already received (again after a refused `reserve`)."""
        receive = self._receive
        while self._end - self._start >= 4:
            size = _SIZE.unpack_from(receive, self._start)[0]
            if size < 0 or size > self._max_size:
                raise FrameSizeError(f"{self._what} size {size} is outside {self._bounds}")
            body_start = self._start + 4
            available = self._end - body_start
            if available >= size:
                if not self._reserve(size):
                    return  # the frame stays in the receive buffer until parse() is called again
                self._start = body_start + size
                self._deliver(receive[body_start:self._start])
                continue
            if 4 + size > len(receive):
                # Too large for the receive buffer: a buffer of its own, which the socket fills.
                if not self._reserve(size):
                    return
                frame = bytearray(size)
                frame[:available] = self._view[body_start:self._end]
                self._frame, self._filled = frame, available
                self._start = self._end = 0
                return
            if body_start + size > len(receive):
                self._compact()
            return
        if self._start == self._end:
            self._start = self._end = 0

    def drop_partial(self) -> None:
        """Forget a large frame being received (the connection is over)."""
        self._frame = None

    def _compact(self) -> None:
        pending = self._end - self._start
        self._receive[:pending] = self._view[self._start:self._end]
        self._start, self._end = 0, pending
