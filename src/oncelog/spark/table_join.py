"""Kafka Streams' KStream-KTable join on Spark: `join_table(source, table_topic)`.

`source` reads the event topics and the table's topic together (`subscribe`
"input-events,reference-data"). Rows of `table_topic` are the table's changelog: a value
sets the key's entry, a null value (a tombstone) removes it. Every other row is an event,
joined with the table's value for its key at the moment it is processed, as Kafka
Streams does: an update after an event does not change the event's result, and an event
after a tombstone finds nothing. Inner join: an event whose key has no entry (or no key)
is dropped; left join: it comes out with a null `table_value`.

The table lives in Spark's state store (one value per key, in the query's checkpoint),
through `transformWithState` grouped by key, so it survives restarts and a re-run
micro-batch sees the table as it was before that micro-batch. Within a micro-batch a
key's rows are processed as Kafka Streams processes its input: each topic-partition's in
offset order, and among the partitions the one whose next record has the lowest
timestamp first (a table update before an event on a tie); rows of different keys are
independent. Spark's `transformWithState` needs the RocksDB state store provider
(`ROCKSDB_PROVIDER`), which oncelog's local sessions (`build_session`, the runner's) use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from oncelog.spark.session import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER_KEY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HOWS = ("inner", "left")

# What join_table returns: the event's key, value, topic and timestamp, and the table's
# value for its key. Not the event's partition: a `partition` column would tell the sink
# where to write.
JOINED_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("table_value", BinaryType()),
    StructField("topic", StringType()),
    StructField("timestamp", TimestampType()),
])
_INPUT_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp"]
_TABLE_ENTRY = StructType([StructField("value", BinaryType())])


class TableJoinError(ValueError):
    """join_table cannot be built as asked (one line)."""


def join_table(source: DataFrame, table_topic: str, *, how: str = "inner") -> DataFrame:
    """The events of `source` (its rows not from `table_topic`) joined with the table that
    follows `table_topic`; see the module docstring. Columns: JOINED_SCHEMA."""
    if how not in HOWS:
        raise TableJoinError(f"join_table how={how!r}: use inner or left")
    missing = [name for name in _INPUT_COLUMNS if name not in source.columns]
    if missing:
        raise TableJoinError(f"join_table needs the source's columns {', '.join(missing)} (read it with "
                             "format(\"oncelog\") or \"kafka\", subscribing to the events' topics and the table's)")
    provider = source.sparkSession.conf.get(STATE_STORE_PROVIDER_KEY, None)
    if provider != ROCKSDB_PROVIDER:
        raise TableJoinError(f"join_table keeps the table in Spark's state store through transformWithState, which "
                             f"needs {STATE_STORE_PROVIDER_KEY}={ROCKSDB_PROVIDER} (this session has "
                             f"{provider or 'the default'}); set it before the query starts")
    return (source.select(*_INPUT_COLUMNS)
            .groupBy("key")
            .transformWithState(_TableJoin(table_topic, how == "left"), JOINED_SCHEMA, "Append", "None"))


class _TableJoin(StatefulProcessor):
    """Per key: the table's value (state "table") and the events joined with it."""

    def __init__(self, table_topic: str, keep_unmatched: bool) -> None:
        self.table_topic = table_topic
        self.keep_unmatched = keep_unmatched

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.table = handle.getValueState("table", _TABLE_ENTRY)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Row]:
        has_key = key is not None and key[0] is not None
        entry = self.table.get() if has_key and self.table.exists() else None
        current = None if entry is None else entry[0]
        changed = False
        for row in in_processing_order(rows, self.table_topic):
            if row.topic == self.table_topic:
                if has_key:  # a table record without a key has nothing to set (Kafka Streams drops it)
                    current, changed = row.value, True
                continue
            if current is None and not self.keep_unmatched:
                continue
            yield Row(key=row.key, value=row.value, table_value=current, topic=row.topic, timestamp=row.timestamp)
        if changed:
            if current is None:
                self.table.clear()
            else:
                self.table.update((current,))

    def close(self) -> None:
        pass


def in_processing_order(rows: Iterable[Any], table_topic: str) -> Iterator[Any]:
    """`rows` in Kafka Streams' order: each topic-partition's in offset order; next, always
    the head with the lowest timestamp, a table record before an event on a tie."""
    queues: dict[tuple[str, int], list[Any]] = {}
    for row in rows:
        queues.setdefault((row.topic, row.partition), []).append(row)
    for queue in queues.values():
        queue.sort(key=lambda row: row.offset, reverse=True)  # taken from the end
    while queues:
        chosen = min(queues, key=lambda partition: (queues[partition][-1].timestamp,
                                                     queues[partition][-1].topic != table_topic, partition))
        queue = queues[chosen]
        yield queue.pop()
        if not queue:
            del queues[chosen]
