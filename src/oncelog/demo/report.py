"""Small pieces of the demos' reports."""

from __future__ import annotations

import math
import os


def console_url(embedded) -> str | None:
    """The broker's console (`http.listener`), when it serves one."""
    listener = getattr(embedded.broker, "http", None)
    address = getattr(listener, "address", None)
    return None if address is None else f"http://{address[0]}:{address[1]}/"


def percentile(sorted_values: list[int], percent: float) -> int:
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def printer(out):
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    return say


def machine_load() -> str:
    """`2 cores, load 1.9 (1 min) / 2.4 (5 min)`: what the timings were measured under."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} cores, load {one:.1f} (1 min) / {five:.1f} (5 min) at the end of the run"
