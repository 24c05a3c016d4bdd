"""The seeds' consume-transform-produce loop, killed with SIGKILL at random points:
the output holds each input record's transform exactly once, and the group's committed
offsets match the output."""

import random
import subprocess
import sys
import time
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker

INPUT_RECORDS = 20_000
KILLS = 12


def read_committed(bootstrap, topic, partitions):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values = []
    deadline = time.monotonic() + 60
    positions = dict.fromkeys(range(partitions), 0)
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in consumer.consume(5000, timeout=0.3):
            assert message.error() is None
            values.append(message.value())
        for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
            positions[tp.partition] = max(positions[tp.partition], tp.offset)
    consumer.close()
    return values


def test_killed_consume_transform_produce_app_outputs_each_record_exactly_once(tmp_path):
    config = {"group.initial.rebalance.delay.ms": "0"}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("input", 3, 1), NewTopic("output", 3, 1)]).values():
            future.result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(INPUT_RECORDS):
            producer.produce("input", f"order-{i}".encode(), key=str(i % 97).encode())
            if i % 5000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0

        command = [sys.executable, "-m", "oncelog.chaos.ctp", "--bootstrap", bootstrap, "--input", "input",
                   "--output", "output", "--group", "ctp", "--transactional-id", "ctp-app", "--batch", "10",
                   "--idle-exit", "4"]
        rng = random.Random(20)
        kills = 0
        while kills < KILLS:
            app = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            # Kill after a random number of committed transactions, at a random moment
            # (inside a transaction, between produce and commit, or between transactions).
            lines = [app.stdout.readline() for _ in range(rng.randint(1, 8))]
            if not all(lines):
                app.wait()
                break  # it found nothing left to do
            time.sleep(rng.uniform(0.0, 0.05))
            app.kill()
            app.wait()
            kills += 1
        finisher = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
        assert finisher.returncode == 0, finisher.stderr
        assert kills == KILLS, "the input must outlast the kills, or the test proves less than it says"

        output = read_committed(bootstrap, "output", 3)
        counts = Counter(output)
        duplicates = {value: n for value, n in counts.items() if n > 1}
        assert duplicates == {}
        assert set(counts) == {f"enriched:order-{i}".encode() for i in range(INPUT_RECORDS)}

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "isolation.level": "read_committed"})
        committed = consumer.committed([TopicPartition("input", p) for p in range(3)], timeout=10)
        ends = [consumer.get_watermark_offsets(TopicPartition("input", p), timeout=10)[1] for p in range(3)]
        consumer.close()
        assert [tp.offset for tp in committed] == ends, "committed offsets match the input consumed into the output"
