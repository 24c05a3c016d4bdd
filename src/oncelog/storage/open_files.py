"""The open segment files of a broker's logs, at most `limit` of them.

Every segment keeps a descriptor of its log file for its reads and writes. A broker of
100,000 partitions would need 100,000 descriptors, more than a process may have (this
machine's hard limit is 20,000; Kafka asks its operators for a limit above the number of
segments). `OpenFiles` keeps the descriptors of the most recently used segments: when one
more opens past the limit, the least recently used is closed, and reopens by its path at
its next use (an open of an existing file, a few microseconds). Nothing is lost by the
close: writes are in the page cache, and every flush fsyncs through a descriptor of its
own.

Threads: segments may be added from the log dir threads that open partitions
(num.recovery.threads.per.data.dir); only the owner thread, the one that made this (the
event loop's), closes descriptors, and it never runs while those threads do (the loop
waits for them). So a descriptor is never closed under a thread that is using it; on the
owner thread a segment fetches its descriptor right before each system call, with no
other segment's opening in between.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol

MIN_LIMIT = 128


class Releasable(Protocol):
    def release_descriptor(self) -> None:
        """Close the descriptor; the next use reopens it."""


def default_limit() -> int:
    """Three quarters of the process's descriptor limit (the rest for connections,
    checkpoints, flushes), at least MIN_LIMIT."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(MIN_LIMIT, soft - max(1024, soft // 4))


class OpenFiles:
    """Segments with an open descriptor, least recently used first."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = max(MIN_LIMIT, default_limit() if limit is None else limit)
        self._open: OrderedDict[Releasable, None] = OrderedDict()
        self._lock = threading.Lock()
        self._owner = threading.get_ident()
        self.released = 0  # descriptors closed to stay within the limit, so far

    def __len__(self) -> int:
        return len(self._open)

    def add(self, segment: Releasable) -> None:
        """`segment` opened its descriptor; on the owner thread, the least recently used
        ones close if that makes one too many."""
        with self._lock:
            self._open[segment] = None
        if len(self._open) > self.limit:
            self.trim()

    def use(self, segment: Releasable) -> None:
        """`segment` is being read or written: the last to close."""
        try:
            self._open.move_to_end(segment)
        except KeyError:  # opened before it joined, or released meanwhile
            pass

    def discard(self, segment: Releasable) -> None:
        """`segment` closed for good."""
        with self._lock:
            self._open.pop(segment, None)

    def trim(self) -> None:
        """Close the least recently used descriptors until within the limit; off the
        owner thread, nothing (the owner trims at its next opening)."""
        if threading.get_ident() != self._owner:
            return
        while len(self._open) > self.limit:
            with self._lock:
                segment, _ = self._open.popitem(last=False)
            segment.release_descriptor()
            self.released += 1
