"""A retry of an already-written batch is recognised as a duplicate after a clean restart
and after kill -9, because producer state is snapshotted and rebuilt from the log."""


import pytest
from kio.schema.errors import ErrorCode

from oncelog.local.process import BrokerProcess
from tests.support.idempotent import idempotent_batch, init_producer_id, produce
from tests.support.kafka import create_topic


@pytest.mark.parametrize("how", ["clean_restart", "kill_9", "kill_9_after_roll"])
def test_retry_after_restart_is_deduplicated(tmp_path, how):
    config = {"log.flush.interval.messages": "1"}
    if how == "kill_9_after_roll":
        config["log.segment.bytes"] = "300"  # several segments: replay crosses a snapshot
    with BrokerProcess(tmp_path / "data", config) as broker:
        create_topic(broker.bootstrap_servers, "idem")
        producer_id, epoch = init_producer_id(broker.bootstrap_servers)
        offsets = []
        for sequence in range(0, 15, 3):
            result = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, sequence))
            assert result.error_code == ErrorCode.none
            offsets.append(result.base_offset)
        assert offsets == [0, 3, 6, 9, 12]

        if how == "clean_restart":
            broker.restart()
        else:
            broker.kill()
            broker.start()

        # The last batch again, as a client retry after a lost response: same offset, not re-written.
        retry = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 12))
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 12)
        # An older one inside the 5-batch window too.
        older = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 3))
        assert (older.error_code, older.base_offset) == (ErrorCode.none, 3)
        # The next sequence continues the log; a gap is refused.
        following = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 15))
        assert (following.error_code, following.base_offset) == (ErrorCode.none, 15)
        gap = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 30))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert f"producer {producer_id}" in gap.error_message and "idem-0" in gap.error_message

        # New producer ids after restarts never repeat the old one.
        assert init_producer_id(broker.bootstrap_servers)[0] != producer_id


def test_validation_errors_on_the_wire(tmp_path):
    with BrokerProcess(tmp_path / "data", {"num.partitions": "1"}) as broker:
        create_topic(broker.bootstrap_servers, "idem")
        producer_id, _ = init_producer_id(broker.bootstrap_servers)
        assert produce(broker.bootstrap_servers, idempotent_batch(producer_id, 2, 0)).error_code == ErrorCode.none
        stale = produce(broker.bootstrap_servers, idempotent_batch(producer_id, 1, 3))
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        assert "smaller than the last seen epoch 2" in stale.error_message
        new_epoch_bad_start = produce(broker.bootstrap_servers, idempotent_batch(producer_id, 3, 5))
        assert new_epoch_bad_start.error_code == ErrorCode.out_of_order_sequence_number
        # KIP-360: an unknown producer id is accepted at any sequence.
        assert produce(broker.bootstrap_servers, idempotent_batch(999_999, 0, 42)).error_code == ErrorCode.none


def millis(moment):
    return None if moment is None else round(moment.timestamp() * 1000)


@pytest.mark.parametrize("how", ["clean_restart", "kill_9"])
def test_duplicate_on_a_log_append_time_topic_returns_the_original_append_time(tmp_path, how):
    """Producer state keeps the batch's time as written (the broker's append time), so a
    retry answers with the original LogAppendTime before and after a restart, never the
    client's own timestamp."""
    client_timestamp = 1_000  # long past: were it kept, the producer would count as expired
    with BrokerProcess(tmp_path / "data", {"log.flush.interval.messages": "1"}) as broker:
        create_topic(broker.bootstrap_servers, "stamped", config={"message.timestamp.type": "LogAppendTime"})
        producer_id, epoch = init_producer_id(broker.bootstrap_servers)
        first = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 0, timestamp=client_timestamp),
                        topic="stamped")
        assert first.error_code == ErrorCode.none
        append_time = millis(first.log_append_time)
        assert append_time > client_timestamp

        retry = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 0, timestamp=client_timestamp),
                        topic="stamped")
        assert (retry.error_code, retry.base_offset, millis(retry.log_append_time)) == (ErrorCode.none, 0, append_time)

        if how == "clean_restart":
            broker.restart()
        else:
            broker.kill()
            broker.start()

        after = produce(broker.bootstrap_servers, idempotent_batch(producer_id, epoch, 0, timestamp=client_timestamp),
                        topic="stamped")
        assert (after.error_code, after.base_offset, millis(after.log_append_time)) == (ErrorCode.none, 0, append_time)
