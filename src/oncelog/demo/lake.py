"""`oncelog demo --sink iceberg`: the demo's Iceberg table, `demo.enriched_orders`, in the
embedded SQLite catalog the pipeline runner makes in its `--warehouse` directory
(`catalog.db`, the table's files beside it), and the pyiceberg reads that check it: the
rows of the current snapshot, the sink's snapshots, and data files no snapshot lists.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.spark.pipeline.spec import EMBEDDED_CATALOG_FILE

if TYPE_CHECKING:
    from pyiceberg.table import Table

TABLE = "demo.enriched_orders"


def catalog_properties(warehouse: Path) -> dict[str, str]:
    """pyiceberg's `load_catalog("default", **properties)` for the runner's embedded catalog."""
    return {"type": "sql", "uri": f"sqlite:///{warehouse / EMBEDDED_CATALOG_FILE}", "warehouse": f"file://{warehouse}"}


def read_command(warehouse: Path) -> str:
    """A shell line that prints the table with pyiceberg, run by this Python (the venv's,
    which has pyiceberg)."""
    arguments = ", ".join(f"{key}={json.dumps(value)}" for key, value in catalog_properties(warehouse).items())
    code = (f"from pyiceberg.catalog import load_catalog; "
            f'print(load_catalog("default", {arguments}).load_table("{TABLE}").scan().to_pandas())')
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def open_table(warehouse: Path) -> Table:
    from pyiceberg.catalog import load_catalog

    return load_catalog("default", **catalog_properties(warehouse)).load_table(TABLE)


def table_exists(warehouse: Path) -> bool:
    """Whether an earlier demo left the table in `warehouse` (its catalog file is there and
    names the table)."""
    if not (warehouse / EMBEDDED_CATALOG_FILE).exists():
        return False
    from pyiceberg.catalog import load_catalog

    return load_catalog("default", **catalog_properties(warehouse)).table_exists(TABLE)


def sink_snapshots(table: Table) -> int:
    """The snapshots the oncelog sink committed (their summary names the query and batch)."""
    from oncelog.spark.iceberg.commit import QUERY_ID_PROPERTY

    return sum(1 for snapshot in table.snapshots() if snapshot.summary and snapshot.summary.get(QUERY_ID_PROPERTY))


def stray_data_files(table: Table) -> list[str]:
    """Parquet files under the table's data directory that the current snapshot does not
    list: files of failed or killed attempts the sink's cleanup has not deleted."""
    referenced = {task.file.file_path for task in table.scan().plan_files()}
    location = table.location()
    if not location.startswith("file://"):
        return []
    data = Path(location.removeprefix("file://")) / "data"
    present = {f"file://{path}" for path in data.rglob("*.parquet")} if data.exists() else set()
    return sorted(present - referenced)
