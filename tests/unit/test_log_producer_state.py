"""PartitionLog's producer state across appends and reopens: the timestamp it keeps, and
that expiry and the entry cap hold when state is rebuilt from snapshots and the log."""

from oncelog.protocol.record_batch import Record, build_batch, parse_batches
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.producer_state import ProducerStateConfig

NOW_MS = 1_700_000_000_000
CLIENT_TIMESTAMP_MS = 1_000


def idempotent_append(log, producer_id, sequence, *, now_ms=NOW_MS, timestamp_ms=None, count=2, transactional=False):
    records = [Record(key=b"k%d" % i, value=b"v") for i in range(count)]
    data = bytearray(build_batch(
        records, timestamp_ms=now_ms if timestamp_ms is None else timestamp_ms, producer_id=producer_id,
        producer_epoch=0, base_sequence=sequence, transactional=transactional,
    ))
    return log.append(data, parse_batches(data), now_ms=now_ms)


def open_log(path, config=None, *, producer_state_config=None, recover=False, now_ms=NOW_MS) -> PartitionLog:
    return PartitionLog.open(path / "orders-0", "orders", 0, config or LogConfig(), recover=recover, now_ms=now_ms,
                             producer_state_config=producer_state_config)


def test_log_append_time_is_the_timestamp_kept_and_returned_for_a_duplicate(tmp_path):
    config = LogConfig(message_timestamp_type="LogAppendTime")
    log = open_log(tmp_path, config)
    first = idempotent_append(log, 7, 0, now_ms=NOW_MS + 5, timestamp_ms=CLIENT_TIMESTAMP_MS)
    assert first.log_append_time_ms == NOW_MS + 5
    assert log.producer_state.producers[7].last_timestamp == NOW_MS + 5
    retry = idempotent_append(log, 7, 0, now_ms=NOW_MS + 9, timestamp_ms=CLIENT_TIMESTAMP_MS)
    assert (retry.duplicate, retry.base_offset, retry.log_append_time_ms) == (True, 0, NOW_MS + 5)
    log.close()

    reopened = open_log(tmp_path, config, now_ms=NOW_MS + 10)
    again = idempotent_append(reopened, 7, 0, now_ms=NOW_MS + 11, timestamp_ms=CLIENT_TIMESTAMP_MS)
    assert (again.duplicate, again.base_offset, again.log_append_time_ms) == (True, 0, NOW_MS + 5)
    reopened.close()


def test_create_time_keeps_the_clients_max_timestamp(tmp_path):
    log = open_log(tmp_path)
    idempotent_append(log, 7, 0, now_ms=NOW_MS + 5, timestamp_ms=NOW_MS - 100)
    assert log.producer_state.producers[7].last_timestamp == NOW_MS - 100
    log.close()


def test_producer_expired_before_a_clean_reopen_stays_expired(tmp_path):
    expiring = ProducerStateConfig(producer_id_expiration_ms=1_000)
    log = open_log(tmp_path, producer_state_config=expiring)
    idempotent_append(log, 7, 0)
    idempotent_append(log, 8, 0, transactional=True)
    log.close()  # the snapshot still holds producer 7

    reopened = open_log(tmp_path, producer_state_config=expiring, now_ms=NOW_MS + 1_000)
    assert sorted(reopened.producer_state.producers) == [8]  # an open transaction never expires
    retry = idempotent_append(reopened, 7, 0, now_ms=NOW_MS + 1_000)
    assert (retry.duplicate, retry.base_offset) == (False, 4)  # KIP-360: unknown, so appended
    reopened.close()


def test_producer_expired_before_a_crash_stays_expired_after_replaying_the_log(tmp_path):
    expiring = ProducerStateConfig(producer_id_expiration_ms=1_000)
    log = open_log(tmp_path, producer_state_config=expiring)
    idempotent_append(log, 7, 0)
    idempotent_append(log, 9, 0, now_ms=NOW_MS + 600)
    log.flush()
    log.close_without_flush()  # no snapshot: the state comes from replaying the batches

    reopened = open_log(tmp_path, producer_state_config=expiring, recover=True, now_ms=NOW_MS + 1_000)
    assert sorted(reopened.producer_state.producers) == [9]
    reopened.close()


def test_cap_holds_when_state_is_replayed_from_the_log(tmp_path):
    log = open_log(tmp_path)
    for producer_id in range(20):
        idempotent_append(log, producer_id, 0)
    log.flush()
    log.close_without_flush()

    capped = open_log(tmp_path, producer_state_config=ProducerStateConfig(max_entries=5), recover=True)
    assert sorted(capped.producer_state.producers) == [15, 16, 17, 18, 19]
    assert idempotent_append(capped, 19, 0).duplicate
    capped.close()
