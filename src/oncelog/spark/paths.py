"""Locations the connectors read and write with plain file calls (a query's checkpoint)."""

from __future__ import annotations

import re
from pathlib import Path

# Under a query's checkpointLocation, the sinks' own files: the Kafka sink's batch-mode
# decisions (oncelog.spark.sink.batch_commit) and both sinks' per-micro-batch summaries
# (oncelog.spark.sink_summary), each kept for the last DECISIONS_KEPT micro-batches.
SINK_STATE_DIR = "oncelog-sink"
DECISIONS_KEPT = 100  # like spark.sql.streaming.minBatchesToRetain's default

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def local_path(location: str) -> Path | None:
    """`location` as an absolute local path (`file://` and `file:` are local), or None
    when it names another filesystem (hdfs://, s3a://, ...)."""
    value = location.strip()
    if value.startswith("file://"):
        value = value[len("file://"):]
    elif value.startswith("file:"):
        value = value[len("file:"):]
    elif _URI.match(value):
        return None
    return Path(value).absolute()
