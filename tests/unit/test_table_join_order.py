"""The order join_table processes one key's rows of a micro-batch in: Kafka Streams' (each
topic-partition in offset order, the lowest timestamp among the partitions' next records
first, a table record before an event on a tie), also when timestamps within a partition
go backwards."""

from typing import NamedTuple

from oncelog.spark.table_join import in_processing_order


class Row(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    value: str


def test_each_partition_keeps_its_offset_order_and_the_partitions_merge_by_timestamp():
    rows = [
        Row("ref", 0, 1, 5, "A2"),  # an older timestamp at a later offset: still after A1
        Row("events", 1, 0, 7, "e2"),
        Row("ref", 0, 0, 10, "A1"),
        Row("events", 0, 0, 3, "e1"),
        Row("events", 0, 1, 10, "e3"),  # ties with A1's timestamp: the table record first
    ]
    assert [row.value for row in in_processing_order(rows, "ref")] == ["e1", "e2", "A1", "A2", "e3"]


def test_no_rows_give_nothing():
    assert list(in_processing_order([], "ref")) == []
