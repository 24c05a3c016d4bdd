"""Kafka's size-prefixed frames out of the bytes an `asyncio.BufferedProtocol` receives:
the broker's client connections (requests) and a broker's connections to its peers
(responses) both read through it.

The socket reads into the buffer `get_buffer` offers. Frames that fit the receive buffer
are cut from it; a larger one gets a bytearray of its own, and the socket fills that
directly, so its bytes are not copied in user space on their way in. Each frame is
handed to `deliver` as a bytearray (writable: the broker lets the log stamp offsets into
a Produce request's batches in place) without its size prefix, and is never reused.

Memory follows the bytes a peer has sent, not the sizes it claims (a hostile client may
claim 100 MiB in four bytes and send nothing more):
- the receive buffer starts at `INITIAL_RECEIVE_BUFFER` and grows to `RECEIVE_BUFFER`
  only once a read has filled it (a client that sends in bursts);
- a frame's own buffer starts at `GROWTH` times what has arrived of it (at least the
  receive buffer's size, at most the frame's size) and grows by the same factor as the
  socket fills it, so it never holds more than `GROWTH` times the bytes received plus
  one receive buffer; growing copies what arrived, about a third of a large frame's
  bytes in all. `preallocate=True` gives a frame its whole size at once, for peers
  whose sizes are trusted (a broker reading its own peers' responses).

`reserve(size)` may refuse a new frame (the broker's request memory pool): the frame then
waits, unparsed, until `parse` is called again. A size prefix above `max_size` is a
FrameSizeError before any buffer exists; `set_limit` changes the bound (the broker's
connections use `sasl.server.max.receive.size` until a SASL client has authenticated).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

RECEIVE_BUFFER = 64 * 1024
INITIAL_RECEIVE_BUFFER = 4 * 1024
GROWTH = 4
_SIZE = struct.Struct(">i")


class FrameSizeError(ValueError):
    """A size prefix outside [0, max_size]: the stream cannot be framed any further."""


def _always(_size: int) -> bool:
    return True


class FrameReceiver:
    def __init__(self, deliver: Callable[[bytearray], None], *, max_size: int = 2**31 - 1,
                 reserve: Callable[[int], bool] = _always, what: str = "frame", limit: str = "",
                 preallocate: bool = False) -> None:
        """`what` names the frames and `limit` the setting behind `max_size` in a
        FrameSizeError ("request", "socket.request.max.bytes")."""
        self._deliver = deliver
        self._reserve = reserve
        self._what = what
        self._preallocate = preallocate
        self.set_limit(max_size, limit)
        # Bytes not yet framed are _receive[_start:_end]; a frame too large for this buffer
        # is received into _frame (its size _frame_size) from _filled on.
        self._receive = bytearray(RECEIVE_BUFFER if preallocate else INITIAL_RECEIVE_BUFFER)
        self._view = memoryview(self._receive)
        self._start = 0
        self._end = 0
        self._frame: bytearray | None = None
        self._frame_size = 0
        self._filled = 0

    def set_limit(self, max_size: int, limit: str = "") -> None:
        """The largest size prefix accepted from now on; `limit` names the setting."""
        self.max_size = max_size
        self._bounds = f"[0, {limit}={max_size}]" if limit else f"[0, {max_size}]"

    @property
    def held_bytes(self) -> int:
        """The buffers this receiver holds now (for tests and diagnostics)."""
        return len(self._receive) + (len(self._frame) if self._frame is not None else 0)

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
        frame = self._frame
        if frame is not None:
            self._filled += nbytes
            if self._filled < len(frame):
                return
            if len(frame) < self._frame_size:
                self._grow_frame()
                return
            self._frame = None
            self._deliver(frame)
            return
        self._end += nbytes
        if self._end == len(self._receive) and len(self._receive) < RECEIVE_BUFFER:
            self._grow_receive_buffer()  # the read filled it: more is likely waiting
        self.parse()

    def parse(self) -> None:
        """Deliver the whole frames already received (again after a refused `reserve`)."""
        receive = self._receive
        while self._end - self._start >= 4:
            size = _SIZE.unpack_from(receive, self._start)[0]
            if size < 0 or size > self.max_size:
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
                capacity = size if self._preallocate else min(size, max(GROWTH * available, RECEIVE_BUFFER))
                frame = bytearray(capacity)
                frame[:available] = self._view[body_start:self._end]
                self._frame, self._frame_size, self._filled = frame, size, available
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

    def _grow_frame(self) -> None:
        """The frame's buffer is full but the frame is not: a larger one, holding what came."""
        assert self._frame is not None
        grown = bytearray(min(self._frame_size, GROWTH * len(self._frame)))
        grown[:self._filled] = self._frame
        self._frame = grown

    def _grow_receive_buffer(self) -> None:
        grown = bytearray(RECEIVE_BUFFER)
        pending = self._end - self._start
        grown[:pending] = self._view[self._start:self._end]
        self._receive, self._view = grown, memoryview(grown)
        self._start, self._end = 0, pending

    def _compact(self) -> None:
        pending = self._end - self._start
        self._receive[:pending] = self._view[self._start:self._end]
        self._start, self._end = 0, pending
