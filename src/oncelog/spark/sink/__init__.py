"""The Kafka sink, `writeStream.format("oncelog")` and `write.format("oncelog")`: exactly once
into Kafka topics. See docs/spark.md, "Sink".

- writers: the writers Spark calls (`stream_writer()`, `batch_writer()`);
- modes: the table of the modes (option `mode`), one class each with its own prepare,
  write, commit and abort: partition_mode (`PartitionMode`) and batch_mode (`BatchMode`);
- options: the sink's options (`SinkOptions`) and its errors;
- reachable: the driver's check that the cluster answers;
- rows: which columns it takes and how a task's Arrow batches become record batches;
- producing: what a task of either mode writes with (its producer, its rows timed);
- task: a task attempt's identity and the commit message it sends the driver;
- batch_commit: batch mode's driver side (the gate, the decisions, `abandon_query`);
- twophase: the KIP-939 calls batch mode makes on the wire.

`abandon_query` is importable from here (docs/spark.md, docs/alerts.md), loaded when first
asked for: importing a part of the sink (its options) does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.spark.sink.batch_commit import abandon_query

__all__ = ["abandon_query"]


def __getattr__(name: str) -> Any:
    if name == "abandon_query":
        from oncelog.spark.sink.batch_commit import abandon_query

        return abandon_query
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
