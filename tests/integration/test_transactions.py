"""The seeds' transaction scenarios with confluent-kafka (librdkafka) against a real broker."""

import time

import pytest
from confluent_kafka import KafkaException, Producer

from oncelog import EmbeddedBroker
from oncelog.kernel.leadership import StandaloneLeadership
from oncelog.local.process import BrokerProcess
from tests.support.kafka import create_topics, last_stable_offset, read_values

FAST_TIMEOUTS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


def transactional_producer(bootstrap, transactional_id, **settings):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 1,
                         **settings})
    producer.init_transactions(30)
    return producer


SIX = [(topic, p) for topic in ("orders", "payments") for p in range(3)]


@pytest.fixture
def txn_broker(tmp_path):
    with EmbeddedBroker(tmp_path / "b", FAST_TIMEOUTS) as broker:
        create_topics(broker.bootstrap_servers, ("orders", 3), ("payments", 3))
        yield broker


def test_commit_across_two_topics_is_seen_whole_by_read_committed(txn_broker):
    bootstrap = txn_broker.bootstrap_servers
    producer = transactional_producer(bootstrap, "committer")
    producer.begin_transaction()
    for i in range(60):
        topic, partition = SIX[i % 6]
        producer.produce(topic, f"c{i}".encode(), partition=partition)
    producer.commit_transaction(30)
    assert sorted(read_values(bootstrap, SIX, "read_committed")) == sorted(f"c{i}" for i in range(60))


def test_abort_is_invisible_to_read_committed_and_visible_to_read_uncommitted(txn_broker):
    bootstrap = txn_broker.bootstrap_servers
    producer = transactional_producer(bootstrap, "aborter")
    producer.begin_transaction()
    for i in range(60):
        topic, partition = SIX[i % 6]
        producer.produce(topic, f"a{i}".encode(), partition=partition)
    producer.flush(10)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("orders", b"after", partition=0)
    producer.commit_transaction(30)
    assert read_values(bootstrap, SIX, "read_committed") == ["after"]
    uncommitted = read_values(bootstrap, SIX, "read_uncommitted")
    assert sorted(uncommitted) == sorted([f"a{i}" for i in range(60)] + ["after"])


def test_open_transaction_holds_the_last_stable_offset(txn_broker):
    bootstrap = txn_broker.bootstrap_servers
    holder = transactional_producer(bootstrap, "holder")
    holder.begin_transaction()
    holder.produce("orders", b"held-1", partition=0)
    holder.flush(10)
    other = transactional_producer(bootstrap, "other")
    other.begin_transaction()
    other.produce("orders", b"other-committed", partition=0)
    other.commit_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("orders", b"plain", partition=0)
    plain.flush(10)

    assert last_stable_offset(bootstrap, "orders", 0) == 0, "the LSO stays at the open transaction's first offset"
    assert read_values(bootstrap, [("orders", 0)], "read_committed") == []
    assert read_values(bootstrap, [("orders", 0)], "read_uncommitted") == ["held-1", "other-committed", "plain"]

    holder.commit_transaction(30)
    assert read_values(bootstrap, [("orders", 0)], "read_committed") == ["held-1", "other-committed", "plain"]
    # The commit marker takes an offset too: the LSO is past it.
    assert last_stable_offset(bootstrap, "orders", 0) == 5


def test_a_new_instance_fences_the_zombie_and_aborts_its_transaction(txn_broker):
    bootstrap = txn_broker.bootstrap_servers
    zombie = transactional_producer(bootstrap, "app-1")
    zombie.begin_transaction()
    zombie.produce("orders", b"zombie-data", partition=1)
    zombie.flush(10)

    successor = transactional_producer(bootstrap, "app-1")  # InitProducerId bumps the epoch
    successor.begin_transaction()
    successor.produce("orders", b"successor-data", partition=1)
    successor.commit_transaction(30)

    zombie.produce("orders", b"zombie-late", partition=1)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error

    assert read_values(bootstrap, [("orders", 1)], "read_committed") == ["successor-data"]
    assert "zombie-data" in read_values(bootstrap, [("orders", 1)], "read_uncommitted")


def test_a_producer_that_stops_mid_transaction_is_aborted_after_its_timeout(txn_broker):
    bootstrap = txn_broker.bootstrap_servers
    stalled = transactional_producer(bootstrap, "stalled", **{"transaction.timeout.ms": 1500})
    stalled.begin_transaction()
    stalled.produce("payments", b"never-visible", partition=2)
    stalled.flush(10)
    assert last_stable_offset(bootstrap, "payments", 2) == 0
    time.sleep(2.5)  # the timeout, plus the 200 ms cleanup interval, plus margin
    assert last_stable_offset(bootstrap, "payments", 2) == 2, "data and the ABORT marker are stable now"
    assert read_values(bootstrap, [("payments", 2)], "read_committed") == []
    with pytest.raises(KafkaException):
        stalled.commit_transaction(10)  # the stalled producer was fenced by the abort


def test_fetch_of_only_aborted_batches_yields_nothing_to_read_committed(tmp_path):
    with EmbeddedBroker(tmp_path / "b") as broker:
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, ("tiny", 1), config={"max.message.bytes": "1024"})
        producer = transactional_producer(bootstrap, "tiny-writer", **{"batch.size": 512})
        for round_ in range(20):
            producer.begin_transaction()
            for i in range(5):
                producer.produce("tiny", f"r{round_}-{i}".encode().ljust(150, b"."), partition=0)
            producer.flush(10)
            producer.abort_transaction(30)
        assert read_values(bootstrap, [("tiny", 0)], "read_committed") == []
        assert len(read_values(bootstrap, [("tiny", 0)], "read_uncommitted")) == 100
        producer.begin_transaction()
        producer.produce("tiny", b"finally", partition=0)
        producer.commit_transaction(30)
        assert read_values(bootstrap, [("tiny", 0)], "read_committed") == ["finally"]


def test_end_txn_retries_and_mismatches_get_kafkas_answers(txn_broker):
    coordinator = txn_broker.broker.txn_coordinator
    producer = transactional_producer(txn_broker.bootstrap_servers, "retrier")
    producer.begin_transaction()
    producer.produce("orders", b"x", partition=0)
    producer.commit_transaction(30)
    deadline = time.monotonic() + 10  # the markers follow the answer to EndTxn, as in Kafka
    while txn_broker.call(lambda: coordinator.describe("retrier").state.display_name) != "CompleteCommit":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    metadata = txn_broker.call(lambda: coordinator.describe("retrier"))
    pid, epoch = metadata.producer_id, metadata.producer_epoch

    def end(commit, producer_epoch=epoch):
        return txn_broker.call(
            lambda: coordinator.end_transaction("retrier", pid, producer_epoch, commit=commit,
                                                now=int(time.time() * 1000))
        ).name

    assert end(True) == "none", "a retried commit of a completed commit succeeds"
    assert end(False) == "invalid_txn_state", "the opposite outcome is refused"
    assert end(True, epoch - 1) == "producer_fenced"
    assert txn_broker.call(
        lambda: coordinator.end_transaction("retrier", pid + 1, epoch, commit=True, now=0)
    ).name == "invalid_producer_id_mapping"


def test_commit_acknowledged_before_kill_9_is_fully_visible_after_restart(tmp_path):
    with BrokerProcess(tmp_path / "data", FAST_TIMEOUTS) as broker:
        create_topics(broker.bootstrap_servers, ("orders", 3), ("payments", 3))
        producer = transactional_producer(broker.bootstrap_servers, "durable")
        producer.begin_transaction()
        for i in range(30):
            topic, partition = SIX[i % 6]
            producer.produce(topic, f"d{i}".encode(), partition=partition)
        producer.commit_transaction(30)
        broker.kill()
        broker.start()
        committed = read_values(broker.bootstrap_servers, SIX, "read_committed")
        assert sorted(committed) == sorted(f"d{i}" for i in range(30))


def test_transaction_open_at_kill_9_is_aborted_after_its_timeout(tmp_path):
    with BrokerProcess(tmp_path / "data", FAST_TIMEOUTS) as broker:
        create_topics(broker.bootstrap_servers, ("orders", 3), ("payments", 3))
        producer = transactional_producer(broker.bootstrap_servers, "interrupted", **{"transaction.timeout.ms": 2000})
        producer.begin_transaction()
        for i in range(12):
            topic, partition = SIX[i % 6]
            producer.produce(topic, f"i{i}".encode(), partition=partition)
        producer.flush(10)
        broker.kill()
        del producer
        broker.start()
        time.sleep(3)
        assert read_values(broker.bootstrap_servers, SIX, "read_committed") == []
        for topic, partition in SIX:
            assert last_stable_offset(broker.bootstrap_servers, topic, partition) == 3  # 2 records + ABORT


def test_coordinator_finishes_a_commit_interrupted_between_prepare_and_markers(tmp_path):
    """The crash window of two-phase commit: PrepareCommit is durable, no marker is written
    yet. Simulated by stopping the marker step, then restarting on the same log.dirs."""
    data = tmp_path / "b"
    with EmbeddedBroker(data) as broker:
        create_topics(broker.bootstrap_servers, ("orders", 3), ("payments", 3))
        coordinator = broker.broker.txn_coordinator
        coordinator._schedule_markers = lambda *args, **kwargs: None  # the "crash" before phase two
        producer = transactional_producer(broker.bootstrap_servers, "two-phase")
        producer.begin_transaction()
        for i in range(6):
            topic, partition = SIX[i]
            producer.produce(topic, f"p{i}".encode(), partition=partition)
        producer.flush(10)
        producer.commit_transaction(10)  # answered once PrepareCommit is durable, as in Kafka
        assert broker.call(lambda: coordinator.describe("two-phase").state.display_name) == "PrepareCommit"
        assert read_values(broker.bootstrap_servers, SIX, "read_committed", settle=0.5) == []
    with EmbeddedBroker(data) as restarted:
        coordinator = restarted.broker.txn_coordinator
        deadline = time.monotonic() + 10  # phase two runs in the background after the load
        while restarted.call(lambda: coordinator.describe("two-phase").state.display_name) != "CompleteCommit":
            assert time.monotonic() < deadline, "the interrupted commit was not completed"
            time.sleep(0.05)
        assert sorted(read_values(restarted.bootstrap_servers, SIX, "read_committed")) == [f"p{i}" for i in range(6)]


def test_late_write_of_an_aborted_transaction_cannot_land_in_the_next(txn_broker):
    """KIP-890 part 1: a transactional batch for a partition outside the producer's
    ongoing transaction is refused, so a delayed write of an ended transaction stays out."""
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.produce.v9 import request as produce_v9

    from oncelog.protocol import record_batch as rb
    from oncelog.protocol.client import WireClient

    producer = transactional_producer(txn_broker.bootstrap_servers, "late")
    producer.begin_transaction()
    producer.produce("orders", b"first", partition=0)
    producer.abort_transaction(30)
    metadata = txn_broker.broker.txn_coordinator.describe("late")
    late_batch = rb.build_batch([rb.Record(None, b"late")], timestamp_ms=1, producer_id=metadata.producer_id,
                                producer_epoch=metadata.producer_epoch, base_sequence=1, transactional=True)
    request = produce_v9.ProduceRequest(
        transactional_id="late", acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce_v9.TopicProduceData(
            name="orders", partition_data=(produce_v9.PartitionProduceData(index=0, records=late_batch),)),),
    )
    with WireClient.connect(txn_broker.bootstrap_servers) as client:
        result = client.request(request).responses[0].partition_responses[0]
    assert result.error_code == ErrorCode.invalid_txn_state
    producer.begin_transaction()
    producer.produce("orders", b"second", partition=0)
    producer.commit_transaction(30)
    assert read_values(txn_broker.bootstrap_servers, [("orders", 0)], "read_committed") == ["second"]


def test_late_end_txn_of_a_timed_out_transaction_does_not_touch_the_successors(txn_broker):
    """A producer's transaction is aborted by its timeout; a new instance starts the next
    transaction; the old instance's EndTxn(commit) arrives late: it is fenced and the
    new transaction is neither committed nor aborted by it."""
    from kio.schema.end_txn.v3.request import EndTxnRequest
    from kio.schema.errors import ErrorCode

    from oncelog.protocol.client import WireClient

    bootstrap = txn_broker.bootstrap_servers
    coordinator = txn_broker.broker.txn_coordinator
    old = transactional_producer(bootstrap, "late-end", **{"transaction.timeout.ms": 1000})
    old.begin_transaction()
    old.produce("orders", b"old", partition=2)
    old.flush(10)
    stale = txn_broker.call(lambda: coordinator.describe("late-end"))
    time.sleep(2)  # aborted by the timeout
    successor = transactional_producer(bootstrap, "late-end")
    successor.begin_transaction()
    successor.produce("orders", b"new", partition=2)
    successor.flush(10)
    with WireClient.connect(bootstrap) as client:
        late = client.request(EndTxnRequest(transactional_id="late-end", producer_id=stale.producer_id,
                                             producer_epoch=stale.producer_epoch, committed=True))
    assert late.error_code == ErrorCode.producer_fenced
    assert txn_broker.call(lambda: coordinator.describe("late-end").state.display_name) == "Ongoing"
    assert read_values(bootstrap, [("orders", 2)], "read_committed", settle=0.5) == []
    successor.commit_transaction(30)
    assert read_values(bootstrap, [("orders", 2)], "read_committed") == ["new"]


def test_transactional_id_expires_after_transactional_id_expiration_ms(tmp_path):
    config = {"transactional.id.expiration.ms": "500",
              "transaction.remove.expired.transaction.cleanup.interval.ms": "200"}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        create_topics(broker.bootstrap_servers, ("orders", 1))
        producer = transactional_producer(broker.bootstrap_servers, "short-lived")
        producer.begin_transaction()
        producer.produce("orders", b"x", partition=0)
        producer.commit_transaction(30)
        coordinator = broker.broker.txn_coordinator
        time.sleep(1.5)
        assert broker.call(lambda: coordinator.describe("short-lived")) is None
    with EmbeddedBroker(tmp_path / "b", config) as restarted:
        assert restarted.call(lambda: restarted.broker.txn_coordinator.describe("short-lived")) is None


def describe_transaction(bootstrap, transactional_id):
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

    from oncelog.protocol.client import WireClient

    with WireClient.connect(bootstrap) as client:
        (state,) = client.request(DescribeTransactionsRequest(transactional_ids=(transactional_id,))).transaction_states
    return state


def coordinator_epoch(broker: EmbeddedBroker) -> int:
    """The coordinator epoch a standalone broker's coordinators took their partitions at."""
    leadership = broker.broker.leadership
    assert isinstance(leadership, StandaloneLeadership) and leadership.coordinator_epoch is not None
    return leadership.coordinator_epoch


def latest_coordinator_epoch(bootstrap, topic, partition, producer_id):
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

    from oncelog.protocol.client import WireClient

    with WireClient.connect(bootstrap) as client:
        topics = (TopicRequest(name=topic, partition_indexes=(partition,)),)
        response = client.request(DescribeProducersRequest(topics=topics))
    (producer,) = [p for p in response.topics[0].partitions[0].active_producers if p.producer_id == producer_id]
    return producer.coordinator_epoch


def test_coordinator_finishes_an_abort_interrupted_between_prepare_and_markers_after_a_restart(tmp_path):
    """PrepareAbort is durable, no ABORT marker is written yet (phase two held back), the
    broker goes away; a new broker process on the same log.dirs loads PrepareAbort, writes
    the markers under its new, higher coordinator epoch and completes the abort."""
    data = tmp_path / "data"
    with EmbeddedBroker(data, FAST_TIMEOUTS) as broker:
        create_topics(broker.bootstrap_servers, ("orders", 3), ("payments", 3))
        coordinator = broker.broker.txn_coordinator
        first_epoch = coordinator_epoch(broker)
        coordinator._schedule_markers = lambda *args, **kwargs: None  # the "crash" before phase two
        producer = transactional_producer(broker.bootstrap_servers, "abort-two-phase")
        producer.begin_transaction()
        for i in range(6):
            topic, partition = SIX[i]
            producer.produce(topic, f"x{i}".encode(), partition=partition)
        producer.flush(10)
        producer.abort_transaction(10)  # answered once PrepareAbort is durable
        stuck = broker.call(lambda: coordinator.describe("abort-two-phase"))
        assert stuck.state.display_name == "PrepareAbort"
        for topic, partition in SIX:
            assert last_stable_offset(broker.bootstrap_servers, topic, partition) == 0, "no marker yet"
        del producer
    with BrokerProcess(data, FAST_TIMEOUTS) as restarted:
        bootstrap = restarted.bootstrap_servers
        deadline = time.monotonic() + 10
        while describe_transaction(bootstrap, "abort-two-phase").transaction_state != "CompleteAbort":
            assert time.monotonic() < deadline, "the interrupted abort was not completed"
            time.sleep(0.05)
        for topic, partition in SIX:
            assert last_stable_offset(bootstrap, topic, partition) == 2  # the record + the ABORT marker
            assert latest_coordinator_epoch(bootstrap, topic, partition, stuck.producer_id) == first_epoch + 1
        assert read_values(bootstrap, SIX, "read_committed") == []
        assert sorted(read_values(bootstrap, SIX, "read_uncommitted")) == [f"x{i}" for i in range(6)]
        successor = transactional_producer(bootstrap, "abort-two-phase")
        successor.begin_transaction()
        successor.produce("orders", b"after-restart", partition=0)
        successor.commit_transaction(30)
        assert read_values(bootstrap, [("orders", 0)], "read_committed") == ["after-restart"]


def test_coordinator_epoch_grows_with_every_restart_and_fences_older_markers(tmp_path):
    """Kafka bumps the coordinator epoch on each load of `__transaction_state` and a
    partition refuses a marker whose coordinator epoch is older than the last it took
    for the producer: WriteTxnMarkers from before the restart is TRANSACTION_COORDINATOR_FENCED."""
    from kio.schema.errors import ErrorCode
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )

    from oncelog.protocol.client import WireClient

    data = tmp_path / "b"
    epochs = []
    for _ in range(3):
        with EmbeddedBroker(data) as broker:
            epochs.append(coordinator_epoch(broker))
    assert epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2]
    with EmbeddedBroker(data) as broker:
        bootstrap = broker.bootstrap_servers
        current = coordinator_epoch(broker)
        assert current == epochs[-1] + 1
        create_topics(bootstrap, ("orders", 1))
        producer = transactional_producer(bootstrap, "epoch-check")
        producer.begin_transaction()
        producer.produce("orders", b"x", partition=0)
        producer.commit_transaction(30)
        metadata = broker.call(lambda: broker.broker.txn_coordinator.describe("epoch-check"))
        assert latest_coordinator_epoch(bootstrap, "orders", 0, metadata.producer_id) == current

        def write_marker(coordinator_epoch):
            with WireClient.connect(bootstrap) as client:
                response = client.request(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
                    producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch, transaction_result=False,
                    topics=(WritableTxnMarkerTopic(name="orders", partition_indexes=(0,)),),
                    coordinator_epoch=coordinator_epoch,
                ),)))
            return response.markers[0].topics[0].partitions[0].error_code

        assert write_marker(epochs[-1]) == ErrorCode.transaction_coordinator_fenced
        assert write_marker(current) == ErrorCode.none
        assert read_values(bootstrap, [("orders", 0)], "read_committed") == ["x"]
