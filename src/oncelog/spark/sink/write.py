"""A task's write, in either of the sink's modes (executor side; see oncelog.spark.sink for
the modes and the writer classes Spark calls):

- `write_partition_mode`: the task's rows and its micro-batch marker in one transaction the
  task commits itself; nothing written when the marker says an earlier attempt or run
  committed the batch already.
- `write_batch_mode`: the task attempt's rows in its own transaction, handed over still open
  (keepPreparedTxn) for the driver to commit or abort (oncelog.spark.sink.batch_commit).

Also the transactional ids each mode writes under, the producer a task writes with
(`new_producer`, `abort_quietly`; `df.write`'s writer uses them too), and a client error
worded for the task (`describe_error`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict

from oncelog.client.cluster import shared_cluster
from oncelog.client.errors import ClientError, ConnectionLost, Fenced, NoAnswer
from oncelog.client.groups import committed_offset
from oncelog.client.producer import TransactionalProducer
from oncelog.names import sink_task_id
from oncelog.spark import trace
from oncelog.spark.pause import pause_point
from oncelog.spark.sink.batch_commit import batch_transactional_prefix
from oncelog.spark.sink.options import BATCH_MODE, PARTITION_MODE, SinkOptions, SinkWriteError
from oncelog.spark.sink.rows import RowWriter, first_topic
from oncelog.spark.sink.task import TaskIdentity, TaskResult
from oncelog.spark.sink.twophase import TwoPhaseClient


def new_producer(options: SinkOptions, transactional_id: str) -> TransactionalProducer:
    return TransactionalProducer(shared_cluster(options.client), transactional_id, options.producer_settings,
                                 timeout_s=options.cluster_timeout_s)


# -- partition mode (executor) ------------------------------------------------------------------


def partition_transactional_id(options: SinkOptions, query_id: str, partition_id: int) -> str:
    """Also the task's marker group (oncelog.names.sink_marker_query recognises it)."""
    return sink_task_id(options.transactional_id_prefix, query_id, partition_id)


def _timed_rows(batches: Iterable, waiting: trace.Stopwatch) -> Iterator:
    """The task's non-empty Arrow batches; `waiting` times how long each took to come
    (the read, the transform and Spark's conversions upstream of this writer)."""
    upstream = iter(batches)
    while True:
        waiting.start()
        batch = next(upstream, None)
        waiting.stop()
        if batch is None:
            return
        if batch.num_rows:
            yield batch


def _write_rows(writer: RowWriter, first, rows, where: dict) -> None:
    writing = trace.Stopwatch("sink.rows", **where)
    writing.start()
    writer.write(first)
    writing.stop()
    for batch in rows:
        writing.start()
        writer.write(batch)
        writing.stop()
    writing.record(records=writer.count)


def write_partition_mode(options: SinkOptions, task: TaskIdentity, batches: Iterable) -> TaskResult:
    where = {"batch": task.batch_id, "task": task.partition_id}
    waiting = trace.Stopwatch("sink.upstream_wait", **where)
    rows = _timed_rows(batches, waiting)
    first = next(rows, None)
    result = TaskResult(PARTITION_MODE, task.query_id, task.batch_id, task.partition_id, task.attempt, 0)
    if first is None:
        return result
    transactional_id = partition_transactional_id(options, task.query_id, task.partition_id)
    # The same on every re-run: the option's topic, else the first of option topics; only
    # without either the first row's (the same on a re-run only if the rows' order is).
    marker_topic = options.topic or (options.topics[0] if options.topics else first_topic(first, None))
    producer = new_producer(options, transactional_id)
    began = False
    try:
        with trace.step("sink.init", **where):  # fences every earlier attempt of this partition
            producer.init()
        with trace.step("sink.marker_check", **where):
            committed = committed_offset(producer.cluster, transactional_id, marker_topic, 0,
                                         deadline=time.monotonic() + options.cluster_timeout_s)
        if committed > task.batch_id:
            for _ in rows:  # an earlier attempt or run committed this batch's rows
                pass
            return TaskResult(**{**asdict(result), "skipped": True})
        producer.begin()
        began = True
        writer = RowWriter(producer, producer.cluster, options)
        _write_rows(writer, first, rows, where)
        with trace.step("sink.flush", **where):
            producer.flush()
        pause_point("partition:before-task-commit")  # every row is in the open transaction
        committing = time.perf_counter()
        with trace.step("sink.send_offsets", **where):
            producer.send_offsets(transactional_id, {(marker_topic, 0): task.batch_id + 1})
        with trace.step("sink.commit", **where):
            producer.commit()
        commit_ms = (time.perf_counter() - committing) * 1000
        began = False
        pause_point("partition:after-task-commit")
        return TaskResult(**{**asdict(result), "records": writer.count, "topics": tuple(sorted(writer.topics)),
                             "commit_ms": commit_ms})
    except ClientError as error:
        raise SinkWriteError(describe_error(error, options, task.describe(transactional_id))) from None
    finally:
        waiting.record()
        if began:
            abort_quietly(producer)


def abort_quietly(producer: TransactionalProducer) -> None:
    try:
        producer.abort()
    except ClientError:  # fenced or unreachable: the next InitProducerId of the id aborts it
        pass


def describe_error(error: ClientError, options: SinkOptions, where: str) -> str:
    if isinstance(error, Fenced):
        return f"{where} was fenced by a newer attempt of the same task (a retry or speculative copy)"
    if isinstance(error, (NoAnswer, ConnectionLost)):
        return (
            f"{where}: kafka.bootstrap.servers={options.bootstrap_servers} did not answer within "
            f"clusterTimeoutMs={options.cluster_timeout_ms}: {error}"
        )
    return f"{where}: {error}"


# -- batch mode (executor) --------------------------------------------------------------------


def batch_transactional_id(options: SinkOptions, task: TaskIdentity, run_token: str) -> str:
    return (
        f"{batch_transactional_prefix(options, task.query_id)}{task.batch_id}-{run_token}-"
        f"{task.partition_id}-{task.attempt}"
    )


def write_batch_mode(options: SinkOptions, task: TaskIdentity, run_token: str, batches: Iterable) -> TaskResult:
    transactional_id = batch_transactional_id(options, task, run_token)
    result = TaskResult(BATCH_MODE, task.query_id, task.batch_id, task.partition_id, task.attempt, 0)
    where = {"batch": task.batch_id, "task": task.partition_id}
    waiting = trace.Stopwatch("sink.upstream_wait", **where)
    rows = _timed_rows(batches, waiting)
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
        _write_rows(writer, first, rows, where)
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
