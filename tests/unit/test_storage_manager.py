"""LogManager (topics, log dirs, checkpoints, clean shutdown) and LogConfig."""

import dataclasses
import os
import re
import resource
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from oncelog.protocol.record_batch import Record, build_batch, parse_batches
from oncelog.storage import (
    CorruptLogError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogConfig,
    LogManager,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from oncelog.storage.config import LONG_MAX, TOPIC_CONFIGS
from oncelog.storage.manager import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    TOPICS_META_FILE,
    NewTopic,
)

NOW_MS = 1_700_000_000_000


def append(log, count=1, *, timestamp_ms=NOW_MS):
    data = bytearray(build_batch([Record(None, b"v%d" % i) for i in range(count)], timestamp_ms=timestamp_ms))
    return log.append(data, parse_batches(data), now_ms=NOW_MS)


@pytest.fixture
def manager(tmp_path):
    opened = LogManager([tmp_path / "data"], LogConfig())
    opened.load()
    yield opened
    opened.close()


def reopen(manager, tmp_path, log_dirs=None, config=None):
    manager.close()
    again = LogManager(log_dirs or [tmp_path / "data"], config or LogConfig())
    again.load()
    return again


# -- topics --------------------------------------------------------------------------------


def test_create_topic_opens_empty_partitions_with_the_effective_config(manager, tmp_path):
    info = manager.create_topic("orders", 3, {"retention.ms": "1000", "segment.bytes": "100000"})
    assert (info.name, info.num_partitions) == ("orders", 3)
    assert info.config_overrides == {"retention.ms": "1000", "segment.bytes": "100000"}
    assert info.config.retention_ms == 1000 and info.config.segment_bytes == 100000
    assert isinstance(info.topic_id, uuid.UUID)
    for partition in range(3):
        log = manager.partition("orders", partition)
        assert log.config == info.config
        assert (tmp_path / "data" / f"orders-{partition}").is_dir()
    assert manager.partition("orders", 3) is None
    assert manager.topic_by_id(info.topic_id) == info


def test_topic_metadata_and_data_survive_a_clean_restart(manager, tmp_path):
    topic_id = uuid.UUID("6a8e3c5b-2f0d-4b1e-9c3a-7d5e1f2a4b6c")
    manager.create_topic("orders", 2, {"cleanup.policy": "compact"}, topic_id=topic_id)
    manager.create_topic("__consumer_offsets", 1, {})
    for _ in range(5):
        append(manager.partition("orders", 1), 2)
    before = manager.topics()
    manager = reopen(manager, tmp_path)
    try:
        assert manager.topics() == before
        assert manager.topic_by_id(topic_id).name == "orders"
        log = manager.partition("orders", 1)
        assert (log.log_start_offset, log.log_end_offset) == (0, 10)
        assert append(log).base_offset == 10
    finally:
        manager.close()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "topic/x", "héllo", "a:b"])
def test_kafka_invalid_topic_names_are_refused(manager, name):
    with pytest.raises(InvalidTopicError):
        manager.create_topic(name, 1, {})


def test_longest_legal_topic_name_is_accepted(manager):
    assert manager.create_topic("a.B_9-" + "x" * 243, 1, {}).num_partitions == 1


def test_topics_differing_only_in_dot_and_underscore_collide(manager):
    manager.create_topic("metrics.cpu", 1, {})
    with pytest.raises(InvalidTopicError, match=re.escape("collides with existing topic 'metrics.cpu'")):
        manager.create_topic("metrics_cpu", 1, {})


def test_creating_an_existing_topic_is_refused(manager):
    manager.create_topic("orders", 1, {})
    with pytest.raises(TopicExistsError, match="'orders' already exists"):
        manager.create_topic("orders", 2, {})


@pytest.mark.parametrize("count", [0, -1])
def test_topics_need_at_least_one_partition(manager, count):
    with pytest.raises(InvalidPartitionsError):
        manager.create_topic("orders", count, {})


@pytest.mark.parametrize(
    "configs, key",
    [
        ({"no.such.config": "1"}, "no.such.config"),
        ({"retention.ms": "soon"}, "retention.ms"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"segment.bytes": "10"}, "segment.bytes"),
        ({"segment.bytes": str(2**31)}, "segment.bytes"),
        ({"cleanup.policy": "delete,archive"}, "cleanup.policy"),
        ({"message.timestamp.type": "logappendtime"}, "message.timestamp.type"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"preallocate": "yes"}, "preallocate"),
    ],
)
def test_invalid_topic_configs_are_refused_naming_the_key(manager, configs, key):
    with pytest.raises(InvalidConfigError) as raised:
        manager.create_topic("orders", 1, configs)
    assert raised.value.key == key
    assert raised.value.kafka_error_code == 40
    assert manager.topics() == {}


def test_validate_only_creates_nothing(manager, tmp_path):
    info = manager.create_topic("orders", 2, {"retention.ms": "5"}, validate_only=True)
    assert info.config.retention_ms == 5
    assert manager.topics() == {}
    assert not (tmp_path / "data" / "orders-0").exists()


def test_delete_topic_removes_its_directories_and_metadata(manager, tmp_path):
    manager.create_topic("orders", 2, {})
    manager.create_topic("keep", 1, {})
    append(manager.partition("orders", 0))
    manager.delete_topic("orders")
    assert not (tmp_path / "data" / "orders-0").exists()
    assert manager.partition("orders", 0) is None
    with pytest.raises(UnknownTopicError):
        manager.delete_topic("orders")
    manager = reopen(manager, tmp_path)
    try:
        assert list(manager.topics()) == ["keep"]
        assert manager.create_topic("orders", 1, {}).num_partitions == 1
        assert manager.partition("orders", 0).log_end_offset == 0
    finally:
        manager.close()


def test_create_partitions_only_grows_a_topic(manager):
    manager.create_topic("orders", 2, {"retention.ms": "77"})
    info = manager.create_partitions("orders", 5)
    assert info.num_partitions == 5
    assert manager.partition("orders", 4).config.retention_ms == 77
    with pytest.raises(InvalidPartitionsError, match="already has 5 partitions"):
        manager.create_partitions("orders", 5)
    with pytest.raises(InvalidPartitionsError, match="higher than the requested 3"):
        manager.create_partitions("orders", 3)
    with pytest.raises(UnknownTopicError):
        manager.create_partitions("missing", 3)


def test_alter_topic_config_sets_removes_and_replaces_overrides(manager, tmp_path):
    manager.create_topic("orders", 2, {"retention.ms": "1000"})
    info = manager.alter_topic_config("orders", {"segment.ms": "5000"})
    assert info.config_overrides == {"retention.ms": "1000", "segment.ms": "5000"}
    assert manager.partition("orders", 1).config.segment_ms == 5000
    info = manager.alter_topic_config("orders", {"retention.ms": None})
    assert info.config_overrides == {"segment.ms": "5000"}
    assert manager.partition("orders", 0).config.retention_ms == LogConfig().retention_ms
    info = manager.alter_topic_config("orders", {"max.message.bytes": "2000"}, replace=True)
    assert info.config_overrides == {"max.message.bytes": "2000"}
    with pytest.raises(InvalidConfigError):
        manager.alter_topic_config("orders", {"retention.ms": "x"})
    with pytest.raises(InvalidConfigError):
        manager.alter_topic_config("orders", {"bogus": None})
    manager = reopen(manager, tmp_path)
    try:
        assert manager.topic("orders").config_overrides == {"max.message.bytes": "2000"}
        assert manager.partition("orders", 1).config.max_message_bytes == 2000
    finally:
        manager.close()


# -- log dirs ------------------------------------------------------------------------------


def test_new_partitions_go_to_the_log_dir_with_the_fewest(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs, LogConfig())
    manager.load()
    try:
        manager.create_topic("one", 4, {})
        manager.create_topic("two", 2, {})
        counts = {d.name: sum(1 for e in d.iterdir() if e.is_dir()) for d in dirs}
        assert counts == {"a": 2, "b": 2, "c": 2}
        manager = reopen(manager, tmp_path, log_dirs=dirs)
        assert manager.log_dir_of("one", 3) == next(d for d in dirs if (d / "one-3").exists())
        assert all((d / TOPICS_META_FILE).exists() for d in dirs)
    finally:
        manager.close()


def test_a_corrupt_metadata_copy_is_replaced_by_another_log_dirs(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    manager.load()
    manager.create_topic("orders", 2, {})
    manager.close()
    damaged = dirs[0] / TOPICS_META_FILE
    data = bytearray(damaged.read_bytes())
    data[-3] ^= 0xFF
    damaged.write_bytes(bytes(data))
    again = LogManager(dirs, LogConfig())
    again.load()
    try:
        assert list(again.topics()) == ["orders"]
    finally:
        again.close()


def test_corrupt_metadata_in_the_only_log_dir_stops_the_load(tmp_path):
    manager = LogManager([tmp_path / "data"], LogConfig())
    manager.load()
    manager.create_topic("orders", 1, {})
    manager.close()
    (tmp_path / "data" / TOPICS_META_FILE).write_bytes(b"OLTM\x00\x01garbage")
    again = LogManager([tmp_path / "data"], LogConfig())
    with pytest.raises(CorruptLogError):
        again.load()
    # the failed load released the directory lock
    third = LogManager([tmp_path / "data"], LogConfig())
    with pytest.raises(CorruptLogError):
        third.load()


def test_a_log_dir_cannot_be_used_by_two_managers(manager, tmp_path):
    other = LogManager([tmp_path / "data"], LogConfig())
    with pytest.raises(StorageError, match="in use"):
        other.load()


def test_directories_of_unknown_partitions_are_set_aside_as_stray(manager, tmp_path):
    manager.create_topic("orders", 1, {})
    (tmp_path / "data" / "ghost-0").mkdir()
    manager = reopen(manager, tmp_path)
    try:
        names = os.listdir(tmp_path / "data")
        assert "ghost-0" not in names
        assert any(name.startswith("ghost-0.") and name.endswith("-stray") for name in names)
        assert list(manager.topics()) == ["orders"]
    finally:
        manager.close()


# -- shutdown, checkpoints, recovery -------------------------------------------------------


def test_close_writes_the_clean_shutdown_marker_and_load_removes_it(manager, tmp_path):
    manager.create_topic("orders", 1, {})
    manager.close()
    data = tmp_path / "data"
    assert (data / CLEAN_SHUTDOWN_MARKER).exists()
    assert (data / RECOVERY_POINT_CHECKPOINT_FILE).exists()
    assert (data / LOG_START_CHECKPOINT_FILE).exists()
    again = LogManager([data], LogConfig())
    again.load()
    try:
        assert not (data / CLEAN_SHUTDOWN_MARKER).exists()
    finally:
        again.close()


def test_checkpoints_carry_log_start_offsets_across_restarts(manager, tmp_path):
    manager.create_topic("orders", 1, {})
    log = manager.partition("orders", 0)
    for _ in range(5):
        append(log, 2)
    log.delete_records_before(7)
    manager = reopen(manager, tmp_path)
    try:
        assert manager.partition("orders", 0).log_start_offset == 7
    finally:
        manager.close()


def test_retention_and_flush_run_over_every_partition(manager):
    now = time.time_ns() // 1_000_000  # logs start their flush.ms clock at the wall time of opening
    manager.create_topic("orders", 2, {"retention.ms": "1000", "flush.ms": "10"})
    for partition in range(2):
        append(manager.partition("orders", partition), 3, timestamp_ms=now)
    flushes = manager.take_flushes(manager.due_for_flush(now + 60_000))
    assert len(flushes) == 2
    for flush in flushes:
        flush.sync()
        flush.finish(now + 60_000)
    assert manager.partition("orders", 0).recovery_point == 3
    assert manager.apply_retention(now + 2_000) == 2
    assert manager.partition("orders", 1).log_start_offset == 3


def test_partitions_missing_from_the_recovery_checkpoint_are_rescanned_in_full(manager, tmp_path):
    manager.create_topic("orders", 1, {"segment.bytes": "300"})
    log = manager.partition("orders", 0)
    for _ in range(10):
        append(log, 2)
    bases = log.segment_base_offsets
    first_segment = log.directory / "00000000000000000000.log"
    manager.close()
    data = tmp_path / "data"
    (data / CLEAN_SHUTDOWN_MARKER).unlink()
    (data / RECOVERY_POINT_CHECKPOINT_FILE).unlink()
    with open(first_segment, "r+b") as file:
        file.seek(70)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x10]))
    again = LogManager([data], LogConfig())
    again.load()
    try:
        recovered = again.partition("orders", 0)
        assert len(bases) > 2
        assert recovered.segment_base_offsets == [0]
        assert recovered.log_end_offset == 0
    finally:
        again.close()


CRASHING_BROKER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from oncelog.protocol.record_batch import Record, build_batch, parse_batches
    from oncelog.storage import LogConfig, LogManager

    manager = LogManager([Path(sys.argv[1])], LogConfig())
    manager.load()
    if manager.topic("orders") is None:
        manager.create_topic("orders", 1, {"flush.messages": "1"})
    log = manager.partition("orders", 0)
    for i in range(int(sys.argv[2])):
        data = bytearray(build_batch([Record(None, b"m%d" % i)], timestamp_ms=1))
        log.append(data, parse_batches(data), now_ms=1)
    manager.checkpoint()
    # half a batch more, then die without closing: a torn tail and no clean-shutdown marker
    with open(log.directory / "00000000000000000000.log", "ab") as file:
        file.write(bytes(data)[:40])
    os._exit(0)
    """
)


def test_unclean_shutdown_recovers_the_torn_tail_and_keeps_acknowledged_data(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-c", CRASHING_BROKER, str(data), "25"], check=True, timeout=60)
    assert not (data / CLEAN_SHUTDOWN_MARKER).exists()
    manager = LogManager([data], LogConfig())
    manager.load()
    try:
        log = manager.partition("orders", 0)
        assert log.log_end_offset == 25
        assert len(parse_batches(log.read(0, 1 << 20).records)) == 25
        assert append(log).base_offset == 25
    finally:
        manager.close()


# -- LogConfig -----------------------------------------------------------------------------


def test_every_topic_config_round_trips_through_its_kafka_spelling():
    config = LogConfig().with_overrides(
        {"cleanup.policy": "compact,delete", "retention.ms": "-1", "unclean.leader.election.enable": "TRUE",
         "min.cleanable.dirty.ratio": "0.25", "message.timestamp.type": "LogAppendTime"}
    )
    described = config.to_kafka_dict()
    assert set(described) == set(TOPIC_CONFIGS)
    assert described["unclean.leader.election.enable"] == "true"
    assert described["retention.ms"] == "-1"
    assert described["flush.messages"] == str(LONG_MAX)
    assert LogConfig().with_overrides(described) == config


def test_kafka_defaults_are_the_broker_defaults():
    described = LogConfig().to_kafka_dict()
    assert described["segment.bytes"] == "1073741824"
    assert described["retention.ms"] == "604800000"
    assert described["max.message.bytes"] == "1048588"
    assert described["index.interval.bytes"] == "4096"
    assert described["segment.index.bytes"] == "10485760"
    assert described["cleanup.policy"] == "delete"
    assert described["message.timestamp.type"] == "CreateTime"


def test_broker_properties_supply_defaults_with_the_most_precise_retention_key_winning():
    config = LogConfig.from_broker_properties({"log.retention.hours": "2", "log.segment.bytes": "20000",
                                               "log.flush.interval.messages": "1", "listeners": "PLAINTEXT://:9092"})
    assert (config.retention_ms, config.segment_bytes, config.flush_messages) == (7_200_000, 20000, 1)
    config = LogConfig.from_broker_properties({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert config.retention_ms == 180_000
    config = LogConfig.from_broker_properties({"log.retention.minutes": "3", "log.retention.ms": "-1"})
    assert config.retention_ms == -1
    assert LogConfig.from_broker_properties({"log.roll.hours": "1"}).segment_ms == 3_600_000
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_broker_properties({"log.segment.bytes": "big"})
    assert raised.value.key == "log.segment.bytes"


# -- many partitions -----------------------------------------------------------------------


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_create_topics_writes_the_metadata_once_and_answers_each_topic_in_order(manager, tmp_path, monkeypatch):
    writes = []
    write = manager._write_topics_meta
    monkeypatch.setattr(manager, "_write_topics_meta", lambda: (writes.append(1), write()))
    outcomes = manager.create_topics([
        NewTopic("a.b", 3), NewTopic("a_b", 1), NewTopic("c", 0), NewTopic("a.b", 1), NewTopic("d", 2),
    ])
    assert len(writes) == 1
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "TopicInfo", "InvalidTopicError", "InvalidPartitionsError", "TopicExistsError", "TopicInfo"]
    assert sorted(manager.topics()) == ["a.b", "d"]
    assert {(log.topic, log.partition) for log in manager.partitions()} == {
        ("a.b", 0), ("a.b", 1), ("a.b", 2), ("d", 0), ("d", 1)}
    again = reopen(manager, tmp_path)
    assert sorted(again.topics()) == ["a.b", "d"]
    again.close()


def test_more_partitions_than_open_files_allowed_are_written_read_and_reopened(tmp_path):
    # 300 partitions, at most 128 segment files open: the least recently used close and
    # reopen at their next use; nothing written is lost, before and after a crash.
    manager = LogManager([tmp_path / "data"], LogConfig(), max_open_files=128)
    manager.load()
    before = _open_descriptors()
    manager.create_topics([NewTopic(f"t{index}", 10) for index in range(30)])
    for round_number in range(2):
        for log in manager.partitions():
            append(log, 1 + round_number)
    assert len(manager.open_files) <= 128
    assert _open_descriptors() - before <= 128
    assert manager.open_files.released > 0
    for log in manager.partitions():
        assert log.log_end_offset == 3
        assert len(parse_batches(log.read(0, 1 << 20).records)) == 2
    for log in manager.partitions():
        log.close_without_flush()  # the process dies: no flush, no clean-shutdown marker
    manager._unlock_all()
    again = LogManager([tmp_path / "data"], LogConfig(), max_open_files=128)
    again.load()
    assert len(again.open_files) <= 128
    assert sorted(log.log_end_offset for log in again.partitions()) == [3] * 300
    again.close()
    assert len(again.open_files) == 0


def test_a_scan_goes_on_when_its_segment_file_was_closed_between_two_reads(tmp_path):
    manager = LogManager([tmp_path / "data"], LogConfig(), max_open_files=128)
    manager.load()
    manager.create_topics([NewTopic("scanned", 1), *(NewTopic(f"other{index}", 1) for index in range(200))])
    scanned = manager.partition("scanned", 0)
    for _ in range(3):
        append(scanned, 2)
    segment = scanned.segments[0]
    batches = segment.read_batches(chunk_bytes=12)  # a batch at a time: one larger than a chunk is read whole
    first = next(batches)
    for index in range(200):  # every other partition's file used since: the scanned one closes
        append(manager.partition(f"other{index}", 0))
    assert segment._fd < 0
    headers = [*first[1], *(header for _chunk, chunk_headers in batches for header in chunk_headers)]
    assert [header.base_offset for header in headers] == [0, 2, 4]
    manager.close()


def test_logs_of_many_segments_load_on_several_threads_within_the_open_files_allowed(tmp_path):
    config = LogConfig(segment_bytes=50)  # a segment per batch
    manager = LogManager([tmp_path / "data"], config)
    manager.load()
    manager.create_topics([NewTopic(f"t{index}", 10) for index in range(20)])
    for log in manager.partitions():
        for _ in range(6):
            append(log)
    assert all(len(log.segments) >= 6 for log in manager.partitions())
    manager.close()
    # 1,200 segments, at most 128 open, and a process limit that leaves room for about
    # 250 more descriptors: the threads must not hold a run's segments open.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_open_descriptors() + 250, hard))
    try:
        again = LogManager([tmp_path / "data"], config, threads_per_dir=4, max_open_files=128)
        again.load()
        assert len(again.open_files) <= 128
        assert sorted(log.log_end_offset for log in again.partitions()) == [6] * 200
        again.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_topic_colliding_with_two_others_is_refused_after_one_of_them_is_deleted(manager):
    # Two colliding names can exist (created before the check, or by another broker's
    # metadata); deleting one still leaves the other guarding the name.
    manager._add_record(manager._new_record(NewTopic("a.b", 1))[0])
    record = dataclasses.replace(manager._topics["a.b"], name="a_b", topic_id=uuid.uuid4())
    manager._add_record(record)  # as a load of such metadata would
    manager._remove_record(record)
    with pytest.raises(InvalidTopicError, match="collides"):
        manager.create_topic("a_b", 1, {})
