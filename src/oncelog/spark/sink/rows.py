"""The sink's rows: which columns it takes (those of Spark's Kafka sink) and how a task's
Arrow batches become record batches in its transaction.

`RowWriter.write(batch)` works on whole columns: each row's topic (the `topic` column, else
option `topic`), its partition (the `partition` column; else Kafka's murmur2 of the key,
as the Java producer and Spark's Kafka sink pick it; else, for rows without a key, one
partition per Arrow batch, like Kafka's sticky partitioner), then the records of each
topic-partition encoded at once (oncelog.client.records) and handed to the task's
TransactionalProducer. No Python object is made per row (headers apart).
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from oncelog import clock
from oncelog.client.cluster import Cluster, UnknownTopic
from oncelog.client.partitioner import partition_by_crc32, partition_by_murmur2
from oncelog.client.producer import TransactionalProducer
from oncelog.client.records import encode_records
from oncelog.spark.sink.options import SinkOptionError, SinkOptions, SinkWriteError

HEADERS_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
_COLUMN_TYPES = {
    "value": (BinaryType(), StringType()),
    "key": (BinaryType(), StringType()),
    "topic": (StringType(),),
    "partition": (IntegerType(),),
}


def check_input_schema(schema: StructType, options: SinkOptions) -> None:
    """The columns of Spark's Kafka sink: value (required), key, topic, partition, headers.
    Other columns are ignored, as Spark's Kafka sink ignores them."""
    fields = {field.name.lower(): field for field in schema.fields}
    if "value" not in fields:
        raise SinkOptionError(
            f"the oncelog sink needs a 'value' column (binary or string); the rows have {schema.simpleString()}"
        )
    for name, allowed in _COLUMN_TYPES.items():
        column = fields.get(name)
        if column is not None and column.dataType not in allowed:
            raise SinkOptionError(
                f"column {name!r} must be {' or '.join(t.simpleString() for t in allowed)}, "
                f"not {column.dataType.simpleString()}"
            )
    headers = fields.get("headers")
    if headers is not None and not _is_headers_type(headers.dataType):
        raise SinkOptionError(
            "column 'headers' must be array<struct<key:string,value:binary>>, "
            f"not {headers.dataType.simpleString()}"
        )
    if options.topic is None and "topic" not in fields:
        raise SinkOptionError(
            "option topic is required when the rows have no 'topic' column (it names the topic to write to)"
        )


def _is_headers_type(data_type) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    element = data_type.elementType
    names = [f.name.lower() for f in element.fields]
    return (
        names == ["key", "value"]
        and isinstance(element.fields[0].dataType, StringType)
        and isinstance(element.fields[1].dataType, BinaryType)
    )


def nonempty_batches(batches):
    for batch in batches:
        if batch.num_rows:
            yield batch


def first_topic(batch: pa.RecordBatch, default: str | None) -> str:
    """The topic of the batch's first row (the partition-mode marker's topic)."""
    column = _column(batch, "topic")
    topic = column[0].as_py() if column is not None else None
    topic = topic if topic is not None else default
    if topic is None:
        raise SinkWriteError("a row has a null 'topic' and option topic is not set")
    return topic


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    for index, column_name in enumerate(batch.schema.names):
        if column_name.lower() == name:
            return batch.column(index)
    return None


class RowWriter:
    """Writes a task's Arrow batches into `producer`'s open transaction."""

    def __init__(self, producer: TransactionalProducer, cluster: Cluster, options: SinkOptions) -> None:
        self.producer = producer
        self.cluster = cluster
        self.options = options
        self.count = 0
        self.topics: set[str] = set()

    def write_all(self, batches) -> RowWriter:
        for batch in batches:
            self.write(batch)
        return self

    def write(self, batch: pa.RecordBatch) -> None:
        rows = batch.num_rows
        if not rows:
            return
        values = _column(batch, "value")
        assert values is not None  # check_input_schema requires one
        keys = _column(batch, "key")
        headers = _column(batch, "headers")
        explicit = _column(batch, "partition")
        for topic, selection in self._by_topic(batch):
            if selection is not None:
                take = pa.array(selection)
                part_values, part_keys = values.take(take), None if keys is None else keys.take(take)
                part_headers = None if headers is None else headers.take(take)
                part_explicit = None if explicit is None else explicit.take(take)
            else:
                part_values, part_keys, part_headers, part_explicit = values, keys, headers, explicit
            self._write_topic(topic, part_keys, part_values, part_headers, part_explicit)
        self.count += rows

    def _by_topic(self, batch: pa.RecordBatch):
        """(topic, row indices or None for every row) for each topic the rows name."""
        column = _column(batch, "topic")
        default = self.options.topic
        if column is None or (column.null_count == len(column) and default is not None):
            if default is None:
                raise SinkWriteError("a row has a null 'topic' and option topic is not set")
            return [(default, None)]
        if column.null_count:
            if default is None:
                raise SinkWriteError("a row has a null 'topic' and option topic is not set")
            column = pc.fill_null(column, default)
        encoded = column.dictionary_encode()
        names = encoded.dictionary.to_pylist()
        allowed = self.options.topics
        if allowed and not set(names) <= set(allowed):
            stray = sorted(set(names) - set(allowed))
            raise SinkWriteError(f"a row names the topic {stray[0]!r}, which is not one of option "
                                 f"topics={','.join(allowed)}")
        if len(names) == 1:
            return [(names[0], None)]
        indices = encoded.indices.to_numpy()
        return [(name, np.flatnonzero(indices == number)) for number, name in enumerate(names)]

    def _write_topic(self, topic: str, keys, values, headers, explicit) -> None:
        partitions = self._partition_count(topic)
        rows = len(values)
        chosen = self._partitions(topic, keys, rows, partitions)
        if explicit is not None and explicit.null_count < rows:
            given = pc.fill_null(explicit, -1).to_numpy()
            bad = given[(given >= partitions) | (given < -1)]
            if len(bad):
                raise SinkWriteError(
                    f"a row's partition {int(bad[0])} does not exist: topic {topic!r} has {partitions} partitions")
            chosen = np.where(given >= 0, given, chosen)
        timestamp_ms = clock.now_ms()
        settings = self.options.producer_settings
        groups: list[tuple[int, np.ndarray | None]]  # (partition, its rows; None: every row)
        if (chosen == chosen[0]).all():
            groups = [(int(chosen[0]), None)]
        else:
            order = np.argsort(chosen, kind="stable")
            sorted_partitions = chosen[order]
            cuts = np.flatnonzero(np.diff(sorted_partitions)) + 1
            groups = [(int(sorted_partitions[start]), order[start:stop])
                      for start, stop in zip([0, *cuts.tolist()], [*cuts.tolist(), rows], strict=True)]
        for partition, selection in groups:
            part: tuple[Any, ...]  # (keys, values, headers), Arrow arrays or None
            if selection is None:
                part = (keys, values, headers)
            else:
                take = pa.array(selection)
                part = tuple(None if column is None else column.take(take) for column in (keys, values, headers))
            record_sets = encode_records(*part, max_batch_bytes=settings.max_batch_bytes,
                                         timestamp_ms=timestamp_ms, codec=settings.codec)
            self.producer.write(topic, partition, record_sets)
        self.topics.add(topic)

    def _partitions(self, topic: str, keys, rows: int, partitions: int) -> np.ndarray:
        """Each row's partition from its key; rows without a key share one partition."""
        name = self.options.partitioner
        # Keyless rows share one partition, chosen anew for every Arrow batch (Kafka's
        # sticky partitioner moves on when a batch is done).
        sticky = random.randrange(partitions)
        if keys is None or keys.null_count == rows or name == "random":
            return np.full(rows, sticky, dtype=np.int32)
        by_key = partition_by_murmur2(keys, partitions) if name.startswith("murmur2") else \
            partition_by_crc32(keys, partitions)
        if keys.null_count:
            keyless = sticky
            if not name.endswith("_random"):  # murmur2 / consistent: keyless rows hash as the empty key
                keyless = int(partition_by_murmur2(pa.array([b""]), partitions)[0]) if name == "murmur2" else 0
            by_key = np.where(keys.is_valid().to_numpy(zero_copy_only=False), by_key, keyless)
        return by_key.astype(np.int32)

    def _partition_count(self, topic: str) -> int:
        """The topic's partition count; as a producer, its Metadata request lets a broker
        with auto.create.topics.enable create the topic."""
        deadline = time.monotonic() + self.options.cluster_timeout_s
        try:
            return self.cluster.retrying(f"Metadata for topic {topic!r}", deadline,
                                         lambda: self.cluster.partition_count(topic, auto_create=True))
        except UnknownTopic:
            raise SinkWriteError(
                f"topic {topic!r} does not exist on kafka.bootstrap.servers={self.options.bootstrap_servers}"
            ) from None
