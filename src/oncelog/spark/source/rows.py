"""The row schema (the same columns as Spark's Kafka source) and the Arrow batches that
carry rows from an executor's Fetch answers to Spark, a column at a time."""

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


def arrow_batch(decoded, topic: str, partition: int, include_headers: bool):
    """The records of one Fetch answer (oncelog.client.records.DecodedRecords) as a
    pyarrow.RecordBatch of `kafka_schema`, built from whole columns."""
    import numpy as np
    import pyarrow as pa

    schema = arrow_schema(include_headers)
    count = len(decoded)
    name = topic.encode()
    topic_offsets = np.arange(count + 1, dtype=np.int32) * len(name)
    columns = [
        decoded.keys,
        decoded.values,
        pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(topic_offsets), pa.py_buffer(name * count)]),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(decoded.offsets),
        pa.array(decoded.timestamps_ms * 1000, type=schema.field("timestamp").type),
        pa.array(decoded.timestamp_types),
    ]
    if include_headers:
        headers_type = schema.field("headers").type
        if decoded.headers is None:
            columns.append(pa.nulls(count, headers_type))
        else:
            columns.append(pa.array(
                [None if pairs is None else [{"key": key, "value": value} for key, value in pairs]
                 for pairs in decoded.headers], type=headers_type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
