"""The Iceberg sink (`format("oncelog-iceberg")`) on a real pyiceberg SQLite catalog in a
temporary directory: a streaming query from an oncelog topic, batch writes into a
partitioned and sorted table, and the driver's commit called directly, the way Spark calls
it after a restart and as a concurrent writer races it. The fault runs (task retries,
driver kills) are in test_iceberg_faults.py."""

from __future__ import annotations

import uuid
from collections import Counter

import pyarrow as pa
import pytest
from pyarrow import parquet
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitStateUnknownException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType as IcebergLong
from pyiceberg.types import NestedField
from pyiceberg.types import StringType as IcebergString
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

import oncelog.spark.iceberg.commit as iceberg_commit
from oncelog.spark.iceberg.files import batch_attempts_dir
from oncelog.spark.iceberg.options import IcebergOptionError, IcebergSchemaMismatch, IcebergTableMissing
from oncelog.spark.iceberg.writers import AttemptIdentity, IcebergStreamWriter, stream_writer
from tests.support.kafka import create_topics
from tests.support.spark.iceberg_pipeline import catalog_options, start_query
from tests.support.spark.iceberg_tables import (
    attempt_logs,
    column_counts,
    load_table,
    local_path,
    sink_snapshots,
    unreferenced_data_files,
)
from tests.support.spark.topics import write_source

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType()),
                     StructField("n", LongType())])


def rows(prefix: str, count: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([f"{prefix}{i}" for i in range(count)], pa.large_string()),
                            pa.array([f"{prefix.upper()}{i}" for i in range(count)], pa.large_string()),
                            pa.array(range(count), pa.int64())], names=["key", "value", "n"])


def make_writer(warehouse, schema: StructType = SCHEMA, **options: str) -> IcebergStreamWriter:
    return stream_writer({"table": "db.events", **catalog_options(str(warehouse)), **options}, schema)


def test_stream_from_a_topic_adds_the_committed_input_once_in_one_snapshot_per_micro_batch(
        spark, shared_broker, topic, tmp_path):
    bootstrap = shared_broker.bootstrap_servers
    source = f"{topic}-in"
    create_topics(bootstrap, (source, 2))
    committed = write_source(bootstrap, source, 2, transactions=6, per_transaction=10)  # every 3rd aborted
    checkpoint, warehouse = str(tmp_path / "checkpoint"), str(tmp_path)

    def run():
        query = start_query(spark, bootstrap=bootstrap, source=source, table="db.orders",
                            warehouse_dir=warehouse, checkpoint=checkpoint, max_offsets=25)
        query.awaitTermination(180)
        assert query.exception() is None
        return query

    query = run()
    table = load_table(warehouse, "db.orders")
    assert column_counts(table) == Counter(value.upper() for value in committed)  # no aborted input, no duplicate
    snapshots = sink_snapshots(table)
    assert [batch for _, batch in snapshots] == sorted({batch for _, batch in snapshots})  # one per micro-batch
    assert len(snapshots) > 1 and {query_id for query_id, _ in snapshots} == {str(query.id)}
    assert str(table.schema().find_field("timestamp").field_type) == "timestamptz"
    batches = column_counts(table, "batch")
    assert set(batches) == {batch for _, batch in snapshots}  # each snapshot holds its micro-batch's rows

    run()  # from the checkpoint, nothing new: no snapshot
    assert len(sink_snapshots(load_table(warehouse, "db.orders"))) == len(snapshots)
    more = write_source(bootstrap, source, 2, transactions=3, per_transaction=8, prefix="s")
    run()
    table = load_table(warehouse, "db.orders")
    assert column_counts(table) == Counter(value.upper() for value in committed + more)
    assert unreferenced_data_files(table) == [] and attempt_logs(table) == []


def test_a_repeated_commit_of_a_batch_adds_nothing_and_other_attempts_files_are_deleted(tmp_path):
    writer = make_writer(tmp_path)
    query_id = str(uuid.uuid4())
    first = writer.write_as(AttemptIdentity(query_id, 5, 0, 0), [rows("a", 10)])
    lost = writer.write_as(AttemptIdentity(query_id, 5, 1, 0), [rows("b", 10)])  # a speculative copy won
    won = writer.write_as(AttemptIdentity(query_id, 5, 1, 1), [rows("b", 10)])
    assert lost.data_files and (first.records, won.records) == (10, 10)
    writer.commit([first, won], 5)
    assert writer.last_outcome is not None
    assert (writer.last_outcome.outcome, writer.last_outcome.deleted_files) == ("committed", len(lost.data_files))
    table = load_table(tmp_path, "db.events")
    expected = Counter([f"A{i}" for i in range(10)] + [f"B{i}" for i in range(10)])
    assert column_counts(table) == expected

    # After a restart Spark runs batch 5 again (new attempts, new files) and calls commit(5)
    # again, in a fresh Python worker with a fresh writer.
    fresh = make_writer(tmp_path)
    rerun = [fresh.write_as(AttemptIdentity(query_id, 5, 0, 0), [rows("a", 10)]),
             fresh.write_as(AttemptIdentity(query_id, 5, 1, 0), [rows("b", 10)])]
    fresh.commit(rerun, 5)
    assert fresh.last_outcome is not None and fresh.last_outcome.outcome == "already-committed"
    assert fresh.last_outcome.deleted_files == sum(len(result.data_files) for result in rerun)
    fresh.commit([first, won], 5)  # the same messages again
    assert fresh.last_outcome.outcome == "already-committed"

    table = load_table(tmp_path, "db.events")
    assert column_counts(table) == expected
    assert sink_snapshots(table) == [(query_id, 5)]
    assert unreferenced_data_files(table) == [] and attempt_logs(table) == []

    following = fresh.write_as(AttemptIdentity(query_id, 6, 0, 0), [rows("c", 3)])
    fresh.commit([following], 6)
    assert sink_snapshots(load_table(tmp_path, "db.events")) == [(query_id, 5), (query_id, 6)]


def test_an_attempt_that_fails_part_way_deletes_the_files_it_wrote(tmp_path):
    writer = make_writer(tmp_path)
    table = load_table(tmp_path, "db.events")
    table.transaction().set_properties({"write.target-file-size-bytes": "64"}).commit_transaction()  # a file a batch
    writer = make_writer(tmp_path)

    def failing_input():
        yield rows("a", 5)
        yield rows("b", 5)
        raise RuntimeError("the task's input failed")

    with pytest.raises(RuntimeError, match="input failed"):
        writer.write_as(AttemptIdentity("q", 0, 0, 0), failing_input())
    assert unreferenced_data_files(table) == [] and attempt_logs(table) == []
    assert writer.write_as(AttemptIdentity("q", 0, 0, 1), [rows("a", 5), rows("b", 5)]).data_files  # writes files


def test_a_concurrent_writer_that_commits_first_makes_the_sink_retry_without_loss_or_duplicate(
        tmp_path, monkeypatch):
    writer = make_writer(tmp_path)
    table = load_table(tmp_path, "db.events")
    # No retry inside pyiceberg: the conflict reaches the sink's own loop (reload, check, retry).
    table.transaction().set_properties({"commit.retry.num-retries": "0"}).commit_transaction()
    raced = []

    def concurrent_append(point: str) -> None:  # another writer commits between our load and our commit
        if point == "iceberg:before-snapshot" and not raced:
            raced.append(point)
            load_table(tmp_path, "db.events").append(pa.Table.from_batches([rows("other", 4)]))

    monkeypatch.setattr(iceberg_commit, "pause_point", concurrent_append)
    query_id = str(uuid.uuid4())
    result = writer.write_as(AttemptIdentity(query_id, 0, 0, 0), [rows("ours", 6)])
    writer.commit([result], 0)
    assert raced and writer.last_outcome is not None
    assert (writer.last_outcome.outcome, writer.last_outcome.commit_attempts) == ("committed", 2)
    table = load_table(tmp_path, "db.events")
    assert column_counts(table) == Counter([f"OTHER{i}" for i in range(4)] + [f"OURS{i}" for i in range(6)])
    assert sink_snapshots(table) == [(query_id, 0)]


def test_a_commit_whose_answer_was_lost_is_found_by_its_summary_and_not_applied_again(tmp_path, monkeypatch):
    writer = make_writer(tmp_path)
    real_append = iceberg_commit._append
    lost_answers = []

    def append_then_lose_the_answer(*args):
        snapshot_id = real_append(*args)
        if not lost_answers:
            lost_answers.append(snapshot_id)
            raise CommitStateUnknownException("the catalog applied it; the answer was lost")
        return snapshot_id

    monkeypatch.setattr(iceberg_commit, "_append", append_then_lose_the_answer)
    query_id = str(uuid.uuid4())
    writer.commit([writer.write_as(AttemptIdentity(query_id, 0, 0, 0), [rows("x", 5)])], 0)
    assert writer.last_outcome is not None
    assert (writer.last_outcome.outcome, writer.last_outcome.snapshot_id) == ("already-committed", lost_answers[0])
    table = load_table(tmp_path, "db.events")
    assert column_counts(table) == Counter(f"X{i}" for i in range(5))
    assert unreferenced_data_files(table) == []


def test_a_dataframe_that_does_not_fit_the_table_fails_naming_the_column(tmp_path):
    required = StructType([StructField("id", LongType(), nullable=False), *SCHEMA.fields])
    make_writer(tmp_path, required)  # creates db.events: id required
    with pytest.raises(IcebergSchemaMismatch, match="column 'extra' of the DataFrame is not a column of"):
        make_writer(tmp_path, StructType([*required.fields, StructField("extra", StringType())]))
    with pytest.raises(IcebergSchemaMismatch, match="column 'n' is string in the DataFrame but long"):
        make_writer(tmp_path, StructType([*required.fields[:3], StructField("n", StringType())]))
    with pytest.raises(IcebergSchemaMismatch, match=r"required column 'id' \(long\) of Iceberg table .* missing"):
        make_writer(tmp_path, SCHEMA)
    with pytest.raises(IcebergSchemaMismatch, match="column 'id' is nullable in the DataFrame but required"):
        make_writer(tmp_path, StructType([StructField("id", LongType()), *SCHEMA.fields]))
    # int promotes to long; an optional column may be left out
    make_writer(tmp_path, StructType([StructField("id", IntegerType(), nullable=False), *SCHEMA.fields[:2]]))
    with pytest.raises(IcebergTableMissing, match=r"db\.missing does not exist"):
        stream_writer({"table": "db.missing", "createTableIfMissing": "false", **catalog_options(str(tmp_path))},
                      SCHEMA)
    with pytest.raises(IcebergOptionError, match="unknown option 'topic'"):
        stream_writer({"table": "db.events", "topic": "x", **catalog_options(str(tmp_path))}, SCHEMA)


def test_batch_write_appends_one_snapshot_into_the_tables_partitions_in_its_sort_order(spark, tmp_path):
    warehouse = str(tmp_path)
    properties = {key[len("catalog."):]: value for key, value in catalog_options(warehouse).items()}
    catalog = load_catalog("default", **properties)
    catalog.create_namespace("shop")
    created = catalog.create_table(
        "shop.sales", schema=Schema(NestedField(1, "region", IcebergString()), NestedField(2, "amount", IcebergLong()),
                                   NestedField(3, "item", IcebergString())),
        partition_spec=PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(),
                                                    name="region")),
        sort_order=SortOrder(SortField(source_id=2, transform=IdentityTransform(), direction=SortDirection.DESC,
                                       null_order=NullOrder.NULLS_LAST)))
    data = [("eu" if i % 3 else "us", (i * 37) % 101, f"item{i}") for i in range(60)]
    frame = spark.createDataFrame(data, "region string, amount long, item string").repartition(2)
    writer = frame.write.format("oncelog-iceberg").option("table", "shop.sales").mode("append")
    for key, value in catalog_options(warehouse).items():
        writer = writer.option(key, value)
    writer.save()

    table = catalog.load_table("shop.sales")
    assert len(table.snapshots()) == 1 and sink_snapshots(table)[0][0].startswith("write-")
    assert Counter(table.scan().to_arrow().column("item").to_pylist()) == Counter(item for *_, item in data)
    files = list(table.scan().plan_files())
    assert {task.file.partition[0] for task in files} == {"eu", "us"}
    for task in files:
        assert task.file.sort_order_id == created.sort_order().order_id
        written = parquet.read_table(task.file.file_path[len("file://"):])
        assert set(written.column("region").to_pylist()) == {task.file.partition[0]}  # one partition per file
        amounts = written.column("amount").to_pylist()
        assert amounts == sorted(amounts, reverse=True)
    with pytest.raises(Exception, match="appends"):
        frame.write.format("oncelog-iceberg").option("table", "shop.sales").mode("overwrite").save()


def test_an_aborted_batch_deletes_nothing_and_its_next_commit_deletes_the_files_it_does_not_reference(tmp_path):
    """abort may follow a commit whose outcome the catalog applies later, or run while
    another driver writes the same batch: it must not delete; the batch's next commit does."""
    writer = make_writer(tmp_path)
    query_id = str(uuid.uuid4())
    failed_run = writer.write_as(AttemptIdentity(query_id, 0, 0, 0), [rows("a", 4)])
    writer.abort([failed_run], 0)
    table = load_table(tmp_path, "db.events")
    assert len(unreferenced_data_files(table)) == len(failed_run.data_files) > 0  # still there
    rerun = writer.write_as(AttemptIdentity(query_id, 0, 0, 0), [rows("a", 4)])
    writer.commit([rerun], 0)
    table = load_table(tmp_path, "db.events")
    assert column_counts(table) == Counter(f"A{i}" for i in range(4))
    assert unreferenced_data_files(table) == [] and attempt_logs(table) == []


def test_a_log_that_cannot_be_read_yet_is_left_for_a_later_commit(tmp_path):
    """A late attempt may still be writing its log when the batch commits: the cleanup
    deletes only the logs it read, so that attempt's files stay traceable."""
    writer = make_writer(tmp_path)
    query_id = str(uuid.uuid4())
    winner = writer.write_as(AttemptIdentity(query_id, 0, 0, 0), [rows("a", 4)])
    table = load_table(tmp_path, "db.events")
    late_log = local_path(batch_attempts_dir(table.metadata.location, query_id, 0)) / "part-0-attempt-1-late-0.json"
    late_log.write_text('{"files": ["')  # torn: being written
    writer.commit([winner], 0)
    assert writer.last_outcome is not None and writer.last_outcome.outcome == "committed"
    assert late_log.exists()
    assert attempt_logs(load_table(tmp_path, "db.events")) == [late_log]


def test_a_cleanup_that_fails_after_the_snapshot_does_not_fail_the_committed_batch(tmp_path, monkeypatch):
    writer = make_writer(tmp_path)
    query_id = str(uuid.uuid4())
    result = writer.write_as(AttemptIdentity(query_id, 0, 0, 0), [rows("a", 4)])

    def listing_fails(*_args, **_kwargs):
        raise OSError("SlowDown: the object store throttles listing")

    monkeypatch.setattr(iceberg_commit, "clean_up_batch", listing_fails)
    writer.commit([result], 0)
    assert writer.last_outcome is not None and writer.last_outcome.outcome == "committed"
    assert sink_snapshots(load_table(tmp_path, "db.events")) == [(query_id, 0)]
