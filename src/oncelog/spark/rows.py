"""The row schema (the same columns as Spark's Kafka source) and the Arrow batches that
carry rows from an executor's consumer to Spark, a column at a time."""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Kafka's TimestampType ids, which Spark's timestampType column carries.
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def kafka_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool):
    """Exactly the Arrow schema PySpark expects for `kafka_schema` (it checks equality)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


class ArrowRows:
    """Messages of one topic-partition, turned into pyarrow RecordBatches a column at a
    time (one list comprehension per column is several times cheaper than per-record
    appends). Runs on executors, inside `read()`."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._timestamp_types = {
            TIMESTAMP_CREATE_TIME: CREATE_TIME,
            TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME,
        }
        self._messages: list = []
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    def extend(self, messages: list) -> None:
        """Add error-free confluent-kafka Messages, in offset order."""
        self._messages.extend(messages)
        self.size_bytes += sum(map(len, messages))  # len(Message) is its value's length

    def take_batch(self):
        """The gathered rows as one pyarrow.RecordBatch; the builder starts empty again."""
        import pyarrow as pa

        messages, self._messages, self.size_bytes = self._messages, [], 0
        schema = arrow_schema(self.include_headers)
        count = len(messages)
        timestamps = [message.timestamp() for message in messages]
        kinds = [self._timestamp_types.get(kind, NO_TIMESTAMP_TYPE) for kind, _ in timestamps]
        columns = [
            pa.array([message.key() for message in messages], type=pa.binary()),
            pa.array([message.value() for message in messages], type=pa.binary()),
            pa.array([self.topic] * count, type=pa.string()),
            pa.array([self.partition] * count, type=pa.int32()),
            pa.array([message.offset() for message in messages], type=pa.int64()),
            pa.array(
                [
                    ms * 1000 if kind != NO_TIMESTAMP_TYPE else None
                    for kind, (_, ms) in zip(kinds, timestamps)
                ],
                type=schema.field("timestamp").type,
            ),
            pa.array(kinds, type=pa.int32()),
        ]
        if self.include_headers:
            headers = [message.headers() or None for message in messages]
            columns.append(pa.array(headers, type=schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)
