"""Producer ids come from persisted blocks and are never reused across restarts."""

import pytest

from oncelog.coordinator.producer_ids import ProducerIdManager


def test_ids_are_consecutive_within_a_block(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    assert [manager.next_producer_id() for _ in range(12)] == list(range(12))


def test_a_restart_skips_the_rest_of_the_block(tmp_path):
    first = ProducerIdManager(tmp_path, block_size=10)
    used = [first.next_producer_id() for _ in range(3)]
    second = ProducerIdManager(tmp_path, block_size=10)
    assert second.next_producer_id() == 10
    assert set(used).isdisjoint({10})


def test_no_id_is_handed_out_twice_over_many_restarts(tmp_path):
    seen = set()
    for _ in range(20):
        manager = ProducerIdManager(tmp_path, block_size=7)
        for _ in range(5):
            producer_id = manager.next_producer_id()
            assert producer_id not in seen
            seen.add(producer_id)


def test_a_corrupt_file_stops_allocation(tmp_path):
    ProducerIdManager(tmp_path).next_producer_id()
    path = tmp_path / "producer-ids.meta"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(data)
    with pytest.raises(RuntimeError, match="corrupt"):
        ProducerIdManager(tmp_path)
