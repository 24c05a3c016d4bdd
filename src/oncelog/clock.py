"""The one wall clock, in Kafka's unit: milliseconds since the epoch.

It sits below every module that stamps or times anything (the log, the coordinators,
the handlers, the replicas, the Spark sink), so none of them imports another for the
time. Code that tests drive through time takes `now_ms` as an argument, and its caller
hands it this clock's reading.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
