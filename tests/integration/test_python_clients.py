"""kafka-python and aiokafka against a real broker: produce and consume round trips."""

import asyncio

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

T0 = 1_700_000_000_000
CREATE_TIME = 0


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(broker, codec):
    bootstrap = broker.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp", 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=5)
    futures = [
        producer.send("kp", key=f"k{i % 10}".encode(), value=f"value-{i}".encode() * 20,
                      headers=[("i", str(i).encode())], partition=i % 2, timestamp_ms=T0 + i * 3)
        for i in range(2000)
    ]
    producer.flush()
    offsets = [f.get(timeout=10) for f in futures]
    assert sorted((m.partition, m.offset) for m in offsets) == sorted(
        [(0, o) for o in range(1000)] + [(1, o) for o in range(1000)]
    )
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("kp", 0), TopicPartition("kp", 1)])
    consumer.seek_to_beginning()
    received = []
    for message in consumer:
        received.append(message)
        if len(received) == 2000:
            break
    consumer.close()
    assert len(received) == 2000
    for partition in (0, 1):
        values = [int(dict(m.headers)["i"]) for m in received if m.partition == partition]
        assert values == list(range(partition, 2000, 2))
    for m in received:
        i = int(dict(m.headers)["i"])
        assert (m.key, m.value) == (f"k{i % 10}".encode(), f"value-{i}".encode() * 20)
        assert (m.timestamp, m.timestamp_type) == (T0 + i * 3, CREATE_TIME)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_round_trip(broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    bootstrap = broker.bootstrap_servers

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([AioNewTopic("aio", 3, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec)
        await producer.start()
        try:
            sent = []
            for i in range(600):
                metadata = await producer.send_and_wait(
                    "aio", f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 3, headers=[("h", b"x")],
                    timestamp_ms=T0 + i * 7,
                )
                sent.append((metadata.partition, metadata.offset))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False, group_id=None)
        await consumer.start()
        received = []
        try:
            while len(received) < 600:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for messages in batches.values():
                    received.extend(messages)
        finally:
            await consumer.stop()
        return sent, received

    sent, received = asyncio.run(scenario())
    assert sorted(sent) == sorted((p, o) for p in range(3) for o in range(200))
    assert len(received) == 600
    for partition in range(3):
        in_partition = [m for m in received if m.partition == partition]
        expected = range(partition, 600, 3)
        assert [m.value for m in in_partition] == [f"v{i}".encode() for i in expected]
        assert [m.key for m in in_partition] == [f"k{i}".encode() for i in expected]
        assert [(m.timestamp, m.timestamp_type) for m in in_partition] == [(T0 + i * 7, CREATE_TIME) for i in expected]
    assert all(m.headers == (("h", b"x"),) or list(m.headers) == [("h", b"x")] for m in received)
