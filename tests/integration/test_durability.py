"""Restart and crash: acknowledged data survives, with the same offsets, exactly once."""

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.local.process import BrokerProcess


def read_everything(bootstrap, topic, partitions, timeout=30):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    records = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout
    while any(len(records[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in consumer.consume(5000, timeout=0.5):
            assert message.error() is None, message.error()
            records[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    return ends, records


def test_clean_restart_keeps_every_acknowledged_message_at_its_offset(tmp_path):
    with BrokerProcess(tmp_path / "data", {"log.segment.bytes": "20000"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("keep", 2, 1)])["keep"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all", "linger.ms": 2})
        acknowledged = {}

        def delivered(error, message):
            assert error is None
            acknowledged[(message.partition(), message.offset())] = message.value()

        for i in range(3000):
            producer.produce("keep", f"m{i}".encode() * 5, partition=i % 2, on_delivery=delivered)
        assert producer.flush(20) == 0
        broker.restart()
        ends, records = read_everything(broker.bootstrap_servers, "keep", 2)
        assert ends == {0: 1500, 1: 1500}
        stored = {(p, offset): value for p in records for offset, value in records[p]}
        assert stored == acknowledged
        # appends continue after the restored end
        producer2 = Producer({"bootstrap.servers": broker.bootstrap_servers})
        results = []
        producer2.produce("keep", b"after", partition=0, on_delivery=lambda e, m: results.append(m.offset()))
        producer2.flush(10)
        assert results == [1500]


def test_kill_9_during_produce_loses_no_acknowledged_message(tmp_path):
    config = {"log.flush.interval.messages": "1", "log.segment.bytes": "50000"}
    with BrokerProcess(tmp_path / "data", config) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("crash", 1, 1)])["crash"].result(10)
        producer = Producer({
            "bootstrap.servers": broker.bootstrap_servers, "acks": "all", "linger.ms": 1,
            "message.timeout.ms": 5000, "retries": 0,
        })
        acknowledged = {}
        stop = threading.Event()

        def delivered(error, message):
            if error is None:
                acknowledged[message.value()] = message.offset()

        def produce_stream():
            i = 0
            while not stop.is_set():
                try:
                    producer.produce("crash", f"msg-{i}".encode(), on_delivery=delivered)
                    i += 1
                except BufferError:
                    pass
                producer.poll(0)
                if i % 100 == 0:
                    time.sleep(0.001)

        thread = threading.Thread(target=produce_stream)
        thread.start()
        time.sleep(1.5)
        broker.kill()
        time.sleep(0.2)
        stop.set()
        thread.join()
        producer.flush(10)
        assert len(acknowledged) > 100, "the stream should have been acknowledged before the kill"

        broker.start()
        ends, records = read_everything(broker.bootstrap_servers, "crash", 1)
        values = [value for _, value in records[0]]
        offsets = [offset for offset, _ in records[0]]
        assert offsets == list(range(ends[0])), "the recovered log is readable to its end, without gaps"
        assert len(values) == len(set(values)), "no message is stored twice"
        stored_at = {value: offset for offset, value in records[0]}
        missing = [v for v in acknowledged if v not in stored_at]
        assert missing == []
        assert all(stored_at[v] == o for v, o in acknowledged.items()), "acknowledged offsets are kept"
