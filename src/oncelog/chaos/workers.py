"""The client threads of a chaos phase, each recording into the run's History.

Two `TransactionalWriter`s and an `IdempotentWriter` on `chaos`, a read_committed and a
read_uncommitted `TailingConsumer` on all three topics, and the consume-transform-produce
`TransformLoop` from `chaos-in` to `chaos-out`. Each is a `Worker`: a thread whose
unexpected exception (a bug of the harness, not a Kafka error) fails the run. Every loop
is bounded in count and in time. `oncelog.chaos.run` starts them and waits for them.
"""

from __future__ import annotations

import functools
import threading

from confluent_kafka import KafkaError, KafkaException

from oncelog.chaos.history import RecordingConsumer, RecordingProducer
from oncelog.chaos.sessions import ClientHang, RunState, TransactionalSession, close_quietly, send
from oncelog.chaos.settings import (
    CALL_TIMEOUT_S,
    CLIENT_BASE,
    CTP_GROUP,
    CTP_TRANSACTIONAL_ID,
    INPUT_TOPIC,
    MAX_CONSUMER_POLLS,
    MAX_IDEMPOTENT_BURSTS,
    MAX_TRANSACTIONS_PER_WRITER,
    OUTPUT_TOPIC,
    PARTITIONS,
    PRODUCER_BASE,
    TOPIC,
    TOPICS,
)


class Worker(threading.Thread):
    """A thread whose unexpected exception fails the run (and stops the others)."""

    def __init__(self, run: RunState, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.run_state = run
        self.rng = run.rng()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as error:  # noqa: BLE001 (any failure of a worker fails the run)
            self.run_state.fail(self.name, error)

    def work(self) -> None:
        raise NotImplementedError


class TransactionalWriter(Worker):
    """Transactions of 1-8 records on random partitions of `chaos`; a fraction is aborted
    on purpose (half of those after a flush, so the aborted records are in the log)."""

    def __init__(self, run: RunState, name: str, transactional_id: str, abort_fraction: float) -> None:
        super().__init__(run, name)
        self.session = TransactionalSession(run, transactional_id, name)
        self.abort_fraction = abort_fraction

    def work(self) -> None:
        run, session = self.run_state, self.session
        try:
            for _ in range(MAX_TRANSACTIONS_PER_WRITER):
                if run.stop.is_set():
                    break
                producer = session.ready()
                if producer is None:
                    run.stop.wait(0.2)
                    continue
                try:
                    producer.begin_transaction()
                except KafkaException:
                    session.discard()
                    continue
                try:
                    for _record in range(self.rng.randint(1, 8)):
                        send(producer, TOPIC, partition=self.rng.randrange(PARTITIONS))
                    producer.poll(0)
                    commit = self.rng.random() >= self.abort_fraction
                    if not commit and self.rng.random() < 0.5:
                        producer.flush(CALL_TIMEOUT_S)
                except (KafkaException, BufferError) as error:
                    run.count(f"{self.name}.send_errors")
                    outcome = session.abandon(error)
                else:
                    outcome = session.end(commit)
                run.count(f"{self.name}.{outcome}")
                run.stop.wait(self.rng.uniform(0, 0.05))
        finally:
            session.close()


class IdempotentWriter(Worker):
    """Bursts of 1-5 records to `chaos` through an idempotent producer, about 20 bursts
    a second; a fatal error recreates the producer (under a new client name)."""

    def work(self) -> None:
        run = self.run_state
        incarnation = 0
        fatal = threading.Event()

        def on_error(error) -> None:
            if error.fatal():
                fatal.set()

        def create() -> RecordingProducer:
            nonlocal incarnation
            producer = RecordingProducer(run.history, {
                **PRODUCER_BASE,
                "bootstrap.servers": run.bootstrap,
                **run.security,
                "enable.idempotence": True,
                "message.timeout.ms": 30_000,
                "error_cb": on_error,
            }, client=f"{self.name}.{incarnation}")
            incarnation += 1
            return producer

        producer = create()
        try:
            for _ in range(MAX_IDEMPOTENT_BURSTS):
                if run.stop.is_set():
                    break
                if fatal.is_set():
                    run.count(f"{self.name}.producers_recreated")
                    close_quietly(producer, purge=True)
                    fatal.clear()
                    producer = create()
                for _record in range(self.rng.randint(1, 5)):
                    try:
                        send(producer, TOPIC)
                    except BufferError:
                        run.count(f"{self.name}.queue_full")
                    except KafkaException:
                        run.count(f"{self.name}.send_errors")
                try:
                    producer.poll(0)
                except KafkaException as error:  # confluent-kafka raises a fatal error from poll
                    if not error.args[0].fatal():
                        raise
                    fatal.set()
                run.stop.wait(0.05)
        finally:
            close_quietly(producer)


class TailingConsumer(Worker):
    """Reads every partition of the three topics from offset 0 for the whole run, with
    one isolation level."""

    def __init__(self, run: RunState, name: str, isolation: str) -> None:
        super().__init__(run, name)
        self.isolation = isolation

    def work(self) -> None:
        from confluent_kafka import TopicPartition

        run = self.run_state
        consumer = RecordingConsumer(run.history, {
            **CLIENT_BASE,
            "bootstrap.servers": run.bootstrap,
            **run.security,
            "group.id": f"chaos-tail-{self.name}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": self.isolation,
            "fetch.wait.max.ms": 100,
        }, client=self.name)
        try:
            consumer.assign([TopicPartition(topic, p, 0) for topic in TOPICS for p in range(PARTITIONS)])
            for _ in range(MAX_CONSUMER_POLLS):
                if run.stop.is_set():
                    break
                try:
                    consumer.consume(500, timeout=0.2)
                except KafkaException:
                    run.count(f"{self.name}.consume_errors")
                    run.stop.wait(0.1)
        finally:
            _close_consumer(run, consumer)


class TransformLoop(Worker):
    """Consume-transform-produce from `chaos-in` to `chaos-out`, exactly once.

    Each input record's output is derived from its value (`out:<value>`) and written to
    the same partition number, so a retried transaction writes the same output again.
    A transaction holds the batch's outputs and the next input offsets
    (`send_offsets_to_transaction`). After any transaction that did not commit, the
    consumer seeks every assigned partition back to the group's committed offset, as
    Kafka's exactly-once example does, once a producer is ready again (a new one has
    fenced the old one by then); the broker returns those offsets only once no
    transaction holds them pending (a read_committed consumer asks for stable offsets).
    Only when that fails is the consumer recreated (static membership: it takes over the
    partitions at once).

    Recreating it after every abort starved partitions (issue 45): a partition with no
    committed offset starts fetching after librdkafka's offset query timer
    (`retry.backoff.ms`, 100 ms), and by then the prefetch holds thousands of the other
    partitions' records, so with 20,000 inputs seeded the loop rewound before it ever
    reached that partition.
    """

    def __init__(self, run: RunState, name: str, abort_fraction: float) -> None:
        super().__init__(run, name)
        self.session = TransactionalSession(run, CTP_TRANSACTIONAL_ID, name)
        self.abort_fraction = abort_fraction
        self.consumer_incarnation = 0
        self.consumer_failed = threading.Event()  # the current consumer reported a fatal error

    def new_consumer(self) -> RecordingConsumer:
        self.consumer_failed.clear()

        def on_error(error) -> None:
            if _is_fatal(error):
                self.consumer_failed.set()

        consumer = RecordingConsumer(self.run_state.history, {
            **CLIENT_BASE,
            "bootstrap.servers": self.run_state.bootstrap,
            **self.run_state.security,
            "group.id": CTP_GROUP,
            "group.instance.id": f"{self.name}-member",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            # Fetches of about one input batch (5 records) per partition interleave the
            # partitions; with large ones every batch of ten comes from the partition
            # fetched first, and the frequent rewinds would never get past it.
            "max.partition.fetch.bytes": 256,
            "error_cb": on_error,
        }, client=f"{self.name}-consumer.{self.consumer_incarnation}")
        self.consumer_incarnation += 1
        consumer.subscribe([INPUT_TOPIC])
        return consumer

    def rewind(self, consumer: RecordingConsumer) -> bool:
        """Seek each assigned partition to the group's committed offset (the beginning
        where none is); False when the consumer cannot say them."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if self.consumer_failed.is_set():
            return False
        try:
            assigned = consumer.assignment()
            committed = self.run_state.bounded(f"{self.name}: committed", CALL_TIMEOUT_S,
                                               functools.partial(consumer.committed, assigned, timeout=CALL_TIMEOUT_S))
            for tp in committed:
                if tp.error is not None:
                    return False
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except (KafkaException, ClientHang):
            return False
        return True

    def work(self) -> None:
        from confluent_kafka import TopicPartition

        run, session = self.run_state, self.session
        consumer = self.new_consumer()
        rewind = False  # the last transaction did not commit: its inputs go back
        try:
            for _ in range(MAX_TRANSACTIONS_PER_WRITER * 10):
                if run.stop.is_set():
                    break
                producer = session.ready()
                if producer is None:
                    run.stop.wait(0.2)
                    continue
                if rewind:
                    # Only now: a new producer's init_transactions has fenced the old one,
                    # so no transaction holds the group's offsets pending any more.
                    rewind = False
                    if not self.rewind(consumer):
                        run.count(f"{self.name}.rewinds_by_rejoin")
                        _close_consumer(run, consumer)
                        consumer = self.new_consumer()
                try:
                    messages = consumer.consume(self.rng.randint(1, 10), timeout=0.3)
                    # A fatal consumer error may also come as an error message (code _FATAL;
                    # its fatal() flag is not set there) or only to the error callback: a
                    # static member fenced (FENCED_INSTANCE_ID) after the group coordinator
                    # moved in the middle of its rebalance, for one. The consumer is dead then.
                    fatal = next((m.error() for m in messages if _is_fatal(m.error())), None)
                    if fatal is not None or self.consumer_failed.is_set():
                        raise KafkaException(fatal or KafkaError(KafkaError._FATAL))
                except KafkaException:  # a fatal consumer error, e.g. a fenced static member
                    run.count(f"{self.name}.consume_errors")
                    _close_consumer(run, consumer)
                    consumer = self.new_consumer()
                    continue
                records = [m for m in messages if m.error() is None]
                if not records:
                    continue
                outcome = "failed"
                try:
                    producer.begin_transaction()
                except KafkaException:
                    session.discard()
                else:
                    try:
                        next_offsets: dict[int, int] = {}
                        for message in records:
                            input_value = message.value().decode()
                            output_value = f"out:{input_value}"
                            run.history.record_transform(producer.client, input_value, output_value)
                            send(producer, OUTPUT_TOPIC, value=output_value, partition=message.partition())
                            next_offsets[message.partition()] = max(next_offsets.get(message.partition(), 0),
                                                                    message.offset() + 1)
                        offsets = [TopicPartition(INPUT_TOPIC, p, offset) for p, offset in sorted(next_offsets.items())]
                        run.bounded(f"{self.name}: send_offsets_to_transaction", CALL_TIMEOUT_S,
                                    functools.partial(producer.send_offsets, offsets, consumer, CTP_GROUP,
                                                      CALL_TIMEOUT_S))
                        commit = self.rng.random() >= self.abort_fraction
                    except ClientHang:
                        session.forget()  # the next producer's init_transactions fences it and aborts its transaction
                    except (KafkaException, BufferError) as error:
                        run.count(f"{self.name}.txn_errors")
                        outcome = session.abandon(error)
                    else:
                        outcome = session.end(commit)
                run.count(f"{self.name}.{outcome}")
                if outcome != "commit":
                    run.count(f"{self.name}.rewinds")
                    rewind = True
        finally:
            session.close()
            _close_consumer(run, consumer)


def _is_fatal(error) -> bool:
    """Whether a message's error (None: no error) is a fatal one."""
    return error is not None and (error.fatal() or error.code() == KafkaError._FATAL)


def _close_consumer(run: RunState, consumer: RecordingConsumer) -> None:
    try:
        run.bounded("consumer close", CALL_TIMEOUT_S, consumer.close)
    except KafkaException:
        pass  # closing after a fatal error may report it again
    except ClientHang:
        pass  # counted; the consumer is left behind
