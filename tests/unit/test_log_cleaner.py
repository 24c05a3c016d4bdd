"""The log cleaner on a real PartitionLog: keys, tombstones, transactions and markers,
producer state, the LSO bound, and crash safety of the segment swap."""

from __future__ import annotations

import asyncio
import os
import threading
from functools import partial
from pathlib import Path
from typing import cast

import pytest

from oncelog.protocol.record_batch import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    iter_records,
    parse_batches,
)
from oncelog.storage import AppendOrigin, LogConfig, PartitionLog, cleaner_work, producer_snapshot
from oncelog.storage import cleaner as cleaner_module
from oncelog.storage.batch_records import DELETE_HORIZON_BIT
from oncelog.storage.cleaner import CleanerConfig, LogCleaner
from oncelog.storage.manager import LogManager
from oncelog.storage.producer_state import Verdict

NOW_MS = 1_700_000_000_000
DAY_MS = 86_400_000
# Small segments: every few batches roll, so most of the log is cleanable.
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "400"}


class _OneLogManager:
    """What LogCleaner needs of a LogManager, for one log."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.log_dirs = [log.directory.parent]

    def partitions(self):
        return iter([self.log])

    def log_dir_of(self, topic: str, partition: int) -> Path:
        return self.log.directory.parent


def open_log(tmp_path: Path, overrides: dict | None = None, *, recover: bool = False) -> PartitionLog:
    config = LogConfig().with_overrides({**COMPACT, **(overrides or {})})
    return PartitionLog.open(tmp_path / "table-0", "table", 0, config, recover=recover,
                             recovery_point=0 if recover else None, now_ms=NOW_MS)


def put(log: PartitionLog, key: bytes | None, value: bytes | None, **batch) -> int:
    data = bytearray(build_batch([Record(key=key, value=value)], timestamp_ms=NOW_MS, **batch))
    return log.append(data, parse_batches(data), now_ms=NOW_MS).base_offset


def marker(log: PartitionLog, producer_id: int, epoch: int, kind: ControlType) -> int:
    data = bytearray(build_control_batch(kind, producer_id=producer_id, producer_epoch=epoch,
                                         coordinator_epoch=0, timestamp_ms=NOW_MS))
    return log.append(data, parse_batches(data), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR).base_offset


def roll(log: PartitionLog) -> None:
    log.roll()


def make_dirty(log: PartitionLog) -> None:
    """New data in a rolled segment: what makes Kafka's cleaner run another round."""
    put(log, b"filler-%d" % log.log_end_offset, b"x")
    roll(log)


def contents(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record in the log."""
    data = log.read(log.log_start_offset, 1 << 30).records
    found = []
    for header in parse_batches(data):
        if header.is_control:
            continue
        found += [(r.offset, r.key, r.value) for r in iter_records(data, header)]
    return found


def batches(log: PartitionLog):
    data = log.read(log.log_start_offset, 1 << 30).records
    return data, parse_batches(data)


def clean(log: PartitionLog, now_ms: int = NOW_MS) -> LogCleaner:
    cleaner = LogCleaner(cast(LogManager, _OneLogManager(log)), CleanerConfig())  # a stand-in
    cleaner.clean(log, now_ms)
    return cleaner


def test_cleaning_keeps_only_the_latest_record_per_key_at_its_offset(tmp_path):
    log = open_log(tmp_path)
    for i in range(30):
        put(log, b"k%d" % (i % 4), b"v%d" % i)
    roll(log)
    put(log, b"k0", b"active")  # the active segment is never cleaned
    clean(log)
    assert contents(log) == [
        (26, b"k2", b"v26"), (27, b"k3", b"v27"), (28, b"k0", b"v28"), (29, b"k1", b"v29"), (30, b"k0", b"active"),
    ]
    assert log.log_end_offset == 31
    log.close()
    reopened = open_log(tmp_path, recover=True)
    assert [offset for offset, *_ in contents(reopened)] == [26, 27, 28, 29, 30]
    # Offsets never move: a fetch from a removed offset starts at the next kept batch.
    assert reopened.read(3, 1 << 20).first_offset == 26


def test_records_of_the_dirty_section_only_supersede_older_ones(tmp_path):
    log = open_log(tmp_path)
    for i in range(10):
        put(log, b"k%d" % (i % 2), b"first-%d" % i)
    roll(log)
    cleaner = clean(log)
    for i in range(10):
        put(log, b"k0", b"second-%d" % i)
    roll(log)
    cleaner.clean(log, NOW_MS)
    assert contents(log) == [(9, b"k1", b"first-9"), (19, b"k0", b"second-9")]


def test_tombstone_stays_until_delete_retention_after_the_clean_that_kept_it(tmp_path):
    log = open_log(tmp_path, {"delete.retention.ms": str(DAY_MS)})
    put(log, b"a", b"1")
    put(log, b"b", b"1")
    put(log, b"a", None)
    roll(log)
    cleaner = clean(log, NOW_MS)
    assert contents(log) == [(1, b"b", b"1"), (2, b"a", None)]
    data, headers = batches(log)
    tombstone = next(h for h in headers if h.base_offset == 2)
    assert tombstone.attributes & DELETE_HORIZON_BIT and tombstone.base_timestamp == NOW_MS + DAY_MS
    # The record's own timestamp is unchanged by the horizon in the base timestamp.
    assert iter_records(data, tombstone)[0].timestamp == NOW_MS

    # Like Kafka, later rounds run when new data makes the log dirty again.
    put(log, b"c", b"1")
    roll(log)
    cleaner.clean(log, NOW_MS + DAY_MS - 1)
    assert (2, b"a", None) in contents(log)
    put(log, b"d", b"1")
    roll(log)
    cleaner.clean(log, NOW_MS + DAY_MS)
    assert contents(log) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1")]


def test_records_without_a_key_are_removed(tmp_path):
    log = open_log(tmp_path)
    put(log, None, b"no key")
    put(log, b"k", b"v")
    roll(log)
    clean(log)
    assert contents(log) == [(1, b"k", b"v")]


def transactional(log: PartitionLog, producer_id: int, sequence: int, key: bytes, value: bytes) -> int:
    return put(log, key, value, producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
               transactional=True)


def test_aborted_transaction_data_goes_and_its_marker_follows_after_delete_retention(tmp_path):
    log = open_log(tmp_path, {"delete.retention.ms": str(DAY_MS)})
    put(log, b"k", b"committed-before")
    transactional(log, 7, 0, b"k", b"aborted")
    transactional(log, 7, 1, b"other", b"aborted")
    abort_at = marker(log, 7, 0, ControlType.ABORT)
    transactional(log, 8, 0, b"x", b"committed")
    commit_at = marker(log, 8, 0, ControlType.COMMIT)
    put(log, b"filler", b"1")  # producers 7 and 8 then are not the round's last batch
    roll(log)
    assert [e.last_offset for e in log.txn_index.entries] == [abort_at]

    cleaner = clean(log, NOW_MS)
    # The aborted records never supersede: k keeps its committed value.
    assert (0, b"k", b"committed-before") in contents(log)
    assert all(value != b"aborted" for *_, value in contents(log))
    # Producer 7's last batch stays, emptied, for its sequence numbers.
    _data, headers = batches(log)
    kept_7 = [h for h in headers if h.producer_id == 7 and not h.is_control]
    assert [(h.base_offset, h.record_count, h.base_sequence, h.last_offset_delta) for h in kept_7] == [(2, 0, 1, 0)]
    # Both markers stay while data of their transactions was seen; the abort stays indexed.
    assert {h.base_offset for h in headers if h.is_control} == {abort_at, commit_at}
    assert [e.last_offset for e in log.txn_index.entries] == [abort_at]

    make_dirty(log)
    cleaner.clean(log, NOW_MS + 1)  # the emptied batch is still producer 7's last: marker kept
    assert abort_at in {h.base_offset for h in batches(log)[1] if h.is_control}
    log.producer_state.producers.clear()  # producers expired: nothing pins their batches
    make_dirty(log)
    cleaner.clean(log, NOW_MS + 2)  # the emptied batch goes; this round still saw it
    assert [h.base_offset for h in batches(log)[1] if h.producer_id == 7] == [abort_at]
    assert [e.last_offset for e in log.txn_index.entries] == [abort_at]
    make_dirty(log)
    cleaner.clean(log, NOW_MS + 3)  # no data of the aborted transaction left: horizon set
    assert log.txn_index.entries == []
    abort_marker = next(h for h in batches(log)[1] if h.base_offset == abort_at)
    assert abort_marker.attributes & DELETE_HORIZON_BIT and abort_marker.base_timestamp == NOW_MS + 3 + DAY_MS
    make_dirty(log)
    cleaner.clean(log, NOW_MS + 3 + DAY_MS)
    # The abort marker is gone; the commit marker stays while its transaction's record does.
    assert [h.base_offset for h in batches(log)[1] if h.is_control] == [commit_at]
    assert contents(log)[:3] == [(0, b"k", b"committed-before"), (4, b"x", b"committed"), (6, b"filler", b"1")]


def test_read_committed_sees_no_abort_without_its_marker_after_cleaning(tmp_path):
    log = open_log(tmp_path, {"delete.retention.ms": "0"})
    transactional(log, 7, 0, b"k", b"aborted")
    marker(log, 7, 0, ControlType.ABORT)
    transactional(log, 7, 1, b"k", b"committed")  # same producer, next transaction
    marker(log, 7, 0, ControlType.COMMIT)
    put(log, b"z", b"1")
    roll(log)
    cleaner = clean(log)
    log.producer_state.producers.clear()
    for step in range(1, 4):
        make_dirty(log)
        cleaner.clean(log, NOW_MS + step)
    aborted = log.aborted_transactions(0, log.log_end_offset)
    markers = {h.base_offset for h in batches(log)[1] if h.is_control}
    assert all(any(m >= first for m in markers) for _pid, first in aborted)
    assert (2, b"k", b"committed") in contents(log)


def test_producer_state_survives_cleaning_and_a_restart_without_snapshots(tmp_path):
    log = open_log(tmp_path)
    for sequence in range(5):
        put(log, b"same", b"v%d" % sequence, producer_id=42, producer_epoch=3, base_sequence=sequence)
    for i in range(5):
        put(log, b"same", b"later-%d" % i)  # supersedes every record of producer 42
    roll(log)
    clean(log)
    _data, headers = batches(log)
    mine = [h for h in headers if h.producer_id == 42]
    assert [(h.base_offset, h.record_count, h.base_sequence) for h in mine] == [(4, 0, 4)]
    log.close()
    producer_snapshot.delete_snapshots(log.directory, above=-1)

    reopened = open_log(tmp_path, recover=True)
    entry = reopened.producer_state.producers[42]
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (3, 4, 4)
    # The next sequence is accepted, a retry of the last batch is a duplicate, a gap is refused.
    assert reopened.producer_state.check(42, 3, 5, 5).verdict is Verdict.APPEND
    assert reopened.producer_state.check(42, 3, 4, 4).verdict is Verdict.DUPLICATE
    assert reopened.producer_state.check(42, 3, 7, 7).verdict is Verdict.OUT_OF_ORDER_SEQUENCE


def test_nothing_at_or_after_the_last_stable_offset_is_cleaned(tmp_path):
    log = open_log(tmp_path)
    put(log, b"k", b"old")
    put(log, b"k", b"newer")
    open_txn = transactional(log, 9, 0, b"k", b"open transaction")
    put(log, b"k", b"after the open transaction")
    roll(log)
    put(log, b"k", b"active")
    assert log.last_stable_offset == open_txn
    cleaner = clean(log)
    assert contents(log) == [
        (1, b"k", b"newer"), (2, b"k", b"open transaction"), (3, b"k", b"after the open transaction"),
        (4, b"k", b"active"),
    ]
    assert cleaner.first_dirty_offset(log) == open_txn


def test_cleaner_picks_only_compacted_logs_over_the_dirty_ratio(tmp_path):
    log = open_log(tmp_path, {"min.cleanable.dirty.ratio": "0.5"})
    for i in range(20):
        put(log, b"k%d" % (i % 2), b"v%d" % i)
    roll(log)
    cleaner = LogCleaner(_OneLogManager(log), CleanerConfig())
    assert cleaner.clean_filthiest(NOW_MS) is not None
    assert cleaner.clean_filthiest(NOW_MS) is None  # everything is clean now
    put(log, b"k0", b"new")
    roll(log)
    assert cleaner.cleanable_range(log, NOW_MS).dirty_ratio < 0.5
    assert cleaner.clean_filthiest(NOW_MS) is None

    deleting = PartitionLog.open(tmp_path / "plain-0", "plain", 0, LogConfig().with_overrides({"segment.bytes": "400"}),
                                 recover=False)
    for i in range(20):
        put(deleting, b"k", b"v%d" % i)
    roll(deleting)
    assert LogCleaner(_OneLogManager(deleting), CleanerConfig()).clean_filthiest(NOW_MS) is None


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    log = open_log(tmp_path, {"min.compaction.lag.ms": str(DAY_MS)})
    for i in range(10):
        put(log, b"k", b"v%d" % i)
    roll(log)
    put(log, b"k", b"active")
    clean(log, NOW_MS + 1000)
    assert len(contents(log)) == 11
    clean(log, NOW_MS + DAY_MS + 1)
    assert [value for *_, value in contents(log)] == [b"v9", b"active"]


def test_cleaner_checkpoint_is_kept_across_restarts(tmp_path):
    log = open_log(tmp_path)
    for i in range(10):
        put(log, b"k", b"v%d" % i)
    roll(log)
    clean(log)
    assert LogCleaner(_OneLogManager(log), CleanerConfig()).first_dirty_offset(log) == 10


# -- crash safety -------------------------------------------------------------------------


def _log_with_history(tmp_path: Path) -> PartitionLog:
    log = open_log(tmp_path)
    for i in range(40):
        put(log, b"k%d" % (i % 3), b"v%d" % i)
    roll(log)
    put(log, b"k0", b"active")
    return log


EXPECTED_AFTER_CLEANING = [(37, b"k1", b"v37"), (38, b"k2", b"v38"), (39, b"k0", b"v39"), (40, b"k0", b"active")]


class _Crash(Exception):
    pass


@pytest.mark.parametrize("crash_point", ["writing", "after_swap_rename", "deleting_old_segments", "after_swap"])
def test_a_crash_anywhere_in_a_swap_loses_and_duplicates_nothing(tmp_path, monkeypatch, crash_point):
    log = _log_with_history(tmp_path)
    before = contents(log)
    log.flush()
    calls = {"unlink": 0}
    real_unlink = cleaner_module.unlink_segment_files
    real_rename = cleaner_module.rename

    def crashing_unlink(directory, base):
        calls["unlink"] += 1
        if crash_point == "deleting_old_segments" and calls["unlink"] == 2:
            raise _Crash
        real_unlink(directory, base)

    def crashing_rename(source, target):
        real_rename(source, target)
        if crash_point == "after_swap_rename" and target.name.endswith(".swap"):
            raise _Crash
        if crash_point == "after_swap" and source.name.endswith(".swap"):
            raise _Crash

    def crashing_write(fd, data, path):
        os.write(fd, data[: len(data) // 2])
        raise _Crash

    monkeypatch.setattr(cleaner_module, "unlink_segment_files", crashing_unlink)
    monkeypatch.setattr(cleaner_module, "rename", crashing_rename)
    if crash_point == "writing":
        monkeypatch.setattr(cleaner_work, "_write_all", crashing_write)
    with pytest.raises(_Crash):
        clean(log)
    log.close_without_flush()  # kill -9: nothing more is written
    monkeypatch.undo()

    reopened = open_log(tmp_path, recover=True)
    leftovers = [name for name in os.listdir(reopened.directory) if name.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    after = contents(reopened)
    offsets = [offset for offset, *_ in after]
    assert offsets == sorted(set(offsets))  # no duplicates, in order
    assert set(after) <= set(before)
    latest = {key: (offset, value) for offset, key, value in before}
    assert all(latest[key] in {(o, v) for o, k, v in after if k == key} for key in latest)
    # Cleaning again completes the job.
    clean(reopened)
    assert contents(reopened) == EXPECTED_AFTER_CLEANING
    reopened.close()
    assert contents(open_log(tmp_path, recover=True)) == EXPECTED_AFTER_CLEANING


def test_reads_in_the_middle_of_a_swap_keep_working(tmp_path, monkeypatch):
    log = _log_with_history(tmp_path)
    seen = []
    real_replace = log.replace_segments

    def replace_then_read(old, new):
        seen.append(contents(log))  # old segment files are already unlinked here
        real_replace(old, new)

    monkeypatch.setattr(log, "replace_segments", replace_then_read)
    clean(log)
    assert seen and all(len(snapshot) >= len(EXPECTED_AFTER_CLEANING) for snapshot in seen)
    assert contents(log) == EXPECTED_AFTER_CLEANING


def test_compact_and_delete_also_applies_retention(tmp_path):
    log = open_log(tmp_path, {"cleanup.policy": "compact,delete", "retention.ms": str(DAY_MS)})
    for i in range(20):
        put(log, b"k%d" % (i % 2), b"v%d" % i)
    roll(log)
    clean(log)
    assert [value for *_, value in contents(log)] == [b"v18", b"v19"]
    fresh = bytearray(build_batch([Record(key=b"k0", value=b"new")], timestamp_ms=NOW_MS + 2 * DAY_MS))
    log.append(fresh, parse_batches(fresh), now_ms=NOW_MS + 2 * DAY_MS)
    assert log.apply_retention(NOW_MS + 2 * DAY_MS) > 0
    assert contents(log) == [(20, b"k0", b"new")]
    # The cleaner starts over from the new log start.
    assert LogCleaner(_OneLogManager(log), CleanerConfig()).first_dirty_offset(log) == 20


def test_a_producers_last_marker_stays_as_an_empty_batch_and_the_log_reopens(tmp_path):
    """A coordinator abort with a bumped epoch leaves the producer no data batch of its
    epoch: its marker is what keeps the epoch, emptied once its delete horizon passed."""
    log = open_log(tmp_path, {"delete.retention.ms": "0"})
    transactional(log, 5, 0, b"k", b"aborted")
    abort_at = marker(log, 5, 1, ControlType.ABORT)  # epoch 1: the coordinator fenced epoch 0
    put(log, b"other", b"1")
    roll(log)
    cleaner = clean(log, NOW_MS)
    for step in range(1, 4):
        make_dirty(log)
        cleaner.clean(log, NOW_MS + step)
    _data, headers = batches(log)
    kept = [h for h in headers if h.producer_id == 5]
    assert [(h.base_offset, h.is_control, h.record_count, h.producer_epoch) for h in kept] == [(abort_at, True, 0, 1)]
    assert log.txn_index.entries == []
    log.close()
    producer_snapshot.delete_snapshots(log.directory, above=-1)
    reopened = open_log(tmp_path, recover=True)
    assert (b"k", b"aborted") not in [(k, v) for _o, k, v in contents(reopened)]
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == []


def test_after_a_completed_swap_aborts_whose_marker_is_gone_are_forgotten(tmp_path):
    from oncelog.storage.txn_index import AbortedTxn

    log = open_log(tmp_path)
    transactional(log, 7, 0, b"k", b"aborted")
    kept_marker = marker(log, 7, 0, ControlType.ABORT)
    put(log, b"k", b"v")
    # As if a crash came between the swap that dropped a marker at offset 2 and the
    # index update: the entry outlived its marker.
    log.txn_index.append(AbortedTxn(8, 2, 2, 2))
    log.drop_orphan_aborted_txns()
    assert [entry.last_offset for entry in log.txn_index.entries] == [kept_marker]


# -- the round's heavy part on a thread (the broker's cleaner thread) ---------------------


def _history_with_retention(tmp_path: Path) -> PartitionLog:
    log = open_log(tmp_path, {"cleanup.policy": "compact,delete", "retention.ms": str(DAY_MS)})
    for i in range(40):
        put(log, b"k%d" % (i % 3), b"v%d" % i)
    roll(log)
    put(log, b"k0", b"active")
    return log


def _leftovers(directory: Path) -> list[str]:
    if not directory.exists():
        return []
    return [name for name in os.listdir(directory) if name.endswith((".cleaned", ".swap"))]


def test_cleaning_on_a_thread_leaves_the_same_log_as_cleaning_in_place(tmp_path):
    in_place = _history_with_retention(tmp_path / "a")
    on_thread = _history_with_retention(tmp_path / "b")
    clean(in_place)
    cleaner = LogCleaner(_OneLogManager(on_thread), CleanerConfig())
    stats = asyncio.run(cleaner.clean_filthiest_in_thread(NOW_MS, asyncio.to_thread))
    assert stats is not None and stats.end_offset == 40
    assert contents(on_thread) == contents(in_place) == EXPECTED_AFTER_CLEANING
    assert on_thread.cleaning is None and not cleaner.is_cleaning("table", 0)
    assert _leftovers(on_thread.directory) == []


@pytest.mark.parametrize("when", ["while_the_thread_writes", "before_the_swap"])
@pytest.mark.parametrize("change", ["retention", "truncation", "deletion"])
def test_a_log_changed_during_the_thread_work_gets_no_cleaned_segment(tmp_path, change, when):
    log = _history_with_retention(tmp_path)
    before = contents(log)
    cleaner = LogCleaner(_OneLogManager(log), CleanerConfig())

    def change_the_log():
        if change == "retention":
            assert log.apply_retention(NOW_MS + 2 * DAY_MS) > 0
        elif change == "truncation":
            log.truncate_to(20)
        else:
            log.delete()

    async def run_in_thread(step):
        if not isinstance(step, partial):  # the offset map
            return await asyncio.to_thread(step)
        if when == "while_the_thread_writes":
            change_the_log()  # on the loop, as a request handler or timer would
            return await asyncio.to_thread(step)
        result = await asyncio.to_thread(step)
        assert _leftovers(log.directory)  # the cleaned segment waits for its swap
        change_the_log()
        return result

    assert asyncio.run(cleaner.clean_filthiest_in_thread(NOW_MS, run_in_thread)) is None
    assert cleaner.rounds_aborted == 1 and not cleaner.uncleanable
    assert log.cleaning is None and not cleaner.is_cleaning("table", 0)
    assert _leftovers(log.directory) == []
    assert cleaner.first_dirty_offset(log) == log.log_start_offset  # no checkpoint written
    if change == "retention":
        assert contents(log) == [] and log.log_start_offset == 41
    elif change == "truncation":
        assert contents(log) == before[:20]  # untouched by the cleaner
    else:
        assert not log.directory.exists()  # nothing written back into a deleted partition


def test_cancelling_a_round_waits_for_the_thread_and_discards_its_output(tmp_path):
    log = _log_with_history(tmp_path)
    before = contents(log)
    cleaner = LogCleaner(_OneLogManager(log), CleanerConfig())
    entered, release = threading.Event(), threading.Event()

    async def run_in_thread(step):
        def held():
            if isinstance(step, partial):
                entered.set()
                release.wait(10)
            return step()

        return await asyncio.to_thread(held)

    async def scenario():
        task = asyncio.create_task(cleaner.clean_filthiest_in_thread(NOW_MS, run_in_thread))
        assert await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0.1)
        assert not task.done()  # the thread is still running: the round waits for it
        assert log.cleaning is not None and log.cleaning.abort_reason is not None
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert contents(log) == before
    assert cleaner.rounds_aborted == 1 and log.cleaning is None
    assert _leftovers(log.directory) == []


def test_a_partition_being_cleaned_is_not_picked_for_a_second_round(tmp_path):
    log = _log_with_history(tmp_path)
    cleaner = LogCleaner(_OneLogManager(log), CleanerConfig())
    seen = []

    async def run_in_thread(step):
        seen.append(cleaner.is_cleaning("table", 0))
        seen.append(cleaner.clean_filthiest(NOW_MS))  # mid-round: nothing else qualifies
        with pytest.raises(RuntimeError, match="cleaning"):
            LogCleaner(_OneLogManager(log), CleanerConfig()).clean(log, NOW_MS)
        return await asyncio.to_thread(step)

    assert asyncio.run(cleaner.clean_filthiest_in_thread(NOW_MS, run_in_thread)) is not None
    assert seen[:2] == [True, None]
    assert contents(log) == EXPECTED_AFTER_CLEANING
