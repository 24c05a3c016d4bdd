"""The sink's modes (option `mode`), each one class with its own four steps, chosen once per
writer from the options (`sink_mode`): nothing else in the sink asks which mode it runs in.

| step | where | partition (PartitionMode) | batch (BatchMode) |
| --- | --- | --- | --- |
| `prepare` | driver, before the tasks | the cluster answers | 2PC is there; open the gate |
| `write` | executor, per task attempt | rows + marker, committed by the task | rows, handed over open |
| `commit` | driver, all tasks done | the figures only | decide, commit, abort the rest |
| `abort` | driver, the batch failed | nothing (committed tasks stay) | abort unless decided |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from pyspark.sql.types import StructType

from oncelog.spark.sink.batch_mode import BatchMode
from oncelog.spark.sink.options import BATCH_MODE, PARTITION_MODE, SinkOptions
from oncelog.spark.sink.partition_mode import PartitionMode
from oncelog.spark.sink.task import TaskIdentity, TaskResult


class SinkMode(Protocol):
    """One mode of the sink. Created on the driver with the writer and pickled to executors
    with it, so it holds only options and plain values."""

    name: str

    def prepare(self, schema: StructType) -> None:
        """Driver, once per micro-batch before its tasks write."""

    def write(self, task: TaskIdentity, batches: Iterable) -> TaskResult:
        """Executor: one task attempt's rows (pyarrow RecordBatches)."""
        ...

    def commit(self, results: list[TaskResult], batch_id: int) -> None:
        """Driver, after every task of the micro-batch succeeded (again after a restart)."""

    def abort(self, results: list[TaskResult], batch_id: int) -> None:
        """Driver, when the micro-batch failed (or commit raised)."""


SINK_MODES: dict[str, Callable[[SinkOptions], SinkMode]] = {
    PARTITION_MODE: PartitionMode,
    BATCH_MODE: BatchMode,
}


def sink_mode(options: SinkOptions) -> SinkMode:
    """The mode option `mode` names (parse_sink_options has checked it is one)."""
    return SINK_MODES[options.mode](options)
