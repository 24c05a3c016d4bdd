"""`oncelog transactions` (list, describe, describe-producers, find-hanging, abort) run as
a real subprocess against a real broker, with transactions made by kafka-python.

How the hanging transaction is made: a producer opens a transaction and writes to a
partition; the broker is then killed (SIGKILL) and the coordinator's log,
`__transaction_state`, is lost (its partition directories are deleted) before the broker
restarts. That is the failure find-hanging exists for: the partition still holds the open
transaction (it blocks the last stable offset), but no coordinator remembers it, so no
coordinator will ever time it out or write its marker. A transactional write with a
producer id the coordinator never saw cannot make one: KIP-890 verification refuses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from oncelog.local.process import BrokerProcess

ONCELOG = Path(sys.executable).with_name("oncelog")
COMMAND_TIMEOUT_S = 60
DEADLINE_S = 30.0


def oncelog(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    return subprocess.run(
        [str(ONCELOG), "transactions", *args, "--bootstrap-server", bootstrap],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
        env=environment,
    )


def table(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """Run a command that prints a table; its rows as dicts by column name."""
    completed = oncelog(bootstrap, *args)
    assert completed.returncode == 0, f"oncelog transactions {' '.join(args)}: {completed.stderr}"
    header, *rows = completed.stdout.splitlines()
    columns = header.split()
    parsed = []
    for row in rows:
        values = row.split()
        assert len(values) <= len(columns), (header, row)
        # Only the last column may be empty (describe's TopicPartitions between transactions).
        parsed.append(dict(zip(columns, values + [""] * (len(columns) - len(values)), strict=True)))
    return parsed


def one_line_error(bootstrap: str, *args: str) -> str:
    completed = oncelog(bootstrap, *args)
    assert completed.returncode == 1, (completed.returncode, completed.stdout, completed.stderr)
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oncelog: error: "), completed.stderr
    return lines[0]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def open_transaction(bootstrap: str, transactional_id: str, writes: list[tuple[str, int, bytes]],
                     **config) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, **config)
    producer.init_transactions()
    producer.begin_transaction()
    for topic, partition, value in writes:
        producer.send(topic, value, partition=partition)
    producer.flush()
    return producer


def read_committed_end(bootstrap: str, tp: TopicPartition) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def read_committed_values(bootstrap: str, tp: TopicPartition, until_offset: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    consumer.assign([tp])
    consumer.seek_to_beginning()
    values = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while consumer.position(tp) < until_offset:
            assert time.monotonic() < deadline, f"position {consumer.position(tp)} never reached {until_offset}"
            values += [m.value for m in consumer.poll(timeout_ms=200).get(tp, [])]
    finally:
        consumer.close()
    return values


# -- list and describe -------------------------------------------------------------------


def test_transactions_list_shows_every_transactional_id_with_its_coordinator_and_state(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "listed", 2)
    ongoing = open_transaction(bootstrap, "cli-ongoing", [("listed", 0, b"a")])
    committed = open_transaction(bootstrap, "cli-committed", [("listed", 1, b"b")])
    committed.commit_transaction()
    idle = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="cli-idle")
    idle.init_transactions()
    try:
        rows = table(bootstrap, "list")
        assert sorted((r["TransactionalId"], r["Coordinator"], r["TransactionState"]) for r in rows) == [
            ("cli-committed", "1", "CompleteCommit"),
            ("cli-idle", "1", "Empty"),
            ("cli-ongoing", "1", "Ongoing"),
        ]
        producer_ids = {r["TransactionalId"]: r["ProducerId"] for r in rows}
        assert len(set(producer_ids.values())) == 3
        for transactional_id, producer_id in producer_ids.items():
            (described,) = table(bootstrap, "describe", "--transactional-id", transactional_id)
            assert described["ProducerId"] == producer_id
    finally:
        for producer in (ongoing, committed, idle):
            producer.close(timeout=5)


def test_transactions_describe_shows_the_ongoing_transaction_its_timeout_and_partitions(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "described", 3)
    before_ms = time.time_ns() // 1_000_000
    producer = open_transaction(bootstrap, "cli-described", [("described", 0, b"a"), ("described", 2, b"b")],
                                transaction_timeout_ms=45_000)
    after_ms = time.time_ns() // 1_000_000
    try:
        (row,) = table(bootstrap, "describe", "--transactional-id", "cli-described")
        listed = {r["TransactionalId"]: r["ProducerId"] for r in table(bootstrap, "list")}
        assert row["CoordinatorId"] == "1"
        assert row["TransactionalId"] == "cli-described"
        assert row["ProducerId"] == listed["cli-described"]
        assert row["ProducerEpoch"] == "0"
        assert row["TransactionState"] == "Ongoing"
        assert row["TransactionTimeoutMs"] == "45000"
        assert before_ms - 1000 <= int(row["CurrentTransactionStartTimeMs"]) <= after_ms + 1000
        assert 0 <= int(row["TransactionDurationMs"]) < 60_000
        assert row["TopicPartitions"] == "described-0,described-2"
    finally:
        producer.close(timeout=5)


def test_transactions_describe_of_an_id_between_transactions_has_no_start_time(broker):
    bootstrap = broker.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="cli-empty")
    producer.init_transactions()
    try:
        (row,) = table(bootstrap, "describe", "--transactional-id", "cli-empty")
        assert row["TransactionState"] == "Empty"
        assert row["CurrentTransactionStartTimeMs"] == "None"
        assert row["TransactionDurationMs"] == "None"
        assert row["TopicPartitions"] == ""
    finally:
        producer.close(timeout=5)


def test_transactions_describe_of_an_unknown_id_is_a_one_line_error(broker):
    error = one_line_error(broker.bootstrap_servers, "describe", "--transactional-id", "never-used")
    assert error == "oncelog: error: transactional id 'never-used': not found (TRANSACTIONAL_ID_NOT_FOUND)"


def test_transactions_commands_without_a_broker_are_a_one_line_error():
    from oncelog.local.process import free_port

    error = one_line_error(f"127.0.0.1:{free_port()}", "list")
    assert error.startswith("oncelog: error: cannot connect to 127.0.0.1:")


# -- find-hanging and abort ---------------------------------------------------------------


def test_find_hanging_ignores_an_old_transaction_its_coordinator_still_tracks(broker):
    """Kafka's rule: age alone is not hanging. With --max-transaction-timeout 0 every open
    transaction is old enough, but this one is Ongoing on its coordinator with the
    partition, so the coordinator will complete or time it out itself."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "tracked", 1)
    producer = open_transaction(bootstrap, "cli-tracked", [("tracked", 0, b"a")])
    try:
        time.sleep(0.05)  # older than 0 ms, as Kafka compares with ">"
        (producer_row,) = table(bootstrap, "describe-producers", "--topic", "tracked", "--partition", "0")
        assert producer_row["CurrentTransactionStartOffset"] == "0"
        assert table(bootstrap, "find-hanging", "--topic", "tracked", "--max-transaction-timeout", "0") == []
        assert table(bootstrap, "find-hanging", "--max-transaction-timeout", "0") == []
    finally:
        producer.close(timeout=5)


def test_find_hanging_reports_a_transaction_its_coordinator_lost_and_abort_unblocks_read_committed(tmp_path):
    data_dir = tmp_path / "broker"
    tp = TopicPartition("hang", 0)
    with BrokerProcess(data_dir) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "hang", 1)
        plain = KafkaProducer(bootstrap_servers=bootstrap)
        plain.send("hang", b"before", partition=0).get(timeout=DEADLINE_S)  # offset 0
        lost = open_transaction(bootstrap, "cli-lost", [("hang", 0, b"lost-0"), ("hang", 0, b"lost-1")])  # 1-2
        plain.send("hang", b"after", partition=0).get(timeout=DEADLINE_S)  # offset 3, behind the open one
        plain.close()
        producers = table(bootstrap, "describe-producers", "--topic", "hang", "--partition", "0")
        (open_row,) = [p for p in producers if p["CurrentTransactionStartOffset"] != "None"]
        assert open_row["CurrentTransactionStartOffset"] == "1"

        # The coordinator's log is lost in a crash.
        broker.kill()
        lost.close(timeout=0)
        state_dirs = [p for p in data_dir.iterdir() if p.name.startswith("__transaction_state-")]
        assert state_dirs, sorted(p.name for p in data_dir.iterdir())
        for directory in state_dirs:
            shutil.rmtree(directory)
        broker.start()

        assert read_committed_end(bootstrap, tp) == 1  # the open transaction holds the LSO
        young = table(bootstrap, "find-hanging", "--topic", "hang")  # default: 15 minutes
        assert young == []
        (hanging,) = table(bootstrap, "find-hanging", "--topic", "hang", "--max-transaction-timeout", "0")
        assert hanging["Topic"] == "hang" and hanging["Partition"] == "0"
        assert hanging["ProducerId"] == open_row["ProducerId"]
        assert hanging["ProducerEpoch"] == open_row["ProducerEpoch"]
        assert hanging["CoordinatorEpoch"] == "-1"  # no marker ever reached this producer here
        assert hanging["StartOffset"] == "1"
        assert hanging["LastTimestamp"] == open_row["LastTimestamp"]
        assert hanging["Duration(min)"] == "0"
        assert table(bootstrap, "find-hanging", "--max-transaction-timeout", "0") == [hanging]  # all topics

        completed = oncelog(bootstrap, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "1")
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.strip() == (
            f"Aborted the transaction of producer {open_row['ProducerId']} (epoch {open_row['ProducerEpoch']}, "
            "coordinator epoch 0) starting at offset 1 of hang-0."
        )

        # The ABORT marker at 4 ends the transaction: read_committed gets past it.
        assert read_committed_end(bootstrap, tp) == 5
        assert read_committed_values(bootstrap, tp, 5) == [b"before", b"after"]
        assert table(bootstrap, "find-hanging", "--topic", "hang", "--max-transaction-timeout", "0") == []
        producers = table(bootstrap, "describe-producers", "--topic", "hang", "--partition", "0")
        assert [p["CurrentTransactionStartOffset"] for p in producers] == ["None"] * len(producers)
        assert one_line_error(bootstrap, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "1") == (
            "oncelog: error: no open transaction starts at offset 1 of hang-0"
        )


def test_abort_and_find_hanging_refuse_unknown_partitions_in_one_line(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "known", 1)
    assert one_line_error(bootstrap, "abort", "--topic", "known", "--partition", "7", "--start-offset", "0") == (
        "oncelog: error: partition known-7 does not exist"
    )
    assert one_line_error(bootstrap, "abort", "--topic", "unknown", "--partition", "0", "--start-offset", "0") == (
        "oncelog: error: topic 'unknown': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"
    )
    assert one_line_error(bootstrap, "find-hanging", "--topic", "unknown") == (
        "oncelog: error: topic 'unknown': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"
    )
    assert one_line_error(bootstrap, "find-hanging", "--partition", "0") == (
        "oncelog: error: --partition requires --topic"
    )
    # Asking about a topic must not create it (Metadata v4+ with auto-creation off).
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        assert "unknown" not in admin.list_topics()
    finally:
        admin.close()
