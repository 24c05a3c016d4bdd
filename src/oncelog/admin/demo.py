"""`oncelog demo`: the end-to-end smoke job run by `make demo`.

Starts an embedded broker in a temporary directory, creates a topic, produces N
numbered records with an idempotent producer (acks=all), reads them back from the
beginning and checks that every acknowledged record came back exactly once, in offset
order per partition. Prints a short report; exits 1 if anything is off.

It stands in for the main job until the exactly-once Spark pipeline exists.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.admin.clients import describe_kafka_error
from oncelog.cli import CommandError

DEMO_TOPIC = "oncelog-demo"
DEMO_PARTITIONS = 3
# The consumer gives up when no record arrives for this long.
IDLE_TIMEOUT_S = 30.0


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="produce and consume through an embedded broker, and check the result",
    )
    demo.add_argument("--messages", type=int, default=100_000, help="default: %(default)s")
    demo.add_argument(
        "--data-dir", type=Path,
        help="keep the broker's log here (default: a temporary directory, removed after)",
    )
    demo.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    if args.messages < 1:
        raise CommandError("--messages must be at least 1")
    from oncelog.broker.embedded import EmbeddedBroker

    with tempfile.TemporaryDirectory(prefix="oncelog-demo-") as temporary:
        data_dir = args.data_dir or Path(temporary)
        with EmbeddedBroker(data_dir) as broker:
            print(f"embedded broker on {broker.bootstrap_servers}, data in {data_dir}")
            return _run(broker.bootstrap_servers, args.messages)


def _log_errors(error: KafkaError) -> None:
    print(f"oncelog demo: client error: {error.str()}", file=sys.stderr)


def _run(bootstrap: str, count: int) -> int:
    quiet = logging.getLogger("oncelog.demo.librdkafka")  # errors come through error_cb
    quiet.setLevel(logging.CRITICAL + 1)
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": quiet})
    future = admin.create_topics(
        [NewTopic(DEMO_TOPIC, num_partitions=DEMO_PARTITIONS, replication_factor=1)]
    )[DEMO_TOPIC]
    try:
        future.result(timeout=30)
    except KafkaException as error:
        reason = describe_kafka_error(error, topic=DEMO_TOPIC)
        raise CommandError(f"cannot create topic {DEMO_TOPIC!r}: {reason}") from None

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "error_cb": _log_errors,
        "logger": quiet,
    })
    acknowledged: list[int] = []
    delivery_errors: Counter[str] = Counter()

    def on_delivery(error: KafkaError | None, message) -> None:
        if error is not None:
            delivery_errors[error.str()] += 1
        else:
            acknowledged.append(int(message.value()))

    started = time.perf_counter()
    for number in range(count):
        while True:
            try:
                producer.produce(
                    DEMO_TOPIC, key=f"key-{number % 1000}", value=str(number),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    not_flushed = producer.flush(60)
    produce_seconds = time.perf_counter() - started

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "oncelog-demo",
        "enable.auto.commit": False,
        "error_cb": _log_errors,
        "logger": quiet,
    })
    consumer.assign([
        TopicPartition(DEMO_TOPIC, partition, OFFSET_BEGINNING)
        for partition in range(DEMO_PARTITIONS)
    ])
    seen: Counter[int] = Counter()
    last_offset: dict[int, int] = {}
    out_of_order = 0
    consumed = 0
    started = time.perf_counter()
    last_record_at = started
    while consumed < len(acknowledged) and time.perf_counter() - last_record_at < IDLE_TIMEOUT_S:
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            if message.error() is not None:
                print(f"oncelog demo: consume error: {message.error().str()}", file=sys.stderr)
                continue
            consumed += 1
            seen[int(message.value())] += 1
            partition, offset = message.partition(), message.offset()
            if offset <= last_offset.get(partition, -1):
                out_of_order += 1
            last_offset[partition] = offset
            last_record_at = time.perf_counter()
    consume_seconds = time.perf_counter() - started
    consumer.close()

    missing = len(set(acknowledged) - set(seen))
    duplicates = sum(times - 1 for times in seen.values() if times > 1)
    unexpected = len(set(seen) - set(acknowledged))
    failed = sum(delivery_errors.values()) + not_flushed
    print(f"produced   {len(acknowledged)} of {count} acknowledged "
          f"({_rate(len(acknowledged), produce_seconds)})")
    print(f"consumed   {consumed} ({_rate(consumed, consume_seconds)})")
    print(f"missing    {missing}")
    print(f"duplicates {duplicates}")
    if unexpected:
        print(f"unacknowledged but read {unexpected}")
    if out_of_order:
        print(f"offsets out of order {out_of_order}")
    for reason, times in delivery_errors.items():
        print(f"delivery failed {times}x: {reason}")
    ok = (
        failed == 0 and len(acknowledged) == count and missing == 0 and duplicates == 0
        and unexpected == 0 and out_of_order == 0
    )
    print("result     OK" if ok else "result     FAILED")
    return 0 if ok else 1


def _rate(records: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    return f"{records / seconds:,.0f} msg/s in {seconds:.2f}s"
