"""Log compaction with a real broker and real clients: a compacted topic reads back the
latest value per key, keyless records are refused, and the coordinators reload their
state from compacted __consumer_offsets and __transaction_state after a restart."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.local.process import BrokerProcess, wait_until
from oncelog.protocol.record_batch import parse_batches
from oncelog.storage.batch_records import decode_records

# The cleaner runs every 100 ms and cleans as soon as anything is dirty.
FAST_CLEANER = {
    "log.cleaner.backoff.ms": "100",
    "log.cleaner.min.cleanable.ratio": "0.01",
}


def records_of(broker: EmbeddedBroker, topic: str, partition: int = 0) -> list:
    def read():
        log = broker.broker.logs.partition(topic, partition)
        data = log.read(log.log_start_offset, 1 << 30).records
        found = []
        for header in parse_batches(data):
            if not header.is_control:
                found += decode_records(data, header)  # compressed batches too
        return found

    return broker.call(read)


def consume_all(bootstrap: str, topic: str, expected_end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            if found and found[-1][0] >= expected_end - 1:
                break
            continue
        assert message.error() is None, message.error()
        offset, key = message.offset(), message.key()
        assert offset is not None and key is not None  # a record of a compacted topic: keyed
        found.append((offset, key, message.value()))
        if offset >= expected_end - 1:
            break
    consumer.close()
    return found


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compacted_topic_reads_back_only_the_latest_value_per_key(tmp_path, compression):
    with EmbeddedBroker(tmp_path / "data", FAST_CLEANER) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("table", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "2048", "delete.retention.ms": "0",
        })])["table"].result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                             "compression.type": compression})
        for round_ in range(20):
            # The last round rewrites only the even keys: batches holding both get rewritten.
            for key in range(10) if round_ < 19 else range(0, 10, 2):
                producer.produce("table", key=b"key-%d" % key, value=b"value-%d-%d" % (key, round_))
            producer.flush(10)
        producer.produce("table", key=b"key-3", value=None)  # a tombstone
        for filler in range(40):  # pushes the keys above out of the active segment
            producer.produce("table", key=b"filler-%d" % filler, value=b"x" * 40)
            producer.flush(10)
        end = 19 * 10 + 5 + 1 + 40

        def compacted() -> bool:
            keys = [r.key for r in records_of(broker, "table") if r.key.startswith(b"key-")]
            return len(keys) == len(set(keys))

        wait_until(compacted, timeout=30, message="the cleaner compacted the topic")
        read = consume_all(bootstrap, "table", end)
        keyed = {key: value for _offset, key, value in read if key.startswith(b"key-")}
        assert keyed.pop(b"key-3", None) is None  # the tombstone, until a later round drops it
        assert keyed == {b"key-%d" % key: b"value-%d-%d" % (key, 19 if key % 2 == 0 else 18)
                         for key in range(10) if key != 3}
        assert len([1 for _o, key, _v in read if key.startswith(b"key-")]) in (9, 10)
        offsets = [offset for offset, *_ in read]
        assert offsets == sorted(offsets) and offsets[-1] == end - 1
        producer.produce("table", key=b"after", value=b"cleaning")  # the producer carries on
        assert producer.flush(10) == 0


def test_read_committed_after_cleaning_sees_committed_latest_values_only(tmp_path):
    with EmbeddedBroker(tmp_path / "data", FAST_CLEANER) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("table", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "2048", "delete.retention.ms": "0",
        })])["table"].result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "writer"})
        producer.init_transactions(10)
        expected = {}
        for number in range(40):
            producer.begin_transaction()
            key = b"key-%d" % (number % 5)
            producer.produce("table", key=key, value=b"%d" % number)
            producer.flush(10)
            if number % 3 == 0:
                producer.abort_transaction(10)
            else:
                producer.commit_transaction(10)
                expected[key] = b"%d" % number
        filler = Producer({"bootstrap.servers": bootstrap})
        for number in range(40):
            filler.produce("table", key=b"filler-%d" % number, value=b"x" * 40)
            filler.flush(10)

        def compacted() -> bool:
            keys = [r.key for r in records_of(broker, "table") if r.key.startswith(b"key-")]
            return len(keys) == len(set(keys))

        wait_until(compacted, timeout=30, message="the cleaner compacted the topic")
        end = broker.call(lambda: broker.broker.logs.partition("table", 0).log_end_offset)
        read = consume_all(bootstrap, "table", end)
        assert {key: value for _o, key, value in read if key.startswith(b"key-")} == expected
        assert len([1 for _o, key, _v in read if key.startswith(b"key-")]) == len(expected)


def test_produce_without_a_key_to_a_compacted_topic_is_invalid_record(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("table", 1, 1, config={"cleanup.policy": "compact"})])["table"].result(10)
        errors = []
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "retries": 0})
        producer.produce("table", value=b"no key", on_delivery=lambda error, _message: errors.append(error))
        producer.flush(10)  # one batch each: Kafka refuses a whole batch with a keyless record
        producer.produce("table", key=b"k", value=b"with key",
                         on_delivery=lambda error, _message: errors.append(error))
        producer.flush(10)
        assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
        assert errors[1] is None
        assert [r.key for r in records_of(broker, "table")] == [b"k"]


INTERNAL_COMPACTION = {
    **FAST_CLEANER,
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "4096",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.segment.bytes": "4096",
    "group.initial.rebalance.delay.ms": "0",
}


def test_group_offsets_reload_from_compacted_consumer_offsets_after_restart(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data, INTERNAL_COMPACTION) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("events", 2, 1)])["events"].result(10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compacted-group",
                             "enable.auto.commit": False})
        for commit in range(1, 151):
            consumer.commit(offsets=[TopicPartition("events", 0, commit), TopicPartition("events", 1, 2 * commit)],
                            asynchronous=False)
        consumer.close()
        commits = 150 * 2
        wait_until(lambda: len(records_of(broker, "__consumer_offsets")) < commits / 2, timeout=30,
                   message="__consumer_offsets compacted")
    with EmbeddedBroker(data, INTERNAL_COMPACTION) as broker:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "compacted-group"})
        committed = consumer.committed([TopicPartition("events", 0), TopicPartition("events", 1)], timeout=10)
        consumer.close()
        assert [tp.offset for tp in committed] == [150, 300]


def test_transaction_state_reloads_from_compacted_transaction_log_after_restart(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data, INTERNAL_COMPACTION) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("out", 1, 1)])["out"].result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "compacted-txn"})
        producer.init_transactions(10)
        for number in range(60):
            producer.begin_transaction()
            producer.produce("out", key=b"k", value=b"%d" % number)
            if number == 59:
                producer.flush(10)  # the partition joins the transaction: the abort is real
                producer.abort_transaction(10)
            else:
                producer.commit_transaction(10)
        before = broker.call(lambda: broker.broker.txn_coordinator.describe("compacted-txn"))
        epoch_before, producer_id = before.producer_epoch, before.producer_id
        wait_until(lambda: len(records_of(broker, "__transaction_state")) < 60, timeout=30,
                   message="__transaction_state compacted")
    with EmbeddedBroker(data, INTERNAL_COMPACTION) as broker:
        after = broker.call(lambda: broker.broker.txn_coordinator.describe("compacted-txn"))
        assert (after.producer_id, after.producer_epoch) == (producer_id, epoch_before)
        assert after.state.name == "COMPLETE_ABORT"
        # A new instance fences the old epoch and can commit.
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "compacted-txn"})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("out", key=b"k", value=b"after restart")
        producer.commit_transaction(10)
        assert broker.call(lambda: broker.broker.txn_coordinator.describe("compacted-txn").producer_epoch) \
            == epoch_before + 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_during_cleaning_loses_nothing(tmp_path, seed):
    """A broker killed at a random moment while it keeps compacting: after a restart the
    latest value of every key is there, once."""
    import random

    rng = random.Random(seed)
    config = {**FAST_CLEANER, "log.cleaner.backoff.ms": "10"}
    data = tmp_path / "data"
    latest: dict[bytes, bytes] = {}
    with BrokerProcess(data, config) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("table", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "1024",
        })])["table"].result(10)
        for round_ in range(3):
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
            for number in range(300):
                key = b"key-%d" % rng.randrange(20)
                value = b"%d-%d" % (round_, number)
                producer.produce("table", key=key, value=value)
                producer.poll(0)
                latest[key] = value
            assert producer.flush(10) == 0
            time.sleep(rng.uniform(0.0, 0.3))
            broker.kill()
            broker.start()
            bootstrap = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap})
        for filler in range(30):
            producer.produce("table", key=b"filler-%d" % filler, value=b"x" * 40)
            producer.flush(10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("table", 0, 0)])
        seen: dict[bytes, bytes] = {}
        offsets = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if b"filler-29" in seen:
                    break
                continue
            if message.error():
                raise KafkaException(message.error())
            offsets.append(message.offset())
            seen[message.key()] = message.value()
        consumer.close()
        assert offsets == sorted(set(offsets))
        assert {key: value for key, value in seen.items() if key.startswith(b"key-")} == latest
        assert len(offsets) < 900  # the cleaner did compact between and across the kills
