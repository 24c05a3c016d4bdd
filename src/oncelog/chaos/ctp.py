"""The seeds' consume-transform-produce loop, as an application process to kill -9.

    python -m oncelog.chaos.ctp --bootstrap HOST:PORT --input in --output out \\
        --group g --transactional-id app-1 [--batch 100]

Reads `input` with a read_committed group consumer (static membership, so a restarted
instance takes over its partitions at once), writes `transform(value)` to `output` in a
transaction together with the consumed offsets (`send_offsets_to_transaction`), and
commits. Exits when it has been idle for `--idle-exit` seconds. Killed at any point,
a restarted instance fences the old one (same transactional id), the open transaction
is aborted, and consumption resumes from the last committed offsets: each input record
is transformed into the output exactly once.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def transform(value: bytes) -> bytes:
    return b"enriched:" + value


def run(bootstrap: str, input_topic: str, output_topic: str, group: str, transactional_id: str,
        batch: int, idle_exit: float) -> int:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.instance.id": f"{transactional_id}-member",
        "session.timeout.ms": 6000,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe([input_topic])
    processed = 0
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < idle_exit:
        messages = consumer.consume(batch, timeout=0.5)
        records = [m for m in messages if m.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        for message in records:
            value = message.value()
            assert value is not None  # the seeds' input records all have values
            producer.produce(output_topic, transform(value), key=message.key(),
                             headers=[("source", f"{message.partition()}:{message.offset()}".encode())])
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        processed += len(records)
        last_progress = time.monotonic()
        print(f"committed {processed}", flush=True)
    consumer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oncelog.chaos.ctp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--idle-exit", type=float, default=5.0)
    args = parser.parse_args(argv)
    try:
        return run(args.bootstrap, args.input, args.output, args.group, args.transactional_id, args.batch,
                   args.idle_exit)
    except KafkaException as error:
        print(f"ctp: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
