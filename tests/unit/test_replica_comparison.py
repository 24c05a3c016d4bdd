"""compare_replicas' rule (oncelog.chaos.replicas): the replicas of a partition hold the
same batches up to the smallest high watermark among them; beyond it they may differ."""

from oncelog.chaos.replicas import compare_log_dirs
from oncelog.protocol.record_batch import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    parse_batches,
)
from oncelog.storage import AppendOrigin, LogConfig, LogManager

NOW_MS = 1_700_000_000_000


def data_batch(value: bytes, **kwargs) -> bytearray:
    return bytearray(build_batch([Record(b"k", value), Record(b"k", value + b"!")], timestamp_ms=NOW_MS, **kwargs))


def leader_batches() -> list[bytearray]:
    """What a leader wrote: plain, transactional and a commit marker."""
    return [
        data_batch(b"a"),
        data_batch(b"b", producer_id=7, producer_epoch=0, base_sequence=0, transactional=True),
        data_batch(b"c"),
        bytearray(build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                      timestamp_ms=NOW_MS)),
        data_batch(b"d"),
    ]


def write_node(log_dir, batches: list[bytearray], high_watermark: int, topic: str = "orders") -> None:
    """A node's log dir after a clean shutdown: `batches` appended with offsets as a
    leader assigns them, `high_watermark` checkpointed."""
    manager = LogManager([log_dir], LogConfig(), replicated=True)
    manager.load()
    manager.create_topic(topic, 1, {})
    log = manager.partition(topic, 0)
    assert log is not None  # created above
    for data in batches:
        origin = AppendOrigin.COORDINATOR if parse_batches(data)[0].is_control else AppendOrigin.CLIENT
        log.append(data, parse_batches(data), now_ms=NOW_MS, origin=origin, leader_epoch=3)
    log.update_high_watermark(high_watermark)
    manager.close()


def test_identical_replicas_up_to_the_smallest_high_watermark_pass(tmp_path):
    batches = leader_batches()
    write_node(tmp_path / "node-1", [bytearray(b) for b in batches], high_watermark=9)
    write_node(tmp_path / "node-2", [bytearray(b) for b in batches], high_watermark=7)
    # A follower that has not fetched the last batch yet: its high watermark is lower.
    write_node(tmp_path / "node-3", [bytearray(b) for b in batches[:-1]], high_watermark=7)

    comparison = compare_log_dirs({n: tmp_path / f"node-{n}" for n in (1, 2, 3)})

    assert comparison.ok, comparison.mismatches
    assert comparison.partitions == 1
    assert comparison.batches == 4  # offsets 0..6: the last batch is above the bound
    assert comparison.bounds == {"orders-0": (7, 9)}


def test_replicas_that_differ_only_above_the_smallest_high_watermark_pass(tmp_path):
    batches = leader_batches()
    write_node(tmp_path / "node-1", [bytearray(b) for b in batches], high_watermark=7)
    write_node(tmp_path / "node-2", [bytearray(b) for b in batches[:-1]] + [data_batch(b"uncommitted tail")],
               high_watermark=7)

    assert compare_log_dirs({1: tmp_path / "node-1", 2: tmp_path / "node-2"}).ok


def test_a_replica_with_a_different_batch_below_the_high_watermark_is_reported(tmp_path):
    batches = leader_batches()
    diverging = [bytearray(b) for b in batches]
    diverging[2] = data_batch(b"other")  # offsets 4-5: same offsets, other bytes
    write_node(tmp_path / "node-1", [bytearray(b) for b in batches], high_watermark=9)
    write_node(tmp_path / "node-2", diverging, high_watermark=9)
    write_node(tmp_path / "node-3", [bytearray(b) for b in batches], high_watermark=9)

    comparison = compare_log_dirs({n: tmp_path / f"node-{n}" for n in (1, 2, 3)})

    assert not comparison.ok
    (mismatch,) = comparison.mismatches
    assert (mismatch.topic, mismatch.partition) == ("orders", 0)
    assert "batch #2 differs" in mismatch.description and "node 2 has [4..5]" in mismatch.description


def test_a_replica_missing_a_batch_below_the_high_watermark_is_reported(tmp_path):
    batches = leader_batches()
    write_node(tmp_path / "node-1", [bytearray(b) for b in batches], high_watermark=9)
    # Node 2 lacks the transactional batch but claims the same high watermark: its
    # offsets shift, so the comparison finds the hole.
    write_node(tmp_path / "node-2", [bytearray(b) for i, b in enumerate(batches) if i != 1], high_watermark=9)

    comparison = compare_log_dirs({1: tmp_path / "node-1", 2: tmp_path / "node-2"})

    assert [m.partition for m in comparison.mismatches] == [0]
    assert "batch #1 differs" in comparison.mismatches[0].description


def test_only_the_given_topics_are_compared_and_internal_topics_are_left_out_by_default(tmp_path):
    for node in (1, 2):
        write_node(tmp_path / f"node-{node}", [data_batch(b"%d" % node)], high_watermark=2, topic="__consumer_offsets")

    dirs = {n: tmp_path / f"node-{n}" for n in (1, 2)}
    assert compare_log_dirs(dirs).partitions == 0
    assert not compare_log_dirs(dirs, ["__consumer_offsets"]).ok
