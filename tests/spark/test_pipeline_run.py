"""The pipeline runner end to end: a real broker, real Spark, the exactly-once sinks.

- through the `oncelog pipeline run` command (its own Spark driver process), with a
  transform loaded from a file whose Python UDF executors must import;
- through the command into an Iceberg table (`--sink iceberg:NAMESPACE.TABLE`) in the
  embedded SQLite catalog, read back with pyiceberg;
- through `run_pipeline` on the tests' Spark session, with --sql, in batch mode, and again
  from the same checkpoint.
The input holds committed and aborted transactions; the output is read with
read_committed (or from the table's current snapshot) and must hold each committed record
exactly once, and no aborted one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

from oncelog.spark.pipeline import PipelineSpec, Trigger, run_pipeline
from tests.support.kafka import create_topics
from tests.support.pipeline import produce_in_transactions, read_committed

ONCELOG = Path(sys.executable).with_name("oncelog")


def test_cli_runs_a_file_transform_with_arrow_and_pandas_udfs_and_writes_each_committed_record_exactly_once(
    shared_broker, tmp_path
):
    bootstrap = shared_broker.bootstrap_servers
    source, sink = f"cli-in-{uuid.uuid4().hex[:6]}", f"cli-out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2), (sink, 2))
    committed = [f"order-{i}".encode() for i in range(300)]
    aborted = [f"aborted-{i}".encode() for i in range(100)]
    produce_in_transactions(bootstrap, source, [(committed[:150], True), (aborted, False), (committed[150:], True)])
    # An Arrow-optimized Python UDF and a pandas UDF (pandas comes with oncelog): executors
    # must import this file's module, which the runner ships.
    transform = tmp_path / f"shout_{uuid.uuid4().hex[:6]}.py"
    transform.write_text(textwrap.dedent("""
        import pandas as pd
        from pyspark.sql import functions as F

        @F.udf("binary", useArrow=True)
        def shout(value):
            return value.upper()

        @F.pandas_udf("binary")
        def bang(values: pd.Series) -> pd.Series:
            return values.map(lambda value: value + b"!")

        def transform(source):
            return source.select("key", bang(shout("value")).alias("value"))
    """))

    completed = subprocess.run(
        [str(ONCELOG), "pipeline", "run", "--source", source, "--sink", sink,
         "--transform", f"{transform}:transform", "--checkpoint", str(tmp_path / "checkpoint"),
         "--bootstrap-servers", bootstrap, "--trigger", "available-now", "--master", "local[2]",
         "--progress", "json",
         "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"],
        check=False, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Warning" not in completed.stderr, completed.stderr  # e.g. Arrow optimization failed to enable
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    batches = [e for e in events if e["event"] == "batch"]
    assert events[0]["event"] == "started" and events[-1]["event"] == "finished"
    assert sum(b["records"] for b in batches) == 300
    output = read_committed(bootstrap, sink)
    assert Counter(output) == Counter(value.upper() + b"!" for value in committed)


def test_iceberg_sink_from_the_command_line_writes_each_committed_record_once_one_snapshot_per_micro_batch(
    spark, shared_broker, tmp_path
):
    """`--sink iceberg:shop.orders` parsed as the command parses it, run on the tests' Spark
    session (a Spark of its own would add 20 s), twice on one checkpoint, into the embedded
    SQLite catalog next to the checkpoint."""
    from pyiceberg.catalog import load_catalog

    from oncelog.spark.iceberg.commit import BATCH_ID_PROPERTY
    from oncelog.spark.pipeline import build_parser, spec_from_args

    bootstrap = shared_broker.bootstrap_servers
    source = f"lake-in-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2))
    first = [f"order-{i}".encode() for i in range(150)]
    produce_in_transactions(bootstrap, source, [(first[:80], True), ([b"aborted"] * 40, False), (first[80:], True)])
    checkpoint = tmp_path / "checkpoints" / "orders"
    spec = spec_from_args(build_parser().parse_args([
        "--source", source, "--sink", "iceberg:shop.orders",
        "--sql", "SELECT CAST(value AS STRING) AS body, partition, offset, timestamp FROM source",
        "--sink-option", "partitionBy=partition", "--checkpoint", str(checkpoint),
        "--bootstrap-servers", bootstrap, "--trigger", "available-now", "--max-offsets-per-trigger", "100",
        "--no-report",
    ]))
    lines: list[str] = []

    first_run = run_pipeline(spec, spark, emit=lines.append)
    second = [f"later-{i}".encode() for i in range(30)]
    produce_in_transactions(bootstrap, source, [(second, True)])
    second_run = run_pipeline(spec, spark, emit=lines.append)

    warehouse = tmp_path / "checkpoints" / "warehouse"  # the default: next to the checkpoint
    assert lines[0] == (f"writing Iceberg table shop.orders in the embedded SQLite catalog "
                        f"{warehouse}/catalog.db (its files under {warehouse})")
    appended = [line for line in lines if line.endswith(" rows appended to shop.orders in one snapshot")]
    assert len(appended) == first_run.batch_count + second_run.batch_count, lines
    assert (first_run.records, second_run.records) == (150, 30)
    table = load_catalog("default", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                         warehouse=f"file://{warehouse}").load_table("shop.orders")
    assert Counter(table.scan().to_arrow().column("body").to_pylist()) == Counter(
        value.decode() for value in first + second)
    assert [field.name for field in table.schema().fields] == ["body", "partition", "offset", "timestamp"]
    assert [field.name for field in table.spec().fields] == ["partition"]
    assert [int(snapshot.summary[BATCH_ID_PROPERTY]) for snapshot in table.snapshots() if snapshot.summary] == [
        batch.batch_id for run in (first_run, second_run) for batch in run.batches]
    assert all(batch.sink is not None and batch.sink.mode == "iceberg" for batch in first_run.batches)


def test_sql_pipeline_in_batch_mode_continues_from_its_checkpoint_without_duplicates(
    spark, shared_broker, tmp_path
):
    bootstrap = shared_broker.bootstrap_servers
    source, sink = f"sql-in-{uuid.uuid4().hex[:6]}", f"sql-out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2), (sink, 2))
    spec = PipelineSpec(
        source_topic=source, sink_topics=(sink,), checkpoint=str(tmp_path / "checkpoint"),
        bootstrap_servers=bootstrap, mode="batch", trigger=Trigger.parse("available-now"),
        sql="SELECT key, concat(value, CAST('-seen' AS BINARY)) AS value FROM source",
        max_offsets_per_trigger=60, progress="none",
    )
    first = [f"first-{i}".encode() for i in range(100)]
    produce_in_transactions(bootstrap, source, [(first, True), ([b"never"] * 20, False)])

    first_run = run_pipeline(spec, spark)
    second = [f"second-{i}".encode() for i in range(50)]
    produce_in_transactions(bootstrap, source, [(second, True)])
    second_run = run_pipeline(spec, spark)

    assert first_run.records == 100 and second_run.records == 50
    assert second_run.batches[0].batch_id == first_run.batches[-1].batch_id + 1
    assert Counter(read_committed(bootstrap, sink)) == Counter(v + b"-seen" for v in first + second)


def test_partition_mode_warns_of_a_nondeterministic_transform_and_batch_mode_does_not(spark, shared_broker):
    """Partition mode skips a re-run micro-batch's committed tasks, so it needs each task to
    get the same rows again: rand() does not promise that, a window count and
    current_timestamp() (fixed per micro-batch) do."""
    from oncelog.spark.pipeline import build_parser, spec_from_args
    from oncelog.spark.pipeline.query import build_output, nondeterministic_warning

    bootstrap = shared_broker.bootstrap_servers
    source = f"determinism-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2))

    def warning(sql: str, mode: str) -> str | None:
        spec = spec_from_args(build_parser().parse_args([
            "--source", source, "--sink", f"{source}-out", "--mode", mode, "--sql", sql,
            "--checkpoint", "/nonexistent", "--bootstrap-servers", bootstrap, "--no-report",
        ]))
        return nondeterministic_warning(build_output(spark, spec, []), spec)

    random_values = "SELECT key, CAST(rand() AS STRING) AS value FROM source"
    assert "nondeterministic" in (warning(random_values, "partition") or "")
    assert warning(random_values, "batch") is None
    assert warning("SELECT key, CAST(current_timestamp() AS STRING) AS value FROM source", "partition") is None
    assert warning("SELECT key, CAST(count(*) AS STRING) AS value FROM source "
                   "GROUP BY window(timestamp, '5 minutes'), key", "partition") is None
