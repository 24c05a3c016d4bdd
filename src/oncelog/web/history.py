"""Each partition's LSO lag over the last minutes, for the console's charts.

The broker samples every local partition's high watermark minus last stable offset on
its event loop every `SAMPLE_INTERVAL_MS` (a subtraction per partition); the history
keeps the last `KEPT_SAMPLES` samples. Owned by the loop: the console reads a copy taken
there with the rest of its view.
"""

from __future__ import annotations

from collections import deque
from typing import Any

SAMPLE_INTERVAL_MS = 2_000
KEPT_SAMPLES = 150  # 5 minutes
MAX_PARTITIONS = 2_000  # beyond this, partitions that never had a lag are not charted


class LagHistory:
    def __init__(self, kept: int = KEPT_SAMPLES) -> None:
        self._kept = kept
        self._times: deque[int] = deque(maxlen=kept)
        self._lags: dict[str, deque[int | None]] = {}

    def record(self, now_ms: int, lags: dict[str, int]) -> None:
        """One sample: `lags` maps "topic-partition" to its LSO lag now. A partition seen
        for the first time starts with gaps; one that is gone gets gaps until it falls
        out of the window."""
        self._times.append(now_ms)
        for key, lag in lags.items():
            series = self._lags.get(key)
            if series is None:
                if len(self._lags) >= MAX_PARTITIONS and lag == 0:
                    continue
                series = self._lags[key] = deque([None] * (len(self._times) - 1), maxlen=self._kept)
            series.append(lag)
        for key, series in list(self._lags.items()):
            if key not in lags:
                series.append(None)
                if all(value is None for value in series):
                    del self._lags[key]

    def as_json(self) -> dict[str, Any]:
        """{"times_ms": [...], "series": {"topic-partition": [lag or null, ...]}}, aligned."""
        return {"times_ms": list(self._times), "series": {key: list(series) for key, series in self._lags.items()}}
