"""What the transaction coordinator counts for /metrics: transactions completed (their
markers written) by result, with how long the markers took from the decision, the
coordinator's own aborts of timed-out transactions, and producers fenced by a new
instance's InitProducerId. Owned and updated by the coordinator on the event loop."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.stats import Histogram


@dataclass(frozen=True, slots=True)
class TxnStatsSnapshot:
    commits: int
    aborts: int
    timed_out: int
    fenced: int
    markers_count: int
    markers_total_s: float
    markers_cumulative: tuple[int, ...]
    loads_count: int = 0
    loads_total_s: float = 0.0
    loads_cumulative: tuple[int, ...] = ()
    completing: int = 0  # transactions whose markers are being written now
    prepared: int = 0  # KIP-939 transactions kept prepared for an external decision


class TxnStats:
    def __init__(self) -> None:
        self.commits = 0
        self.aborts = 0
        self.timed_out = 0
        self.fenced = 0
        self.markers = Histogram()  # from PrepareCommit/PrepareAbort to CompleteCommit/CompleteAbort
        self.loads = Histogram()  # loading a __transaction_state partition (KIP-484's load time)

    def completed(self, commit: bool, seconds: float) -> None:
        if commit:
            self.commits += 1
        else:
            self.aborts += 1
        self.markers.observe(seconds)

    def snapshot(self, completing: int = 0, prepared: int = 0) -> TxnStatsSnapshot:
        return TxnStatsSnapshot(self.commits, self.aborts, self.timed_out, self.fenced, self.markers.count,
                                self.markers.total_s, self.markers.cumulative(), self.loads.count,
                                self.loads.total_s, self.loads.cumulative(), completing, prepared)
