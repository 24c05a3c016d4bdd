"""kafka-python and aiokafka against a real broker: produce and consume round trips."""

import asyncio

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(broker, codec):
    bootstrap = broker.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp", 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=5)
    futures = [
        producer.send("kp", key=f"k{i % 10}".encode(), value=f"value-{i}".encode() * 20,
                      headers=[("i", str(i).encode())], partition=i % 2)
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
    assert all(m.value == f"value-{dict(m.headers)['i'].decode()}".encode() * 20 for m in received)


@pytest.mark.parametrize("codec", [None, "gzip", "lz4", "zstd"])
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
                    "aio", f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 3, headers=[("h", b"x")]
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
        values = [m.value for m in received if m.partition == partition]
        assert values == [f"v{i}".encode() for i in range(partition, 600, 3)]
    assert all(m.headers == (("h", b"x"),) or list(m.headers) == [("h", b"x")] for m in received)
