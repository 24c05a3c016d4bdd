"""The log cleaner's heavy work runs on its own thread, not on the broker's event loop:
the broker keeps answering while a large partition is cleaned, and deleting the topic,
retention, or stopping the broker in the middle of a round discard the round's output
safely (Kafka's cleaner thread and LogCleanerManager's abort)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from oncelog.protocol.record_batch import Record, build_batch, parse_batches
from oncelog.storage import cleaner_work
from oncelog.storage.cleaner import CleaningInProgress, SwapCommit
from tests.support.latency_probe import LatencyProbe, assert_p99_below

FAST_CLEANER = {
    "log.cleaner.backoff.ms": "50",
    "log.cleaner.min.cleanable.ratio": "0.01",
}
LATENCY_P99_LIMIT_S = 0.2


SLOW_FSYNC_S = 0.25  # a disk that takes this much longer for every fsync


def slow_fsyncs(monkeypatch) -> None:
    """Every fsync of this process (the embedded broker's) takes SLOW_FSYNC_S longer, as
    on a throttled or busy disk: the fsync itself still happens, after a sleep that, like
    a real fsync, lets other threads run."""
    real_fsync = os.fsync

    def slow_fsync(fd):
        time.sleep(SLOW_FSYNC_S)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)


@pytest.mark.parametrize("disk", ["fast", "slow"])
def test_broker_answers_with_bounded_latency_while_a_large_partition_is_cleaned(tmp_path, monkeypatch, disk):
    """With a slow disk, this also proves that no fsync of the round (the swap's, the
    transaction index's, the cleaner checkpoint's) runs on the event loop."""
    with EmbeddedBroker(tmp_path / "data", FAST_CLEANER) as broker:
        broker.call(lambda: broker.broker.logs.create_topic("big", 1, {"cleanup.policy": "compact"}))
        log = broker.call(lambda: broker.broker.logs.partition("big", 0))
        # ~32 MB of small keyed records, each key written ~20 times, in the active
        # segment: nothing is cleanable until it rolls.
        now_ms = time.time_ns() // 1_000_000
        value = b"v" * 60
        written = number = 0
        while written < 32 * 1024 * 1024:
            batch = bytearray(build_batch(
                [Record(key=b"key-%06d" % ((number * 500 + i) % 20_000), value=value) for i in range(500)],
                timestamp_ms=now_ms,
            ))
            broker.call(lambda data=batch: log.append(data, parse_batches(data), now_ms=now_ms))
            written += len(batch)
            number += 1
        end = broker.call(lambda: log.log_end_offset)
        if disk == "slow":
            slow_fsyncs(monkeypatch)

        probe = LatencyProbe(broker.bootstrap_servers)
        started = time.monotonic()
        broker.call(log.roll)  # the whole 32 MB becomes the dirty section
        wait_until(lambda: broker.call(lambda: broker.broker.cleaner.first_dirty_offset(log)) == end,
                   timeout=120, interval=0.05, message="the cleaning round finished")
        # The round's last step writes the cleaner checkpoint: wait for it too.
        wait_until(lambda: broker.call(lambda: not broker.broker.cleaner.is_cleaning("big", 0)),
                   timeout=30, interval=0.05, message="the cleaning round ended")
        finished = time.monotonic()
        probe.stop()

        assert broker.call(lambda: log.size_in_bytes) < written / 10  # the round did clean
        assert_p99_below(probe, started, finished, LATENCY_P99_LIMIT_S, f"cleaning on a {disk} disk")


def test_broker_answers_with_bounded_latency_while_checkpoints_are_written_to_a_slow_disk(tmp_path, monkeypatch):
    """Six fsyncs per log dir every log.flush.offset.checkpoint.interval.ms (two per
    checkpoint file) run on the flusher thread, not on the event loop."""
    config = {"log.flush.offset.checkpoint.interval.ms": "300"}
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        broker.call(lambda: broker.broker.logs.create_topic("some", 3, {}))
        checkpoint = tmp_path / "data" / "recovery-point-offset-checkpoint"
        wait_until(checkpoint.exists, timeout=10, interval=0.05, message="a first checkpoint")
        slow_fsyncs(monkeypatch)
        probe = LatencyProbe(broker.bootstrap_servers)
        started = time.monotonic()
        written = checkpoint.stat().st_mtime_ns
        wait_until(lambda: checkpoint.stat().st_mtime_ns != written, timeout=10, interval=0.05,
                   message="a checkpoint written on the slow disk")
        time.sleep(2.0)  # more of them
        finished = time.monotonic()
        probe.stop()
        assert_p99_below(probe, started, finished, LATENCY_P99_LIMIT_S, "writing checkpoints to a slow disk")


class CleanerThreadGate:
    """Holds the cleaner thread inside its first write of a cleaned segment ("writing":
    its `.cleaned` file exists, nothing swapped) or inside the fsyncs that make its first
    swap durable ("committing the swap": the `.swap` file exists, the old segments are
    still there), until released."""

    def __init__(self, monkeypatch, moment: str = "writing") -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.aborted = threading.Event()
        real_abort = CleaningInProgress.abort

        def gated(real):
            def held(*args):
                if not self.entered.is_set():
                    self.entered.set()
                    self.released.wait(60)
                return real(*args)
            return held

        def observed_abort(in_progress, reason):
            real_abort(in_progress, reason)
            self.aborted.set()

        if moment == "writing":
            monkeypatch.setattr(cleaner_work, "_write_all", gated(cleaner_work._write_all))
        else:
            assert moment == "committing the swap", moment
            monkeypatch.setattr(SwapCommit, "sync", gated(SwapCommit.sync))
        monkeypatch.setattr(CleaningInProgress, "abort", observed_abort)


MOMENTS = ["writing", "committing the swap"]


def produce_keyed(bootstrap: str, topic: str, count: int, keys: int = 10) -> None:
    """`count` records over `keys` keys, ten per batch (segments of 2048 bytes roll often)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for number in range(count):
        producer.produce(topic, key=b"key-%d" % (number % keys), value=b"value-%d" % number + b"x" * 40)
        if number % 10 == 9:
            assert producer.flush(10) == 0
    assert producer.flush(10) == 0


def leftovers(data_dir: Path) -> list[str]:
    return [name for _root, _dirs, files in os.walk(data_dir) for name in files
            if name.endswith((".cleaned", ".swap"))]


def consume(bootstrap: str, topic: str, expected: int | None) -> list[tuple[int, bytes, bytes]]:
    """`expected` records from partition 0's start, or with None every record up to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": expected is None})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 20
    while (expected is None or len(found) < expected) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            error = message.error()
            if expected is None and error is not None and error.code() == KafkaError._PARTITION_EOF:
                break
            assert error is None, error
            offset, key, value = message.offset(), message.key(), message.value()
            assert offset is not None and key is not None and value is not None  # keyed records, no tombstones
            found.append((offset, key, value))
    consumer.close()
    return found


def call_within(broker: EmbeddedBroker, seconds: float, function):
    """broker.call, failing instead of hanging when the event loop does not answer."""
    result = []
    caller = threading.Thread(target=lambda: result.append(broker.call(function)), daemon=True)
    caller.start()
    caller.join(seconds)
    assert result, f"the broker's event loop did not answer within {seconds} s"
    return result[0]


@pytest.mark.parametrize("moment", MOMENTS)
def test_deleting_the_topic_during_a_cleaning_round_discards_its_output(tmp_path, monkeypatch, moment):
    gate = CleanerThreadGate(monkeypatch, moment)
    data = tmp_path / "data"
    try:
        with EmbeddedBroker(data, FAST_CLEANER) as broker:
            bootstrap = broker.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("table", 1, 1, config={
                "cleanup.policy": "compact", "segment.bytes": "2048",
            })])["table"].result(10)
            produce_keyed(bootstrap, "table", 300)
            assert gate.entered.wait(30), "no cleaning round started"
            assert leftovers(data), "the round has a cleaned file"

            admin.delete_topics(["table"])["table"].result(10)  # answered while the round is held
            assert not (data / "table-0").exists()
            gate.released.set()
            wait_until(lambda: broker.call(lambda: broker.broker.cleaner.rounds_aborted) == 1, timeout=30,
                       message="the round counted as aborted")
            assert not broker.call(lambda: broker.broker.cleaner.is_cleaning("table", 0))
            assert not (data / "table-0").exists()  # nothing resurrected
            assert leftovers(data) == []

            # A topic of the same name starts empty and works.
            admin.create_topics([NewTopic("table", 1, 1, config={"cleanup.policy": "compact"})])["table"].result(10)
            produce_keyed(bootstrap, "table", 1)
            assert consume(bootstrap, "table", 1) == [(0, b"key-0", b"value-0" + b"x" * 40)]
    finally:
        gate.released.set()


@pytest.mark.parametrize("moment", MOMENTS)
def test_retention_deleting_segments_during_a_cleaning_round_discards_its_output(tmp_path, monkeypatch, moment):
    gate = CleanerThreadGate(monkeypatch, moment)
    data = tmp_path / "data"
    try:
        with EmbeddedBroker(data, FAST_CLEANER) as broker:
            bootstrap = broker.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("table", 1, 1, config={
                "cleanup.policy": "compact,delete", "segment.bytes": "2048", "retention.ms": "3600000",
            })])["table"].result(10)
            produce_keyed(bootstrap, "table", 300)
            assert gate.entered.wait(30), "no cleaning round started"
            assert leftovers(data), "the round has a cleaned or swap file"
            log = call_within(broker, 10, lambda: broker.broker.logs.partition("table", 0))

            # Retention, as its timer would run it two hours later: every segment is too old.
            in_two_hours = time.time_ns() // 1_000_000 + 7_200_000
            deleted = call_within(broker, 10, lambda: log.apply_retention(in_two_hours))
            assert deleted > 0
            assert gate.aborted.is_set()
            start, end = broker.call(lambda: (log.log_start_offset, log.log_end_offset))
            assert start == end == 300
            gate.released.set()
            wait_until(lambda: broker.call(lambda: broker.broker.cleaner.rounds_aborted) >= 1, timeout=30,
                       message="the round counted as aborted")
            wait_until(lambda: not broker.call(lambda: broker.broker.cleaner.is_cleaning("table", 0)), timeout=30,
                       message="no round running")
            assert leftovers(data) == []
            # The deleted segments stay deleted: no cleaned copy of them was swapped in.
            assert broker.call(lambda: (log.log_start_offset, log.log_end_offset, log.size_in_bytes)) == (300, 300, 0)
            assert broker.call(lambda: log.segment_base_offsets) == [300]
            produce_keyed(bootstrap, "table", 1)
        with EmbeddedBroker(data, FAST_CLEANER) as broker:
            log = broker.call(lambda: broker.broker.logs.partition("table", 0))
            assert broker.call(lambda: (log.log_start_offset, log.log_end_offset)) == (300, 301)
            assert consume(broker.bootstrap_servers, "table", 1)[0][0] == 300
    finally:
        gate.released.set()


@pytest.mark.parametrize("moment", MOMENTS)
def test_stopping_the_broker_during_a_cleaning_round_is_clean_and_the_restart_consistent(tmp_path, monkeypatch,
                                                                                        moment):
    gate = CleanerThreadGate(monkeypatch, moment)
    data = tmp_path / "data"
    broker = EmbeddedBroker(data, FAST_CLEANER).start()
    try:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("table", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "2048",
        })])["table"].result(10)
        produce_keyed(bootstrap, "table", 300)
        assert gate.entered.wait(30), "no cleaning round started"

        stopping = threading.Thread(target=broker.stop, daemon=True)
        stopping.start()
        # stop() aborts the round on the loop, then waits for the held thread.
        assert gate.aborted.wait(10), "stop() did not abort the running round"
        assert stopping.is_alive(), "stop() returned while the cleaner thread was still writing"
        gate.released.set()
        stopping.join(30)
        assert not stopping.is_alive(), "stop() did not finish"
    finally:
        gate.released.set()
        broker.stop()
    assert leftovers(data) == []
    assert (data / ".oncelog_cleanshutdown").exists()
    monkeypatch.undo()

    with EmbeddedBroker(data, FAST_CLEANER) as broker:
        read = consume(broker.bootstrap_servers, "table", 10)
        offsets = [offset for offset, *_ in read]
        assert offsets == sorted(set(offsets))
        latest = {b"key-%d" % (number % 10): b"value-%d" % number + b"x" * 40 for number in range(300)}
        log = broker.call(lambda: broker.broker.logs.partition("table", 0))
        end = broker.call(lambda: log.log_end_offset)
        assert end == 300
        # After the restart the cleaner finishes the job: one record per key is left
        # (the active segment's records may still repeat a key).
        wait_until(lambda: broker.call(lambda: broker.broker.cleaner.first_dirty_offset(log))
                   == broker.call(lambda: log.active_segment.base_offset), timeout=30,
                   message="the cleaner caught up after the restart")
        everything = consume(broker.bootstrap_servers, "table", None)
        assert {key: value for _offset, key, value in everything} == latest
