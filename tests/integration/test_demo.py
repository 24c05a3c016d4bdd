"""`oncelog demo`, the job `make demo` runs: orders written in committed and aborted
transactions, the exactly-once Spark pipeline through a failed task attempt and a driver
killed with SIGKILL and restarted, and every committed order enriched exactly once; and
`oncelog demo --sink iceberg`, the same into an Iceberg table read back with pyiceberg;
and `oncelog demo --stateful`, the seeds' Kafka Streams application (windowed counts,
branches, a stream-table join) through aborted input and two kinds of driver kill, run
from a wheel installed outside the repository."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ONCELOG = Path(sys.executable).with_name("oncelog")
REPO = Path(__file__).resolve().parents[2]


def report_value(output: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)} +(.*)$", output, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{output}"
    return match.group(1)


def run_orders_demo(tmp_path, kills: int) -> str:
    """`oncelog demo` with 3,000 orders and `kills` driver kills; every order checked."""
    completed = subprocess.run(
        [str(ONCELOG), "demo", "--messages", "3000", "--kills", str(kills), "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=300,
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, output + completed.stderr.decode()[-3000:]
    assert report_value(output, "input committed").startswith("2,400 orders")
    assert report_value(output, "input aborted").startswith("600 orders")
    assert report_value(output, "output records").startswith("2,400 ")
    for label in ("duplicates", "missing", "aborted records leaked", "wrong enrichment"):
        assert report_value(output, label) == "0", output
    assert re.match(r"[1-9]\d* injected", report_value(output, "task failures")), output
    assert report_value(output, "driver kills").startswith(f"{kills} (SIGKILL")
    assert report_value(output, "driver restarts").startswith(f"{kills} ")
    assert re.match(r"p50 [\d,]+ ms, p99 [\d,]+ ms \(Spark's addBatch", report_value(output, "micro-batch")), output
    assert re.match(r"p50 [\d,]+ ms, p99 [\d,]+ ms \(the commit alone", report_value(output, "sink commit")), output
    assert re.match(r"\d+ cores, load [\d.]+ ", report_value(output, "machine")), output
    assert report_value(output, "result") == "OK"
    assert any((tmp_path / "data").iterdir()), "the broker's log was written to --data-dir"
    return output


def test_demo_enriches_every_committed_order_exactly_once_through_a_task_failure(tmp_path):
    """One driver start (about 20 s). The same driver code (oncelog.demo.driver) kills the
    stateful demo's driver below, from the wheel; the orders demo's kill is the slow test next."""
    run_orders_demo(tmp_path, kills=0)


@pytest.mark.slow
def test_demo_enriches_every_committed_order_exactly_once_through_task_failure_and_driver_kill(tmp_path):
    """`make demo`'s faults at a smaller size (`make sink-faults`)."""
    run_orders_demo(tmp_path, kills=1)


def run_stateful_demo(*options: str, kills: int = 2, oncelog: Path = ONCELOG, **run) -> str:
    """`oncelog demo --stateful` with 2,000 events: about 50 s on 2 cores with both kinds of
    driver kill (three driver starts), 40 s with one kill. Checks every output's anomaly
    counts are 0 and the kills happened."""
    completed = subprocess.run(
        [str(oncelog), "demo", "--stateful", "--messages", "2000", "--kills", str(kills), *options],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=400, **run,
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, output + completed.stderr.decode()[-3000:]
    assert report_value(output, "input committed").startswith("1,600 events and ")
    assert report_value(output, "input aborted").startswith("400 events and ")
    for topic in ("windowed-counts", "high-priority-events", "normal-priority-events", "enriched-events"):
        records, *anomalies = report_value(output, topic).split()
        assert int(records.replace(",", "")) > 0 and set(anomalies) <= {"0", "-"}, output
    for label in ("duplicates", "missing", "aborted records leaked"):
        assert report_value(output, label) == "0", output
    assert report_value(output, "wrong results").startswith("0 "), output
    mid_batch = r"; 1 meant for the middle of a micro-batch \((in|after) micro-batch \d+\)" if kills == 2 else ""
    assert re.match(rf"{kills} \(SIGKILL .*: 1 between the sink's commit and Spark's commit log \(micro-batch \d+\)"
                    rf"{mid_batch}\)$", report_value(output, "driver kills")), output
    assert report_value(output, "driver restarts").startswith(f"{kills} ")
    assert report_value(output, "result") == "OK"
    return output


@pytest.mark.slow
def test_stateful_demo_in_partition_mode_re_runs_each_task_identically_after_a_kill_after_the_sinks_commit():
    """Partition mode is exactly once only if a micro-batch run again gives each task the
    rows it gave before (its committed tasks are skipped, by task): shown here for a
    windowed count, a stream-table join and branches in one query, through a kill between
    the sink's commit and Spark's commit log (`make sink-faults`)."""
    output = run_stateful_demo("--mode", "partition")
    assert "(sink mode partition, update output mode)" in output


def run_iceberg_demo(tmp_path, *options: str) -> str:
    completed = subprocess.run(
        [str(ONCELOG), "demo", "--sink", "iceberg", "--warehouse", str(tmp_path / "lake"), *options],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=300,
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, output + completed.stderr.decode()[-3000:]
    for label in ("duplicates", "missing", "aborted records leaked", "wrong enrichment", "stray data files"):
        assert report_value(output, label).split(" ")[0] == "0", output
    assert re.match(r"[1-9]\d* injected", report_value(output, "task failures")), output
    assert report_value(output, "result") == "OK"
    return output


def read_demo_table(warehouse: Path):
    """The table as the demo's report says to read it (its `read it with` line's catalog)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("default", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                        warehouse=f"file://{warehouse}").load_table("demo.enriched_orders")


@pytest.mark.slow
def test_demo_into_an_iceberg_table_holds_every_committed_order_once_through_a_task_failure(tmp_path):
    """`oncelog demo --sink iceberg` at its cheapest (one driver start, no kill: ~22 s; in
    `make iceberg-faults`, the sink itself in the default run's test_iceberg_sink); the
    driver kill is in the slow test below and, for the sink itself, test_iceberg_faults."""
    output = run_iceberg_demo(tmp_path, "--messages", "1000", "--kills", "0")

    assert report_value(output, "output records").startswith("800 (the table's current snapshot")
    table = read_demo_table(tmp_path / "lake")
    rows = table.scan(selected_fields=("order_id", "tier", "source")).to_arrow()
    assert rows.num_rows == 800 and len(set(rows.column("order_id").to_pylist())) == 800
    assert int(report_value(output, "snapshots").split(" ")[0]) == len(list(table.snapshots()))
    # The command the report prints runs as it is, with the venv's Python (which has pyiceberg).
    read_back = subprocess.run(report_value(output, "read it with"), shell=True, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert read_back.returncode == 0, read_back.stderr
    assert "order_id" in read_back.stdout and "[800 rows x" in read_back.stdout, read_back.stdout


@pytest.mark.slow
def test_demo_into_an_iceberg_table_holds_every_committed_order_once_through_a_driver_kill(tmp_path):
    """The demo's default faults (a task failure and the driver SIGKILLed) into the table:
    about 40 s on 2 cores."""
    output = run_iceberg_demo(tmp_path, "--messages", "3000")

    assert report_value(output, "output records").startswith("2,400 ")
    assert report_value(output, "driver kills").startswith("1 (SIGKILL")
    assert report_value(output, "driver restarts").startswith("1 ")


def test_stateful_demo_from_a_wheel_outside_the_repository_is_exactly_once_through_aborted_input_and_kills(
        tmp_path):
    """`pip install oncelog` and `oncelog demo --stateful` in another directory: everything
    the demos need (the transforms Spark's workers import included) ships in the package,
    and the seeds' Kafka Streams application counts, branches and joins exactly once
    through aborted input and a driver kill between the sink's commit and Spark's commit
    log (the orders demo runs from the source tree above; the
    Iceberg one in `make iceberg-faults`). The wheel is built from a copy of the sources;
    the fresh virtualenv gets only that wheel, and reaches the dependencies (pyspark,
    confluent-kafka, ...) through a .pth line naming this environment's site-packages, so
    the test stays offline and fast. A path line does not run that directory's own .pth
    files, so an editable oncelog installed there stays out of sight (its metadata does
    not: hence --ignore-installed)."""
    source = tmp_path / "source"
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "--wheel-dir", str(wheels), str(source)], check=True, timeout=300)
    (wheel,) = wheels.glob("oncelog-*.whl")

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    site_packages = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    here = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site_packages / "oncelog-test-dependencies.pth").write_text("".join(f"{path}\n" for path in here))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--ignore-installed", "--quiet", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=300)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "ONCELOG_BOOTSTRAP")}
    installed = subprocess.check_output([str(python), "-c", "import oncelog; print(oncelog.__file__)"],
                                        cwd=elsewhere, env=clean, text=True).strip()
    assert installed.startswith(str(site_packages)), installed
    # One kill, between the sink's commit and Spark's commit log (test_sink_faults has the
    # random ones; the slow partition-mode run below has both).
    run_stateful_demo(kills=1, oncelog=environment / "bin" / "oncelog", cwd=elsewhere, env=clean)


def test_demo_into_a_warehouse_that_holds_an_earlier_demos_table_is_refused_in_one_line(tmp_path):
    """Every run seeds the same order ids: into the table of an earlier run they would read
    as duplicates, so the demo refuses before it starts anything."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    lake = tmp_path / "lake"
    lake.mkdir()
    catalog = load_catalog("default", type="sql", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}")
    catalog.create_namespace("demo")
    catalog.create_table("demo.enriched_orders", schema=Schema(NestedField(1, "order_id", StringType())))
    completed = subprocess.run([str(ONCELOG), "demo", "--sink", "iceberg", "--warehouse", str(lake)],
                               stdin=subprocess.DEVNULL, check=False, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 1
    assert completed.stderr == (f"oncelog: error: demo: {lake} already holds demo.enriched_orders from an "
                                "earlier demo: give another --warehouse, or remove that one\n"), completed.stderr
