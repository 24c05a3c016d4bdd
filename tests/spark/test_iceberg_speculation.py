"""The Iceberg sink with Spark's speculative execution on, for real (`make iceberg-faults`):
a standalone cluster of two workers on distinct loopback hosts (local mode never
speculates). The first task attempt to have written its data files stalls there (the
sink's pause point `iceberg:task-files-written`, set through spark.executorEnv); Spark
starts a copy on the other worker, the copy wins, and the stalled attempt is killed with
its files written.

The table must hold upper(value) of the committed input exactly once, some rows written by
a copy (attempt 1), and no data file that no snapshot references: the stalled attempt's
files, logged before it wrote them, are deleted by the driver after the batch's commit."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from oncelog.local.spark_cluster import StandaloneSpark
from oncelog.spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV
from tests.support.kafka import create_topics
from tests.support.spark import ICEBERG_PIPELINE, SPECULATION_CONF
from tests.support.spark.iceberg_tables import attempt_logs, column_counts, load_table, unreferenced_data_files
from tests.support.spark.topics import write_source

PIPELINE = ICEBERG_PIPELINE
STALL_AT = "iceberg:task-files-written"
TABLE = "lake.speculated"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_speculative_copy_wins_and_the_table_holds_each_record_once_without_the_losers_files(
        shared_broker, tmp_path):
    bootstrap = shared_broker.bootstrap_servers
    source = f"spec-iceberg-in-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2))
    committed = write_source(bootstrap, source, 2, transactions=6, per_transaction=10, prefix="iceberg")
    warehouse = tmp_path / "lake"
    warehouse.mkdir()
    (tmp_path / "standalone-spark").mkdir()
    with StandaloneSpark(workers=2, work_dir=tmp_path / "standalone-spark") as cluster:
        config = {
            "master": cluster.master_url,
            "conf": {**SPECULATION_CONF, f"spark.executorEnv.{PAUSE_AT_ENV}": STALL_AT,
                     f"spark.executorEnv.{PAUSE_FILE_ENV}": str(tmp_path / "stalled")},
            "query": {"bootstrap": bootstrap, "source": source, "table": TABLE, "warehouse_dir": str(warehouse),
                      "checkpoint": str(tmp_path / "checkpoint"), "max_offsets": 20},
        }
        completed = subprocess.run([sys.executable, str(PIPELINE), json.dumps(config)], check=False,
                                   capture_output=True, stdin=subprocess.DEVNULL, timeout=540)
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")[-4000:]
    assert (tmp_path / "stalled").read_text() == STALL_AT, "no task attempt stalled"

    table = load_table(warehouse, TABLE)
    assert column_counts(table) == Counter(value.upper() for value in committed)
    winners = Counter(table.scan(selected_fields=("attempt",)).to_arrow().column("attempt").to_pylist())
    assert any(attempt != 0 for attempt in winners), f"no speculative copy won: {winners}"
    assert unreferenced_data_files(table) == []
    assert attempt_logs(table) == []
