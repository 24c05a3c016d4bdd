"""The Iceberg sink's options (`format("oncelog-iceberg")`), parsed once into a frozen,
picklable `IcebergSinkOptions`, and the sink's errors. See docs/iceberg.md.

- `table` (required): `namespace.table`, e.g. `db.orders` (nested namespaces: `a.b.orders`).
- `catalog.<key>`: pyiceberg catalog properties, handed to `load_catalog(catalogName,
  **props)` without the prefix (`catalog.type=sql`, `catalog.uri=sqlite:///...`,
  `catalog.warehouse=file:///...`; `catalog.type=rest` and `catalog.uri=https://...` for a
  REST catalog). With none, pyiceberg's own configuration (~/.pyiceberg.yaml,
  PYICEBERG_CATALOG__* variables) names the catalog.
- `catalogName` (default `default`): the catalog's name (the SQL catalog keeps it in its rows).
- `createTableIfMissing` (default true): create the table, and its namespace, from the
  DataFrame's schema when it does not exist; `partitionBy` gives the new table's spec.
- `commitTimeoutMs` (default 120000): how long the driver keeps retrying a snapshot commit
  that lost to a concurrent writer (or whose outcome is unknown) before failing the batch.
- `checkpointLocation`: the query's checkpoint; the query id is read from it when a
  micro-batch has no task messages to carry it.

Spark hands options over lower-cased, so catalog property names arrive lower-cased (all of
pyiceberg's are). No imports beyond the standard library and oncelog.spark.errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from oncelog.spark.errors import SourceError
from oncelog.spark.paths import local_path

FORMAT_NAME = "oncelog-iceberg"
ICEBERG_MODE = "iceberg"  # the `mode` of this sink's batch summaries (oncelog.spark.sink_summary)
CATALOG_PREFIX = "catalog."
DEFAULT_CATALOG_NAME = "default"
DEFAULT_COMMIT_TIMEOUT_MS = 120_000

_SUPPORTED = ("table", "catalogName", "createTableIfMissing", "partitionBy", "commitTimeoutMs", "checkpointLocation")
_SUPPORTED_LOWER = {name.lower(): name for name in _SUPPORTED}
# Options Spark's own DataStreamWriter/DataFrameWriter put into the map it hands over.
_SPARK_WRITER_OPTIONS = {
    "queryname", "path", "asyncprogresstrackingenabled", "asyncprogresstrackingcheckpointintervalms",
}
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,254}")
TABLE_NAME_RULE = "namespace.table (letters, digits, '_' and '-' in each part), e.g. db.orders"


class IcebergSinkError(SourceError):
    """Base class of the Iceberg sink's errors."""


class IcebergOptionError(IcebergSinkError, ValueError):
    """An option is missing, unknown, or has a value the sink cannot use."""


class IcebergSchemaMismatch(IcebergSinkError, ValueError):
    """The DataFrame's columns cannot be written into the existing table."""


class IcebergTableMissing(IcebergSinkError):
    """The table does not exist and createTableIfMissing is false."""


class IcebergCommitError(IcebergSinkError):
    """A micro-batch's snapshot could not be committed."""


@dataclass(frozen=True)
class IcebergSinkOptions:
    table: tuple[str, ...]  # namespace parts, then the table's name
    catalog_name: str
    catalog_properties: tuple[tuple[str, str], ...]
    create_table: bool
    partition_by: str | None
    commit_timeout_ms: int
    checkpoint_location: Path | None

    @property
    def table_name(self) -> str:
        return ".".join(self.table)

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.table[:-1]

    @property
    def catalog_settings(self) -> dict[str, str]:
        return dict(self.catalog_properties)


def table_parts(name: str) -> tuple[str, ...] | None:
    """`namespace.table` (`a.b.table` for nested namespaces) as its parts, or None when the
    sink does not take it as a table name."""
    parts = tuple(name.split("."))
    if len(parts) < 2 or not all(_NAME_PART.fullmatch(part) for part in parts):
        return None
    return parts


def parse_iceberg_options(raw: Mapping[str, str]) -> IcebergSinkOptions:
    options = {str(key).lower(): str(value) for key, value in raw.items()}
    for key in options:
        if not key.startswith(CATALOG_PREFIX) and key not in _SUPPORTED_LOWER and key not in _SPARK_WRITER_OPTIONS:
            raise IcebergOptionError(
                f"unknown option {key!r} for the {FORMAT_NAME} sink; it takes {', '.join(_SUPPORTED)} and catalog.*"
            )
    table = options.get("table", "").strip()
    if not table:
        raise IcebergOptionError("option table is required: namespace.table, e.g. db.orders")
    parts = table_parts(table)
    if parts is None:
        raise IcebergOptionError(f"option table={table!r}: use {TABLE_NAME_RULE}")
    catalog_properties = tuple(sorted(
        (key[len(CATALOG_PREFIX):], value) for key, value in options.items()
        if key.startswith(CATALOG_PREFIX) and len(key) > len(CATALOG_PREFIX)
    ))
    create = options.get("createtableifmissing", "true").strip().lower()
    if create not in ("true", "false"):
        raise IcebergOptionError(f"option createTableIfMissing={create!r}: use true or false")
    timeout = options.get("committimeoutms", str(DEFAULT_COMMIT_TIMEOUT_MS)).strip()
    if not timeout.isdigit() or int(timeout) <= 0:
        raise IcebergOptionError(f"option commitTimeoutMs={timeout!r}: use a positive number of milliseconds")
    return IcebergSinkOptions(
        table=parts,
        catalog_name=options.get("catalogname", DEFAULT_CATALOG_NAME).strip() or DEFAULT_CATALOG_NAME,
        catalog_properties=catalog_properties,
        create_table=create == "true",
        partition_by=options.get("partitionby", "").strip() or None,
        commit_timeout_ms=int(timeout),
        checkpoint_location=_checkpoint_path(options.get("checkpointlocation")),
    )


def _checkpoint_path(raw: str | None) -> Path | None:
    """A local checkpoint path, or None when unset or not on a local filesystem (the query
    id then comes only from the tasks' messages)."""
    if raw is None or not raw.strip():
        return None
    return local_path(raw)


def read_query_id(options: IcebergSinkOptions) -> str | None:
    """The query id from `<checkpointLocation>/metadata` (Spark writes it before the first
    micro-batch), or None when it cannot be read."""
    if options.checkpoint_location is None:
        return None
    try:
        with open(options.checkpoint_location / "metadata") as metadata:
            return str(json.loads(metadata.readline())["id"])
    except (OSError, ValueError, KeyError):
        return None
