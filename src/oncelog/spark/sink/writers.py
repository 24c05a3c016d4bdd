"""`df.writeStream.format("oncelog")`: an exactly-once Kafka sink for Structured Streaming,
and `df.write.format("oncelog")` for batch DataFrames. See docs/spark.md, "Sink".

Two modes (option `mode`):

- `partition` (default, any Kafka 2.5+ cluster): each task writes its rows in one
  transaction under `transactional.id = <prefix>-<queryId>-<partitionId>`, so a retried
  or speculative attempt fences the earlier one (InitProducerId). In the same
  transaction it commits offset `batchId + 1` for `<marker topic>-0` to the marker group
  named like the transactional id (TxnOffsetCommit, generation -1: the group has no
  members). A re-run of the batch reads that offset (OffsetFetch with require_stable)
  and writes nothing when it is past the batch. Each task's output is atomic; a
  micro-batch is not.
- `batch` (oncelog broker with KIP-939): each task attempt writes its rows in its own
  transaction and hands it over still open (InitProducerId v6, keepPreparedTxn); the
  driver's `commit(batchId)` records its decision durably under the checkpoint, then
  commits the recorded transactions and aborts everything else of the batch
  (oncelog.spark.sink.batch_commit). A "gate" transaction opened before the tasks write holds
  every output partition's last stable offset below the batch's records until all of
  them are committed, so a read_committed consumer sees a micro-batch's records of a
  partition all at once.

Tasks write through oncelog.client (oncelog.spark.sink.write, one function per mode): rows
become record batches a column at a time (oncelog.spark.sink.rows) and go out through a
TransactionalProducer that speaks the standard transaction APIs; connections are kept by
the Python worker for its next task.

Where code runs:
- `OncelogDataSource.streamWriter()` / `writer()` (source/data_source.py) call `stream_writer()` /
  `batch_writer()` here, on the driver, once per micro-batch for the tasks and again in the
  fresh Python worker that runs `commit`/`abort` (no driver state survives between calls).
- `write()` runs on executors: one call per task attempt, rows as pyarrow RecordBatches.
- Writers are pickled to executors: they hold only options and plain values.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from oncelog.client.cluster import shared_cluster
from oncelog.client.config import ClientConfig
from oncelog.client.errors import AuthenticationFailed, ClientError
from oncelog.spark import trace
from oncelog.spark.errors import ClusterUnreachable
from oncelog.spark.pause import pause_point
from oncelog.spark.sink.batch_commit import (
    BatchCommitter,
)
from oncelog.spark.sink.options import (
    BATCH_MODE,
    PARTITION_MODE,
    SinkOptionError,
    SinkOptions,
    SinkWriteError,
    check_client_settings,
    parse_sink_options,
)
from oncelog.spark.sink.rows import RowWriter, check_input_schema, nonempty_batches
from oncelog.spark.sink.task import TaskIdentity, TaskResult, read_query_id
from oncelog.spark.sink.twophase import TwoPhaseClient
from oncelog.spark.sink.write import abort_quietly, describe_error, new_producer, write_batch_mode, write_partition_mode
from oncelog.spark.sink_summary import SinkBatchSummary, read_summary, write_summary
from oncelog.spark.worker import settle

logger = logging.getLogger("oncelog.spark.sink")

# How long a successful reachability check holds for this process (the driver's Python
# workers are reused from one micro-batch to the next).
REACHABLE_FOR_S = 60.0

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
    if options.mode == BATCH_MODE:
        writer.prepare_batch_on_driver()
    else:
        check_reachable(options)
        warn_of_fan_out(options, schema)
    return writer


_warned_of_fan_out: set[SinkOptions] = set()


def warn_of_fan_out(options: SinkOptions, schema: StructType) -> None:
    """Driver, mode=partition: rows routed to several topics by the `topic` column are
    atomic per task (one transaction covers the task's rows to every topic), not per
    micro-batch; said once per process and set of options, in the driver's log."""
    if len(options.topics) == 1 or "topic" not in {field.name.lower() for field in schema.fields}:
        return  # one topic allowed: nothing fans out
    once_per = dataclasses.replace(options, micro_batch_id=None)  # not once per foreachBatch micro-batch
    if once_per in _warned_of_fan_out:
        return
    _warned_of_fan_out.add(once_per)
    logger.warning(
        "oncelog sink, mode=partition, rows with a 'topic' column: each task's rows to every topic commit "
        "together, but a micro-batch's tasks commit one by one, so a read_committed consumer may see one "
        "topic's records of a micro-batch before another's. For a micro-batch visible everywhere at once, "
        "use mode=batch with option topics naming every output topic"
    )


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


# -- driver checks -------------------------------------------------------------------------

_reachable_at: dict[ClientConfig, float] = {}


def check_reachable(options: SinkOptions) -> None:
    """Driver: a metadata round trip, so an unreachable cluster fails the query with a
    message naming the option instead of failing every task attempt after its timeout.
    Once it answered, this process does not ask again for REACHABLE_FOR_S."""
    checked = _reachable_at.get(options.client)
    if checked is not None and time.monotonic() - checked < REACHABLE_FOR_S:
        return
    cluster = shared_cluster(options.client)
    timeout_ms = min(options.cluster_timeout_ms, 30_000)
    try:
        cluster.retrying("Metadata", time.monotonic() + timeout_ms / 1000, lambda: cluster.refresh_metadata(()))
    except AuthenticationFailed as error:  # it answered: the credentials (kafka.sasl.*) are wrong
        raise ClusterUnreachable(f"kafka.bootstrap.servers={options.bootstrap_servers} refused the kafka.sasl.* "
                                 f"credentials: {error}") from None
    except ClientError as error:
        raise ClusterUnreachable(
            f"no answer from kafka.bootstrap.servers={options.bootstrap_servers} "
            f"(waited up to clusterTimeoutMs={timeout_ms}): {error}"
        ) from None
    _reachable_at[options.client] = time.monotonic()


# -- streaming writer ------------------------------------------------------------------------


class OncelogStreamWriter(DataSourceStreamArrowWriter):
    """Writes one micro-batch; see the module docstring. Created on the driver per
    micro-batch and pickled to executors; `commit`/`abort` run on a fresh instance."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # Unique to this execution of the micro-batch: batch mode's transactional ids carry
        # it, so a batch re-run after a restart never reuses (and, through InitProducerId,
        # aborts) a transaction an earlier run handed to the driver and may have decided on.
        self.run_token = uuid.uuid4().hex[:8]

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
        if self.options.mode == PARTITION_MODE:
            return write_partition_mode(self.options, task, iterator)
        return write_batch_mode(self.options, task, self.run_token, iterator)

    # Driver --------------------------------------------------------------------------------

    def prepare_batch_on_driver(self) -> None:
        """Driver, mode=batch, before the batch's tasks write: check the cluster does 2PC and
        open the gate."""
        query_id = read_query_id(self.options)
        with TwoPhaseClient(self.options.client, self.options.cluster_timeout_s) as client:
            client.check_two_phase_commit()
            BatchCommitter(self.options, query_id, client).open_gate()

    def commit(self, messages: list, batchId: int) -> None:
        """Driver, after every task of the batch succeeded. Idempotent per batchId: Spark calls
        it again after a restart when it stopped before writing its commit log. Leaves the
        batch's figures for the pipeline runner (oncelog.spark.sink_summary)."""
        results = _results(messages)
        if self.options.mode == PARTITION_MODE:
            # The tasks committed; nothing is left to do but to say what they wrote.
            committed = [result for result in results if not result.skipped and result.records]
            write_summary(self.options.checkpoint_location, SinkBatchSummary(
                batch_id=batchId, mode=PARTITION_MODE, records_written=sum(r.records for r in committed),
                commit_ms=max((r.commit_ms for r in committed), default=None),
            ))
            pause_point("commit:return:partition")
            settle()
            return
        query_id = read_query_id(self.options)
        with (trace.step("sink.batch_commit", batch=batchId),
              TwoPhaseClient(self.options.client, self.options.cluster_timeout_s) as client):
            done = BatchCommitter(self.options, query_id, client).commit(results, batchId)
        earlier = read_summary(self.options.checkpoint_location, batchId)
        write_summary(self.options.checkpoint_location, SinkBatchSummary(
            batch_id=batchId, mode=BATCH_MODE, records_written=done.records, commit_ms=done.commit_ms,
            outcome=done.outcome, aborted=0 if earlier is None else earlier.aborted,
        ))
        pause_point("commit:return:batch")
        settle()

    def abort(self, messages: list, batchId: int) -> None:
        """Driver, when the batch failed (or commit raised). Partition mode: tasks that
        committed stay committed, and a re-run skips them. Batch mode: aborts the batch's
        transactions unless a commit decision was already recorded."""
        if self.options.mode == PARTITION_MODE:
            return
        query_id = read_query_id(self.options)
        with TwoPhaseClient(self.options.client, self.options.cluster_timeout_s) as client:
            aborted = BatchCommitter(self.options, query_id, client).abort(_results(messages), batchId)
        if aborted:
            earlier = read_summary(self.options.checkpoint_location, batchId)
            write_summary(self.options.checkpoint_location, SinkBatchSummary(
                batch_id=batchId, mode=BATCH_MODE, records_written=0, commit_ms=None, outcome="aborted",
                aborted=1 + (0 if earlier is None else earlier.aborted),
            ))


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

