"""The transaction coordinator's answers on the wire, state by state, as Kafka's
TransactionCoordinator gives them: InitProducerId (timeouts, KIP-360, producer id
rotation), EndTxn (v0-v4), AddPartitionsToTxn, transactional Produce verification
(KIP-890 part 1), ListTransactions filters, and the epoch fence when the log refuses it."""

import datetime
import time
from dataclasses import replace

import pytest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.end_txn.v4.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.produce.v9 import request as produce_v9

from oncelog import EmbeddedBroker
from oncelog.coordinator.txn.state import TransactionState
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode as Code
from tests.support.coordinators import change_transaction, find_coordinators

S = TransactionState
TOPIC = "answers"
MAX_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def answers_broker(tmp_path_factory):
    config = {"transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)}
    with EmbeddedBroker(tmp_path_factory.mktemp("answers") / "b", config) as running:
        running.call(lambda: running.broker.logs.create_topic(TOPIC, 3, {}))
        find_coordinators(running)
        yield running


def now():
    return int(time.time() * 1000)


def init(client, transactional_id, timeout_ms=30_000, producer_id=-1, producer_epoch=-1):
    return client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=producer_id, producer_epoch=producer_epoch,
    ))


def add_partitions(client, transactional_id, producer_id, producer_epoch, partitions=(0,)):
    response = client.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=TOPIC, partitions=tuple(partitions)),),
    ))
    return {r.partition_error_code for t in response.results_by_topic_v3_and_below for r in t.results_by_partition}


def end(client, transactional_id, producer_id, producer_epoch, commit):
    return client.request(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                        producer_epoch=producer_epoch, committed=commit)).error_code


def coordinator_abort_bump(broker):
    """How much the coordinator's own abort (fence, timeout) bumps the epoch beyond the
    fence: with transaction.version 2 every end of a transaction bumps it (KIP-890 part 2)."""
    return 1 if broker.broker.config["transaction.version"] >= 2 else 0


def state_of(broker, transactional_id):
    return broker.call(lambda: broker.broker.txn_coordinator.describe(transactional_id).state)


def wait_for_state(broker, transactional_id, state, timeout=10.0):
    deadline = time.monotonic() + timeout
    while state_of(broker, transactional_id) is not state:
        assert time.monotonic() < deadline, f"{transactional_id} stuck in {state_of(broker, transactional_id)}"
        time.sleep(0.02)


def bring_to(broker, transactional_id, state):
    """A transactional id in `state` (Prepare* ones with their markers held back, as if
    the coordinator were between the two phases). Returns (producer id, epoch)."""
    coordinator = broker.broker.txn_coordinator

    def setup():
        result = coordinator.init_producer_id(transactional_id, 30_000, -1, -1, now())
        assert result.error is Code.none
        pid, epoch = result.producer_id, result.producer_epoch
        if state is S.EMPTY:
            return pid, epoch
        assert coordinator.add_partitions(transactional_id, pid, epoch, {(TOPIC, 0)}, now()) is Code.none
        if state is S.ONGOING:
            return pid, epoch
        commit = state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            coordinator._schedule_markers = lambda *args, **kwargs: None  # phase two held back
        try:
            assert coordinator.end_transaction(transactional_id, pid, epoch, commit=commit, now=now()) is Code.none
        finally:
            coordinator.__dict__.pop("_schedule_markers", None)
        return pid, epoch

    pid, epoch = broker.call(setup)
    wait_for_state(broker, transactional_id, state)
    return pid, epoch


# Kafka's answer to each request in each state (the request comes from the current producer):
# (EndTxn commit, EndTxn abort, AddPartitionsToTxn, InitProducerId with the current id and epoch).
ANSWERS = {
    S.EMPTY: (Code.invalid_txn_state, Code.invalid_txn_state, Code.none, Code.none),
    S.ONGOING: (Code.none, Code.none, Code.none, Code.concurrent_transactions),
    # Kafka holds a pending CompleteCommit/CompleteAbort while in a Prepare state: every
    # EndTxn there is told to retry, whichever end it asks for.
    S.PREPARE_COMMIT: (Code.concurrent_transactions, Code.concurrent_transactions, Code.concurrent_transactions,
                       Code.concurrent_transactions),
    S.PREPARE_ABORT: (Code.concurrent_transactions, Code.concurrent_transactions, Code.concurrent_transactions,
                      Code.concurrent_transactions),
    S.COMPLETE_COMMIT: (Code.none, Code.invalid_txn_state, Code.none, Code.none),
    S.COMPLETE_ABORT: (Code.invalid_txn_state, Code.none, Code.none, Code.none),
}
REQUESTS = ("end-commit", "end-abort", "add-partitions", "init-producer-id")


@pytest.mark.parametrize("state", list(ANSWERS), ids=lambda s: s.display_name)
@pytest.mark.parametrize("request_name", REQUESTS)
def test_coordinator_answers_each_request_in_each_state_as_kafka(answers_broker, state, request_name):
    transactional_id = f"answers-{state.display_name}-{request_name}"
    pid, epoch = bring_to(answers_broker, transactional_id, state)
    expected = ANSWERS[state][REQUESTS.index(request_name)]
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        if request_name == "end-commit":
            answer = end(client, transactional_id, pid, epoch, commit=True)
        elif request_name == "end-abort":
            answer = end(client, transactional_id, pid, epoch, commit=False)
        elif request_name == "add-partitions":
            (answer,) = add_partitions(client, transactional_id, pid, epoch, partitions=(1,))
        else:
            answer = init(client, transactional_id, producer_id=pid, producer_epoch=epoch).error_code
    assert answer == expected
    if expected is not Code.none and state is not S.ONGOING:
        assert state_of(answers_broker, transactional_id) is state, "a refused request changes nothing"


def test_end_txn_v4_is_advertised_and_v5_is_not(tmp_path):
    """At transaction.version 1; level 2 adds v5 (see test_txn_version_2.py)."""
    with EmbeddedBroker(tmp_path / "b", {"transaction.version": "1"}) as level_1, \
            WireClient.connect(level_1.bootstrap_servers) as client:
        versions = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    (end_txn,) = [key for key in versions.api_keys if key.api_key == 26]
    assert (end_txn.min_version, end_txn.max_version) == (0, 4)


def test_end_txn_v4_commits_a_transaction(answers_broker):
    pid, epoch = bring_to(answers_broker, "end-v4", S.ONGOING)
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        assert end(client, "end-v4", pid, epoch, commit=True) == ErrorCode.none
    wait_for_state(answers_broker, "end-v4", S.COMPLETE_COMMIT)


@pytest.mark.parametrize("timeout_ms", [MAX_TIMEOUT_MS + 1, 0, -5])
def test_init_producer_id_with_a_timeout_outside_the_broker_limit_is_invalid_transaction_timeout(
    answers_broker, timeout_ms
):
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        response = init(client, f"timeout-{timeout_ms}", timeout_ms=timeout_ms)
        assert (response.error_code, response.producer_id, response.producer_epoch) == (
            ErrorCode.invalid_transaction_timeout, -1, -1)
        assert init(client, f"timeout-{timeout_ms}", timeout_ms=MAX_TIMEOUT_MS).error_code == ErrorCode.none


def test_kip360_unknown_transactional_id_with_an_expected_producer_gets_a_fresh_producer_id(answers_broker):
    """The client's producer id is gone (its transactional id expired): Kafka hands out a
    new producer id at epoch 0 instead of fencing the client."""
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        response = init(client, "kip360-unknown", producer_id=123_456, producer_epoch=7)
    assert response.error_code == ErrorCode.none
    assert response.producer_id != 123_456 and response.producer_epoch == 0


def test_kip360_expected_producer_of_another_id_is_fenced(answers_broker):
    pid, epoch = bring_to(answers_broker, "kip360-foreign", S.COMPLETE_COMMIT)
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        assert init(client, "kip360-foreign", producer_id=pid + 1000, producer_epoch=epoch).error_code == \
            ErrorCode.producer_fenced
        assert init(client, "kip360-foreign", producer_id=pid, producer_epoch=epoch + 5).error_code == \
            ErrorCode.producer_fenced


def test_kip360_retry_of_a_lost_epoch_bump_gets_the_same_epoch(answers_broker):
    pid, epoch = bring_to(answers_broker, "kip360-retry", S.COMPLETE_ABORT)
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        first = init(client, "kip360-retry", producer_id=pid, producer_epoch=epoch)
        retry = init(client, "kip360-retry", producer_id=pid, producer_epoch=epoch)
    assert (first.producer_id, first.producer_epoch) == (pid, epoch + 1)
    assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, pid, epoch + 1)


def test_a_pending_transition_is_concurrent_transactions_before_the_producer_is_checked(answers_broker):
    """Kafka checks for a pending transition before the KIP-360 producer check: a request
    naming a stale producer gets the retriable answer while the transition is in flight."""
    bring_to(answers_broker, "pending-first", S.COMPLETE_COMMIT)
    coordinator = answers_broker.broker.txn_coordinator

    def init_while_pending():
        entry = coordinator._entries["pending-first"]
        entry.pending = replace(entry.current, state=S.EMPTY)  # a log append in flight
        try:
            return coordinator.init_producer_id("pending-first", 30_000, entry.current.producer_id + 1000, 0,
                                                now()).error
        finally:
            entry.pending = None

    assert answers_broker.call(init_while_pending) is Code.concurrent_transactions


def test_producer_id_rotates_when_the_epoch_is_exhausted(answers_broker):
    """InitProducerId at the last usable epoch moves the id to a new producer id at epoch 0;
    a retry of that request (its answer lost) gets the same new producer id again; an
    older epoch of the old producer id is fenced."""
    pid, _ = bring_to(answers_broker, "rotate", S.COMPLETE_COMMIT)
    coordinator = answers_broker.broker.txn_coordinator
    answers_broker.call(lambda: change_transaction(coordinator, "rotate", producer_epoch=32765))
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        last = init(client, "rotate", producer_id=pid, producer_epoch=32765)
        assert (last.error_code, last.producer_id, last.producer_epoch) == (ErrorCode.none, pid, 32766)
        rotated = init(client, "rotate", producer_id=pid, producer_epoch=32766)
        assert rotated.error_code == ErrorCode.none
        assert rotated.producer_id != pid and rotated.producer_epoch == 0
        retried = init(client, "rotate", producer_id=pid, producer_epoch=32766)
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
            ErrorCode.none, rotated.producer_id, 0)
        assert init(client, "rotate", producer_id=pid, producer_epoch=32765).error_code == ErrorCode.producer_fenced
        # The new producer id works for transactions.
        assert add_partitions(client, "rotate", rotated.producer_id, 0) == {ErrorCode.none}
        assert end(client, "rotate", rotated.producer_id, 0, commit=True) == ErrorCode.none


def test_producer_id_rotates_for_a_new_instance_at_the_exhausted_epoch(answers_broker):
    pid, _ = bring_to(answers_broker, "rotate-new", S.COMPLETE_ABORT)
    coordinator = answers_broker.broker.txn_coordinator
    answers_broker.call(lambda: change_transaction(coordinator, "rotate-new", producer_epoch=32766))
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        fresh = init(client, "rotate-new")
    assert fresh.error_code == ErrorCode.none and fresh.producer_id != pid and fresh.producer_epoch == 0


def produce_transactional(client, transactional_id, producer_id, producer_epoch, partition, sequence=0):
    batch = rb.build_batch([rb.Record(None, b"v")], timestamp_ms=now(), producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=sequence, transactional=True)
    response = client.request(produce_v9.ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce_v9.TopicProduceData(
            name=TOPIC, partition_data=(produce_v9.PartitionProduceData(index=partition, records=batch),)),),
    ))
    return response.responses[0].partition_responses[0].error_code


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT], ids=lambda s: s.display_name)
def test_transactional_produce_while_the_markers_are_written_is_retriable(answers_broker, state):
    """Kafka's coordinator answers the verification with CONCURRENT_TRANSACTIONS and its
    broker turns that into NOT_ENOUGH_REPLICAS for the producer, which retries."""
    transactional_id = f"verify-{state.display_name}"
    pid, epoch = bring_to(answers_broker, transactional_id, state)
    coordinator = answers_broker.broker.txn_coordinator
    assert answers_broker.call(lambda: coordinator.verify_partition(transactional_id, pid, epoch, (TOPIC, 0))) is \
        Code.concurrent_transactions
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        assert produce_transactional(client, transactional_id, pid, epoch, 0) == ErrorCode.not_enough_replicas


def test_transactional_produce_verification_answers(answers_broker):
    pid, epoch = bring_to(answers_broker, "verify-ongoing", S.ONGOING)
    coordinator = answers_broker.broker.txn_coordinator

    def verify(producer_id, producer_epoch, partition):
        return answers_broker.call(
            lambda: coordinator.verify_partition("verify-ongoing", producer_id, producer_epoch, (TOPIC, partition)))

    assert verify(pid, epoch, 0) is Code.none
    assert verify(pid, epoch, 2) is Code.invalid_txn_state, "not added to the transaction"
    assert verify(pid + 1, epoch, 0) is Code.invalid_producer_id_mapping
    assert verify(pid, epoch + 1, 0) is Code.producer_fenced
    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        assert produce_transactional(client, "verify-ongoing", pid, epoch, 0) == ErrorCode.none
        assert produce_transactional(client, "verify-ongoing", pid, epoch, 2) == ErrorCode.invalid_txn_state
        # A fenced producer learns it as INVALID_PRODUCER_EPOCH, as Kafka's broker says it.
        assert init(client, "verify-ongoing").error_code == ErrorCode.concurrent_transactions  # fences, aborts
        wait_for_state(answers_broker, "verify-ongoing", S.COMPLETE_ABORT)
        assert produce_transactional(client, "verify-ongoing", pid, epoch, 0, sequence=1) == \
            ErrorCode.invalid_producer_epoch


def test_a_failed_epoch_fence_does_not_bump_the_epoch_again(answers_broker):
    """The abort that fences an Ongoing transaction cannot be written: the coordinator
    answers the error; the retries reuse the epoch bumped by the first attempt, as Kafka's
    hasFailedEpochFence does, so failures do not burn epochs."""
    pid, epoch = bring_to(answers_broker, "fence-fails", S.ONGOING)
    coordinator = answers_broker.broker.txn_coordinator

    def init_with_failing_log():
        coordinator._append = lambda *args, **kwargs: Code.coordinator_not_available
        try:
            return coordinator.init_producer_id("fence-fails", 30_000, -1, -1, now()).error
        finally:
            del coordinator._append

    with WireClient.connect(answers_broker.bootstrap_servers) as client:
        for _ in range(3):
            assert answers_broker.call(init_with_failing_log) is Code.coordinator_not_available
            metadata = answers_broker.call(lambda: coordinator.describe("fence-fails"))
            assert (metadata.state, metadata.producer_epoch) == (S.ONGOING, epoch + 1)
        # The old producer is fenced already, although nothing reached the log.
        assert add_partitions(client, "fence-fails", pid, epoch, partitions=(2,)) == {ErrorCode.producer_fenced}
        assert init(client, "fence-fails").error_code == ErrorCode.concurrent_transactions
        wait_for_state(answers_broker, "fence-fails", S.COMPLETE_ABORT)
        aborted_at = epoch + 1 + coordinator_abort_bump(answers_broker)
        assert answers_broker.call(lambda: coordinator.describe("fence-fails").producer_epoch) == aborted_at
        again = init(client, "fence-fails")
    assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.none, pid, aborted_at + 1)


def test_a_failed_timeout_abort_does_not_bump_the_epoch_again(broker):
    broker.call(lambda: broker.broker.logs.create_topic(TOPIC, 3, {}))
    find_coordinators(broker)
    _pid, epoch = bring_to(broker, "timeout-fence-fails", S.ONGOING)
    coordinator = broker.broker.txn_coordinator

    def abort_later(append_fails):
        metadata = coordinator.describe("timeout-fence-fails")
        later = metadata.txn_start_timestamp + metadata.txn_timeout_ms + 1
        if append_fails:
            coordinator._append = lambda *args, **kwargs: Code.coordinator_not_available
        try:
            coordinator.abort_timed_out(later)
        finally:
            coordinator.__dict__.pop("_append", None)
        return coordinator.describe("timeout-fence-fails").producer_epoch

    assert broker.call(abort_later, True) == epoch + 1
    assert broker.call(abort_later, True) == epoch + 1
    assert broker.call(abort_later, False) == epoch + 1 + coordinator_abort_bump(broker)
    wait_for_state(broker, "timeout-fence-fails", S.COMPLETE_ABORT)


def list_transactions(client, **filters):
    response = client.request(ListTransactionsRequest(**filters))
    assert response.error_code == ErrorCode.none
    return {state.transactional_id: state.transaction_state for state in response.transaction_states
            if state.transactional_id.startswith("lt-")}, tuple(response.unknown_state_filters)


def test_list_transactions_filters_by_state_producer_and_duration(broker):
    broker.call(lambda: broker.broker.logs.create_topic(TOPIC, 3, {}))
    find_coordinators(broker)
    _ = bring_to(broker, "lt-empty", S.EMPTY)
    ongoing_pid, _ = bring_to(broker, "lt-ongoing", S.ONGOING)
    committed_pid, _ = bring_to(broker, "lt-committed", S.COMPLETE_COMMIT)
    time.sleep(0.01)
    with WireClient.connect(broker.bootstrap_servers) as client:
        everything, _ = list_transactions(client)
        assert everything == {"lt-empty": "Empty", "lt-ongoing": "Ongoing", "lt-committed": "CompleteCommit"}
        assert list_transactions(client, state_filters=("Ongoing",)) == ({"lt-ongoing": "Ongoing"}, ())
        assert list_transactions(client, state_filters=("Ongoing", "Unheard")) == (
            {"lt-ongoing": "Ongoing"}, ("Unheard",))
        assert list_transactions(client, state_filters=("Unheard",)) == ({}, ("Unheard",))
        assert list_transactions(client, producer_id_filters=(committed_pid, ongoing_pid))[0] == {
            "lt-ongoing": "Ongoing", "lt-committed": "CompleteCommit"}
        assert list_transactions(client, state_filters=("Ongoing",), producer_id_filters=(committed_pid,))[0] == {}
        # Kafka's duration filter applies in every state; an id that never started a
        # transaction (start -1) passes any duration.
        assert list_transactions(client, duration_filter=0)[0] == everything
        assert list_transactions(client, duration_filter=3_600_000)[0] == {"lt-empty": "Empty"}


def test_list_transactions_duration_filter_keeps_only_transactions_older_than_it(broker):
    broker.call(lambda: broker.broker.logs.create_topic(TOPIC, 3, {}))
    find_coordinators(broker)
    bring_to(broker, "lt-timed", S.ONGOING)
    coordinator = broker.broker.txn_coordinator
    start = broker.call(lambda: coordinator.describe("lt-timed").txn_start_timestamp)

    def listed(duration_ms, at):
        return [m.transactional_id for m in coordinator.list(None, None, duration_ms, at)]

    assert broker.call(listed, 500, start + 500) == [], "exactly the duration old is not longer than it"
    assert broker.call(listed, 499, start + 500) == ["lt-timed"]
    assert broker.call(listed, -1, start) == ["lt-timed"], "a negative duration does not filter"
