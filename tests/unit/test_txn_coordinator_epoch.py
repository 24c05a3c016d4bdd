"""The transaction coordinator's epoch file: each load gets a higher epoch, durably."""

import pytest

from oncelog.coordinator.txn.coordinator_epoch import (
    FILE_NAME,
    next_coordinator_epoch,
    read_coordinator_epoch,
)
from oncelog.storage.errors import CorruptLogError


def test_the_first_load_gets_epoch_zero_and_each_later_load_one_more(tmp_path):
    assert read_coordinator_epoch(tmp_path) == -1
    assert [next_coordinator_epoch(tmp_path) for _ in range(3)] == [0, 1, 2]
    assert read_coordinator_epoch(tmp_path) == 2


def test_a_damaged_epoch_file_refuses_to_hand_out_an_epoch(tmp_path):
    next_coordinator_epoch(tmp_path)
    path = tmp_path / FILE_NAME
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError):
        next_coordinator_epoch(tmp_path)
