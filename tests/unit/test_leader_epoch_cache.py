"""LeaderEpochCache: Kafka's LeaderEpochFileCache rules and its `leader-epoch-checkpoint` file."""

import os

import pytest

from oncelog.storage import CorruptLogError, LeaderEpochCache
from oncelog.storage.leader_epoch import FILE_NAME


def cache_with(tmp_path, *entries) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / FILE_NAME)
    for epoch, start_offset in entries:
        cache.assign(epoch, start_offset)
    return cache


def reopened(cache: LeaderEpochCache) -> LeaderEpochCache:
    return LeaderEpochCache(cache.path)


# -- assign --------------------------------------------------------------------------------


def test_assign_keeps_epochs_and_offsets_increasing(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    assert cache.assign(1, 15)  # drops every entry with epoch >= 1 or start >= 15
    assert cache.entries() == [(0, 0), (1, 15)]
    assert cache.assign(3, 5)  # epoch 1's start 15 is past 5: it goes too
    assert cache.entries() == [(0, 0), (3, 5)]
    assert reopened(cache).entries() == [(0, 0), (3, 5)]


def test_assign_of_the_latest_epoch_at_a_later_offset_changes_nothing(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (2, 20))
    assert not cache.assign(2, 25)
    assert cache.entries() == [(0, 0), (2, 20)]
    assert cache.assign(2, 18)  # an earlier start of the latest epoch replaces it
    assert cache.entries() == [(0, 0), (2, 18)]


def test_assign_refuses_a_negative_epoch_or_offset(tmp_path):
    cache = cache_with(tmp_path)
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(0, -1)
    assert cache.entries() == []


def test_latest_epoch_and_entry_of_an_empty_cache(tmp_path):
    cache = cache_with(tmp_path)
    assert (cache.latest_epoch, cache.latest_entry) == (-1, None)
    cache.assign(4, 7)
    assert (cache.latest_epoch, cache.latest_entry) == (4, (4, 7))


# -- lookups -------------------------------------------------------------------------------


def test_epoch_for_offset_is_the_epoch_whose_range_holds_it(tmp_path):
    cache = cache_with(tmp_path, (1, 5), (3, 10))
    assert [cache.epoch_for_offset(offset) for offset in (4, 5, 9, 10, 100)] == [-1, 1, 1, 3, 3]


def test_epoch_for_offset_of_an_empty_cache_is_unknown(tmp_path):
    assert cache_with(tmp_path).epoch_for_offset(0) == -1


def test_end_offset_for_an_epoch_is_the_next_epochs_start(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (2, 10), (4, 20))
    assert cache.end_offset_for(0, 30) == (0, 10)
    assert cache.end_offset_for(2, 30) == (2, 20)


def test_end_offset_for_an_epoch_between_known_ones_answers_the_epoch_below_it(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (2, 10), (4, 20))
    assert cache.end_offset_for(3, 30) == (2, 20)  # the largest epoch <= 3, and where epoch 4 starts


def test_end_offset_for_the_latest_epoch_is_the_log_end(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (2, 10), (4, 20))
    assert cache.end_offset_for(4, 30) == (4, 30)


def test_end_offset_for_an_epoch_older_than_the_cache_is_the_first_start_offset(tmp_path):
    # Kafka: the data before the first known epoch is gone from the log; the follower
    # truncates to where the log now begins.
    cache = cache_with(tmp_path, (3, 100), (5, 200))
    assert cache.end_offset_for(1, 300) == (1, 100)


def test_end_offset_for_an_unknown_newer_epoch_is_undefined(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (2, 10))
    assert cache.end_offset_for(7, 30) == (-1, -1)


def test_end_offset_for_the_undefined_epoch_or_from_an_empty_cache_is_undefined(tmp_path):
    assert cache_with(tmp_path, (0, 0)).end_offset_for(-1, 30) == (-1, -1)
    (tmp_path / "empty").mkdir()
    assert cache_with(tmp_path / "empty").end_offset_for(0, 30) == (-1, -1)


# -- truncation ----------------------------------------------------------------------------


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_new_end(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    cache.truncate_from_end(21)
    assert cache.entries() == [(0, 0), (1, 10), (2, 20)]
    cache.truncate_from_end(20)
    assert cache.entries() == [(0, 0), (1, 10)]
    cache.truncate_from_end(5)
    assert cache.entries() == [(0, 0)]
    assert reopened(cache).entries() == [(0, 0)]


def test_truncate_from_start_keeps_the_covering_epoch_at_the_new_start(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    cache.truncate_from_start(15)
    assert cache.entries() == [(1, 15), (2, 20)]
    cache.truncate_from_start(20)
    assert cache.entries() == [(2, 20)]
    cache.truncate_from_start(25)
    assert cache.entries() == [(2, 25)]
    assert reopened(cache).entries() == [(2, 25)]


def test_truncate_from_start_below_the_first_entry_changes_nothing(tmp_path):
    cache = cache_with(tmp_path, (3, 100))
    cache.truncate_from_start(50)
    assert cache.entries() == [(3, 100)]


def test_clear_empties_the_cache_and_its_file(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (1, 10))
    cache.clear()
    assert cache.entries() == []
    assert cache.path.read_text() == "0\n0\n"
    assert reopened(cache).entries() == []


# -- the checkpoint file -------------------------------------------------------------------


def test_checkpoint_survives_reopen(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (3, 10))
    assert cache.path.read_text() == "0\n2\n0 0\n3 10\n"  # Kafka's LeaderEpochCheckpointFile
    assert reopened(cache).entries() == [(0, 0), (3, 10)]
    assert os.listdir(tmp_path) == [FILE_NAME]  # no temporary file left behind


def test_missing_checkpoint_is_an_empty_cache(tmp_path):
    cache = LeaderEpochCache(tmp_path / FILE_NAME)
    assert cache.entries() == []
    assert not cache.path.exists()  # nothing is written until something changes


def test_empty_checkpoint_file_is_an_empty_cache(tmp_path):
    (tmp_path / FILE_NAME).write_bytes(b"")  # Kafka creates the file empty
    assert LeaderEpochCache(tmp_path / FILE_NAME).entries() == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("0\n2\n0 0\n", "expected 2 entries"),
        ("0\n1\n0 0\n1 5\n", "expected 1 entries"),
        ("1\n0\n", "unrecognized version 1"),
        ("zero\n", "malformed line"),
        ("0\n1\n0\n", "malformed line"),
        ("0\n1\n0 x\n", "malformed line"),
        ("0\n1\n-1 0\n", "invalid leader epoch entry"),
        ("0\n", "malformed line"),
    ],
)
def test_corrupt_checkpoint_is_an_error_at_load(tmp_path, content, message):
    (tmp_path / FILE_NAME).write_text(content)
    with pytest.raises(CorruptLogError, match=message):
        LeaderEpochCache(tmp_path / FILE_NAME)


def test_checkpoint_entries_breaking_monotonicity_are_dropped_at_load(tmp_path):
    (tmp_path / FILE_NAME).write_text("0\n3\n0 0\n2 20\n1 30\n")  # as Kafka's load: assign each in turn
    assert LeaderEpochCache(tmp_path / FILE_NAME).entries() == [(0, 0), (1, 30)]
