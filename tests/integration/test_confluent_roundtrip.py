"""confluent-kafka (librdkafka) against a real broker: the full produce/consume round trip."""

import time
from collections import defaultdict

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.kafka import create_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def consume_all(bootstrap, topic, expected, *, isolation="read_uncommitted", timeout=60):
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })
    metadata = consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
    messages = []
    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=0.5):
            assert message.error() is None, message.error()
            messages.append(message)
    consumer.close()
    return messages


def test_hundred_thousand_keyed_messages_in_every_codec_round_trip_in_order(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "roundtrip", 3)
    per_codec = 20_000
    for codec_index, codec in enumerate(CODECS):
        producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec,
            "linger.ms": 5, "batch.num.messages": 2000,
        })
        failures = []

        def delivered(error, message, failures=failures):  # this codec's list (flushed before the next)
            if error is not None:
                failures.append(error)

        for i in range(per_codec):
            n = codec_index * per_codec + i
            key = f"key-{n % 997}".encode()
            value = f"{codec}:{n}:".encode() + bytes(n % 200)
            headers = [("codec", codec.encode()), ("n", str(n).encode())]
            timestamp = 1_700_000_000_000 + n
            producer.produce("roundtrip", value, key, headers=headers, timestamp=timestamp, on_delivery=delivered)
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        assert failures == []

    messages = consume_all(bootstrap, "roundtrip", len(CODECS) * per_codec)
    assert len(messages) == len(CODECS) * per_codec
    by_partition = defaultdict(list)
    for message in messages:
        by_partition[message.partition()].append(message)
    assert len(by_partition) == 3
    total = 0
    for partition, received in by_partition.items():
        offsets = [m.offset() for m in received]
        assert offsets == list(range(len(received))), f"partition {partition} offsets not contiguous"
        numbers = [int(dict(m.headers())["n"]) for m in received]
        assert numbers == sorted(numbers), f"partition {partition} out of order"
        for m in received:
            n = int(dict(m.headers())["n"])
            codec = CODECS[n // per_codec]
            assert m.key() == f"key-{n % 997}".encode()
            assert m.value() == f"{codec}:{n}:".encode() + bytes(n % 200)
            assert m.timestamp()[1] == 1_700_000_000_000 + n
            assert dict(m.headers())["codec"] == codec.encode()
        total += len(received)
    # Keys hash to partitions: the same key never appears in two partitions.
    partitions_of_key = defaultdict(set)
    for message in messages:
        partitions_of_key[message.key()].add(message.partition())
    assert all(len(p) == 1 for p in partitions_of_key.values())
    assert total == 100_000


def test_watermarks_and_offsets_for_times(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "times", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce("times", f"v{i}".encode(), timestamp=1_000_000 + i * 1000)
        producer.flush(10)  # one batch each, so each has its own timestamp range
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
    assert consumer.get_watermark_offsets(TopicPartition("times", 0), timeout=10) == (0, 10)
    (found,) = consumer.offsets_for_times([TopicPartition("times", 0, 1_004_500)], timeout=10)
    assert found.offset == 5
    (beyond,) = consumer.offsets_for_times([TopicPartition("times", 0, 9_000_000)], timeout=10)
    assert beyond.offset == -1
    consumer.close()


def test_auto_created_topic_gets_num_partitions(tmp_path):
    from oncelog import EmbeddedBroker

    with EmbeddedBroker(tmp_path / "b", {"num.partitions": "4"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce("auto", b"x")
        assert producer.flush(10) == 0
        metadata = producer.list_topics("auto", timeout=10)
        assert len(metadata.topics["auto"].partitions) == 4


def test_produce_to_missing_topic_with_auto_create_off_fails(tmp_path):
    from confluent_kafka import KafkaError

    from oncelog import EmbeddedBroker

    with EmbeddedBroker(tmp_path / "b", {"auto.create.topics.enable": "false"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 3000})
        errors = []
        producer.produce("missing", b"x", on_delivery=lambda e, m: errors.append(e))
        producer.flush(10)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                    KafkaError._MSG_TIMED_OUT)
        assert "missing" not in producer.list_topics(timeout=10).topics


def test_large_message_limits(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "small", 1, config={"max.message.bytes": 2000})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 1_000_000})
    errors = []
    producer.produce("small", b"x" * 5000, on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)  # separate batches: the limit applies to the whole batch
    producer.produce("small", b"y" * 100, on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    codes = sorted(str(e.name()) if e else "OK" for e in errors)
    assert codes == ["MSG_SIZE_TOO_LARGE", "OK"]
