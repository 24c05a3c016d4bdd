"""A soak of share groups (KIP-932) through kills: `make soak-share`.

A broker process and a read_committed share group of consumer processes (librdkafka's
share consumer, explicit acknowledgement) on a 3-partition topic, while a producer
writes transactions, some aborted on purpose. Every few seconds a consumer is killed
with SIGKILL (and started again), and every `--broker-kill-every` seconds the broker is.
Each consumer logs every record it is given and, once commit_sync says so, the records
it accepted; about one delivery in twenty is RELEASEd instead, to be given again.

When the time is up the producer stops, the consumers drain the topic and stop, and the
run is judged:

    lost              committed records never delivered to anyone
    aborted-delivered records delivered that the log does not hold as committed
    accepted-twice    records whose acceptance two commit_syncs confirmed
    over-limit        deliveries past group.share.delivery.count.limit
    lag               records the group has not finished at the end (DescribeShareGroupOffsets)

Verdict OK when every one of them is 0. Records accepted whose confirmation a kill cut
off are counted (`accepted-unconfirmed`), not failed: their commit_sync never returned.

    python scripts/share-soak.py --minutes 10 [--consumers 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

TOPIC = "share-soak"
GROUP = "share-soak"
PARTITIONS = 3
DELIVERY_LIMIT = 5


def consumer_main(bootstrap: str, log_path: str, name: str) -> None:
    """One consumer process: deliveries ("D value count") and confirmed acceptances
    ("A value") appended to its log, flushed line by line."""
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    rng = random.Random(f"{name}-{os.getpid()}")
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    with open(log_path, "a", buffering=1) as log:
        stopping = False

        def stop(*_args) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        while not stopping:
            try:
                messages = [m for m in consumer.poll(0.5) if m.error() is None]
            except KafkaException as error:
                log.write(f"E poll {error}\n")
                time.sleep(0.2)
                continue
            accepted = []
            for message in messages:
                value = message.value().decode()
                log.write(f"D {value} {message.delivery_count()}\n")
                if rng.random() < 0.05:
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
                else:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    accepted.append((message.topic(), message.partition(), value))
            if not messages:
                continue
            try:
                results = consumer.commit_sync(30)
            except KafkaException as error:
                log.write(f"E commit {error}\n")
                continue
            failed = {(tp.topic, tp.partition) for tp, error in results.items() if error is not None}
            for topic, partition, value in accepted:
                if (topic, partition) not in failed:
                    log.write(f"A {value}\n")
        consumer.close()


class Producer(threading.Thread):
    """Transactions of 1-5 records; one in five aborted after a flush, so its records are
    in the log. Records the outcome of each transaction it is sure of."""

    def __init__(self, bootstrap: str, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.rng = rng
        self.stop = threading.Event()
        self.committed: set[str] = set()
        self.aborted: set[str] = set()
        self.uncertain: set[str] = set()  # a commit that failed: committed or aborted, the log decides
        self.transactions = 0

    def run(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as KafkaProducer

        number = 0
        producer = None
        while not self.stop.is_set():
            try:
                if producer is None:
                    producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "transactional.id": "share-soak",
                                              "linger.ms": 2, "log_level": 0})
                    producer.init_transactions(30)
                values = [f"r{number + i}" for i in range(self.rng.randint(1, 5))]
                number += len(values)
                abort = self.rng.random() < 0.2
                producer.begin_transaction()
                for value in values:
                    producer.produce(TOPIC, value.encode(), partition=self.rng.randrange(PARTITIONS))
                producer.flush(30)
                if abort:
                    producer.abort_transaction(30)
                    self.aborted.update(values)
                else:
                    try:
                        producer.commit_transaction(30)
                        self.committed.update(values)
                    except KafkaException:
                        self.uncertain.update(values)
                        raise
                self.transactions += 1
                time.sleep(0.01)
            except KafkaException:
                producer = None  # a new producer fences and aborts what the old one left open
                time.sleep(0.5)


def read_committed_values(bootstrap: str) -> set[str]:
    """Every committed value in the log, read back with a read_committed consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "share-soak-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: set[str] = set()
    positions = dict.fromkeys(range(PARTITIONS), 0)
    deadline = time.monotonic() + 120
    while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            for p in positions:  # aborted stretches and markers end a partition below its end
                position = consumer.position([TopicPartition(TOPIC, p)])[0].offset
                positions[p] = max(positions[p], position)
            continue
        if message.error() is None:
            found.add(message.value().decode())
            positions[message.partition()] = message.offset() + 1
    consumer.close()
    return found


def share_lag(bootstrap: str) -> int:
    from kio.schema.describe_share_group_offsets.v1 import request as describe
    from kio.schema.types import GroupId

    from oncelog.client.wire import Cluster

    with Cluster(bootstrap) as cluster:
        coordinator = cluster.coordinator(GROUP, 0, 30)
        [group] = cluster.request(describe.DescribeShareGroupOffsetsRequest(groups=(
            describe.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(GROUP), topics=None),)),
            coordinator).groups
    return sum(max(0, p.lag) for t in group.topics for p in t.partitions)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--consumer-kill-every", type=float, default=4.0, metavar="SECONDS")
    parser.add_argument("--broker-kill-every", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("consumer", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consumer:
        consumer_main(*args.consumer)
        return 0
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from oncelog.local.process import BrokerProcess

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="share-soak-"))
    config = {"group.share.record.lock.duration.ms": "15000", "group.share.heartbeat.interval.ms": "1000",
              "group.share.min.heartbeat.interval.ms": "500", "group.share.session.timeout.ms": "10000",
              "group.share.min.session.timeout.ms": "5000",
              "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
              "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
              "share.coordinator.state.topic.num.partitions": "3"}
    broker = BrokerProcess(work / "broker", config).start()
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    resource = ConfigResource("group", GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)

    logs = [work / f"consumer-{i}.log" for i in range(args.consumers)]

    def launch(index: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, bootstrap, str(logs[index]), f"c{index}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    consumers = [launch(i) for i in range(args.consumers)]
    producer = Producer(bootstrap, rng)
    producer.start()
    kills = Counter()
    started = time.monotonic()
    end = started + args.minutes * 60
    next_broker_kill = started + args.broker_kill_every
    while time.monotonic() < end:
        time.sleep(args.consumer_kill_every)
        victim = rng.randrange(args.consumers)
        consumers[victim].kill()
        consumers[victim].wait()
        consumers[victim] = launch(victim)
        kills["consumer"] += 1
        if time.monotonic() >= next_broker_kill:
            broker.kill()
            broker.restart()
            kills["broker"] += 1
            next_broker_kill = time.monotonic() + args.broker_kill_every
    producer.stop.set()
    producer.join(120)
    drained_at = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        time.sleep(2)
        if share_lag(bootstrap) == 0:
            drained_at = time.monotonic()
            break
    for process in consumers:
        process.send_signal(signal.SIGTERM)
    for process in consumers:
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
    lag = share_lag(bootstrap)
    committed = read_committed_values(bootstrap)
    broker.stop()

    deliveries: Counter[str] = Counter()
    over_limit = 0
    accepted: Counter[str] = Counter()
    for path in logs:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "D":
                deliveries[parts[1]] += 1
                over_limit += int(parts[2]) > DELIVERY_LIMIT
            elif len(parts) == 2 and parts[0] == "A":
                accepted[parts[1]] += 1
    aborted = producer.aborted - committed
    anomalies = {
        "lost": len(committed - set(deliveries)),
        # read_committed: anything delivered must be committed (aborted on purpose, or by a fence)
        "aborted-delivered": len(set(deliveries) - committed),
        "accepted-twice": sum(1 for count in accepted.values() if count > 1),
        "over-limit": over_limit,
        "lag": lag,
    }
    figures = {
        "minutes": args.minutes, "consumers": args.consumers, "transactions": producer.transactions,
        "committed records": len(committed), "aborted records": len(aborted),
        "deliveries": sum(deliveries.values()), "redeliveries": sum(deliveries.values()) - len(deliveries),
        "accepted-unconfirmed": len(committed - set(accepted)), "consumer kills": kills["consumer"],
        "broker kills": kills["broker"],
        "drained in s": None if drained_at is None else round(drained_at - end, 1),
    }
    verdict = "OK" if all(value == 0 for value in anomalies.values()) else "FAILED"
    print(json.dumps({"verdict": verdict, "anomalies": anomalies, "figures": figures}, indent=2))
    print(f"logs: {work}")
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
