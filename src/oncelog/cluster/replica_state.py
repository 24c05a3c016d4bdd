"""A partition leader's view of its followers: their log end offsets, whether they are in
sync, the ISR changes to propose and the high watermark they allow. Pure: no clock, no
log, no etcd. The caller passes `now_ms`, applies the high watermark to the log (never
moving it back) and writes ISR changes as a CAS on the partition key.

Kafka's rules (Partition.scala and Replica.scala):

- A follower's fetch offset is its log end offset (LEO). `last_caught_up_ms` is the
  latest time at which the follower had fetched up to the leader's LEO: the time of this
  fetch if it asks for the leader's current LEO, else the time of the previous fetch if
  it asks for at least the LEO the leader had then.
- An ISR follower is out of sync when it is not at the leader's LEO and has not caught up
  for more than `replica.lag.time.max.ms`.
- A follower joins the ISR when its LEO reaches the high watermark and the start offset of
  the current leader epoch (so that it holds every committed offset of this epoch).
- The high watermark is the smallest LEO over the ISR, and over followers outside it that
  are caught up and eligible to join it (registered, unfenced: isReplicaIsrEligible).
- One ISR change at a time. While one is in flight, the high watermark is computed over
  the *maximal* ISR, the committed ISR plus the members being added (KIP-497): adding
  members only makes the high watermark more cautious, so that is always safe.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    # The latest time the follower had fetched up to the leader's log end offset.
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    # The leader's log end offset when the last fetch arrived.
    last_fetch_leader_leo: int = UNKNOWN_OFFSET

    def is_caught_up(self, leader_leo: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        return (
            self.log_end_offset == leader_leo
            or now_ms - self.last_caught_up_ms <= replica_lag_time_max_ms
        )


class LeaderReplicaState:
    """State of one leader epoch: build a new one when this broker becomes leader."""

    def __init__(
        self,
        local_id: int,
        replicas: Sequence[int],
        isr: Collection[int],
        leader_epoch: int,
        leader_epoch_start_offset: int,
        *,
        now_ms: int,
        replica_lag_time_max_ms: int,
    ) -> None:
        if local_id not in replicas:
            raise ValueError(
                f"broker {local_id} leads a partition whose replicas {list(replicas)} exclude it"
            )
        self.local_id = local_id
        self.replicas = tuple(replicas)
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._isr = frozenset(isr)
        self._pending_isr: frozenset[int] | None = None
        # A new leader knows nothing of its followers' logs yet. ISR members count as
        # caught up now, so they are not dropped before they have had a chance to fetch;
        # the others as never, so they do not hold the high watermark back.
        self.followers: dict[int, FollowerState] = {
            replica_id: FollowerState(
                replica_id, last_caught_up_ms=now_ms if replica_id in self._isr else 0
            )
            for replica_id in self.replicas
            if replica_id != local_id
        }

    # --- ISR ------------------------------------------------------------------------------

    @property
    def isr(self) -> frozenset[int]:
        """The ISR as committed in the metadata store."""
        return self._isr

    @property
    def isr_change_pending(self) -> bool:
        return self._pending_isr is not None

    @property
    def pending_isr(self) -> frozenset[int] | None:
        return self._pending_isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR, plus the members a pending change adds (KIP-497)."""
        if self._pending_isr is None:
            return self._isr
        return self._isr | self._pending_isr

    def begin_isr_change(self, new_isr: Collection[int]) -> None:
        if self._pending_isr is not None:
            raise RuntimeError(
                f"ISR change to {sorted(new_isr)} begun while the change to {sorted(self._pending_isr)} is in flight"
            )
        new = frozenset(new_isr)
        if self.local_id not in new:
            raise ValueError(f"the leader {self.local_id} cannot leave its own ISR {sorted(new)}")
        self._pending_isr = new

    def complete_isr_change(self, committed_isr: Collection[int]) -> None:
        """The store now holds `committed_isr` for this leader epoch: our CAS succeeded, or
        the image shows an ISR someone else wrote (the controller dropped a dead broker),
        in which case a change still in flight is not written: it was made from the
        partition epoch before (`placement.alter_isr`). Either way it is the committed ISR
        and nothing is pending any more."""
        self._isr = frozenset(committed_isr)
        self._pending_isr = None

    def abort_isr_change(self) -> None:
        """The CAS failed (someone else changed the partition) or was not sent."""
        self._pending_isr = None

    def effective_min_isr(self, min_insync_replicas: int) -> int:
        # Kafka: a min.insync.replicas above the replication factor means "all replicas".
        return min(min_insync_replicas, len(self.replicas))

    def is_under_min_isr(self, min_insync_replicas: int) -> bool:
        """Kafka's isUnderMinIsr: acks=all produce is refused before the append (and Kafka 4
        does not advance the high watermark) while the committed ISR is this small."""
        return len(self._isr) < self.effective_min_isr(min_insync_replicas)

    # --- followers ------------------------------------------------------------------------

    def update_follower_fetch(
        self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int
    ) -> bool:
        """Record a follower's Fetch (its fetch offset is its log end offset) against the
        leader's LEO at the time. True when the follower's LEO moved: then the high
        watermark may move and the follower may join the ISR."""
        follower = self.followers.get(replica_id)
        if follower is None:
            raise ValueError(
                f"broker {replica_id} is not a follower of this partition (replicas {list(self.replicas)})"
            )
        if fetch_offset >= leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_leo:
            # It has what the leader had at its previous fetch, so it was caught up then.
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_leo = max(follower.last_fetch_leader_leo, leader_leo)
        follower.last_fetch_ms = now_ms
        moved = follower.log_end_offset != fetch_offset
        follower.log_end_offset = fetch_offset
        return moved

    def high_watermark_candidate(self, leader_leo: int, *, now_ms: int | None = None,
                                 isr_eligible: Container[int] = ()) -> int:
        """The smallest log end offset over the maximal ISR, the leader's own included.

        With `now_ms`, also over followers outside the ISR that are caught up and may join
        it (`isr_eligible`: registered and unfenced brokers), as Kafka's
        maybeIncrementLeaderHW waits for them (shouldWaitForReplicaToJoinIsr), so that a
        follower catching up under a steady stream of appends can reach the high watermark
        and join. A fenced follower, one cut off from the cluster, was caught up a moment
        ago as much as any: it must not hold acks=all writes, markers and commits for the
        rest of replica.lag.time.max.ms. The result can be below the current high watermark
        (a new leader does not know its followers' offsets yet): the caller keeps the
        larger one."""
        maximal = self.maximal_isr
        candidate = leader_leo
        for follower in self.followers.values():
            if follower.log_end_offset >= candidate:
                continue
            if follower.replica_id in maximal or (
                now_ms is not None
                and follower.replica_id in isr_eligible
                and follower.is_caught_up(leader_leo, now_ms, self.replica_lag_time_max_ms)
            ):
                candidate = follower.log_end_offset
        return candidate

    def isr_expansion_candidates(self, high_watermark: int) -> set[int]:
        """Followers that may join the ISR: not in it, LEO at the high watermark and within
        the current leader epoch. None while an ISR change is in flight."""
        if self._pending_isr is not None:
            return set()
        return {
            follower.replica_id
            for follower in self.followers.values()
            if follower.replica_id not in self._isr
            and follower.log_end_offset >= high_watermark
            and follower.log_end_offset >= self.leader_epoch_start_offset
        }

    def out_of_sync_replicas(self, leader_leo: int, now_ms: int) -> set[int]:
        """ISR followers that have not caught up for more than replica.lag.time.max.ms
        (stuck or too slow). None while an ISR change is in flight."""
        if self._pending_isr is not None:
            return set()
        out = set()
        for replica_id in self._isr - {self.local_id}:
            follower = self.followers.get(replica_id)
            if follower is None or not follower.is_caught_up(
                leader_leo, now_ms, self.replica_lag_time_max_ms
            ):
                out.add(replica_id)
        return out
