"""storage/browse.py on a real partition log: each record's fate, including what the log
cleaner leaves (a producer's last marker kept as an empty batch) and the answer's bounds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from oncelog.protocol.record_batch import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    parse_batches,
    set_base_offset,
)
from oncelog.storage import AppendOrigin, LogConfig, PartitionLog, browse
from oncelog.storage.batch_records import empty_batch

NOW_MS = 1_700_000_000_000


def open_log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(tmp_path / "fates-0", "fates", 0, LogConfig(), recover=False, now_ms=NOW_MS)


def put(log: PartitionLog, value: bytes, **batch) -> int:
    data = bytearray(build_batch([Record(key=b"k", value=value)], timestamp_ms=NOW_MS, **batch))
    offset = log.append(data, parse_batches(data), now_ms=NOW_MS).base_offset
    log.update_high_watermark(log.log_end_offset)
    return offset


def marker(log: PartitionLog, producer_id: int, kind: ControlType, *, emptied: bool = False) -> int:
    data = bytearray(build_control_batch(kind, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                         timestamp_ms=NOW_MS))
    if emptied:  # what the cleaner keeps of a producer's last marker, as a follower copies it
        [header] = parse_batches(data)
        data = bytearray(empty_batch(header))
        [empty_header] = parse_batches(data)
        set_base_offset(data, empty_header, log.log_end_offset)
        offset = log.append(data, parse_batches(data), now_ms=NOW_MS, origin=AppendOrigin.REPLICATION).base_offset
    else:
        offset = log.append(data, parse_batches(data), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR).base_offset
    log.update_high_watermark(log.log_end_offset)
    return offset


def transactional(log: PartitionLog, producer_id: int, sequence: int, value: bytes) -> int:
    return put(log, value, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True)


def fates(log: PartitionLog, offset: int = 0, limit: int = 100, **options) -> list[tuple]:
    browsed = asyncio.run(browse.browse(log, offset, limit, **options))
    return [(r.offset, r.fate.value, r.marker_offset, r.emptied) for r in browsed.records]


def test_a_marker_the_cleaner_emptied_still_decides_the_batches_before_it(tmp_path):
    log = open_log(tmp_path)
    committed = transactional(log, 7, 0, b"kept")
    emptied_at = marker(log, 7, ControlType.COMMIT, emptied=True)
    assert fates(log) == [(committed, "committed", emptied_at, False), (emptied_at, "none", emptied_at, True)]
    log.close()


def test_a_producers_second_transaction_takes_the_marker_after_it_not_the_first_one(tmp_path):
    log = open_log(tmp_path)
    first = transactional(log, 9, 0, b"first")
    abort_at = marker(log, 9, ControlType.ABORT)
    second = transactional(log, 9, 1, b"second")
    commit_at = marker(log, 9, ControlType.COMMIT)
    third = transactional(log, 9, 2, b"open")
    assert fates(log) == [(first, "aborted", abort_at, False), (abort_at, "aborted", abort_at, False),
                          (second, "committed", commit_at, False), (commit_at, "committed", commit_at, False),
                          (third, "open", None, False)]
    assert [offset for offset, *_rest in fates(log, read_committed=True)] == [abort_at, second, commit_at]
    log.close()


def test_a_page_stops_at_its_answer_bound_and_says_where_the_next_starts(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    for _ in range(5):
        put(log, b"x" * 100)
    monkeypatch.setattr(browse, "MAX_ANSWER_BYTES", 250)  # each record: a key of 1 and a value of 100
    page = asyncio.run(browse.browse(log, 0, 100))
    assert ([r.offset for r in page.records], page.next_offset) == ([0, 1, 2], 3)
    log.close()
