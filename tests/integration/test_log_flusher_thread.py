"""A rolled segment's fsync runs on the log flusher thread, not on the broker's event
loop (Kafka flushes on its scheduler thread): on a slow disk, requests go on while a
large segment reaches it."""

from __future__ import annotations

import os
import time

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from oncelog.protocol.record_batch import Record, build_batch, parse_batches
from oncelog.storage import segment as segment_module
from tests.support.latency_probe import LatencyProbe, assert_p99_below

SLOW_FSYNC_S = 0.7  # what a busy CI disk took for a 32 MB segment
LATENCY_P99_LIMIT_S = 0.2


def test_broker_answers_with_bounded_latency_while_a_rolled_segment_is_fsynced_on_a_slow_disk(tmp_path, monkeypatch):
    def slow_fdatasync(fd: int) -> None:
        time.sleep(SLOW_FSYNC_S)  # releases the GIL, as a real fsync waiting on the disk does
        os.fdatasync(fd)

    with EmbeddedBroker(tmp_path / "data", {"log.flush.scheduler.interval.ms": "50"}) as broker:
        broker.call(lambda: broker.broker.logs.create_topic("big", 1, {}))
        log = broker.call(lambda: broker.broker.logs.partition("big", 0))
        now_ms = time.time_ns() // 1_000_000
        for _ in range(20):
            batch = bytearray(build_batch([Record(key=None, value=b"v" * 1000) for _record in range(100)],
                                          timestamp_ms=now_ms))
            broker.call(lambda data=batch: log.append(data, parse_batches(data), now_ms=now_ms))
        end = broker.call(lambda: log.log_end_offset)
        monkeypatch.setattr(segment_module, "_fdatasync", slow_fdatasync)

        probe = LatencyProbe(broker.bootstrap_servers)
        started = time.monotonic()
        broker.call(log.roll)
        wait_until(lambda: broker.call(lambda: log.recovery_point) == end,
                   timeout=30, interval=0.02, message="the rolled segment was flushed")
        finished = time.monotonic()
        probe.stop()

        assert finished - started >= SLOW_FSYNC_S  # the slow fsync did happen
        assert_p99_below(probe, started, finished, LATENCY_P99_LIMIT_S, "flushing")
