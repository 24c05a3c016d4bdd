"""The load generator: confluent-kafka (librdkafka) in its own process.

The harness runs this script as a child process so that the client and the broker each
get a core; it prints one JSON object on stdout and nothing else. Every mode times only
the steady part of its work: connections, metadata and (for idempotent producers)
InitProducerId are done by a warm-up message before the clock starts.

    loadgen.py produce  --bootstrap H:P --topic T --messages N [--acks 1|all] [--idempotent]
                        [--transactional-id ID --transaction-size K [--producers P]]
    loadgen.py consume  --bootstrap H:P --topic T --messages N [--isolation read_committed]
    loadgen.py wire-produce --bootstrap H:P --topic T --messages N [--acks 1|all] [--idempotent]
    loadgen.py create-topic --bootstrap H:P --topic T [--partitions P]
                        [--replication-factor R] [--config KEY=VALUE ...]
    loadgen.py embedded-start --data-dir DIR

`wire-produce` is the broker-only view: pre-built Produce v9 requests of ~1 MB (one
batch each, its base sequence and CRC patched per request) sent over one socket with up
to 5 in flight, as librdkafka's idempotent producer does, from a client that costs
almost no CPU. It shows what the broker alone sustains when it gets a core.

Produce counts a message as sent when librdkafka acknowledged it; failures are reported
through `delivery.report.only.error`, so the success path costs no Python callback.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time

# Client settings shared by every broker under test, so only the broker differs.
PRODUCER_DEFAULTS = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "compression.type": "none",
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "delivery.report.only.error": True,
    "message.timeout.ms": 60_000,
}
CONSUMER_DEFAULTS = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 262_144,
}


def _fail(message: str) -> None:
    print(json.dumps({"error": message}), flush=True)
    sys.exit(1)


def produce(args: argparse.Namespace) -> dict:
    from confluent_kafka import Producer

    config = {"bootstrap.servers": args.bootstrap, **PRODUCER_DEFAULTS, "acks": args.acks}
    if args.idempotent or args.transactional_id:
        config["enable.idempotence"] = True
    if args.transactional_id:
        config["transactional.id"] = args.transactional_id
    errors: list[str] = []

    def on_delivery(error, _message) -> None:
        if error is not None and len(errors) < 10:
            errors.append(str(error))

    producer = Producer({**config, "on_delivery": on_delivery})
    value = b"warm-up".ljust(args.size, b"x") if args.text else os.urandom(args.size)
    topic = args.topic
    transactional = bool(args.transactional_id)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    producer.produce(topic, value)  # warm-up: connection, metadata, producer id
    if transactional:
        producer.commit_transaction(30)
    if producer.flush(30) != 0 or errors:
        _fail(f"warm-up message not delivered: {errors}")

    produce_one = producer.produce
    poll = producer.poll
    commit_latencies: list[float] = []
    # --producers K: K-1 more transactional producers (own transactional ids), warmed up
    # before the clock starts, each running its share of the transactions in a thread
    # (librdkafka's blocking calls release the GIL).
    others = [_warm_transactional(config, f"{args.transactional_id}-{number}", topic, value, on_delivery)
              for number in range(1, args.producers)] if transactional else []
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    if transactional:
        shares = [args.messages // args.producers + (1 if number < args.messages % args.producers else 0)
                  for number in range(args.producers)]
        failures: list[str] = []
        spread = _Spread(args.spread, len(producer.list_topics(topic, timeout=10).topics[topic].partitions))
        threads = [threading.Thread(target=_run_transactions,
                                    args=(other, topic, value, share, args.transaction_size, commit_latencies,
                                          failures, spread, number + 1))
                   for number, (other, share) in enumerate(zip(others, shares[1:], strict=True))]
        for thread in threads:
            thread.start()
        _run_transactions(producer, topic, value, shares[0], args.transaction_size, commit_latencies, failures,
                          spread, 0)
        for thread in threads:
            thread.join()
        for other in others:
            other.flush(120)
        if failures:
            _fail(f"commit_transaction failed: {failures[0]}")
    else:
        for number in range(args.messages):
            if args.text:  # a distinct value per record: its number, padded to --size
                value = f"{number:012d}".ljust(args.size, "x").encode()
            try:
                produce_one(topic, value)
            except BufferError:  # the client's queue is full: let librdkafka drain it
                while True:
                    poll(0.001)
                    try:
                        produce_one(topic, value)
                        break
                    except BufferError:
                        continue
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_before
    if remaining or errors:
        _fail(f"{remaining} messages undelivered, errors: {errors}")
    result = {
        "messages": args.messages,
        "bytes": args.messages * args.size,
        "seconds": elapsed,
        "msg_per_s": args.messages / elapsed,
        "mb_per_s": args.messages * args.size / elapsed / 1e6,
        "client_cpu_s": cpu,
    }
    if commit_latencies:
        commit_latencies.sort()
        result["commit_p50_ms"] = _percentile(commit_latencies, 0.50) * 1000
        result["commit_p99_ms"] = _percentile(commit_latencies, 0.99) * 1000
        result["transactions"] = len(commit_latencies)
    return result


def _warm_transactional(config: dict, transactional_id: str, topic: str, value: bytes, on_delivery):
    """A transactional producer with its id initialised and one committed warm-up message."""
    from confluent_kafka import Producer

    producer = Producer({**config, "transactional.id": transactional_id, "on_delivery": on_delivery})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value)
    producer.commit_transaction(30)
    return producer


class _Spread:
    """--spread K over a topic of N partitions: the partition of a transaction's i-th record."""

    def __init__(self, width: int, partitions: int) -> None:
        if width > partitions:
            _fail(f"--spread {width}: the topic has only {partitions} partitions")
        self.width = width
        self.partitions = partitions

    def partition(self, transaction: int, record: int) -> int:
        return (transaction + record % self.width) % self.partitions


def _run_transactions(producer, topic: str, value: bytes, messages: int, transaction_size: int,
                      commit_latencies: list[float], failures: list[str], spread: _Spread, first: int) -> None:
    """`messages` records in transactions of `transaction_size`, appending each commit's
    latency (list.append is atomic: threads share the list); `first`: the producer's
    number, where its transactions start on the topic (--spread)."""
    from confluent_kafka import KafkaException

    produce_one, poll = producer.produce, producer.poll
    sent = 0
    transaction = first
    while sent < messages and not failures:
        producer.begin_transaction()
        in_this = min(transaction_size, messages - sent)
        for record in range(in_this):
            while True:
                try:
                    if spread.width:
                        produce_one(topic, value, partition=spread.partition(transaction, record))
                    else:
                        produce_one(topic, value)
                    break
                except BufferError:
                    poll(0.001)
        transaction += 1
        commit_started = time.perf_counter()
        try:
            producer.commit_transaction(60)
        except KafkaException as error:
            failures.append(str(error))
            return
        commit_latencies.append(time.perf_counter() - commit_started)
        sent += in_this


def consume(args: argparse.Namespace) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": f"bench-{os.getpid()}",
        "isolation.level": args.isolation,
        **CONSUMER_DEFAULTS,
    })
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    # Warm-up: the group.id makes librdkafka look up its group coordinator, which can
    # create __consumer_offsets on first use; done before the clock starts.
    consumer.committed([TopicPartition(args.topic, p) for p in partitions], timeout=30)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    received = 0
    received_bytes = 0
    deadline = time.monotonic() + 120
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    first_message_at: float | None = None
    while received < args.messages:
        if time.monotonic() > deadline:
            _fail(f"consumed only {received} of {args.messages} messages in 120 s")
        # consume() waits for the whole count (or the timeout): never ask for more than is left.
        for message in consumer.consume(min(10_000, args.messages - received), 1.0):
            if message.error() is not None:
                continue  # partition EOF and the like
            if first_message_at is None:
                first_message_at = time.perf_counter()
            received += 1
            value = message.value()
            assert value is not None  # the load is written with values
            received_bytes += len(value)
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_before
    consumer.close()
    assert first_message_at is not None  # received args.messages of them
    return {
        "messages": received,
        "bytes": received_bytes,
        "seconds": elapsed,
        "msg_per_s": received / elapsed,
        "mb_per_s": received_bytes / elapsed / 1e6,
        "client_cpu_s": cpu,
        "first_message_s": first_message_at - started,
    }


def wire_produce(args: argparse.Namespace) -> dict:
    import datetime
    import struct
    from collections import deque

    from crc32c import crc32c
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v9.response import ProduceResponse
    from kio.schema.types import ProducerId
    from kio.serial import entity_reader
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    from oncelog.protocol import framing, record_batch
    from oncelog.protocol.client import WireClient, encode_request

    client = WireClient.connect(args.bootstrap, timeout=60)
    producer_id, producer_epoch, base_sequence = -1, -1, -1
    if args.idempotent:
        reply = client.request(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            producer_id=ProducerId(-1), producer_epoch=i16(-1)))
        if reply.error_code != 0:
            _fail(f"InitProducerId failed: {reply.error_code!r}")
        producer_id, producer_epoch, base_sequence = reply.producer_id, reply.producer_epoch, 0
    per_request = max(1, args.request_bytes // (args.size + 8))
    value = os.urandom(args.size)
    batch = record_batch.build_batch(
        [record_batch.Record(None, value)] * per_request, timestamp_ms=int(time.time() * 1000),
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
    )
    request = ProduceRequest(
        transactional_id=None, acks=i16(-1 if args.acks in ("all", "-1") else int(args.acks)),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(TopicProduceData(name=args.topic, partition_data=(
            PartitionProduceData(index=i32(0), records=Records(batch)),)),),
    )
    frame = bytearray(encode_request(request, 0))
    at = frame.find(batch)
    frame_view = memoryview(frame)
    crc_covered = frame_view[at + 21: at + len(batch)]
    pack_into = struct.pack_into

    def send(number: int) -> None:
        pack_into(">i", frame, 8, number)  # correlation id
        if args.idempotent:
            pack_into(">i", frame, at + 53, (number * per_request) % (1 << 31))
            pack_into(">I", frame, at + 17, crc32c(crc_covered))
        client.sock.sendall(frame)

    read_response = entity_reader(ProduceResponse)

    def receive() -> None:
        frame = client.read_frame()
        response, _ = read_response(frame, framing.skip_tagged_fields(frame, 4))  # after correlation id
        for topic in response.responses:
            for partition in topic.partition_responses:
                if partition.error_code != 0:
                    _fail(f"produce failed: {partition.error_code!r} {partition.error_message}")

    send(0)  # warm-up
    receive()
    requests = max(1, args.messages // per_request)
    in_flight: deque[int] = deque()
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    for number in range(1, requests + 1):
        if len(in_flight) >= args.in_flight:
            in_flight.popleft()
            receive()
        send(number)
        in_flight.append(number)
    while in_flight:
        in_flight.popleft()
        receive()
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_before
    messages = requests * per_request
    return {
        "messages": messages,
        "bytes": messages * args.size,
        "requests": requests,
        "seconds": elapsed,
        "msg_per_s": messages / elapsed,
        "mb_per_s": messages * args.size / elapsed / 1e6,
        "client_cpu_s": cpu,
    }


def create_topic(args: argparse.Namespace) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    configs = dict(item.split("=", 1) for item in args.config)
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    futures = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)],
                                  operation_timeout=30)
    futures[args.topic].result(30)
    # Wait until Metadata shows every partition with a leader and, when replicated, with
    # every replica in the ISR (followers caught up), so no run starts under-replicated.
    # (With one replica the ISR is not looked at: tansu's may be empty.)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        topic = admin.list_topics(args.topic, timeout=10).topics.get(args.topic)
        if topic is not None and topic.error is None and len(topic.partitions) == args.partitions and all(
            p.leader >= 0 and (args.replication_factor == 1 or len(p.isrs) >= args.replication_factor)
            for p in topic.partitions.values()
        ):
            return {"topic": args.topic, "partitions": args.partitions, "replication_factor": args.replication_factor}
        time.sleep(0.05)
    _fail(f"topic {args.topic} has no leaders or not a full ISR after 60 s")
    return {}


def embedded_start(args: argparse.Namespace) -> dict:
    """Import time and start time of an in-process broker, from a fresh interpreter."""
    began = time.perf_counter()
    from oncelog import EmbeddedBroker

    imported = time.perf_counter()
    broker = EmbeddedBroker(args.data_dir).start()
    started = time.perf_counter()
    broker.stop()
    return {"import_s": imported - began, "start_s": started - imported}


def _cpu_seconds() -> float:
    """CPU used by this process so far, librdkafka's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def wire_txn(args: argparse.Namespace) -> dict:
    """Transactional producers that cost almost no CPU: scenario 3c's load (each of
    `--producers` transactional ids commits transactions of `--transaction-size` records),
    sent as raw Kafka requests from one asyncio loop, so that the broker, not the client,
    has the cores. Per transaction: AddPartitionsToTxn (retried while the previous
    transaction's markers are out: CONCURRENT_TRANSACTIONS), one Produce per leader (acks
    all, one batch per partition), EndTxn. A transaction's partitions are as `--spread`
    says (0: one partition, the next transaction the next one)."""
    import asyncio
    import datetime
    import struct

    import uvloop
    from confluent_kafka.admin import AdminClient
    from crc32c import crc32c
    from kio.schema.add_partitions_to_txn.v3 import request as add_v3
    from kio.schema.end_txn.v3.request import EndTxnRequest
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.types import ProducerId, TransactionalId
    from kio.static.primitive import Records, i8, i16, i32, i32Timedelta

    from oncelog.protocol import record_batch
    from oncelog.protocol.client import decode_response, encode_request

    concurrent_transactions = 51
    metadata = AdminClient({"bootstrap.servers": args.bootstrap}).list_topics(args.topic, timeout=10)
    addresses = {broker.id: (broker.host, broker.port) for broker in metadata.brokers.values()}
    leaders = {number: partition.leader for number, partition in metadata.topics[args.topic].partitions.items()}
    spread = _Spread(max(args.spread, 1), len(leaders))
    value = os.urandom(args.size)
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    latencies: list[float] = []
    retries = [0]
    ready = [0]  # producers warmed up

    class Template:
        """A request encoded once; each send patches its correlation id (and, for Produce,
        each batch's base sequence and CRC) in place, as `wire-produce` does."""

        def __init__(self, entity, batches: tuple[bytes, ...] = ()) -> None:
            self.entity = entity
            self.frame = bytearray(encode_request(entity, 0, "wire-txn"))
            self.batches = []  # (where the batch starts, its length)
            at = 0
            for batch in batches:
                at = self.frame.index(batch, at)
                self.batches.append((at, len(batch)))
                at += len(batch)

        def patched(self, correlation: int, sequences: tuple[int, ...] = ()) -> bytearray:
            struct.pack_into(">i", self.frame, 8, correlation)
            view = memoryview(self.frame)
            for (at, length), sequence in zip(self.batches, sequences, strict=True):
                struct.pack_into(">i", self.frame, at + 53, sequence)  # the v2 batch's base sequence
                struct.pack_into(">I", self.frame, at + 17, crc32c(view[at + 21: at + length]))
            return self.frame

    class Connection:
        def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.reader, self.writer, self.correlation = reader, writer, 0

        async def request(self, entity):
            return await self.send(Template(entity))

        async def send(self, template: Template, sequences: tuple[int, ...] = ()):
            self.correlation += 1
            self.writer.write(template.patched(self.correlation, sequences))
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            return decode_response(template.entity, await self.reader.readexactly(size), self.correlation)

    async def connect(node: int) -> Connection:
        return Connection(*await asyncio.open_connection(*addresses[node]))

    async def producer(number: int, transactions: int, start: asyncio.Event) -> None:
        transactional_id = TransactionalId(f"{args.transactional_id}-{number}")
        any_broker = await connect(next(iter(addresses)))
        found = await any_broker.request(FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(transactional_id,)))
        [coordinator] = found.coordinators
        if coordinator.error_code != 0:
            _fail(f"FindCoordinator: {coordinator.error_code!r}")
        connections = {node: await connect(node) for node in addresses}
        to_coordinator = connections[coordinator.node_id]
        init = await to_coordinator.request(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=timeout, producer_id=ProducerId(-1),
            producer_epoch=i16(-1)))
        if init.error_code != 0:
            _fail(f"InitProducerId: {init.error_code!r}")
        producer_id, epoch = init.producer_id, init.producer_epoch
        sequences = dict.fromkeys(leaders, 0)
        adds: dict[tuple[int, ...], Template] = {}  # by the transaction's partitions
        produces: dict[tuple[tuple[int, int], ...], Template] = {}  # by (partition, records) of one leader
        end = Template(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                                     committed=True))
        for transaction in range(number, number + transactions + 1):  # the first one warms up
            if transaction == number + 1:  # warmed up: connected, initialised, one transaction committed
                ready[0] += 1
                await start.wait()
            records: dict[int, int] = {}
            for record in range(args.transaction_size):
                partition = spread.partition(transaction, record) if args.spread else transaction % len(leaders)
                records[partition] = records.get(partition, 0) + 1
            key = tuple(sorted(records))
            add = adds.get(key)
            if add is None:
                add = adds[key] = Template(add_v3.AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
                    v3_and_below_producer_epoch=epoch, v3_and_below_topics=(add_v3.AddPartitionsToTxnTopic(
                        name=args.topic, partitions=tuple(i32(p) for p in key)),)))
            while True:
                added = await to_coordinator.send(add)
                codes = {r.partition_error_code for t in added.results_by_topic_v3_and_below
                         for r in t.results_by_partition}
                if codes == {0}:
                    break
                if codes != {concurrent_transactions}:
                    _fail(f"AddPartitionsToTxn: {codes}")
                retries[0] += 1
                await asyncio.sleep(0.002)
            by_leader: dict[int, list[tuple[int, int]]] = {}
            for partition, count in sorted(records.items()):
                by_leader.setdefault(leaders[partition], []).append((partition, count))
            sends = []
            for leader, shape in by_leader.items():
                produce = produces.get(tuple(shape))
                if produce is None:
                    batches = tuple(record_batch.build_batch(
                        [record_batch.Record(None, value)] * count, timestamp_ms=int(time.time() * 1000),
                        producer_id=producer_id, producer_epoch=epoch, base_sequence=0, transactional=True)
                        for _partition, count in shape)
                    produce = produces[tuple(shape)] = Template(ProduceRequest(
                        transactional_id=transactional_id, acks=i16(-1), timeout=timeout,
                        topic_data=(TopicProduceData(name=args.topic, partition_data=tuple(
                            PartitionProduceData(index=i32(partition), records=Records(batch))
                            for (partition, _count), batch in zip(shape, batches, strict=True))),)), batches)
                sends.append(connections[leader].send(produce, tuple(sequences[partition] for partition, _ in shape)))
                for partition, count in shape:
                    sequences[partition] += count
            answers = await asyncio.gather(*sends)
            for answer in answers:
                for topic in answer.responses:
                    for result in topic.partition_responses:
                        if result.error_code != 0:
                            _fail(f"Produce: {result.error_code!r}")
            committing = time.perf_counter()
            ended = await to_coordinator.send(end)
            if ended.error_code != 0:
                _fail(f"EndTxn: {ended.error_code!r}")
            if transaction > number:
                latencies.append(time.perf_counter() - committing)

    async def run() -> tuple[float, float]:
        start = asyncio.Event()
        per_producer = args.messages // args.transaction_size // args.producers
        tasks = [asyncio.create_task(producer(number, per_producer, start)) for number in range(args.producers)]
        while ready[0] < args.producers:
            for task in tasks:
                if task.done():
                    task.result()  # a producer that failed its warm-up: its error
            await asyncio.sleep(0.01)
        cpu_before, started = _cpu_seconds(), time.perf_counter()
        start.set()
        await asyncio.gather(*tasks)
        return time.perf_counter() - started, _cpu_seconds() - cpu_before

    elapsed, cpu = uvloop.run(run())
    transactions = len(latencies)
    latencies.sort()
    messages = transactions * args.transaction_size
    return {"messages": messages, "bytes": messages * args.size, "seconds": elapsed, "msg_per_s": messages / elapsed,
            "mb_per_s": messages * args.size / elapsed / 1e6, "client_cpu_s": cpu, "transactions": transactions,
            "commit_p50_ms": _percentile(latencies, 0.50) * 1000, "commit_p99_ms": _percentile(latencies, 0.99) * 1000,
            "concurrent_transactions_retries": retries[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--transactional-id")
    p.add_argument("--transaction-size", type=int, default=1000)
    p.add_argument("--producers", type=int, default=1,
                   help="transactional producers running at once, each with its own transactional id")
    p.add_argument("--text", action="store_true",
                   help="distinct text values (the record's number padded to --size) instead of one random value")
    p.add_argument("--spread", type=int, default=0, metavar="K",
                   help="each transaction's records round-robin over K of the topic's partitions, "
                        "the next transaction starting one partition further (default: the partitioner's)")
    p.set_defaults(run=produce)
    c = modes.add_parser("consume")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--messages", type=int, required=True)
    c.add_argument("--isolation", default="read_uncommitted", choices=["read_uncommitted", "read_committed"])
    c.set_defaults(run=consume)
    w = modes.add_parser("wire-produce")
    w.add_argument("--bootstrap", required=True)
    w.add_argument("--topic", required=True)
    w.add_argument("--messages", type=int, required=True)
    w.add_argument("--size", type=int, default=1024)
    w.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    w.add_argument("--idempotent", action="store_true")
    w.add_argument("--request-bytes", type=int, default=1_000_000, help="records per request (default ~1 MB)")
    w.add_argument("--in-flight", type=int, default=5)
    w.set_defaults(run=wire_produce)
    x = modes.add_parser("wire-txn", help="scenario 3c's transactions as raw requests: a client of almost no CPU")
    x.add_argument("--bootstrap", required=True)
    x.add_argument("--topic", required=True)
    x.add_argument("--messages", type=int, required=True)
    x.add_argument("--size", type=int, default=1024)
    x.add_argument("--transactional-id", required=True)
    x.add_argument("--transaction-size", type=int, default=10)
    x.add_argument("--producers", type=int, default=16)
    x.add_argument("--spread", type=int, default=0, metavar="K")
    x.set_defaults(run=wire_txn)
    t = modes.add_parser("create-topic")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--partitions", type=int, default=1)
    t.add_argument("--replication-factor", type=int, default=1)
    t.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config (repeatable)")
    t.set_defaults(run=create_topic)
    e = modes.add_parser("embedded-start")
    e.add_argument("--data-dir", required=True)
    e.set_defaults(run=embedded_start)
    args = parser.parse_args()
    print(json.dumps(args.run(args)), flush=True)


if __name__ == "__main__":
    main()
