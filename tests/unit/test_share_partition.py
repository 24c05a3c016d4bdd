"""The share partition's state machine (coordinator/share/partition.py) and share group
membership (coordinator/share/groups.py), on their own: records acquired once at a
time, acknowledged all or none, released and redelivered up to the delivery limit,
locks running out, the window bounded, aborted records and markers never delivered,
the persisted form round-tripping; members joining, fenced and expiring, partitions
shared when members outnumber them."""

from __future__ import annotations

import uuid

import pytest

from oncelog.coordinator.group.scheduler import ManualScheduler
from oncelog.coordinator.share.groups import ShareGroups, ShareHeartbeat, ShareTimings, assign
from oncelog.coordinator.share.partition import (
    AcknowledgeError,
    Acknowledgement,
    AckType,
    Acquired,
    RecordState,
    SharePartition,
    Span,
    SpanKind,
)
from oncelog.coordinator.share.records import (
    StateKey,
    StoredState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from oncelog.protocol.messages import ErrorCode

LOCK_MS = 1000


def partition(start: int = 0, *, limit: int = 3, window: int = 100) -> SharePartition:
    return SharePartition(start, delivery_limit=limit, max_in_flight=window)


def batches(*ranges: tuple[int, int]) -> list[Span]:
    return [Span(first, last) for first, last in ranges]


def ack(first: int, last: int, kind: AckType) -> Acknowledgement:
    return Acknowledgement(first, last, (int(kind),))


def test_records_are_acquired_by_one_member_at_a_time_and_redelivered_when_released():
    share = partition()
    log = batches((0, 4), (5, 9))
    assert share.acquire("a", log, max_records=6, now_ms=0, lock_ms=LOCK_MS) == [Acquired(0, 5, 1)]
    assert share.acquire("b", share_read(share, log), max_records=10, now_ms=0, lock_ms=LOCK_MS) == [Acquired(6, 9, 1)]
    share.acknowledge("a", [ack(0, 2, AckType.ACCEPT), ack(3, 5, AckType.RELEASE)], now_ms=1, lock_ms=LOCK_MS)
    assert share.start_offset == 3 and share.next_fetch_offset() == 3
    assert share.acquire("b", share_read(share, log), max_records=10, now_ms=2, lock_ms=LOCK_MS) == [Acquired(3, 5, 2)]


def share_read(share: SharePartition, log: list[Span]) -> list[Span]:
    """The log as the manager reads it: from the partition's next fetch offset."""
    start = share.next_fetch_offset()
    return [span for span in log if span.last >= start]


def test_acknowledgements_apply_all_or_none_and_only_to_the_members_own_records():
    share = partition()
    share.acquire("a", batches((0, 4)), max_records=5, now_ms=0, lock_ms=LOCK_MS)
    with pytest.raises(AcknowledgeError) as refused:
        share.acknowledge("b", [ack(0, 1, AckType.ACCEPT)], now_ms=1, lock_ms=LOCK_MS)
    assert refused.value.code is ErrorCode.invalid_record_state
    with pytest.raises(AcknowledgeError) as refused:  # the second batch names an offset never acquired
        share.acknowledge("a", [ack(0, 1, AckType.ACCEPT), ack(4, 6, AckType.ACCEPT)], now_ms=1, lock_ms=LOCK_MS)
    assert refused.value.code is ErrorCode.invalid_record_state
    assert share.state_of(0) == (RecordState.ACQUIRED, 1)  # the first batch was not applied either
    for malformed in (Acknowledgement(3, 1, (1,)), Acknowledgement(0, 2, (1, 1)), Acknowledgement(0, 0, (9,)),
                      Acknowledgement(0, 0, (int(AckType.RENEW),))):
        with pytest.raises(AcknowledgeError) as refused:
            share.acknowledge("a", [malformed], now_ms=1, lock_ms=LOCK_MS)
        assert refused.value.code is ErrorCode.invalid_request, malformed
    share.acknowledge("a", [Acknowledgement(0, 4, (1, 3, 0, 1, 2))], now_ms=1, lock_ms=LOCK_MS)
    assert share.start_offset == 4 and share.state_of(4) == (RecordState.AVAILABLE, 1)
    with pytest.raises(AcknowledgeError):  # acknowledged once is enough
        share.acknowledge("a", [ack(0, 0, AckType.ACCEPT)], now_ms=2, lock_ms=LOCK_MS)


def test_a_record_released_at_the_delivery_limit_is_archived_and_the_start_moves_past_it():
    share = partition(limit=2)
    for delivery in (1, 2):
        assert share.acquire("a", batches((0, 0), (1, 1)), max_records=1, now_ms=0, lock_ms=LOCK_MS) == [
            Acquired(0, 0, delivery)]
        share.acknowledge("a", [ack(0, 0, AckType.RELEASE)], now_ms=0, lock_ms=LOCK_MS)
    assert share.state_of(0) is None and share.start_offset == 1


def test_locks_run_out_and_a_closed_session_gives_its_records_back():
    share = partition(limit=2)
    share.acquire("a", batches((0, 1)), max_records=1, now_ms=0, lock_ms=LOCK_MS)
    share.acquire("b", batches((1, 1)), max_records=1, now_ms=500, lock_ms=LOCK_MS)
    assert share.next_lock_deadline() == LOCK_MS
    assert not share.expire_locks(LOCK_MS - 1)
    assert share.expire_locks(LOCK_MS)
    assert share.state_of(0) == (RecordState.AVAILABLE, 1) and share.state_of(1) == (RecordState.ACQUIRED, 1)
    assert share.release_member("b") and share.state_of(1) == (RecordState.AVAILABLE, 1)
    share.acquire("c", batches((0, 1)), max_records=2, now_ms=2000, lock_ms=LOCK_MS)
    share.expire_locks(10_000)  # second deliveries at the limit of 2: archived, the window is empty
    assert (share.start_offset, share.end_offset, share.in_flight()) == (2, 2, 0)


def test_overlapping_acknowledgement_batches_are_refused_whole():
    share = partition()
    share.acquire("a", batches((0, 5)), max_records=6, now_ms=0, lock_ms=LOCK_MS)
    for overlapping in ([ack(0, 4, AckType.ACCEPT), ack(3, 5, AckType.RELEASE)],
                        [ack(4, 5, AckType.ACCEPT), ack(0, 1, AckType.ACCEPT)],
                        [ack(2, 2, AckType.ACCEPT), ack(2, 2, AckType.ACCEPT)]):
        with pytest.raises(AcknowledgeError) as refused:
            share.acknowledge("a", overlapping, now_ms=1, lock_ms=LOCK_MS)
        assert refused.value.code is ErrorCode.invalid_request
        assert [share.state_of(offset) for offset in range(6)] == [(RecordState.ACQUIRED, 1)] * 6


def test_a_record_restored_at_the_delivery_limit_is_archived_not_delivered_again():
    share = partition(limit=2)
    share.acquire("a", batches((0, 1)), max_records=2, now_ms=0, lock_ms=LOCK_MS)
    share.acknowledge("a", [ack(0, 1, AckType.RELEASE)], now_ms=0, lock_ms=LOCK_MS)
    share.acquire("a", batches((0, 1)), max_records=1, now_ms=0, lock_ms=LOCK_MS)  # offset 0: its second
    restored = SharePartition.restore(share.snapshot(), delivery_limit=2, max_in_flight=100)  # a crash
    assert restored.acquire("b", batches((0, 1)), max_records=2, now_ms=0, lock_ms=LOCK_MS) == [Acquired(1, 1, 2)]
    assert restored.state_of(0) is None and restored.start_offset == 1  # archived, passed


def test_an_available_record_compacted_away_is_archived_so_the_start_moves_on():
    share = partition()
    share.acquire("a", batches((0, 2), (3, 5)), max_records=6, now_ms=0, lock_ms=LOCK_MS)
    share.acknowledge("a", [Acknowledgement(0, 5, (1, 2, 1, 1, 2, 1))], now_ms=0, lock_ms=LOCK_MS)
    assert share.next_fetch_offset() == 1
    # Compaction removed offsets 1-2 and 4: the read from 1 returns the batch 3-3, then 5-5.
    changes = share.changes
    assert share.acquire("b", batches((3, 3), (5, 5)), max_records=10, now_ms=0, lock_ms=LOCK_MS,
                         from_offset=1) == []
    assert share.changes > changes and share.state_of(1) is None
    assert (share.start_offset, share.end_offset) == (6, 6)


def test_renew_extends_a_lock_at_v2():
    share = partition()
    share.acquire("a", batches((0, 0)), max_records=1, now_ms=0, lock_ms=LOCK_MS)
    share.acknowledge("a", [ack(0, 0, AckType.RENEW)], now_ms=900, lock_ms=LOCK_MS, renew_allowed=True)
    assert not share.expire_locks(LOCK_MS) and share.next_lock_deadline() == 900 + LOCK_MS


def test_the_window_bounds_the_records_in_flight():
    share = partition(window=3)
    assert share.acquire("a", batches((0, 9)), max_records=10, now_ms=0, lock_ms=LOCK_MS) == [Acquired(0, 2, 1)]
    assert not share.can_acquire()
    share.acknowledge("a", [ack(0, 0, AckType.ACCEPT)], now_ms=0, lock_ms=LOCK_MS)
    assert share.acquire("b", batches((3, 9)), max_records=10, now_ms=0, lock_ms=LOCK_MS) == [Acquired(3, 3, 1)]


def test_aborted_records_markers_and_gaps_are_archived_never_delivered():
    share = partition()
    log = [Span(0, 1), Span(2, 4, SpanKind.ABORTED), Span(5, 5, SpanKind.CONTROL), Span(8, 9)]  # 6-7 compacted
    assert share.acquire("a", log, max_records=100, now_ms=0, lock_ms=LOCK_MS) == [Acquired(0, 1, 1), Acquired(8, 9, 1)]
    share.acknowledge("a", [ack(0, 1, AckType.ACCEPT)], now_ms=0, lock_ms=LOCK_MS)
    assert share.start_offset == 8


def test_the_persisted_state_round_trips_and_acquired_records_come_back_available():
    share = partition(start=10)
    share.acquire("a", batches((10, 19)), max_records=10, now_ms=0, lock_ms=LOCK_MS)
    share.acknowledge("a", [ack(10, 11, AckType.ACCEPT), ack(13, 13, AckType.REJECT), ack(14, 15, AckType.RELEASE)],
                      now_ms=0, lock_ms=LOCK_MS)
    stored = decode_value(encode_value(StoredState(share.snapshot(), leader_epoch=7)))
    assert (stored.state, stored.leader_epoch) == (share.snapshot(), 7)
    state = stored.state
    restored = SharePartition.restore(state, delivery_limit=3, max_in_flight=100)
    assert restored.start_offset == 12 and restored.end_offset == 20
    assert restored.state_of(12) == (RecordState.AVAILABLE, 1)  # was acquired: handed out again, counted
    assert restored.state_of(13) == (RecordState.ARCHIVED, 1)
    key = StateKey("g", uuid.uuid4(), 3)
    assert decode_key(encode_key(key)) == key


def test_the_start_follows_the_log_start_when_records_are_deleted():
    share = partition()
    share.acquire("a", batches((0, 4)), max_records=5, now_ms=0, lock_ms=LOCK_MS)
    assert share.move_start(3) and share.start_offset == 3 and share.state_of(2) is None
    assert share.move_start(50) and (share.start_offset, share.end_offset) == (50, 50)


# ---- membership -------------------------------------------------------------------------


def test_the_simple_assignment_shares_partitions_when_members_outnumber_them():
    assert assign({"m1": ("t",), "m2": ("t",)}, {"t": 4}) == {"m1": {"t": (0, 2)}, "m2": {"t": (1, 3)}}
    assert assign({"m1": ("t",), "m2": ("t",), "m3": ("t",)}, {"t": 2}) == {
        "m1": {"t": (0,)}, "m2": {"t": (1,)}, "m3": {"t": (0,)}}
    assert assign({"m1": ("t", "u"), "m2": ("u",)}, {"t": 1, "u": 1}) == {"m1": {"t": (0,), "u": (0,)},
                                                                           "m2": {"u": (0,)}}


class Counts:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)


def groups(scheduler: ManualScheduler, counts: Counts, *, other: frozenset[str] = frozenset()) -> ShareGroups:
    return ShareGroups(counts, scheduler, timings=lambda _group: ShareTimings(3000, 500), max_size=lambda: 2,
                       owner_error=lambda _group: ErrorCode.none, other_group=lambda group: group in other)


def beat(member: str, epoch: int, topics: tuple[str, ...] | None = ("t",), group: str = "g") -> ShareHeartbeat:
    return ShareHeartbeat(group, member, epoch, None, topics, "client", "/127.0.0.1")


def test_members_join_heartbeat_are_fenced_and_expire():
    scheduler, counts = ManualScheduler(), Counts({"t": 2})
    share_groups = groups(scheduler, counts, other=frozenset({"classic"}))
    first = share_groups.heartbeat(beat("m1", 0))
    assert (first.error, first.member_epoch, first.assignment) == (ErrorCode.none, 1, {"t": (0, 1)})
    second = share_groups.heartbeat(beat("m2", 0))
    assert (second.member_epoch, second.assignment) == (2, {"t": (1,)})
    again = share_groups.heartbeat(beat("m1", 1, None))
    assert (again.member_epoch, again.assignment) == (2, {"t": (0,)})  # the epoch moved: the new assignment
    assert share_groups.heartbeat(beat("m1", 2, None)).assignment is None  # nothing changed
    assert share_groups.heartbeat(beat("m1", 1, None)).error is ErrorCode.fenced_member_epoch
    assert share_groups.heartbeat(beat("m9", 3, None)).error is ErrorCode.unknown_member_id
    assert share_groups.heartbeat(beat("m3", 0)).error is ErrorCode.group_max_size_reached
    assert share_groups.heartbeat(beat("m4", 0, None)).error is ErrorCode.invalid_request
    assert share_groups.heartbeat(beat("", 0)).error is ErrorCode.invalid_request
    assert share_groups.heartbeat(beat("m1", 0, group="classic")).error is ErrorCode.group_id_not_found
    counts.counts["t"] = 3  # the topic grew: a new epoch with its new partition
    assert share_groups.heartbeat(beat("m2", 2, None)).assignment == {"t": (1,)}
    assert share_groups.heartbeat(beat("m1", 2, None)).assignment == {"t": (0, 2)}
    scheduler.advance(3000)  # neither heartbeat again: both expire
    group = share_groups.group("g")
    assert group is not None and group.state == "Empty" and not group.members
    left = share_groups.heartbeat(beat("m1", -1, None))
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
