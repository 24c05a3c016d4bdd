"""The sink's partition mode (`mode=partition`, the default; any Kafka 2.5+ cluster): each task
writes its rows and its micro-batch marker in one transaction it commits itself, under
`<prefix>-<queryId>-<partitionId>`, so a retried or speculative attempt fences the earlier
one; a re-run finds the marker past its batch and writes nothing. Each task's output is
atomic, a micro-batch is not. See oncelog.spark.sink.writers for the writers Spark calls.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import asdict

from pyspark.sql.types import StructType

from oncelog.client.errors import ClientError
from oncelog.client.groups import committed_offset
from oncelog.names import sink_task_id
from oncelog.spark import trace
from oncelog.spark.pause import pause_point
from oncelog.spark.sink.options import PARTITION_MODE, SinkOptions, SinkWriteError
from oncelog.spark.sink.producing import abort_quietly, describe_error, new_producer, timed_rows, write_rows
from oncelog.spark.sink.reachable import check_reachable
from oncelog.spark.sink.rows import RowWriter, first_topic
from oncelog.spark.sink.task import TaskIdentity, TaskResult
from oncelog.spark.sink_summary import SinkBatchSummary, write_summary
from oncelog.spark.worker import settle

logger = logging.getLogger("oncelog.spark.sink")


class PartitionMode:
    """Partition mode's four steps (see oncelog.spark.sink.modes). Pickled to executors with
    the writer: it holds only the options."""

    name = PARTITION_MODE

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def prepare(self, schema: StructType) -> None:
        """Driver, before the micro-batch's tasks write: the cluster answers; a fan-out over
        several topics is said to be atomic per task only."""
        check_reachable(self.options)
        warn_of_fan_out(self.options, schema)

    def write(self, task: TaskIdentity, batches: Iterable) -> TaskResult:
        """Executor: the task's rows and its marker in one transaction the task commits;
        nothing written when the marker says an earlier attempt or run committed the batch."""
        options = self.options
        where = {"batch": task.batch_id, "task": task.partition_id}
        waiting = trace.Stopwatch("sink.upstream_wait", **where)
        rows = timed_rows(batches, waiting)
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
            write_rows(writer, first, rows, where)
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

    def commit(self, results: list[TaskResult], batch_id: int) -> None:
        """Driver: the tasks committed; nothing is left to do but to say what they wrote."""
        committed = [result for result in results if not result.skipped and result.records]
        write_summary(self.options.checkpoint_location, SinkBatchSummary(
            batch_id=batch_id, mode=PARTITION_MODE, records_written=sum(r.records for r in committed),
            commit_ms=max((r.commit_ms for r in committed), default=None),
        ))
        pause_point("commit:return:partition")
        settle()

    def abort(self, results: list[TaskResult], batch_id: int) -> None:
        """Driver: tasks that committed stay committed, and a re-run skips them."""


def partition_transactional_id(options: SinkOptions, query_id: str, partition_id: int) -> str:
    """Also the task's marker group (oncelog.names.sink_marker_query recognises it)."""
    return sink_task_id(options.transactional_id_prefix, query_id, partition_id)


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
