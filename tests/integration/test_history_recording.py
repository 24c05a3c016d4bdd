"""The recording clients against a real broker: what they record is what happened, the
checker passes a correct run, and it reports a real loss."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from oncelog.chaos.checker import check
from oncelog.chaos.history import (
    History,
    Poll,
    ReadComplete,
    RecordingConsumer,
    RecordingProducer,
    RecordingTransactionalProducer,
    Send,
    TxnOutcome,
    observe_group_offsets,
    read_all,
)
from tests.support.kafka import create_topics


def test_idempotent_sends_and_final_reads_are_recorded_and_check_clean(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, ("events", 3))
    history = History()
    with RecordingProducer(history, {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2},
                           client="p1") as producer:
        values = [producer.send("events", key=f"k{n % 7}") for n in range(300)]
        assert producer.flush(30) == 0
    assert values[:2] == ["p1:0", "p1:1"] and len(set(values)) == 300

    sends = history.of_type(Send)
    assert len(sends) == 300 and all(s.acked_offset is not None and s.error is None for s in sends)
    assert {s.partition for s in sends} == {0, 1, 2}

    for isolation in ("read_committed", "read_uncommitted"):
        polls = read_all(history, bootstrap, ["events"], isolation)
        assert sorted(p.value for p in polls) == sorted(values)
        assert {p.isolation for p in polls} == {isolation}
    assert len(history.of_type(ReadComplete)) == 6

    report = check(history)
    assert report.ok, report.summary()
    assert (report.stats["acked"], report.stats["reads"]) == (300, 600)


def test_transactional_outcomes_are_recorded_and_aborted_records_stay_invisible(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, ("orders", 2))
    history = History()
    producer = RecordingTransactionalProducer(
        history, {"bootstrap.servers": bootstrap, "transactional.id": "orders-writer", "linger.ms": 1}, client="tx")
    producer.init_transactions(30)
    for seq in range(4):
        assert producer.begin_transaction() == seq
        for _ in range(10):
            producer.send("orders")
        if seq % 2:
            producer.flush(30)  # the records reach the log before the abort
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    producer.close()

    outcomes = [(o.txn_seq, o.outcome) for o in history.of_type(TxnOutcome)]
    assert outcomes == [(0, "commit"), (1, "abort"), (2, "commit"), (3, "abort")]
    sends = history.of_type(Send)
    assert len(sends) == 40 and all(s.txn_id == "orders-writer" and s.acked_offset is not None for s in sends)

    committed = read_all(history, bootstrap, ["orders"], "read_committed")
    uncommitted = read_all(history, bootstrap, ["orders"], "read_uncommitted")
    assert sorted(p.value for p in committed) == sorted(s.value for s in sends if s.txn_seq in (0, 2))
    assert len(uncommitted) == 40

    report = check(history)
    assert report.ok, report.summary()
    assert (report.stats["committed_txns"], report.stats["aborted_txns"]) == (2, 2)


def test_checker_reports_acknowledged_records_lost_when_the_topic_is_recreated(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, ("fragile", 1))
    history = History()
    with RecordingProducer(history, {"bootstrap.servers": bootstrap}, client="p1") as producer:
        for _ in range(20):
            producer.send("fragile")
        assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics(["fragile"])["fragile"].result(10)
    create_topics(bootstrap, ("fragile", 1))

    read_all(history, bootstrap, ["fragile"], "read_uncommitted")
    report = check(history)
    assert report.found() == {"lost_write": 20}, report.summary()
    assert "verdict: 20 ANOMALIES" in report.summary()


def test_consume_transform_produce_keeps_group_offsets_atomic_with_outputs(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, ("ctp-in", 1), ("ctp-out", 1))
    history = History()
    with RecordingProducer(history, {"bootstrap.servers": bootstrap}, client="src") as source:
        inputs = [source.send("ctp-in") for _ in range(12)]
        assert source.flush(30) == 0

    group = "ctp-group"
    consumer = RecordingConsumer(history, {
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }, client="ctp-consumer")
    consumer.assign([TopicPartition("ctp-in", 0, 0)])
    producer = RecordingTransactionalProducer(
        history, {"bootstrap.servers": bootstrap, "transactional.id": "ctp"}, client="ctp")
    producer.init_transactions(30)
    processed = 0
    while processed < 9:  # three transactions of three inputs; the last three stay unprocessed
        batch = []
        while len(batch) < 3:
            batch += [m for m in consumer.consume(3 - len(batch), timeout=1) if m.error() is None]
        producer.begin_transaction()
        for message in batch:
            output = f"out:{message.value().decode()}"
            history.record_transform("ctp", message.value().decode(), output)
            producer.send("ctp-out", output)
        producer.send_offsets([TopicPartition("ctp-in", 0, batch[-1].offset() + 1)], consumer)
        producer.commit_transaction(30)
        processed += len(batch)
    producer.close()
    consumer.close()

    observations = observe_group_offsets(history, bootstrap, group, [("ctp-in", 0)])
    assert [o.offset for o in observations] == [9]
    read_all(history, bootstrap, ["ctp-in", "ctp-out"], "read_committed")
    report = check(history)
    assert report.ok, report.summary()
    polled_inputs = [p.value for p in history.of_type(Poll) if p.client == "ctp-consumer"]
    assert polled_inputs == inputs[:9]


@pytest.mark.parametrize("isolation", ["serializable", ""])
def test_recording_consumer_rejects_an_unknown_isolation_level(isolation):
    with pytest.raises(ValueError, match=re.escape("isolation.level")):
        RecordingConsumer(History(), {"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                      "isolation.level": isolation}, client="c")
