"""AddPartitionsToTxn v4-v5, the batched form partition leaders send to the transaction
coordinator (KIP-890), answered on the wire by a standalone broker as Kafka's
KafkaApis.handleAddPartitionsToTxnRequest and TransactionCoordinator answer it:
`verify_only` checks each partition against the producer's ongoing transaction, an add
(`verify_only` false) starts or extends a transaction version 2 transaction, each
transaction of the batch gets its own result."""

import datetime
import time

import pytest
from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.add_partitions_to_txn.v5 import request as add_v5
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from oncelog import EmbeddedBroker
from oncelog.coordinator.txn.state import TransactionState
from oncelog.protocol.client import WireClient
from tests.support.coordinators import find_coordinators

S = TransactionState
TOPIC = "verified"


@pytest.fixture(scope="module")
def coordinator_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("broker-form") / "b", {"transaction.version": "2"}) as running:
        find_coordinators(running)
        running.call(lambda: running.broker.logs.create_topic(TOPIC, 3, {}))
        yield running


@pytest.fixture()
def client(coordinator_broker):
    with WireClient.connect(coordinator_broker.bootstrap_servers) as connected:
        yield connected


def init(client, transactional_id):
    response = client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=30),
        producer_id=-1, producer_epoch=-1,
    ))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def transaction(module, transactional_id, producer_id, producer_epoch, partitions, *, verify_only, topic=TOPIC):
    return module.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=verify_only, topics=(module.AddPartitionsToTxnTopic(name=topic, partitions=tuple(partitions)),),
    )


def send(client, *transactions, module=add_v5):
    """{transactional id: {(topic, partition): error}} and the top-level error code."""
    response = client.request(module.AddPartitionsToTxnRequest(transactions=transactions))
    answers = {
        result.transactional_id: {(topic.name, p.partition_index): p.partition_error_code
                                  for topic in result.topic_results for p in topic.results_by_partition}
        for result in response.results_by_transaction
    }
    return response.error_code, answers


def verify(client, transactional_id, producer_id, producer_epoch, partitions, module=add_v5):
    error, answers = send(client, transaction(module, transactional_id, producer_id, producer_epoch, partitions,
                                              verify_only=True), module=module)
    assert error == ErrorCode.none
    return answers[transactional_id]


def add(client, transactional_id, producer_id, producer_epoch, partitions):
    error, answers = send(client, transaction(add_v5, transactional_id, producer_id, producer_epoch, partitions,
                                              verify_only=False))
    assert error == ErrorCode.none
    return answers[transactional_id]


def end(client, transactional_id, producer_id, producer_epoch, commit):
    response = client.request(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                            producer_epoch=producer_epoch, committed=commit))
    return response.error_code, response.producer_id, response.producer_epoch


def metadata_of(broker, transactional_id):
    return broker.call(lambda: broker.broker.txn_coordinator.describe(transactional_id))


def wait_for_state(broker, transactional_id, state, timeout=10.0):
    deadline = time.monotonic() + timeout
    while metadata_of(broker, transactional_id).state is not state:
        assert time.monotonic() < deadline, f"{transactional_id} stuck in {metadata_of(broker, transactional_id)}"
        time.sleep(0.02)


@pytest.mark.parametrize("level", ["1", "2"])
def test_add_partitions_to_txn_v5_is_offered_at_every_transaction_version(tmp_path, level):
    with EmbeddedBroker(tmp_path / "b", {"transaction.version": level}) as broker, \
            WireClient.connect(broker.bootstrap_servers) as client:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}
    assert versions[24] == (0, 5)


def test_verify_only_answers_each_partition_against_the_ongoing_transaction(client):
    pid, epoch = init(client, "verify-ongoing")
    assert add(client, "verify-ongoing", pid, epoch, [0]) == {(TOPIC, 0): ErrorCode.none}
    assert verify(client, "verify-ongoing", pid, epoch, [0, 1]) == {
        (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.transaction_abortable}
    # v4 gets the same answers (Kafka's coordinator says TRANSACTION_ABORTABLE there too).
    assert verify(client, "verify-ongoing", pid, epoch, [0, 1], module=add_v4) == {
        (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.transaction_abortable}
    assert verify(client, "verify-ongoing", pid, epoch + 1, [0]) == {(TOPIC, 0): ErrorCode.producer_fenced}
    assert verify(client, "verify-ongoing", pid + 1, epoch, [0]) == {
        (TOPIC, 0): ErrorCode.invalid_producer_id_mapping}
    assert verify(client, "never-initialised", pid, epoch, [0]) == {
        (TOPIC, 0): ErrorCode.invalid_producer_id_mapping}


def test_verify_only_never_changes_the_transaction(coordinator_broker, client):
    pid, epoch = init(client, "verify-readonly")
    assert verify(client, "verify-readonly", pid, epoch, [2]) == {(TOPIC, 2): ErrorCode.transaction_abortable}
    assert metadata_of(coordinator_broker, "verify-readonly").state is S.EMPTY


def test_verify_only_after_the_transaction_ended_is_transaction_abortable(coordinator_broker, client):
    pid, epoch = init(client, "verify-ended")
    assert add(client, "verify-ended", pid, epoch, [0]) == {(TOPIC, 0): ErrorCode.none}
    assert end(client, "verify-ended", pid, epoch, commit=True) == (ErrorCode.none, pid, epoch + 1)
    wait_for_state(coordinator_broker, "verify-ended", S.COMPLETE_COMMIT)
    # The late batch of the ended transaction (old epoch), and one of the next (new epoch).
    assert verify(client, "verify-ended", pid, epoch, [0]) == {(TOPIC, 0): ErrorCode.producer_fenced}
    assert verify(client, "verify-ended", pid, epoch + 1, [0]) == {(TOPIC, 0): ErrorCode.transaction_abortable}


def test_verify_only_while_the_markers_are_written_is_concurrent_transactions(coordinator_broker, client):
    pid, epoch = init(client, "verify-prepare")
    assert add(client, "verify-prepare", pid, epoch, [0]) == {(TOPIC, 0): ErrorCode.none}
    coordinator = coordinator_broker.broker.txn_coordinator

    def prepare_commit_with_markers_held_back():
        coordinator._schedule_markers = lambda *args, **kwargs: None
        try:
            return coordinator.end_transaction_result("verify-prepare", pid, epoch, commit=True,
                                                      now=int(time.time() * 1000), transaction_version=2).error
        finally:
            del coordinator._schedule_markers

    assert coordinator_broker.call(prepare_commit_with_markers_held_back) is ErrorCode.none
    wait_for_state(coordinator_broker, "verify-prepare", S.PREPARE_COMMIT)
    # The retry of a batch of the committing transaction (the epoch before the bump).
    assert verify(client, "verify-prepare", pid, epoch + 1, [0]) == {(TOPIC, 0): ErrorCode.concurrent_transactions}
    coordinator_broker.call(lambda: coordinator._schedule_markers("verify-prepare"))
    wait_for_state(coordinator_broker, "verify-prepare", S.COMPLETE_COMMIT)


def test_an_add_starts_a_transaction_version_2_transaction_which_end_txn_v5_commits(coordinator_broker, client):
    pid, epoch = init(client, "broker-add")
    assert add(client, "broker-add", pid, epoch, [1, 2]) == {(TOPIC, 1): ErrorCode.none, (TOPIC, 2): ErrorCode.none}
    added = metadata_of(coordinator_broker, "broker-add")
    assert (added.state, added.partitions, added.client_transaction_version) == (
        S.ONGOING, {(TOPIC, 1), (TOPIC, 2)}, 2)
    assert add(client, "broker-add", pid, epoch, [1]) == {(TOPIC, 1): ErrorCode.none}, "a retry"
    assert end(client, "broker-add", pid, epoch, commit=True) == (ErrorCode.none, pid, epoch + 1)
    wait_for_state(coordinator_broker, "broker-add", S.COMPLETE_COMMIT)
    assert add(client, "broker-add", pid, epoch, [0]) == {(TOPIC, 0): ErrorCode.producer_fenced}, "a late add"


def test_each_transaction_of_a_batch_gets_its_own_result(coordinator_broker, client):
    first_pid, first_epoch = init(client, "batch-a")
    second_pid, second_epoch = init(client, "batch-b")
    assert add(client, "batch-a", first_pid, first_epoch, [0]) == {(TOPIC, 0): ErrorCode.none}
    error, answers = send(
        client,
        transaction(add_v5, "batch-a", first_pid, first_epoch, [0, 1], verify_only=True),
        transaction(add_v5, "batch-b", second_pid, second_epoch, [2], verify_only=False),
        transaction(add_v5, "batch-c", 12345, 0, [0], verify_only=True),
    )
    assert error == ErrorCode.none
    assert answers == {
        "batch-a": {(TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.transaction_abortable},
        "batch-b": {(TOPIC, 2): ErrorCode.none},
        "batch-c": {(TOPIC, 0): ErrorCode.invalid_producer_id_mapping},
    }
    assert metadata_of(coordinator_broker, "batch-b").partitions == {(TOPIC, 2)}


def test_a_partition_that_does_not_exist_fails_its_whole_transaction(coordinator_broker, client):
    pid, epoch = init(client, "batch-missing")
    error, answers = send(client, add_v5.AddPartitionsToTxnTransaction(
        transactional_id="batch-missing", producer_id=pid, producer_epoch=epoch, verify_only=False,
        topics=(add_v5.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),
                add_v5.AddPartitionsToTxnTopic(name="no-such-topic", partitions=(0,))),
    ))
    assert error == ErrorCode.none
    assert answers["batch-missing"] == {(TOPIC, 0): ErrorCode.operation_not_attempted,
                                        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    assert metadata_of(coordinator_broker, "batch-missing").state is S.EMPTY


def test_an_empty_transactional_id_is_invalid_request(client):
    assert verify(client, "", 1, 0, [0]) == {(TOPIC, 0): ErrorCode.invalid_request}
