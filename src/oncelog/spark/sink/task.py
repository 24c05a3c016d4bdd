"""Who is writing and what it reports: a task attempt's identity (from Spark's
TaskContext) and the commit message it sends the driver. Shared by the sink's two modes
(oncelog.spark.sink.partition_mode, batch_mode) and batch mode's driver side
(oncelog.spark.sink.batch_commit)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from oncelog.spark.sink.options import SinkError, SinkOptionError, SinkOptions


@dataclass(frozen=True)
class TaskIdentity:
    """Which task attempt of which micro-batch of which query this write is."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int

    @classmethod
    def current(cls, options: SinkOptions) -> TaskIdentity:
        """Executor: from Spark's TaskContext. The query id (stable across restarts from one
        checkpoint) is the local property sql.streaming.queryId; the checkpoint's metadata
        file is the fallback."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise SinkError("write() must run inside a Spark task")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if batch_id is None:
            raise SinkError("the streaming oncelog sink runs only in Structured Streaming queries")
        query_id = context.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            query_id = read_query_id(options)
        return cls(query_id, int(batch_id), context.partitionId(), context.attemptNumber())

    def describe(self, transactional_id: str) -> str:
        return f"task {self.partition_id} attempt {self.attempt} of batch {self.batch_id} ({transactional_id!r})"


@dataclass(frozen=True)
class TaskResult(WriterCommitMessage):
    """What a task attempt reports to the driver's commit."""

    mode: str
    query_id: str
    batch_id: int
    partition_id: int
    attempt: int
    records: int
    transactional_id: str | None = None  # batch mode: the prepared transaction; None when no rows
    producer_id: int = -1
    producer_epoch: int = -1
    skipped: bool = False  # partition mode: this batch's rows were committed by an earlier run
    topics: tuple[str, ...] = ()
    commit_ms: float = 0.0  # partition mode: the task's own commit (marker offset and EndTxn)


def read_query_id(options: SinkOptions) -> str:
    """The query id from `<checkpointLocation>/metadata`, which Spark writes before the first
    micro-batch."""
    if options.checkpoint_location is None:
        raise SinkError(
            "the query id is unknown here: Spark did not set sql.streaming.queryId and option "
            "checkpointLocation is not set"
        )
    path = options.checkpoint_location / "metadata"
    try:
        with open(path) as metadata:
            return json.loads(metadata.readline())["id"]
    except (OSError, ValueError, KeyError) as error:
        raise SinkOptionError(
            f"option checkpointLocation={options.checkpoint_location}: cannot read the query id "
            f"from {path} ({error}); it must be the same path as the query's checkpointLocation"
        ) from None
