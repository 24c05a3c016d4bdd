"""Bad input to the pipeline runner ends it with one line that says what is wrong, and
leaves nothing in the sink topic.

Options (an Iceberg sink's too), the broker, the topics, an Iceberg catalog and the
transform's module are checked before Spark starts (through `oncelog.cli.main`, and once
as a real command); a transform that fails while the query is built, columns that do not
fit an Iceberg table, or a record that fails is reported through Spark, the latter naming
the micro-batch, its source offsets and the failing task's partition."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from oncelog import cli
from oncelog.spark.pipeline import PipelineError, PipelineSpec, Trigger, run_pipeline

ONCELOG = Path(sys.executable).with_name("oncelog")


@pytest.fixture
def topics(shared_broker):
    """A fresh (source, sink) pair of 2-partition topics."""
    from confluent_kafka.admin import AdminClient, NewTopic

    names = (f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(30)
    return names


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["pipeline", "run", *args])
    return code, capsys.readouterr().err


def write_transform(directory: Path, body: str) -> str:
    path = directory / f"transform_{uuid.uuid4().hex[:8]}.py"
    path.write_text(textwrap.dedent(body))
    return f"{path}:transform"


def committed_records(bootstrap: str, topic: str) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    count, at_end = 0, set()
    for _ in range(100):
        for message in consumer.consume(100, 0.1):
            error = message.error()
            if error is None:
                count += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
        if len(at_end) == 2:
            break
    consumer.close()
    assert len(at_end) == 2
    return count


# -- before Spark starts ---------------------------------------------------------------------


def test_missing_source_topic_is_named(capsys, shared_broker, topics, tmp_path):
    _, sink = topics
    code, err = run_cli(capsys, "--source", "no-such-orders", "--sink", sink, "--sql", "SELECT value FROM source",
                        "--checkpoint", str(tmp_path), "--bootstrap-servers", shared_broker.bootstrap_servers)
    assert code == 1
    assert err.strip().splitlines() == [
        (f"oncelog: error: --source topic 'no-such-orders' does not exist on {shared_broker.bootstrap_servers} "
         f"(create it: oncelog topics create --bootstrap-server {shared_broker.bootstrap_servers} "
         "--topic no-such-orders)")
    ]


def test_missing_sink_topic_is_named(capsys, shared_broker, topics, tmp_path):
    source, _ = topics
    code, err = run_cli(capsys, "--source", source, "--sink", "no-such-output", "--sql", "SELECT value FROM source",
                        "--checkpoint", str(tmp_path), "--bootstrap-servers", shared_broker.bootstrap_servers)
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "--sink topic 'no-such-output' does not exist" in err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--conf", "spark.executor.memory"], "--conf expects KEY=VALUE, got 'spark.executor.memory'"),
        (["--trigger", "soon"], "--trigger 'soon': use available-now, once, or processing-time=<N>[ms|s|m]"),
        (["--max-offsets-per-trigger", "0"], "--max-offsets-per-trigger must be positive"),
        (["--transform", "no_colon_here"], "use module:function or path/to/file.py:function"),
        (["--transform", "no_such_module_anywhere:transform"],
         "cannot import 'no_such_module_anywhere': No module named 'no_such_module_anywhere'"),
        (["--transform", "/nonexistent/enrich.py:transform"], "no file '/nonexistent/enrich.py'"),
        (["-X", "no.such.key=1"],
         'oncelog: error: invalid client configuration: No such configuration property: "no.such.key"'),
    ],
    ids=["conf-without-value", "unknown-trigger", "zero-max-offsets", "transform-without-function",
         "transform-module-missing", "transform-file-missing", "x-property-librdkafka-does-not-know"],
)
def test_bad_option_is_one_line(capsys, shared_broker, topics, tmp_path, arguments, message):
    source, sink = topics
    base = ["--source", source, "--sink", sink, "--checkpoint", str(tmp_path),
            "--bootstrap-servers", shared_broker.bootstrap_servers]
    if "--transform" not in arguments:
        base += ["--sql", "SELECT value FROM source"]
    code, err = run_cli(capsys, *base, *arguments)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oncelog: error: "), err
    assert message in lines[0]


def test_unreachable_broker_is_one_line_from_the_command(tmp_path):
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{placeholder.getsockname()[1]}"
    completed = subprocess.run(
        [str(ONCELOG), "pipeline", "run", "--source", "orders", "--sink", "enriched", "--sql",
         "SELECT value FROM source", "--checkpoint", str(tmp_path), "--bootstrap-servers", address],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 1
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"oncelog: error: cannot reach the broker at --bootstrap-server {address}: ")


def test_a_misspelt_sink_setting_is_one_line_before_spark_starts(capsys, shared_broker, topics, tmp_path):
    source, sink = topics
    code, err = run_cli(capsys, "--source", source, "--sink", sink, "--sql", "SELECT value FROM source",
                        "--checkpoint", str(tmp_path), "--bootstrap-server", shared_broker.bootstrap_servers,
                        "--sink-option", "kafka.no.such.prop=1")
    assert code == 1
    assert err.strip().splitlines() == [
        ('oncelog: error: --sink-option: kafka.* options rejected by librdkafka: '
         'No such configuration property: "no.such.prop"')
    ]


ICEBERG = ["--sink", "iceberg:db.orders"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--sink", "iceberg:"], "--sink iceberg:: give the table, as iceberg:NAMESPACE.TABLE (e.g. iceberg:db."),
        (["--sink", "iceberg:orders"], "--sink iceberg:orders: the table must be namespace.table (letters, digits"),
        (["--sink", "ICEBERG:db.x"], "--sink 'ICEBERG:db.x' is not a legal topic name (an Iceberg table: --sink"),
        ([*ICEBERG, "--mode", "batch"], "--mode batch is the Kafka sink's: an Iceberg sink commits each micro-batch "),
        ([*ICEBERG, "--transactional-id-prefix", "lake"], "--transactional-id-prefix is the Kafka sink's: an Iceberg "),
        ([*ICEBERG, "--iceberg-catalog", "uri"], "--iceberg-catalog expects KEY=VALUE, got 'uri'"),
        ([*ICEBERG, "--iceberg-catalog", "catalog.uri=sqlite:///c.db"],
         "--iceberg-catalog takes the catalog's own property names: uri=..., not catalog.uri=..."),
        ([*ICEBERG, "--iceberg-catalog", "type=rest", "--warehouse", "/data/lake"],
         "--warehouse is the embedded catalog's directory: with --iceberg-catalog, give the catalog's own warehouse"),
        (["--sink", "enriched", "--iceberg-catalog", "type=sql"],
         "--iceberg-catalog is for an Iceberg sink (--sink iceberg:NAMESPACE.TABLE), not the topic 'enriched'"),
        ([*ICEBERG, "--sink-option", "kafka.linger.ms=5"],
         "--sink-option: unknown option 'kafka.linger.ms' for the oncelog-iceberg sink; it takes table, catalogName"),
    ],
    ids=["no-table", "no-namespace", "prefix-not-lower-case", "mode", "transactional-id-prefix",
         "catalog-without-value", "catalog-prefixed-key", "warehouse-with-catalog", "catalog-for-a-topic",
         "kafka-option-for-iceberg"],
)
def test_bad_iceberg_sink_arguments_are_one_line_before_any_connection(capsys, tmp_path, arguments, message):
    code, err = run_cli(capsys, "--source", "orders", "--sql", "SELECT value FROM source",
                        "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap-server", "127.0.0.1:9", *arguments)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"oncelog: error: {message}"), err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--sink-option", "createTableIfMissing=false"],
         "--sink iceberg:shop.orders: no such table in the embedded Iceberg catalog (createTableIfMissing=false)"),
        (["--iceberg-catalog", "type=nosuch"],
         "--iceberg-catalog: cannot load Iceberg catalog 'default' (catalog.type): 'nosuch' is not a valid"),
        (["--iceberg-catalog", "type=rest", "--iceberg-catalog", "uri=http://127.0.0.1:9"],
         "cannot use the Iceberg catalog (--iceberg-catalog): ConnectionError: "),
    ],
    ids=["missing-table", "unknown-catalog-type", "unreachable-rest-catalog"],
)
def test_an_iceberg_catalog_that_cannot_take_the_table_is_one_line_before_spark_starts(
        capsys, shared_broker, topics, tmp_path, arguments, message):
    source, _ = topics
    code, err = run_cli(capsys, "--source", source, "--sink", "iceberg:shop.orders",
                        "--sql", "SELECT 1 AS n FROM source", "--checkpoint", str(tmp_path / "checkpoint"),
                        "--bootstrap-server", shared_broker.bootstrap_servers, *arguments)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"oncelog: error: {message}"), err


def test_batch_mode_against_a_broker_without_two_phase_commit_is_one_line_and_leaves_nothing_open(
    capsys, broker, tmp_path
):
    from confluent_kafka.admin import AdminClient, NewTopic

    from oncelog.spark.sink.twophase import TwoPhaseClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in ("orders", "enriched")]).values():
        future.result(30)
    code, err = run_cli(capsys, "--source", "orders", "--sink", "enriched", "--sql", "SELECT value FROM source",
                        "--checkpoint", str(tmp_path), "--bootstrap-server", broker.bootstrap_servers,
                        "--mode", "batch")
    assert code == 1
    assert err.strip().splitlines() == [
        ("oncelog: error: --mode batch: mode=batch needs an oncelog broker with "
         "transaction.two.phase.commit.enable=true (KIP-939 InitProducerId v6); use mode=partition "
         "against other Kafka clusters")
    ]
    assert TwoPhaseClient(broker.bootstrap_servers).list_ongoing(".*") == []


def test_connection_options_come_from_the_environment_and_x_properties_as_for_every_command(
    capsys, monkeypatch, shared_broker, topics, tmp_path
):
    source, _sink = topics
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{placeholder.getsockname()[1]}"
    base = ["--source", source, "--sink", "no-such-output", "--sql", "SELECT value FROM source",
            "--checkpoint", str(tmp_path)]
    monkeypatch.setenv("ONCELOG_BOOTSTRAP", shared_broker.bootstrap_servers)
    _, err = run_cli(capsys, *base)
    assert f"--sink topic 'no-such-output' does not exist on {shared_broker.bootstrap_servers}" in err
    monkeypatch.setenv("ONCELOG_BOOTSTRAP", nobody)
    _, err = run_cli(capsys, *base, "-X", f"bootstrap.servers={shared_broker.bootstrap_servers}")
    assert f"does not exist on {shared_broker.bootstrap_servers}" in err
    # Every other -X property goes to both connectors, and is checked first, by librdkafka,
    # with the words every command uses (not as a --source-option or --sink-option).
    _, err = run_cli(capsys, *base, "-X", "security.protocol=SASL_SSL")
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("oncelog: error: invalid client configuration: "), lines
    assert "SASL mechanism GSSAPI" in lines[0]


# -- through Spark -----------------------------------------------------------------------------


def spec_for(broker, topics, tmp_path, **fields) -> PipelineSpec:
    source, sink = topics
    return PipelineSpec(source_topic=source, sink_topics=(sink,), checkpoint=str(tmp_path / "checkpoint"),
                        bootstrap_servers=broker.bootstrap_servers, trigger=Trigger.parse("available-now"),
                        progress="none", **fields)


def test_transform_that_raises_while_building_the_query_is_one_line(spark, shared_broker, topics, tmp_path):
    reference = write_transform(tmp_path, """
        def transform(source):
            raise KeyError("customers table")
    """)
    with pytest.raises(PipelineError) as raised:
        run_pipeline(spec_for(shared_broker, topics, tmp_path, transforms=(reference,)), spark)
    file_name = Path(reference.split(":")[0]).name
    assert str(raised.value) == (
        f"--transform {reference} raised while building the query (at {file_name}:3): KeyError: 'customers table'"
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT no_such_column AS value FROM source", "no_such_column"),
        ("SELECT key FROM source", "the transform's result has no value column (columns: key)"),
        ("SELECT length(value) AS value FROM source", "the transform's value column is int"),
    ],
    ids=["unknown-column", "no-value-column", "value-not-binary"],
)
def test_bad_sql_is_one_line(spark, shared_broker, topics, tmp_path, sql, message):
    with pytest.raises(PipelineError) as raised:
        run_pipeline(spec_for(shared_broker, topics, tmp_path, sql=sql), spark)
    assert "\n" not in str(raised.value)
    assert message in str(raised.value)


def test_columns_that_do_not_fit_an_existing_iceberg_table_are_one_line_before_the_query_starts(
        spark, shared_broker, topics, tmp_path):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    catalog = load_catalog("default", type="sql", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    catalog.create_namespace("shop")
    catalog.create_table("shop.orders", Schema(NestedField(1, "id", LongType(), required=False)))
    source, _ = topics
    spec = PipelineSpec(source_topic=source, sink_topics=(), sink_table="shop.orders",
                        checkpoint=str(tmp_path / "checkpoint"), bootstrap_servers=shared_broker.bootstrap_servers,
                        sql="SELECT CAST(value AS STRING) AS body FROM source", progress="none")

    with pytest.raises(PipelineError) as raised:
        run_pipeline(spec, spark)

    assert str(raised.value) == (
        "--sink iceberg:shop.orders: column 'body' of the DataFrame is not a column of Iceberg table shop.orders "
        "(its columns: id long); select only the table's columns or evolve the table's schema first"
    )
    assert not (tmp_path / "checkpoint" / "commits").exists()


# A transform whose UDF raises on the record b"poison" (the producers put one at offset 7).
POISONED_ENRICH = """
    from pyspark.sql import functions as F

    @F.udf("binary")
    def enrich(value):
        if value == b"poison":
            raise ValueError(f"cannot enrich {value!r}")
        return value + b"+"

    def transform(source):
        return source.select(enrich("value").alias("value"))
"""


def test_transform_raising_on_a_record_names_batch_offsets_and_partition_and_writes_nothing(
    spark, shared_broker, topics, tmp_path
):
    from confluent_kafka import Producer

    source, sink = topics
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap_servers})
    for number in range(20):
        producer.produce(source, f"order-{number}".encode(), partition=0)
        producer.produce(source, b"poison" if number == 7 else f"order-{number}".encode(), partition=1)
    assert producer.flush(30) == 0
    reference = write_transform(tmp_path, POISONED_ENRICH)

    with pytest.raises(PipelineError) as raised:
        run_pipeline(spec_for(shared_broker, topics, tmp_path, transforms=(reference,), mode="batch"), spark)

    assert str(raised.value) == (
        f"micro-batch 0 (reading {source}-0 [0, 20), {source}-1 [0, 20)) failed in its task for "
        f"{source}-1 offsets [0, 20) (1 attempt): ValueError: cannot enrich b'poison'"
    )
    assert committed_records(shared_broker.bootstrap_servers, sink) == 0


# -- the command, as a user runs it ------------------------------------------------------------

def failing_command(*args: str) -> tuple[str, Path]:
    """`oncelog pipeline run ARGS`, which must fail: its one line on stderr (nothing else:
    what the JVM, Spark and PySpark print goes to Spark's log) and the log that line names."""
    completed = subprocess.run([str(ONCELOG), "pipeline", "run", *args], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert completed.returncode == 1, completed
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    return lines[0], Path(lines[0].rsplit("(Spark's log: ", 1)[1].rstrip(")"))


def test_a_record_failing_in_the_transform_is_one_line_on_the_command_and_sparks_traces_go_to_its_log(
    shared_broker, topics, tmp_path
):
    from confluent_kafka import Producer

    source, sink = topics
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap_servers})
    for number in range(20):
        producer.produce(source, b"poison" if number == 7 else f"order-{number}".encode(), partition=0)
    assert producer.flush(30) == 0
    reference = write_transform(tmp_path, POISONED_ENRICH)
    line, log = failing_command("--source", source, "--sink", sink, "--transform", reference,
                                "--checkpoint", str(tmp_path / "checkpoint"), "--master", "local[2,2]",
                                "--bootstrap-server", shared_broker.bootstrap_servers, "--trigger", "available-now")
    assert line.startswith(f"oncelog: error: micro-batch 0 (reading {source}-0 [0, 20)) failed")
    assert "ValueError: cannot enrich b'poison' (Spark's log: " in line
    assert log.parent == tmp_path / "checkpoint" / "logs"
    assert "ValueError: cannot enrich b'poison'" in log.read_text()  # the traces Spark printed before
    assert committed_records(shared_broker.bootstrap_servers, sink) == 0


MISSING_COLUMN = """
    def transform(source):
        return source.select("no_such_column")
"""


def test_a_transform_naming_a_missing_column_is_one_line_without_the_plan_and_pysparks_logs_go_to_sparks_log(
    shared_broker, topics, tmp_path
):
    source, sink = topics
    reference = write_transform(tmp_path, MISSING_COLUMN)
    line, log = failing_command("--source", source, "--sink", sink, "--transform", reference,
                                "--checkpoint", str(tmp_path / "checkpoint"), "--master", "local[1]",
                                "--bootstrap-server", shared_broker.bootstrap_servers, "--trigger", "available-now")
    file_name = Path(reference.split(":")[0]).name
    assert line.startswith(f"oncelog: error: --transform {reference} raised while building the query "
                           f"(at {file_name}:3): AnalysisException: A column, variable, or function parameter "
                           "with name `no_such_column` cannot be resolved."), line
    assert "StreamingRelation" not in line and "Project" not in line  # the plan is for the log
    logged = log.read_text()
    assert '"logger": "DataFrameQueryContextLogger"' in logged  # PySpark's JSON line
    assert "WARNING: Using incubator modules" in logged  # the JVM's own output
