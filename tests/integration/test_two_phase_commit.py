"""KIP-939 on the broker: a prepared transaction kept for an external decision
(InitProducerId v6 with enable2Pc and keepPreparedTxn), then committed or aborted by its
new owner. This is what the Spark sink's batch mode stands on."""

import datetime
import time

import pytest
from confluent_kafka import KafkaException, Producer
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient
from tests.support.coordinators import find_coordinators
from tests.support.kafka import create_topics, last_stable_offset, read_values


def init_2pc(bootstrap, transactional_id, keep_prepared=True):
    with WireClient.connect(bootstrap) as client:
        return client.request(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=keep_prepared,
        ))


def end_txn(bootstrap, transactional_id, producer_id, epoch, commit):
    with WireClient.connect(bootstrap) as client:
        return client.request(EndTxnRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, committed=commit,
        )).error_code


def prepared_transaction(bootstrap, transactional_id, values):
    """A transaction written and flushed by a normal client, then left open ("prepared")."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 1000})
    producer.init_transactions(10)
    producer.begin_transaction()
    for value in values:
        producer.produce("prepared", value.encode(), partition=0)
    producer.flush(10)
    return producer


@pytest.fixture
def two_phase_broker(tmp_path):
    config = {"transaction.two.phase.commit.enable": "true",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        create_topics(broker.bootstrap_servers, ("prepared", 1))
        yield find_coordinators(broker)


@pytest.mark.parametrize("commit", [True, False])
def test_kept_prepared_transaction_outlives_its_timeout_and_is_ended_by_the_new_owner(two_phase_broker, commit):
    bootstrap = two_phase_broker.bootstrap_servers
    writer = prepared_transaction(bootstrap, "task-0", ["a", "b", "c"])
    original = two_phase_broker.broker.txn_coordinator.describe("task-0")
    original_id, original_epoch = original.producer_id, original.producer_epoch

    kept = init_2pc(bootstrap, "task-0")
    assert kept.error_code == ErrorCode.none
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (original_id, original_epoch)
    assert kept.producer_epoch == original_epoch + 1

    time.sleep(1.8)  # past the writer's 1 s transaction.timeout.ms: a 2PC transaction waits
    assert read_values(bootstrap, [("prepared", 0)], "read_committed", settle=0.3) == []
    assert last_stable_offset(bootstrap, "prepared", 0) == 0

    assert end_txn(bootstrap, "task-0", kept.producer_id, kept.producer_epoch, commit) == ErrorCode.none
    expected = ["a", "b", "c"] if commit else []
    assert read_values(bootstrap, [("prepared", 0)], "read_committed") == expected
    del writer


def test_the_instance_that_prepared_cannot_end_it_after_the_handover(two_phase_broker):
    bootstrap = two_phase_broker.bootstrap_servers
    writer = prepared_transaction(bootstrap, "task-1", ["x"])
    init_2pc(bootstrap, "task-1")
    with pytest.raises(KafkaException):
        writer.commit_transaction(5)
    assert read_values(bootstrap, [("prepared", 0)], "read_committed", settle=0.3) == []


def test_keep_prepared_without_an_open_transaction_reports_none(two_phase_broker):
    kept = init_2pc(two_phase_broker.bootstrap_servers, "fresh")
    assert kept.error_code == ErrorCode.none
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (-1, -1)


def test_two_phase_commit_is_refused_unless_the_broker_enables_it(tmp_path):
    with EmbeddedBroker(tmp_path / "b") as broker:
        assert init_2pc(broker.bootstrap_servers, "t").error_code == ErrorCode.transactional_id_authorization_failed
