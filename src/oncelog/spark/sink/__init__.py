"""The Kafka sink, `writeStream.format("oncelog")` and `write.format("oncelog")`: exactly once
into Kafka topics. See docs/spark.md, "Sink".

- writers: the writers Spark calls (`stream_writer()`, `batch_writer()`) and the driver's
  checks before any task writes;
- options: the sink's options (`SinkOptions`) and its errors;
- rows: which columns it takes and how a task's Arrow batches become record batches;
- task: a task attempt's identity and the commit message it sends the driver;
- write: a task's write in each mode (executor side);
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
