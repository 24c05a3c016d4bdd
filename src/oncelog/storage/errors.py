"""Every exception the storage layer raises.

Each carries the values a handler or an operator needs (topic-partition, offsets, key)
and `kafka_error_code`, the numeric Kafka error code the handler layer answers with
(the handlers own the mapping; the attribute is there so it cannot drift from the class).
"""

from __future__ import annotations


def topic_partition_name(topic: str, partition: int) -> str:
    """The `<topic>-<partition>` spelling Kafka uses in directories and messages."""
    return f"{topic}-{partition}"


class LogError(Exception):
    """Base class of every storage exception."""

    kafka_error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    """A fetch or truncation offset outside [log_start_offset, log_end_offset]."""

    kafka_error_code = 1  # OFFSET_OUT_OF_RANGE

    def __init__(self, topic_partition: str, offset: int, log_start_offset: int, log_end_offset: int,
                 detail: str = "") -> None:
        self.topic_partition = topic_partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        message = (
            f"offset {offset} is out of range for partition {topic_partition}: "
            f"log start offset {log_start_offset}, log end offset {log_end_offset}"
        )
        super().__init__(f"{message}; {detail}" if detail else message)


class CorruptLogError(LogError):
    """A segment, index, checkpoint or metadata file that fails its framing or checksum."""

    kafka_error_code = 2  # CORRUPT_MESSAGE

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class UnknownTopicError(LogError):
    kafka_error_code = 3  # UNKNOWN_TOPIC_OR_PARTITION

    def __init__(self, topic: str, partition: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        if partition is None:
            super().__init__(f"topic {topic!r} does not exist")
        else:
            super().__init__(f"partition {topic_partition_name(topic, partition)} does not exist")


class RecordTooLargeError(LogError):
    """One batch larger than the topic's max.message.bytes (Kafka's MESSAGE_TOO_LARGE)."""

    kafka_error_code = 10  # MESSAGE_TOO_LARGE

    def __init__(self, topic_partition: str, batch_size: int, max_message_bytes: int) -> None:
        self.topic_partition = topic_partition
        self.batch_size = batch_size
        self.max_message_bytes = max_message_bytes
        super().__init__(
            f"batch of {batch_size} bytes for partition {topic_partition} exceeds "
            f"max.message.bytes {max_message_bytes}"
        )


class InvalidTopicError(LogError):
    kafka_error_code = 17  # INVALID_TOPIC_EXCEPTION

    def __init__(self, topic: str, message: str) -> None:
        self.topic = topic
        super().__init__(f"invalid topic {topic!r}: {message}")


class RecordBatchTooLargeError(LogError):
    """One append too large for a segment (Kafka's RECORD_LIST_TOO_LARGE)."""

    kafka_error_code = 18  # RECORD_LIST_TOO_LARGE

    def __init__(self, topic_partition: str, append_size: int, limit: int) -> None:
        self.topic_partition = topic_partition
        self.append_size = append_size
        self.limit = limit
        super().__init__(
            f"append of {append_size} bytes for partition {topic_partition} exceeds the "
            f"largest possible segment of {limit} bytes"
        )


class TopicExistsError(LogError):
    kafka_error_code = 36  # TOPIC_ALREADY_EXISTS

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} already exists")


class InvalidPartitionsError(LogError):
    kafka_error_code = 37  # INVALID_PARTITIONS

    def __init__(self, topic: str, message: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r}: {message}")


class InvalidConfigError(LogError):
    kafka_error_code = 40  # INVALID_CONFIG

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.detail = message
        super().__init__(f"config {key!r}: {message}")


class StorageError(LogError):
    """An I/O failure (ENOSPC, EIO, ...) while touching a log directory."""

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR

    def __init__(self, where: str, message: str, errno: int | None = None) -> None:
        self.where = where
        self.errno = errno
        super().__init__(f"{where}: {message}")


class InvalidRecordError(LogError):
    """A batch that is well framed but breaks a rule of the append (Kafka's INVALID_RECORD)."""

    kafka_error_code = 87  # INVALID_RECORD

    def __init__(self, topic_partition: str, message: str) -> None:
        self.topic_partition = topic_partition
        super().__init__(f"partition {topic_partition}: {message}")


class ProducerStateError(LogError):
    """A batch the idempotent producer state refuses; the message names the producer,
    epoch, partition, and the expected and actual values."""

    def __init__(self, topic_partition: str, message: str) -> None:
        self.topic_partition = topic_partition
        super().__init__(message)


class OutOfOrderSequenceError(ProducerStateError):
    kafka_error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(ProducerStateError):
    kafka_error_code = 47  # INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(ProducerStateError):
    kafka_error_code = 48  # INVALID_TXN_STATE


class TransactionCoordinatorFencedError(ProducerStateError):
    kafka_error_code = 52  # TRANSACTION_COORDINATOR_FENCED


class CorruptBatchError(LogError):
    """Replicated bytes whose framing, magic or CRC32C is wrong (Kafka's CorruptRecordException)."""

    kafka_error_code = 2  # CORRUPT_MESSAGE

    def __init__(self, topic_partition: str, message: str) -> None:
        self.topic_partition = topic_partition
        super().__init__(f"partition {topic_partition}: {message}")


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose first batch starts below the log end offset (Kafka's
    UnexpectedAppendOffsetException). The offsets let the caller do what Kafka's
    Partition does when the log is empty and the batch holds its log end offset (the
    leader's log start fell inside a batch): start the log at `first_offset` and retry."""

    def __init__(self, topic_partition: str, first_offset: int, last_offset: int, log_end_offset: int) -> None:
        self.topic_partition = topic_partition
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"unexpected offset in append to partition {topic_partition}: first offset {first_offset} "
            f"(last offset {last_offset}) is less than the log end offset {log_end_offset}"
        )
