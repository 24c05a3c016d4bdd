"""KIP-890 part 2 (transaction.version 2) on the wire: the epoch is bumped at the end of
every transaction (EndTxn v5 returns it, the markers carry it, the next transaction uses
it), so a late EndTxn, Produce or TxnOffsetCommit of an earlier transaction of the same
producer is fenced instead of acting on the newer one; Produce v12 and TxnOffsetCommit v5
add their partitions to the transaction themselves; an exhausted epoch moves the producer
to a new producer id. Kafka's TransactionCoordinator.endTransaction (TV2) is the reference.
"""

import datetime
import time

import pytest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.end_txn.v4.request import EndTxnRequest as EndTxnRequestV4
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.produce.v11 import request as produce_v11
from kio.schema.produce.v12 import request as produce_v12
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit_v3
from kio.schema.txn_offset_commit.v4 import request as txn_offset_commit_v4
from kio.schema.txn_offset_commit.v5 import request as txn_offset_commit_v5

from oncelog import EmbeddedBroker
from oncelog.coordinator.txn.state import TransactionState
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS
from oncelog.kernel.partitions import read_all_batches
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient
from tests.support.coordinators import change_transaction, find_coordinators

S = TransactionState
TOPIC = "tv2"
ACKED = ErrorCode.none


@pytest.fixture(scope="module")
def tv2_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("tv2") / "b", {"transaction.version": "2"}) as running:
        find_coordinators(running)
        running.call(lambda: running.broker.logs.create_topic(TOPIC, 3, {}))
        yield running


@pytest.fixture()
def client(tv2_broker):
    with WireClient.connect(tv2_broker.bootstrap_servers) as connected:
        yield connected


def now():
    return int(time.time() * 1000)


def init(client, transactional_id):
    response = client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=30),
        producer_id=-1, producer_epoch=-1,
    ))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def end(client, transactional_id, producer_id, producer_epoch, commit):
    """EndTxn v5: (error, producer id, producer epoch)."""
    response = client.request(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                            producer_epoch=producer_epoch, committed=commit))
    return response.error_code, response.producer_id, response.producer_epoch


def produce(client, transactional_id, producer_id, producer_epoch, partition=0, sequence=0, value=b"v",
            module=produce_v12):
    batch = rb.build_batch([rb.Record(None, value)], timestamp_ms=now(), producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=sequence, transactional=True)
    response = client.request(module.ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(module.TopicProduceData(
            name=TOPIC, partition_data=(module.PartitionProduceData(index=partition, records=batch),)),),
    ))
    return response.responses[0].partition_responses[0].error_code


def commit_offsets(client, transactional_id, group, producer_id, producer_epoch, offset, module=txn_offset_commit_v5):
    response = client.request(module.TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group, producer_id=producer_id, producer_epoch=producer_epoch,
        topics=(module.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
            module.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                   committed_metadata=""),)),),
    ))
    return response.topics[0].partitions[0].error_code


def committed_offset(client, group):
    response = client.request(OffsetFetchRequest(
        group_id=group, topics=(OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),), require_stable=True,
    ))
    partition = response.topics[0].partitions[0]
    return partition.error_code, partition.committed_offset


def metadata_of(broker, transactional_id):
    return broker.call(lambda: broker.broker.txn_coordinator.describe(transactional_id))


def wait_for_state(broker, transactional_id, state, timeout=10.0):
    deadline = time.monotonic() + timeout
    while metadata_of(broker, transactional_id).state is not state:
        assert time.monotonic() < deadline, f"{transactional_id} stuck in {metadata_of(broker, transactional_id)}"
        time.sleep(0.02)


def time_out(broker, transactional_id):
    """The coordinator aborts the id's open transaction as timed out, now; returns once
    the abort is complete."""
    coordinator = broker.broker.txn_coordinator

    def abort_it():
        metadata = coordinator.describe(transactional_id)
        coordinator.abort_timed_out(metadata.txn_start_timestamp + metadata.txn_timeout_ms + 1)

    broker.call(abort_it)
    wait_for_state(broker, transactional_id, S.COMPLETE_ABORT)


def batches_of(broker, producer_id, topic=TOPIC, partition=0):
    """(kind, epoch) of the producer's batches in the partition: kind is "data", "COMMIT"
    or "ABORT"."""

    def read():
        found = []
        for buffer, header in read_all_batches(broker.broker, topic, partition):
            if header.producer_id != producer_id:
                continue
            if header.is_control:
                start = header.position + rb.HEADER_SIZE
                kind, _ = rb.read_control_record(memoryview(buffer)[start: header.position + header.size])
                found.append((kind.name, header.producer_epoch))
            else:
                found.append(("data", header.producer_epoch))
        return found

    return broker.call(read)


def test_api_versions_finalizes_transaction_version_2_and_offers_the_kip890_part2_versions(tv2_broker, client):
    response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}
    assert versions[26] == (0, 5), "EndTxn v5"
    assert versions[0] == (3, 12), "Produce v12"
    assert versions[28] == (0, 5), "TxnOffsetCommit v5"
    assert [(f.name, f.min_version, f.max_version) for f in response.supported_features] == [
        ("share.version", 0, 1), ("transaction.version", 0, 2)]
    assert [(f.name, f.min_version_level, f.max_version_level) for f in response.finalized_features] == [
        ("share.version", 1, 1), ("transaction.version", 2, 2)]
    assert response.finalized_features_epoch >= 0, "the Java client ignores features of epoch -1"


def test_api_versions_at_level_1_finalizes_it_and_keeps_the_classic_versions(tmp_path):
    with EmbeddedBroker(tmp_path / "b", {"transaction.version": "1"}) as broker, \
            WireClient.connect(broker.bootstrap_servers) as client:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}
    assert (versions[26], versions[0], versions[28]) == ((0, 4), (3, 11), (0, 3))
    assert [(f.name, f.min_version, f.max_version) for f in response.supported_features] == [
        ("share.version", 0, 1), ("transaction.version", 0, 2)]
    assert [(f.name, f.max_version_level) for f in response.finalized_features] == [
        ("share.version", 1), ("transaction.version", 1)]


def test_end_txn_v5_returns_the_bumped_epoch_which_the_markers_and_the_next_transaction_carry(tv2_broker, client):
    pid, epoch = init(client, "bump")
    assert produce(client, "bump", pid, epoch, sequence=0) == ACKED
    assert end(client, "bump", pid, epoch, commit=True) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, "bump", S.COMPLETE_COMMIT)
    # The next transaction runs at the bumped epoch, its sequences from 0 again.
    assert produce(client, "bump", pid, epoch + 1, sequence=0) == ACKED
    assert end(client, "bump", pid, epoch + 1, commit=False) == (ACKED, pid, epoch + 2)
    wait_for_state(tv2_broker, "bump", S.COMPLETE_ABORT)
    assert batches_of(tv2_broker, pid) == [
        ("data", epoch), ("COMMIT", epoch + 1), ("data", epoch + 1), ("ABORT", epoch + 2)]


def test_a_retried_end_txn_v5_gets_the_same_answer(tv2_broker, client):
    pid, epoch = init(client, "retry")
    assert produce(client, "retry", pid, epoch) == ACKED
    assert end(client, "retry", pid, epoch, commit=True) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, "retry", S.COMPLETE_COMMIT)
    assert end(client, "retry", pid, epoch, commit=True) == (ACKED, pid, epoch + 1), "the retry"
    assert end(client, "retry", pid, epoch, commit=False)[0] == ErrorCode.invalid_txn_state
    assert metadata_of(tv2_broker, "retry").producer_epoch == epoch + 1


def test_an_empty_abort_right_after_a_commit_waits_for_its_markers_instead_of_fencing_the_producer(tv2_broker, client):
    """The Java client 4.3 on a 3-broker cluster: EndTxn(commit) answered with the bumped
    epoch, then at once EndTxn(abort) of an empty transaction at that epoch, while the
    commit's markers were still being written. The broker answered PRODUCER_FENCED and
    the producer's next transaction was lost. Kafka (KAFKA-18464) answers
    CONCURRENT_TRANSACTIONS until the commit is complete; the retry then goes through."""
    coordinator = tv2_broker.broker.txn_coordinator
    pid, epoch = init(client, "commit-then-abort")
    assert produce(client, "commit-then-abort", pid, epoch) == ACKED
    tv2_broker.call(lambda: setattr(coordinator, "_schedule_markers", lambda *args, **kwargs: None))
    try:
        assert end(client, "commit-then-abort", pid, epoch, commit=True) == (ACKED, pid, epoch + 1)
        assert metadata_of(tv2_broker, "commit-then-abort").state is S.PREPARE_COMMIT
        assert end(client, "commit-then-abort", pid, epoch + 1, commit=False) == (
            ErrorCode.concurrent_transactions, -1, -1)
        assert end(client, "commit-then-abort", pid, epoch, commit=True)[0] == ErrorCode.concurrent_transactions
    finally:
        tv2_broker.call(lambda: coordinator.__dict__.pop("_schedule_markers", None))
    tv2_broker.call(lambda: coordinator._schedule_markers("commit-then-abort"))
    wait_for_state(tv2_broker, "commit-then-abort", S.COMPLETE_COMMIT)
    assert end(client, "commit-then-abort", pid, epoch + 1, commit=False) == (ACKED, pid, epoch + 2)
    assert batches_of(tv2_broker, pid) == [("data", epoch), ("COMMIT", epoch + 1)]


def test_a_commit_that_races_the_coordinators_timeout_abort_is_fenced_not_an_invalid_state(tv2_broker, client):
    """KAFKA-20785: the coordinator aborts a timed-out transaction while the producer's
    EndTxn(commit) is on its way. The commit must get PRODUCER_FENCED, which clients
    recover from, not INVALID_TXN_STATE, which they treat as fatal."""
    pid, epoch = init(client, "commit-races-timeout")
    assert produce(client, "commit-races-timeout", pid, epoch) == ACKED

    time_out(tv2_broker, "commit-races-timeout")
    assert end(client, "commit-races-timeout", pid, epoch, commit=True) == (ErrorCode.producer_fenced, -1, -1)
    assert batches_of(tv2_broker, pid)[0] == ("data", epoch) and batches_of(tv2_broker, pid)[-1][0] == "ABORT"


def test_a_late_end_txn_of_the_previous_transaction_is_fenced_and_leaves_the_newer_one_open(tv2_broker, client):
    """The hole of docs/reliability.md: with one epoch per producer session, a late
    EndTxn(commit) of an aborted transaction would commit the next one."""
    pid, epoch = init(client, "late-end")
    assert produce(client, "late-end", pid, epoch, value=b"aborted") == ACKED
    assert end(client, "late-end", pid, epoch, commit=False) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, "late-end", S.COMPLETE_ABORT)
    assert produce(client, "late-end", pid, epoch + 1, value=b"newer") == ACKED
    # The late EndTxn of the aborted transaction, in both protocols.
    assert end(client, "late-end", pid, epoch, commit=True) == (ErrorCode.producer_fenced, -1, -1)
    late_v4 = client.request(EndTxnRequestV4(transactional_id="late-end", producer_id=pid, producer_epoch=epoch,
                                             committed=True))
    assert late_v4.error_code == ErrorCode.producer_fenced
    newer = metadata_of(tv2_broker, "late-end")
    assert (newer.state, newer.producer_epoch, newer.partitions) == (S.ONGOING, epoch + 1, {(TOPIC, 0)})
    assert batches_of(tv2_broker, pid) == [("data", epoch), ("ABORT", epoch + 1), ("data", epoch + 1)]
    # The newer transaction ends as its own producer decides.
    assert end(client, "late-end", pid, epoch + 1, commit=False) == (ACKED, pid, epoch + 2)


@pytest.mark.parametrize("module", [produce_v12, produce_v11], ids=["v12", "v11"])
def test_a_late_produce_of_the_previous_transaction_is_fenced_and_does_not_join_the_newer_one(
    tv2_broker, client, module
):
    transactional_id = f"late-produce-{module.ProduceRequest.__version__}"
    pid, epoch = init(client, transactional_id)
    assert produce(client, transactional_id, pid, epoch, sequence=0) == ACKED
    assert end(client, transactional_id, pid, epoch, commit=False) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, transactional_id, S.COMPLETE_ABORT)
    assert produce(client, transactional_id, pid, epoch + 1, sequence=0) == ACKED
    # The aborted transaction's next batch, still in flight: sequence 1 would fit.
    assert produce(client, transactional_id, pid, epoch, sequence=1, module=module) == \
        ErrorCode.invalid_producer_epoch
    assert batches_of(tv2_broker, pid) == [("data", epoch), ("ABORT", epoch + 1), ("data", epoch + 1)]
    assert end(client, transactional_id, pid, epoch + 1, commit=True) == (ACKED, pid, epoch + 2)


def test_produce_v12_adds_its_partition_to_the_transaction(tv2_broker, client):
    pid, epoch = init(client, "implicit-add")
    assert produce(client, "implicit-add", pid, epoch, partition=1) == ACKED
    assert produce(client, "implicit-add", pid, epoch, partition=2) == ACKED
    added = metadata_of(tv2_broker, "implicit-add")
    assert (added.state, added.partitions, added.client_transaction_version) == (
        S.ONGOING, {(TOPIC, 1), (TOPIC, 2)}, 2)
    assert end(client, "implicit-add", pid, epoch, commit=True) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, "implicit-add", S.COMPLETE_COMMIT)
    assert batches_of(tv2_broker, pid, partition=1) == [("data", epoch), ("COMMIT", epoch + 1)]
    assert batches_of(tv2_broker, pid, partition=2) == [("data", epoch), ("COMMIT", epoch + 1)]


def test_produce_v11_still_needs_add_partitions_to_txn_at_level_2(tv2_broker, client):
    pid, epoch = init(client, "v11-verify")
    assert produce(client, "v11-verify", pid, epoch, module=produce_v11) == ErrorCode.invalid_txn_state
    added = client.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="v11-verify", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),),
    ))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ACKED
    assert produce(client, "v11-verify", pid, epoch, module=produce_v11) == ACKED


def test_txn_offset_commit_v5_adds_the_group_to_the_transaction(tv2_broker, client):
    pid, epoch = init(client, "implicit-offsets")
    assert commit_offsets(client, "implicit-offsets", "g-implicit", pid, epoch, offset=42) == ACKED
    offsets_partition = tv2_broker.call(
        lambda: tv2_broker.broker.group_coordinator.partition_for_group("g-implicit"))
    added = metadata_of(tv2_broker, "implicit-offsets")
    assert (added.state, added.partitions) == (S.ONGOING, {(CONSUMER_OFFSETS, offsets_partition)})
    assert committed_offset(client, "g-implicit")[0] == ErrorCode.unstable_offset_commit
    assert end(client, "implicit-offsets", pid, epoch, commit=True) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, "implicit-offsets", S.COMPLETE_COMMIT)
    assert committed_offset(client, "g-implicit") == (ACKED, 42)


def test_a_late_txn_offset_commit_of_the_previous_transaction_is_fenced(tv2_broker, client):
    pid, epoch = init(client, "late-offsets")
    assert commit_offsets(client, "late-offsets", "g-late", pid, epoch, offset=10) == ACKED
    assert end(client, "late-offsets", pid, epoch, commit=False) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, "late-offsets", S.COMPLETE_ABORT)
    assert produce(client, "late-offsets", pid, epoch + 1) == ACKED  # the newer transaction
    assert commit_offsets(client, "late-offsets", "g-late", pid, epoch, offset=11) == ErrorCode.invalid_producer_epoch
    assert commit_offsets(client, "late-offsets", "g-late", pid, epoch, offset=11,
                          module=txn_offset_commit_v3) == ErrorCode.invalid_producer_epoch
    assert metadata_of(tv2_broker, "late-offsets").partitions == {(TOPIC, 0)}, "the group did not join"
    assert end(client, "late-offsets", pid, epoch + 1, commit=True) == (ACKED, pid, epoch + 2)
    wait_for_state(tv2_broker, "late-offsets", S.COMPLETE_COMMIT)
    assert committed_offset(client, "g-late") == (ACKED, -1)


def test_txn_offset_commit_v4_outside_the_transaction_is_transaction_abortable(tv2_broker, client):
    pid, epoch = init(client, "abortable-offsets")
    assert commit_offsets(client, "abortable-offsets", "g-v4", pid, epoch, offset=1,
                          module=txn_offset_commit_v4) == ErrorCode.transaction_abortable
    assert commit_offsets(client, "abortable-offsets", "g-v4", pid, epoch, offset=1,
                          module=txn_offset_commit_v3) == ErrorCode.invalid_txn_state


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT], ids=lambda s: s.display_name)
def test_end_txn_v5_abort_with_nothing_to_abort_bumps_the_epoch(tv2_broker, client, state):
    transactional_id = f"empty-abort-{state.display_name}"
    pid, epoch = init(client, transactional_id)
    if state is not S.EMPTY:
        assert produce(client, transactional_id, pid, epoch) == ACKED
        assert end(client, transactional_id, pid, epoch, commit=state is S.COMPLETE_COMMIT)[0] == ACKED
        wait_for_state(tv2_broker, transactional_id, state)
        epoch += 1
    assert end(client, transactional_id, pid, epoch, commit=True)[0] == ErrorCode.invalid_txn_state
    assert end(client, transactional_id, pid, epoch, commit=False) == (ACKED, pid, epoch + 1)
    wait_for_state(tv2_broker, transactional_id, S.COMPLETE_ABORT)
    assert produce(client, transactional_id, pid, epoch + 1) == ACKED


def test_an_exhausted_epoch_moves_the_producer_to_a_new_producer_id(tv2_broker, client):
    pid, _ = init(client, "overflow")
    last_epoch = 32766  # the last epoch a client is given (Short.MAX_VALUE - 1)
    coordinator = tv2_broker.broker.txn_coordinator
    tv2_broker.call(lambda: change_transaction(coordinator, "overflow", producer_epoch=last_epoch))
    assert produce(client, "overflow", pid, last_epoch) == ACKED
    error, new_pid, new_epoch = end(client, "overflow", pid, last_epoch, commit=True)
    assert error == ACKED and new_pid != pid and new_epoch == 0
    wait_for_state(tv2_broker, "overflow", S.COMPLETE_COMMIT)
    # The markers close the old producer id's transaction at the epoch past the last one.
    assert batches_of(tv2_broker, pid) == [("data", last_epoch), ("COMMIT", 32767)]
    # A retry with the old producer id gets the new one again; the old one is done.
    assert end(client, "overflow", pid, last_epoch, commit=True) == (ACKED, new_pid, 0)
    assert produce(client, "overflow", pid, last_epoch, sequence=1) == ErrorCode.invalid_producer_id_mapping
    assert produce(client, "overflow", new_pid, 0) == ACKED
    assert end(client, "overflow", new_pid, 0, commit=True) == (ACKED, new_pid, 1)
    wait_for_state(tv2_broker, "overflow", S.COMPLETE_COMMIT)
    assert batches_of(tv2_broker, new_pid) == [("data", 0), ("COMMIT", 1)]


def test_a_timeout_abort_at_the_last_epoch_moves_the_producer_to_a_new_producer_id(tv2_broker, client):
    """KAFKA-20090: the coordinator's own abort of a transaction at the last epoch a client
    is given rotates the producer id as an end by the client does, so the client's late
    EndTxn(abort) is a retry answered with the new id, and its late commit is fenced
    (KAFKA-20785), not a fatal INVALID_TXN_STATE."""
    coordinator = tv2_broker.broker.txn_coordinator
    pid, _ = init(client, "timeout-overflow")
    last_epoch = 32766
    tv2_broker.call(lambda: change_transaction(coordinator, "timeout-overflow", producer_epoch=last_epoch))
    assert produce(client, "timeout-overflow", pid, last_epoch) == ACKED

    time_out(tv2_broker, "timeout-overflow")
    after = metadata_of(tv2_broker, "timeout-overflow")
    assert after.producer_id != pid and after.producer_epoch == 0 and after.previous_producer_id == pid
    assert batches_of(tv2_broker, pid) == [("data", last_epoch), ("ABORT", 32767)]
    assert end(client, "timeout-overflow", pid, last_epoch, commit=True) == (ErrorCode.producer_fenced, -1, -1)
    assert end(client, "timeout-overflow", pid, last_epoch, commit=False) == (ACKED, after.producer_id, 0)
    assert produce(client, "timeout-overflow", after.producer_id, 0) == ACKED
    assert end(client, "timeout-overflow", after.producer_id, 0, commit=True) == (ACKED, after.producer_id, 1)


def test_a_transaction_version_2_commit_survives_a_restart_mid_overflow(tmp_path):
    """PrepareCommit is in the log (TransactionLogValue v1, with the next producer id) but
    its markers are not: the restarted coordinator finishes it under the new producer id."""
    config = {"transaction.version": "2"}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        broker.call(lambda: broker.broker.logs.create_topic(TOPIC, 1, {}))
        find_coordinators(broker)
        with WireClient.connect(broker.bootstrap_servers) as client:
            pid, _ = init(client, "restart")
            coordinator = broker.broker.txn_coordinator
            broker.call(lambda: change_transaction(coordinator, "restart", producer_epoch=32766))
            assert produce(client, "restart", pid, 32766) == ACKED
            broker.call(lambda: setattr(coordinator, "_schedule_markers", lambda *args, **kwargs: None))
            error, new_pid, new_epoch = end(client, "restart", pid, 32766, commit=True)
            assert (error, new_epoch) == (ACKED, 0) and new_pid != pid
            assert metadata_of(broker, "restart").state is S.PREPARE_COMMIT
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        wait_for_state(broker, "restart", S.COMPLETE_COMMIT)
        finished = metadata_of(broker, "restart")
        assert (finished.producer_id, finished.producer_epoch, finished.previous_producer_id) == (new_pid, 0, pid)
        assert batches_of(broker, pid) == [("data", 32766), ("COMMIT", 32767)]
        with WireClient.connect(broker.bootstrap_servers) as client:
            assert end(client, "restart", pid, 32766, commit=True) == (ACKED, new_pid, 0), "the retry, after it"
