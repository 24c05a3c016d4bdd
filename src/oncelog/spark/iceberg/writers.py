"""The Iceberg sink's writers: `df.writeStream.format("oncelog-iceberg")` (one snapshot per
micro-batch, exactly once) and `df.write.format("oncelog-iceberg").mode("append")` (one
snapshot per write). See docs/iceberg.md.

Where code runs:
- `stream_writer()` / `batch_writer()`: the driver, once per micro-batch (and again in the
  fresh Python worker that runs `commit`/`abort`): load the catalog and the table, create
  it when missing, check the DataFrame's columns against it.
- `write()`: executors, one call per task attempt: Parquet data files in the table's
  location (oncelog.spark.iceberg.files); the commit message lists them.
- `commit(messages, batchId)`: the driver: one snapshot with the winning attempts' files,
  its summary naming the query and batch, skipped when the table has the batch already;
  then the files of every other attempt are deleted (oncelog.spark.iceberg.commit).
- `abort`: the driver: the batch failed; nothing is deleted (the outcome of its commit may be
  unknown): the next commit of the batch deletes the files its snapshot does not reference.

Writers are pickled to executors: they hold options, the table's metadata and plain values.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from oncelog.spark import trace
from oncelog.spark.iceberg.commit import (
    ALREADY_COMMITTED,
    BATCH_ID_PROPERTY,
    EMPTY,
    QUERY_ID_PROPERTY,
    BatchOutcome,
    abort_batch,
    commit_batch,
)
from oncelog.spark.iceberg.files import AttemptIdentity, IcebergTaskResult, write_attempt
from oncelog.spark.iceberg.options import (
    FORMAT_NAME,
    ICEBERG_MODE,
    IcebergOptionError,
    IcebergSinkError,
    IcebergSinkOptions,
    parse_iceberg_options,
    read_query_id,
)
from oncelog.spark.iceberg.table import WriteTarget, open_table
from oncelog.spark.sink_summary import SinkBatchSummary, write_summary
from oncelog.spark.worker import settle


def stream_writer(raw_options, schema: StructType, overwrite: bool = False) -> IcebergStreamWriter:
    """Driver: the writer of one micro-batch. Fails here, before any task runs, on bad
    options, an unreachable catalog, a missing table (createTableIfMissing=false) or a
    DataFrame that does not fit the table."""
    with trace.step("iceberg.writer"):
        options = _parse(raw_options, overwrite, "outputMode complete")
        target = WriteTarget.of(options, open_table(options, schema))
    settle()
    return IcebergStreamWriter(options, target)


def batch_writer(raw_options, schema: StructType, overwrite: bool = False) -> IcebergBatchWriter:
    """Driver: the writer of a batch `df.write.format("oncelog-iceberg")`."""
    options = _parse(raw_options, overwrite, 'mode("overwrite")')
    return IcebergBatchWriter(options, WriteTarget.of(options, open_table(options, schema)))


def _parse(raw_options, overwrite: bool, what: str) -> IcebergSinkOptions:
    if overwrite:
        raise IcebergOptionError(f"the {FORMAT_NAME} sink appends; {what} is not supported")
    return parse_iceberg_options(raw_options)


class IcebergStreamWriter(DataSourceStreamArrowWriter):
    """Writes one micro-batch; see the module docstring. Created on the driver per
    micro-batch and pickled to executors; `commit`/`abort` run on a fresh instance."""

    def __init__(self, options: IcebergSinkOptions, target: WriteTarget) -> None:
        self.options = options
        self.target = target
        self.last_outcome: BatchOutcome | None = None  # what the last commit() did (tests read it)

    # Executor --------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> IcebergTaskResult:
        """Executor: this task attempt's rows as data files."""
        attempt = _current_attempt(self.options)
        with trace.step("iceberg.write", batch=attempt.batch_id, task=attempt.partition_id):
            result = self.write_as(attempt, iterator)
        settle()
        return result

    def write_as(self, attempt: AttemptIdentity, batches: Iterable[pa.RecordBatch]) -> IcebergTaskResult:
        """`write()` for an explicit attempt identity (tests replay attempts with it)."""
        return write_attempt(self.target.table_name, self.target.metadata, self.target.io_properties,
                             attempt, batches)

    # Driver ----------------------------------------------------------------------------------

    def commit(self, messages: list, batchId: int) -> None:
        """Driver, after every task of the batch succeeded. Idempotent per batchId (see
        oncelog.spark.iceberg.commit). Leaves the batch's figures for the pipeline runner."""
        results = _results(messages)
        query_id = results[0].query_id if results else read_query_id(self.options)
        if query_id is None:  # no task wrote (no messages) and no checkpoint to name the query
            self.last_outcome = None
            return
        with trace.step("iceberg.commit", batch=batchId):
            outcome = commit_batch(self.options, query_id, batchId, results)
        self.last_outcome = outcome
        write_summary(self.options.checkpoint_location, SinkBatchSummary(
            batch_id=batchId, mode=ICEBERG_MODE, records_written=outcome.records, commit_ms=outcome.commit_ms,
            # A batch without rows adds no snapshot: no decision to count.
            outcome={ALREADY_COMMITTED: "resumed", EMPTY: None}.get(outcome.outcome, "committed"),
        ))
        settle()

    def abort(self, messages: list, batchId: int) -> None:
        """Driver, when the batch failed (or commit raised): nothing is deleted
        (oncelog.spark.iceberg.commit.abort_batch says why); the batch's next commit cleans up."""
        results = _results(messages)
        abort_batch(self.options, results[0].query_id if results else read_query_id(self.options), batchId, results)


def _results(messages: list) -> list[IcebergTaskResult]:
    return [message for message in messages if isinstance(message, IcebergTaskResult)]


def _current_attempt(options: IcebergSinkOptions) -> AttemptIdentity:
    """Executor: this streaming task attempt, from Spark's TaskContext. The query id (stable
    across restarts from one checkpoint) is the local property sql.streaming.queryId."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise IcebergSinkError("write() must run inside a Spark task")
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    if batch_id is None:
        raise IcebergSinkError(f"the streaming {FORMAT_NAME} sink runs only in Structured Streaming queries")
    query_id = context.getLocalProperty("sql.streaming.queryId") or read_query_id(options)
    if not query_id:
        raise IcebergSinkError("the query id is unknown here: Spark did not set sql.streaming.queryId and option "
                               "checkpointLocation does not name the query's checkpoint")
    return AttemptIdentity(query_id, int(batch_id), context.partitionId(), context.attemptNumber())


class IcebergBatchWriter(DataSourceArrowWriter):
    """`df.write.format("oncelog-iceberg")`: the tasks write data files, the driver's commit
    appends them in one snapshot (summary: `oncelog.query-id` = `write-<token>`,
    `oncelog.batch-id` = 0). A failed write leaves the table as it was."""

    def __init__(self, options: IcebergSinkOptions, target: WriteTarget) -> None:
        self.options = options
        self.target = target
        self.write_id = f"write-{uuid.uuid4()}"
        self.last_outcome: BatchOutcome | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> IcebergTaskResult:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None  # write runs in a Spark task
        attempt = AttemptIdentity(self.write_id, 0, context.partitionId(), context.attemptNumber())
        return write_attempt(self.target.table_name, self.target.metadata, self.target.io_properties,
                             attempt, iterator)

    def commit(self, messages: list) -> None:
        self.last_outcome = commit_batch(self.options, self.write_id, 0, _results(messages))

    def abort(self, messages: list) -> None:
        abort_batch(self.options, self.write_id, 0, _results(messages))


__all__ = [
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "AttemptIdentity",
    "IcebergBatchWriter",
    "IcebergStreamWriter",
    "IcebergTaskResult",
    "batch_writer",
    "stream_writer",
]
