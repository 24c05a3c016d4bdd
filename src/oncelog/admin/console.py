"""`oncelog produce` and `oncelog consume`: the console producer and consumer.

They mirror kafka-console-producer.sh and kafka-console-consumer.sh: the same
`--property` names (parse.key, key.separator, print.key, print.offset, ...), the same
line and output formats, `Processed a total of N messages` on stderr when the consumer
stops. Built on confluent-kafka's Producer and Consumer.

When the reader of the consumer's output goes away (`| head -1`), it stops at once, even
on a topic where no record comes (it looks between polls), reports the records written
to the pipe in full and ends as every command ends on a closed pipe (exit status 141,
admin/output.py).

Deviations from Kafka's tools, on purpose:
- Without `--group` the consumer assigns itself every partition of the topic and
  commits nothing, so it needs no group coordinator; Kafka's tool joins a random group
  instead, which is observably the same for a single reader.
- `produce --value V` (repeatable) sends values without reading stdin;
  `produce --header k=v` adds a header to every record; `produce --partition P` pins
  records to one partition.
- A topic that does not exist is an error (`topic 'x' does not exist`) rather than a wait.
"""

from __future__ import annotations

import argparse
import bisect
import errno
import io
import itertools
import select
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from oncelog.admin.clients import (
    CONNECT_TIMEOUT_S,
    add_connection_arguments,
    client_config,
    command_error,
    describe_kafka_error,
    fetch_metadata,
    make_client,
    parse_key_value,
    topic_partitions,
)
from oncelog.admin.formatters import ApiRecordFormatter, record_formatter
from oncelog.admin.output import reader_gone
from oncelog.errors import CommandError

# The consumer wakes up this often to check --timeout-ms and signals.
POLL_INTERVAL_S = 0.2
CONSUME_BATCH = 500
EXIT_INTERRUPTED = 130
_NO_LEADER_YET = (KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION)


def register(commands: argparse._SubParsersAction) -> None:
    produce = commands.add_parser(
        "produce", help="send lines from stdin as records (kafka-console-producer.sh)"
    )
    add_connection_arguments(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="line reader property: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, null.marker, "
        "ignore.error",
    )
    produce.add_argument(
        "--header", action="append", default=[], metavar="KEY=VALUE",
        help="header added to every record, repeatable",
    )
    produce.add_argument(
        "--value", action="append", default=None, metavar="LINE",
        help="send this line instead of reading stdin, repeatable",
    )
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument(
        "--acks", "--request-required-acks", dest="acks", default="all",
        choices=["all", "-1", "0", "1"], help="acks required (default: all)",
    )
    produce.add_argument(
        "--compression-type", "--compression-codec", dest="compression_type", default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"], help="default: none",
    )
    produce.set_defaults(run=run_produce)

    consume = commands.add_parser(
        "consume", help="print records of a topic (kafka-console-consumer.sh)"
    )
    add_connection_arguments(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument(
        "--from-beginning", action="store_true",
        help="start at the earliest offset instead of the end",
    )
    consume.add_argument("--max-messages", type=int, help="exit after this many records")
    consume.add_argument(
        "--timeout-ms", type=int, help="exit when no record arrives for this long"
    )
    consume.add_argument(
        "--isolation-level", default="read_uncommitted",
        choices=["read_committed", "read_uncommitted"], help="default: read_uncommitted",
    )
    consume.add_argument("--group", help="consumer group to join (commits offsets)")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument(
        "--offset", help="with --partition: earliest, latest, or an offset (default: latest)"
    )
    consume.add_argument(
        "--formatter", default="default", metavar="NAME",
        help="default (Kafka's DefaultMessageFormatter), transaction-state (__transaction_state "
        "records as JSON), offsets (__consumer_offsets commits as JSON); Kafka's class names "
        "for these are accepted too",
    )
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="formatter property: print.key, print.value, print.offset, print.partition, "
        "print.headers, print.timestamp, key.separator, line.separator, "
        "headers.separator, null.literal",
    )
    consume.set_defaults(run=run_consume)


def _properties(items: list[str]) -> dict[str, str]:
    return dict(parse_key_value(item, "--property") for item in items)


def _flag(properties: dict[str, str], key: str, default: bool = False) -> bool:
    value = properties.get(key)
    if value is None:
        return default
    return value.strip().lower() == "true"


# --------------------------------------------------------------------------- produce


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class LineReader:
    """Kafka's LineMessageReader: `[headers<headers.delimiter>][key<key.separator>]value`."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> LineReader:
        def separator(key: str, default: str) -> bytes:
            value = properties.get(key, default).encode()
            if not value:
                raise CommandError(f"--property {key} must not be empty")
            return value

        null_marker = properties.get("null.marker")
        return cls(
            parse_key=_flag(properties, "parse.key"),
            key_separator=separator("key.separator", "\t"),
            parse_headers=_flag(properties, "parse.headers"),
            headers_delimiter=separator("headers.delimiter", "\t"),
            headers_separator=separator("headers.separator", ","),
            headers_key_separator=separator("headers.key.separator", ":"),
            null_marker=null_marker.encode() if null_marker is not None else None,
            ignore_error=_flag(properties, "ignore.error"),
        )

    def parse(self, line: bytes, line_number: int) -> ProducerRecord:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            header_text, found, rest = line.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise CommandError(
                        f"no headers delimiter {self.headers_delimiter.decode()!r} "
                        f"on line {line_number}: {line.decode(errors='replace')!r}"
                    )
                rest = line
            elif header_text:
                for pair in header_text.split(self.headers_separator):
                    name, found_key, header_value = pair.partition(self.headers_key_separator)
                    if not found_key:
                        raise CommandError(
                            f"no header key separator {self.headers_key_separator.decode()!r} "
                            f"in header {pair.decode(errors='replace')!r} on line {line_number}"
                        )
                    headers.append((name.decode(), self._nullable(header_value)))
        key: bytes | None = None
        value: bytes | None = rest
        if self.parse_key:
            key_part, found, value_part = rest.partition(self.key_separator)
            if found:
                key, value = self._nullable(key_part), value_part
            elif not self.ignore_error:
                raise CommandError(
                    f"no key separator {self.key_separator.decode()!r} on line "
                    f"{line_number}: {line.decode(errors='replace')!r}"
                )
        return ProducerRecord(key=key, value=self._nullable(value), headers=headers)

    def _nullable(self, field: bytes | None) -> bytes | None:
        if field is not None and self.null_marker is not None and field == self.null_marker:
            return None
        return field


def _input_lines(args: argparse.Namespace, stdin: IO[bytes]) -> Iterator[bytes]:
    if args.value is not None:
        for value in args.value:
            yield value.encode()
        return
    interactive = stdin.isatty()
    while True:
        if interactive:
            print(">", end="", flush=True)
        line = stdin.readline()
        if not line:
            return
        # Java's readLine: a line ends at \n, \r or \r\n, which is not part of it.
        yield line.rstrip(b"\n").rstrip(b"\r")


class DeliveryReport:
    """Counts acknowledged and failed records; keeps the first failure for the message."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = error


def run_produce(args: argparse.Namespace) -> int:
    reader = LineReader.from_properties(_properties(args.property))
    static_headers = [
        (key, value.encode())
        for key, value in (parse_key_value(item, "--header") for item in args.header)
    ]
    producer = make_client(
        Producer,
        client_config(args, **{"acks": args.acks, "compression.type": args.compression_type}),
    )
    report = DeliveryReport()
    sent = 0
    try:
        for line_number, line in enumerate(_input_lines(args, sys.stdin.buffer), start=1):
            record = reader.parse(line, line_number)
            if sent == 0:
                # Like Kafka's producer, look the topic up (and so auto-create it) only
                # when there is something to send.
                _check_topic(producer, args, args.topic, args.partition)
            _send(producer, args, record, static_headers, report)
            sent += 1
            producer.poll(0)
            if report.first_error is not None:
                break
        remaining = producer.flush()
    except KeyboardInterrupt:
        producer.flush(5)
        return EXIT_INTERRUPTED
    if report.failed or remaining:
        not_delivered = report.failed + remaining
        reason = (
            describe_kafka_error(report.first_error, topic=args.topic)
            if report.first_error is not None
            else "delivery timed out"
        )
        raise CommandError(f"{not_delivered} of {sent} records not delivered: {reason}")
    return 0


def _send(
    producer: Producer,
    args: argparse.Namespace,
    record: ProducerRecord,
    static_headers: list[tuple[str, bytes]],
    report: DeliveryReport,
) -> None:
    headers = record.headers + static_headers
    kwargs: dict[str, Any] = {
        "value": record.value,
        "key": record.key,
        "on_delivery": report,
    }
    if headers:
        kwargs["headers"] = headers
    if args.partition is not None:
        kwargs["partition"] = args.partition
    while True:
        try:
            producer.produce(args.topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)  # local queue full: wait for deliveries to drain it
        except KafkaException as error:
            raise command_error(error, topic=args.topic) from None


def _check_topic(
    client: Producer | Consumer, args: argparse.Namespace, topic: str, partition: int | None
) -> list[int]:
    """Fail early, in one line, when the cluster is unreachable, the topic does not exist
    or the partition is out of range."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        metadata = fetch_metadata(client, args, topic=topic)
        topic_metadata = metadata.topics.get(topic)
        error = topic_metadata.error if topic_metadata is not None else None
        # A topic the broker has just auto-created may have no leader for a moment.
        if error is None or error.code() not in _NO_LEADER_YET or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    partitions = topic_partitions(metadata, topic)
    if partition is not None and partition not in partitions:
        raise CommandError(
            f"partition {partition} of topic {topic!r} does not exist "
            f"(the topic has {len(partitions)} partitions)"
        )
    return partitions


# --------------------------------------------------------------------------- consume


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFormatter:
    """Kafka's DefaultMessageFormatter: timestamp, partition, offset, headers, key, value,
    in that order, separated by key.separator."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> MessageFormatter:
        return cls(
            print_timestamp=_flag(properties, "print.timestamp"),
            print_partition=_flag(properties, "print.partition"),
            print_offset=_flag(properties, "print.offset"),
            print_headers=_flag(properties, "print.headers"),
            print_key=_flag(properties, "print.key"),
            print_value=_flag(properties, "print.value", default=True),
            key_separator=properties.get("key.separator", "\t").encode(),
            line_separator=properties.get("line.separator", "\n").encode(),
            headers_separator=properties.get("headers.separator", ",").encode(),
            null_literal=properties.get("null.literal", "null").encode(),
        )

    def format(self, message: Message) -> bytes:
        columns: list[bytes] = []
        if self.print_timestamp:
            timestamp_type, timestamp = message.timestamp()
            if timestamp_type == TIMESTAMP_CREATE_TIME:
                columns.append(f"CreateTime:{timestamp}".encode())
            elif timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
                columns.append(f"LogAppendTime:{timestamp}".encode())
            else:
                columns.append(b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(f"Partition:{message.partition()}".encode())
        if self.print_offset:
            columns.append(f"Offset:{message.offset()}".encode())
        if self.print_headers:
            # A consumed message's headers are (name, value) pairs; the stub also allows
            # the dict that produce() accepts.
            headers = cast("list[tuple[str, bytes | None]]", message.headers() or [])
            columns.append(
                self.headers_separator.join(
                    name.encode() + b":" + self._or_null(value) for name, value in headers
                )
                if headers
                else b"NO_HEADERS"
            )
        if self.print_key:
            columns.append(self._or_null(message.key()))
        if self.print_value:
            columns.append(self._or_null(message.value()))
        if not columns:
            return b""
        return self.key_separator.join(columns) + self.line_separator

    def _or_null(self, field: bytes | str | None) -> bytes:
        if field is None:
            return self.null_literal
        return field.encode() if isinstance(field, str) else field


RecordFormatter = MessageFormatter | ApiRecordFormatter  # what --formatter selects


def _start_offset(args: argparse.Namespace) -> int:
    if args.offset is None:
        return OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    text = args.offset.strip().lower()
    if text == "earliest":
        return OFFSET_BEGINNING
    if text == "latest":
        return OFFSET_END
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise CommandError(
            f"--offset must be earliest, latest or a non-negative offset, got {args.offset!r}"
        )
    return offset


def _validate_consume_options(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise CommandError("--offset requires --partition")
    if args.offset is not None and args.from_beginning:
        raise CommandError("--offset and --from-beginning cannot be used together")
    if args.group is not None and args.partition is not None:
        raise CommandError("--group and --partition cannot be used together")
    if args.max_messages is not None and args.max_messages < 0:
        raise CommandError("--max-messages must not be negative")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CommandError("--timeout-ms must not be negative")


class _StopRequest:
    """SIGINT/SIGTERM while consuming: finish the record in hand, close, report.

    A flag rather than KeyboardInterrupt, so a signal can never land between printing
    a record and counting it."""

    def __init__(self) -> None:
        self.signal_number: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.signal_number = signum

    @property
    def requested(self) -> bool:
        return self.signal_number is not None


class _Progress:
    processed = 0  # records written to stdout in full


def run_consume(args: argparse.Namespace) -> int:
    _validate_consume_options(args)
    formatter = _formatter(args)
    start_offset = _start_offset(args)
    defaults: dict[str, Any] = {
        "group.id": args.group or f"oncelog-console-consumer-{uuid.uuid4().hex[:8]}",
        "isolation.level": args.isolation_level,
        "allow.auto.create.topics": False,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
    }
    if args.group is None:
        defaults["enable.auto.commit"] = False
    consumer = make_client(Consumer, client_config(args, **defaults))

    progress = _Progress()
    stop = _StopRequest()
    previous_handlers: dict[signal.Signals, Any] = {}
    try:
        partitions = _check_topic(consumer, args, args.topic, args.partition)
        if args.group is not None:
            _require_group_support(args)
            _require_group_coordinator(args)
            consumer.subscribe([args.topic])
        else:
            wanted = [args.partition] if args.partition is not None else partitions
            consumer.assign([TopicPartition(args.topic, p, start_offset) for p in wanted])
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[signum] = signal.signal(signum, stop)
        _consume_loop(consumer, args, formatter, sys.stdout.buffer, progress, stop)
    except BrokenPipeError:
        # The reader went away (`| head`): the count of what reached it, then the end
        # every command has on a closed pipe (oncelog.cli.main).
        _report(progress)
        raise
    finally:
        consumer.close()
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
    _report(progress)
    return 128 + stop.signal_number if stop.signal_number is not None else 0


def _report(progress: _Progress) -> None:
    print(f"Processed a total of {progress.processed} messages", file=sys.stderr)


DEFAULT_FORMATTER_NAMES = frozenset({
    "default", "kafka.tools.DefaultMessageFormatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
})


def _formatter(args: argparse.Namespace) -> RecordFormatter:
    if args.formatter in DEFAULT_FORMATTER_NAMES:
        return MessageFormatter.from_properties(_properties(args.property))
    return record_formatter(args.formatter)


def _require_group_support(args: argparse.Namespace) -> None:
    """librdkafka waits silently forever for a group coordinator the broker cannot
    provide; ask first (ListGroups is part of every broker's group API) and say so."""
    admin = make_client(AdminClient, client_config(args))
    try:
        result = admin.list_consumer_groups(request_timeout=CONNECT_TIMEOUT_S).result(
            timeout=CONNECT_TIMEOUT_S
        )
    except (KafkaException, TimeoutError):
        return  # not conclusive: let the consumer try, as Kafka's tool would
    if any(error.code() == KafkaError._UNSUPPORTED_FEATURE for error in result.errors):
        raise CommandError(
            "the broker does not support consumer groups yet; "
            "leave out --group to read every partition by assignment"
        )


def _require_group_coordinator(args: argparse.Namespace) -> None:
    """librdkafka also waits silently for a coordinator the cluster cannot have yet (too
    few brokers for `__consumer_offsets`): ask FindCoordinator, again while the answer
    is retriable, for as long as a command waits for its cluster, then say why."""
    from oncelog.admin.clients import wire_cluster
    from oncelog.client.wire import GROUP_COORDINATOR

    with wire_cluster(args) as cluster:
        cluster.coordinator(args.group, GROUP_COORDINATOR, CONNECT_TIMEOUT_S)


def _consume_loop(
    consumer: Consumer,
    args: argparse.Namespace,
    formatter: RecordFormatter,
    out: IO[bytes],
    progress: _Progress,
    stop: _StopRequest,
) -> None:
    timeout_s = args.timeout_ms / 1000 if args.timeout_ms is not None else None
    last_record_at = time.monotonic()
    while not stop.requested and (
        args.max_messages is None or progress.processed < args.max_messages
    ):
        if reader_gone(out):
            # Found between polls, not at the next write: a quiet topic may have none for hours.
            raise BrokenPipeError(errno.EPIPE, "the reader of stdout has gone")
        wanted = CONSUME_BATCH
        if args.max_messages is not None:
            wanted = min(wanted, args.max_messages - progress.processed)
        wait_s = POLL_INTERVAL_S
        if timeout_s is not None:
            wait_s = max(0.0, min(wait_s, last_record_at + timeout_s - time.monotonic()))
        records: list[bytes] = []
        for message in consumer.consume(num_messages=wanted, timeout=wait_s):
            error = message.error()
            if error is not None:
                _write_records(out, records, progress)  # the records before it, first
                records = []
                _handle_consume_error(error, args)
                continue
            records.append(formatter.format(message))
        if records:
            _write_records(out, records, progress)
            last_record_at = time.monotonic()
        elif timeout_s is not None and time.monotonic() - last_record_at >= timeout_s:
            return


def _write_records(out: IO[bytes], records: list[bytes], progress: _Progress) -> None:
    """Writes formatted records and counts each once its last byte is written, so that
    when the reader goes away midway the count is what reached the pipe. A batch goes
    to the file underneath in as few writes as the pipe takes (the buffered stream would
    not say how much of a batch it wrote before EPIPE)."""
    # The file itself: under the buffered stream, or stdout (PYTHONUNBUFFERED=1, python -u).
    raw = out if isinstance(out, io.RawIOBase) else getattr(out, "raw", None)
    if raw is None:  # no file underneath (a test's buffer): nothing is written in part
        out.write(b"".join(records))
        out.flush()
        progress.processed += len(records)
        return
    out.flush()
    data = memoryview(b"".join(records))
    ends = list(itertools.accumulate(map(len, records)))
    written = 0
    try:
        while written < len(data):
            count = raw.write(data[written:])
            if count is None:  # a non-blocking stdout that is full
                select.select([], [raw], [])
            else:
                written += count
    finally:
        progress.processed += bisect.bisect_right(ends, written)


def _handle_consume_error(error: KafkaError, args: argparse.Namespace) -> None:
    if error.code() == KafkaError._PARTITION_EOF:
        return
    if error.fatal() or error.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    ):
        raise command_error(error, topic=args.topic)
    print(f"oncelog: warning: {describe_kafka_error(error, topic=args.topic)}", file=sys.stderr)
