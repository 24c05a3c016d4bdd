"""Small pieces of the demos' reports."""

from __future__ import annotations

import math


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
