"""Reading one offset range of one partition: the work of one Spark task, on an executor.

A range is [start, end). Offsets are not record counts: under read_committed, control
records (transaction markers) and aborted records occupy offsets the consumer never
delivers. So the reader never counts records; it is done when the consumer's position
reaches `end`, or when it is handed a record at or past `end`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from oncelog.spark.errors import DataLoss, ReadStalled, SourceError
from oncelog.spark.options import SourceOptions
from oncelog.spark.rows import ArrowRows

log = logging.getLogger("oncelog.spark")

# Hand Spark a batch at whichever comes first (Spark's own Arrow batches hold 10,000 rows).
MAX_ROWS_PER_BATCH = 10_000
MAX_BYTES_PER_BATCH = 8 << 20
CONSUME_MAX_MESSAGES = 1_000
CONSUME_WAIT_S = 0.2


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task. Planned on the driver,
    pickled to an executor."""

    topic: str
    partition: int
    start: int
    end: int

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def consumer_config(options: SourceOptions, expected_records: int) -> dict[str, object]:
    """The confluent-kafka Consumer settings for reading ranges: no group membership (the
    consumer is assigned partitions, never subscribes), no offset commits, and an
    out-of-range offset is an error to handle, never a silent jump."""
    config: dict[str, object] = {
        "group.id": f"{options.group_id_prefix}-{uuid.uuid4()}-executor",
        # Prefetch roughly the range, not librdkafka's default 100,000 messages.
        "queued.min.messages": max(1_000, min(100_000, expected_records)),
    }
    config.update(dict(options.client_settings))
    config.update(
        {
            "bootstrap.servers": options.bootstrap_servers,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "error",
            "isolation.level": options.isolation_level,
        }
    )
    return config


def read_range(options: SourceOptions, task: KafkaRange) -> Iterator:
    """Yield pyarrow RecordBatches holding every record the consumer delivers in
    [task.start, task.end). Runs on an executor; opens and closes its own consumer."""
    from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

    if task.end <= task.start:
        return
    consumer = Consumer(consumer_config(options, task.end - task.start))
    where = f"{task.topic}-{task.partition}"
    try:
        consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
        rows = ArrowRows(task.topic, task.partition, options.include_headers)
        position = task.start
        stall_limit_s = options.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        while position < task.end:
            messages = consumer.consume(num_messages=CONSUME_MAX_MESSAGES, timeout=CONSUME_WAIT_S)
            before = position
            if (
                messages
                and messages[0].offset() >= position
                and all(m.error() is None for m in messages)
            ):
                # The common case: records in offset order; keep those before the end.
                if messages[-1].offset() >= task.end:
                    messages = [message for message in messages if message.offset() < task.end]
                    rows.extend(messages)
                    position = task.end
                else:
                    rows.extend(messages)
                    position = messages[-1].offset() + 1
            else:
                position = _take_one_by_one(consumer, options, task, position, messages, rows)
            if position < task.end:
                # Control records and aborted records advance the position without a message.
                (current,) = consumer.position([TopicPartition(task.topic, task.partition)])
                if current.offset != OFFSET_INVALID:
                    position = max(position, current.offset)
            if len(rows) >= MAX_ROWS_PER_BATCH or rows.size_bytes >= MAX_BYTES_PER_BATCH:
                yield rows.take_batch()
            now = time.monotonic()
            if position > before:
                last_progress = now
            elif now - last_progress > stall_limit_s:
                raise ReadStalled(
                    f"no progress reading {where} from offset {position} towards {task.end} for "
                    f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms} "
                    f"(kafka.bootstrap.servers={options.bootstrap_servers})"
                )
        if len(rows):
            yield rows.take_batch()
    finally:
        consumer.close()


def _take_one_by_one(
    consumer, options: SourceOptions, task: KafkaRange, position: int, messages, rows
) -> int:
    """The careful path, for a consume() answer holding errors or records before
    `position` (after a seek): returns the new position."""
    for message in messages:
        error = message.error()
        if error is not None:
            position = _handle_error(consumer, options, task, position, error)
            if position >= task.end:
                return position
            continue
        offset = message.offset()
        if offset >= task.end:
            return task.end
        if offset >= position:
            rows.extend([message])
            position = offset + 1
    return position


def _handle_error(consumer, options: SourceOptions, task: KafkaRange, position: int, error) -> int:
    """Deal with an error the consumer delivered in place of a message; returns the new
    position. Offsets gone from the log are data loss: an error, or skipped over when
    failOnDataLoss is false."""
    from confluent_kafka import KafkaError, TopicPartition

    where = f"{task.topic}-{task.partition}"
    code = error.code()
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(task.topic, task.partition), timeout=options.metadata_timeout_ms / 1000
        )
        if position >= low:
            # Out of range above the log end (truncated log): nothing more to read here.
            message = f"offset {position} of {where} is beyond the log end {high}"
            if options.fail_on_data_loss:
                raise DataLoss(f"{message}; offsets up to {task.end} were expected ({error.str()})")
            log.warning("%s; skipping to the range end %d", message, task.end)
            return task.end
        message = f"offsets {position}..{min(low, task.end) - 1} of {where} were deleted before they were read"
        if options.fail_on_data_loss:
            raise DataLoss(
                f"{message} (log start offset is now {low}). Set failOnDataLoss=false to skip them."
            )
        log.warning("%s; skipping to offset %d", message, low)
        if low >= task.end:
            return task.end
        consumer.assign([TopicPartition(task.topic, task.partition, low)])
        return low
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        message = f"{where} no longer exists; offsets {position}..{task.end - 1} cannot be read"
        if options.fail_on_data_loss:
            raise DataLoss(message)
        log.warning("%s; skipping them", message)
        return task.end
    if error.fatal() or not error.retriable() and code not in _TRANSIENT_CODES:
        raise SourceError(f"reading {where} at offset {position}: {error.str()}")
    log.info("reading %s at offset %d: %s (retrying)", where, position, error.str())
    return position


def _transient_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})


_TRANSIENT_CODES = _transient_codes()
