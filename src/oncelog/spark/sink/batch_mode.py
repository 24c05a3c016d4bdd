"""The sink's batch mode (`mode=batch`; an oncelog broker with KIP-939): each task attempt
writes its rows in its own transaction and hands it over still open (InitProducerId v6,
keepPreparedTxn); the driver's `commit(batchId)` records its decision durably under the
checkpoint, then commits the recorded transactions and aborts everything else of the batch
(oncelog.spark.sink.batch_commit). A gate transaction opened before the tasks write holds
every output partition's last stable offset below the batch's records until all of them are
committed. See oncelog.spark.sink.writers for the writers Spark calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import asdict

from pyspark.sql.types import StructType

from oncelog.client.errors import ClientError
from oncelog.spark import trace
from oncelog.spark.pause import pause_point
from oncelog.spark.sink.batch_commit import BatchCommitter, batch_transactional_prefix
from oncelog.spark.sink.options import BATCH_MODE, SinkOptions, SinkWriteError
from oncelog.spark.sink.producing import abort_quietly, describe_error, new_producer, timed_rows, write_rows
from oncelog.spark.sink.rows import RowWriter
from oncelog.spark.sink.task import TaskIdentity, TaskResult, read_query_id
from oncelog.spark.sink.twophase import TwoPhaseClient
from oncelog.spark.sink_summary import SinkBatchSummary, read_summary, write_summary
from oncelog.spark.worker import settle


class BatchMode:
    """Batch mode's four steps (see oncelog.spark.sink.modes). Pickled to executors with the
    writer: it holds only the options and the run token."""

    name = BATCH_MODE

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        # Unique to this execution of the micro-batch: the tasks' transactional ids carry it,
        # so a batch re-run after a restart never reuses (and, through InitProducerId,
        # aborts) a transaction an earlier run handed to the driver and may have decided on.
        self.run_token = uuid.uuid4().hex[:8]

    def prepare(self, schema: StructType) -> None:
        """Driver, before the micro-batch's tasks write: check the cluster does 2PC and open
        the gate."""
        query_id = read_query_id(self.options)
        with TwoPhaseClient(self.options.client, self.options.cluster_timeout_s) as client:
            client.check_two_phase_commit()
            BatchCommitter(self.options, query_id, client).open_gate()

    def write(self, task: TaskIdentity, batches: Iterable) -> TaskResult:
        """Executor: the task attempt's rows in its own transaction, handed over still open
        (keepPreparedTxn) for the driver to commit or abort."""
        options = self.options
        transactional_id = batch_transactional_id(options, task, self.run_token)
        result = TaskResult(BATCH_MODE, task.query_id, task.batch_id, task.partition_id, task.attempt, 0)
        where = {"batch": task.batch_id, "task": task.partition_id}
        waiting = trace.Stopwatch("sink.upstream_wait", **where)
        rows = timed_rows(batches, waiting)
        first = next(rows, None)
        if first is None:
            waiting.record()
            return result
        producer = new_producer(options, transactional_id)
        handed_over = False
        try:
            with trace.step("sink.init", **where):
                producer.init()
            producer.begin()
            writer = RowWriter(producer, producer.cluster, options)
            write_rows(writer, first, rows, where)
            with trace.step("sink.flush", **where):
                producer.flush()
            pause_point("batch:before-handover")  # every row is in the open transaction
            with (trace.step("sink.handover", **where),
                  TwoPhaseClient(options.client, options.cluster_timeout_s) as client):
                kept = client.keep_prepared(transactional_id)
            handed_over = True
            if not kept.has_ongoing:
                raise SinkWriteError(
                    f"the transaction of {transactional_id!r} ended before it was handed over "
                    "(did the task run longer than kafka.transaction.timeout.ms?)"
                )
            pause_point("batch:after-handover")
            return TaskResult(
                **{**asdict(result), "records": writer.count, "transactional_id": transactional_id,
                   "producer_id": kept.producer_id, "producer_epoch": kept.producer_epoch,
                   "topics": tuple(sorted(writer.topics))},
            )
        except ClientError as error:
            raise SinkWriteError(describe_error(error, options, task.describe(transactional_id))) from None
        finally:
            waiting.record()
            if not handed_over:
                abort_quietly(producer)

    def commit(self, results: list[TaskResult], batch_id: int) -> None:
        """Driver: record the decision, commit the recorded transactions, abort the rest of
        the batch's (idempotent: BatchCommitter.commit)."""
        query_id = read_query_id(self.options)
        with (trace.step("sink.batch_commit", batch=batch_id),
              TwoPhaseClient(self.options.client, self.options.cluster_timeout_s) as client):
            done = BatchCommitter(self.options, query_id, client).commit(results, batch_id)
        earlier = read_summary(self.options.checkpoint_location, batch_id)
        write_summary(self.options.checkpoint_location, SinkBatchSummary(
            batch_id=batch_id, mode=BATCH_MODE, records_written=done.records, commit_ms=done.commit_ms,
            outcome=done.outcome, aborted=0 if earlier is None else earlier.aborted,
        ))
        pause_point("commit:return:batch")
        settle()

    def abort(self, results: list[TaskResult], batch_id: int) -> None:
        """Driver: abort the batch's transactions unless a commit decision was already
        recorded."""
        query_id = read_query_id(self.options)
        with TwoPhaseClient(self.options.client, self.options.cluster_timeout_s) as client:
            aborted = BatchCommitter(self.options, query_id, client).abort(results, batch_id)
        if aborted:
            earlier = read_summary(self.options.checkpoint_location, batch_id)
            write_summary(self.options.checkpoint_location, SinkBatchSummary(
                batch_id=batch_id, mode=BATCH_MODE, records_written=0, commit_ms=None, outcome="aborted",
                aborted=1 + (0 if earlier is None else earlier.aborted),
            ))


def batch_transactional_id(options: SinkOptions, task: TaskIdentity, run_token: str) -> str:
    return (
        f"{batch_transactional_prefix(options, task.query_id)}{task.batch_id}-{run_token}-"
        f"{task.partition_id}-{task.attempt}"
    )
