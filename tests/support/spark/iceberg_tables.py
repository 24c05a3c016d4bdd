"""Helpers of the Iceberg sink tests: the table read back with pyiceberg, the sink's
snapshots, and the files under the table's location that no snapshot references."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table

from oncelog.spark.iceberg.commit import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY
from oncelog.spark.iceberg.files import ATTEMPTS_DIR
from tests.support.spark.iceberg_pipeline import catalog_options


def load_table(warehouse_dir: Path | str, name: str) -> Table:
    properties = {key[len("catalog."):]: value for key, value in catalog_options(str(warehouse_dir)).items()}
    return load_catalog("default", **properties).load_table(name)


def column_counts(table: Table, column: str = "value") -> Counter:
    return Counter(table.scan(selected_fields=(column,)).to_arrow().column(column).to_pylist())


def sink_snapshots(table: Table) -> list[tuple[str, int]]:
    """(query id, batch id) of every snapshot the sink committed, oldest first."""
    found = []
    for snapshot in table.snapshots():
        summary = snapshot.summary
        if summary is not None and summary.get(QUERY_ID_PROPERTY):
            found.append((str(summary.get(QUERY_ID_PROPERTY)), int(summary.get(BATCH_ID_PROPERTY) or -1)))
    return found


def local_path(location: str) -> Path:
    assert location.startswith("file://"), location
    return Path(location[len("file://"):])


def unreferenced_data_files(table: Table) -> list[str]:
    """Parquet files under the table's data directory that the current snapshot does not list."""
    referenced = {task.file.file_path for task in table.scan().plan_files()}
    data = local_path(table.location()) / "data"
    present = {f"file://{path}" for path in data.rglob("*.parquet")} if data.exists() else set()
    return sorted(present - referenced)


def attempt_logs(table: Table) -> list[Path]:
    root = local_path(table.location()) / ATTEMPTS_DIR
    return sorted(root.rglob("*.json")) if root.exists() else []
