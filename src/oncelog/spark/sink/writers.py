"""`df.writeStream.format("oncelog")`: an exactly-once Kafka sink for Structured Streaming,
and `df.write.format("oncelog")` for batch DataFrames. See docs/spark.md, "Sink".

Two modes (option `mode`), each one class chosen once per writer (oncelog.spark.sink.modes):

- `partition` (default, any Kafka 2.5+ cluster; oncelog.spark.sink.partition_mode): each
  task writes its rows in one transaction under `transactional.id =
  <prefix>-<queryId>-<partitionId>`, so a retried or speculative attempt fences the earlier
  one (InitProducerId). In the same transaction it commits offset `batchId + 1` for
  `<marker topic>-0` to the marker group named like the transactional id (TxnOffsetCommit,
  generation -1: the group has no members). A re-run of the batch reads that offset
  (OffsetFetch with require_stable) and writes nothing when it is past the batch. Each
  task's output is atomic; a micro-batch is not.
- `batch` (oncelog broker with KIP-939; oncelog.spark.sink.batch_mode): each task attempt
  writes its rows in its own transaction and hands it over still open (InitProducerId v6,
  keepPreparedTxn); the driver's `commit(batchId)` records its decision durably under the
  checkpoint, then commits the recorded transactions and aborts everything else of the
  batch (oncelog.spark.sink.batch_commit). A "gate" transaction opened before the tasks
  write holds every output partition's last stable offset below the batch's records until
  all of them are committed, so a read_committed consumer sees a micro-batch's records of a
  partition all at once.

Tasks write through oncelog.client: rows become record batches a column at a time
(oncelog.spark.sink.rows) and go out through a TransactionalProducer that speaks the
standard transaction APIs (oncelog.spark.sink.producing); connections are kept by the
Python worker for its next task.

Where code runs:
- `OncelogDataSource.streamWriter()` / `writer()` (source/data_source.py) call `stream_writer()` /
  `batch_writer()` here, on the driver, once per micro-batch for the tasks and again in the
  fresh Python worker that runs `commit`/`abort` (no driver state survives between calls).
- `write()` runs on executors: one call per task attempt, rows as pyarrow RecordBatches.
- Writers are pickled to executors: they hold only options and plain values.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from oncelog.client.errors import ClientError
from oncelog.spark import trace
from oncelog.spark.sink.modes import sink_mode
from oncelog.spark.sink.options import (
    SinkOptionError,
    SinkOptions,
    SinkWriteError,
    check_client_settings,
    parse_sink_options,
)
from oncelog.spark.sink.producing import abort_quietly, describe_error, new_producer
from oncelog.spark.sink.reachable import check_reachable
from oncelog.spark.sink.rows import RowWriter, check_input_schema, nonempty_batches
from oncelog.spark.sink.task import TaskIdentity, TaskResult, read_query_id
from oncelog.spark.worker import settle

# -- entry points (called by OncelogDataSource) -----------------------------------------------


def stream_writer(raw_options, schema: StructType) -> OncelogStreamWriter:
    """Driver: the writer of one micro-batch (or the one that commits it). Fails here, before
    any task runs, on bad options, a schema without the needed columns, an unreachable
    cluster, or (mode=batch) a cluster without 2PC."""
    with trace.step("sink.writer"):
        options = parse_sink_options(raw_options, streaming=True)
        check_client_settings(options)
        check_input_schema(schema, options)
        writer = _prepared_stream_writer(options, schema)
    settle()
    return writer


def _prepared_stream_writer(options: SinkOptions, schema: StructType) -> OncelogStreamWriter:
    writer = OncelogStreamWriter(options, schema)
    writer.prepare_on_driver()
    return writer


def batch_writer(raw_options, schema: StructType) -> OncelogBatchWriter | OncelogMicroBatchWriter:
    """Driver: the writer of a batch `df.write.format("oncelog")`; with option
    microBatchId, of that micro-batch of a streaming query, inside `foreachBatch`."""
    options = parse_sink_options(raw_options, streaming=False)
    check_client_settings(options)
    check_input_schema(schema, options)
    if options.micro_batch_id is not None:
        with trace.step("sink.writer", batch=options.micro_batch_id):
            stream = _prepared_stream_writer(options, schema)
        return OncelogMicroBatchWriter(stream, options.micro_batch_id, read_query_id(options))
    check_reachable(options)
    return OncelogBatchWriter(options, schema)


# -- streaming writer ------------------------------------------------------------------------


class OncelogStreamWriter(DataSourceStreamArrowWriter):
    """Writes one micro-batch; see the module docstring. Created on the driver per
    micro-batch and pickled to executors; `commit`/`abort` run on a fresh instance."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.mode = sink_mode(options)  # its prepare, write, commit and abort (oncelog.spark.sink.modes)

    # Executor ------------------------------------------------------------------------------

    def write(self, iterator: Iterator) -> TaskResult:
        """Executor: this task's rows (pyarrow RecordBatches), written transactionally."""
        return self.write_task(TaskIdentity.current(self.options), iterator)

    def write_task(self, task: TaskIdentity, iterator: Iterable) -> TaskResult:
        """Executor: `write` for the task attempt `task` (traced, the worker settled after)."""
        with trace.step("sink.write", batch=task.batch_id, task=task.partition_id):
            result = self.write_as(task, iterator)
        settle()
        return result

    def write_as(self, task: TaskIdentity, iterator: Iterable) -> TaskResult:
        """`write()` for an explicit task identity (tests replay attempts with it)."""
        return self.mode.write(task, iterator)

    # Driver --------------------------------------------------------------------------------

    def prepare_on_driver(self) -> None:
        """Driver, before the batch's tasks write: the mode's checks (the cluster answers;
        mode=batch: it does 2PC) and set-up (mode=batch: the gate)."""
        self.mode.prepare(self.schema)

    def commit(self, messages: list, batchId: int) -> None:
        """Driver, after every task of the batch succeeded. Idempotent per batchId: Spark calls
        it again after a restart when it stopped before writing its commit log. Leaves the
        batch's figures for the pipeline runner (oncelog.spark.sink_summary)."""
        self.mode.commit(_results(messages), batchId)

    def abort(self, messages: list, batchId: int) -> None:
        """Driver, when the batch failed (or commit raised). Partition mode: tasks that
        committed stay committed, and a re-run skips them. Batch mode: aborts the batch's
        transactions unless a commit decision was already recorded."""
        self.mode.abort(_results(messages), batchId)


def _results(messages: list) -> list[TaskResult]:
    return [message for message in messages if isinstance(message, TaskResult)]


# -- batch DataFrame writes ---------------------------------------------------------------------


@dataclass(frozen=True)
class BatchWriteResult(WriterCommitMessage):
    partition_id: int
    records: int


class OncelogBatchWriter(DataSourceArrowWriter):
    """`df.write.format("oncelog")`: each task writes its rows in one transaction (a retried
    task fences and aborts its failed predecessor's open transaction, but a task that
    committed and is then re-run for another reason writes again: at least once)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.job_token = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator) -> BatchWriteResult:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None  # write runs in a Spark task
        partition_id = context.partitionId()
        transactional_id = f"{self.options.transactional_id_prefix}-write-{self.job_token}-{partition_id}"
        rows = nonempty_batches(iterator)
        first = next(rows, None)
        if first is None:
            return BatchWriteResult(partition_id, 0)
        task = TaskIdentity("write-" + self.job_token, 0, partition_id, context.attemptNumber())
        producer = new_producer(self.options, transactional_id)
        began = False
        try:
            producer.init()
            producer.begin()
            began = True
            writer = RowWriter(producer, producer.cluster, self.options)
            writer.write(first)
            writer.write_all(rows)
            producer.commit()
            began = False
            return BatchWriteResult(partition_id, writer.count)
        except ClientError as error:
            raise SinkWriteError(describe_error(error, self.options, task.describe(transactional_id))) from None
        finally:
            if began:
                abort_quietly(producer)

    def commit(self, messages: list) -> None:
        """Driver: every task committed its own transaction already."""

    def abort(self, messages: list) -> None:
        """Driver: tasks that committed stay committed (at least once)."""


class OncelogMicroBatchWriter(DataSourceArrowWriter):
    """`batch_df.write.format("oncelog").option("microBatchId", batch_id)` inside
    `foreachBatch`: micro-batch `batch_id` of the streaming query whose checkpointLocation
    is given, written exactly as the streaming writer writes one (its transactional ids,
    marker offsets, gate and recorded decisions), so a re-run of the micro-batch after a
    restart is recognised as one. It exists for what a Python data source's streaming
    sink cannot be given: Spark takes update output mode only from sinks it knows can
    (SupportsStreamingUpdateAsAppend), and foreachBatch is one of them. One such write per
    micro-batch: a second one with the same id is taken for a re-run and writes nothing
    (write several topics through the `topic` column instead)."""

    def __init__(self, stream: OncelogStreamWriter, batch_id: int, query_id: str) -> None:
        self.stream = stream
        self.batch_id = batch_id
        self.query_id = query_id

    def write(self, iterator: Iterator) -> TaskResult:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None  # write runs in a Spark task
        # Inside foreachBatch the micro-batch's own ids reach the nested job's tasks too:
        # a microBatchId or checkpointLocation that is not this micro-batch's would make the
        # sink skip rows as "already written" by another micro-batch or query.
        for name, given in (("streaming.sql.batchId", str(self.batch_id)), ("sql.streaming.queryId", self.query_id)):
            actual = context.getLocalProperty(name)
            if actual is not None and actual != given:
                raise SinkOptionError(f"option microBatchId={self.batch_id} with checkpointLocation="
                                      f"{self.stream.options.checkpoint_location} is not the micro-batch this write "
                                      f"runs in ({name} is {actual}, not {given}); give foreachBatch's own batch id "
                                      "and the query's checkpoint")
        task = TaskIdentity(self.query_id, self.batch_id, context.partitionId(), context.attemptNumber())
        return self.stream.write_task(task, iterator)

    def commit(self, messages: list) -> None:
        self.stream.commit(messages, self.batch_id)

    def abort(self, messages: list) -> None:
        self.stream.abort(messages, self.batch_id)

