"""Driver side of the Iceberg sink before any task writes: the catalog, the table (created
from the DataFrame's schema when missing), the check of the DataFrame's columns against an
existing table, and the `WriteTarget` handed to executors.

pyiceberg is imported here, so this module is loaded only by Python workers that run the
Iceberg sink.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema, _check_schema_compatible, promote
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import NestedField

from oncelog.spark.iceberg.options import (
    IcebergOptionError,
    IcebergSchemaMismatch,
    IcebergSinkOptions,
    IcebergTableMissing,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

# -- catalog -------------------------------------------------------------------------------------

_catalogs: dict[tuple[str, tuple[tuple[str, str], ...]], Catalog] = {}
_catalogs_lock = threading.Lock()


def open_catalog(options: IcebergSinkOptions) -> Catalog:
    """The catalog named by the options, kept for the life of this process (the driver's
    Python workers are reused from one micro-batch to the next; a SQL catalog keeps its
    connection pool)."""
    key = (options.catalog_name, options.catalog_properties)
    with _catalogs_lock:
        catalog = _catalogs.get(key)
        if catalog is None:
            try:
                catalog = load_catalog(options.catalog_name, **options.catalog_settings)
            except (ValueError, TypeError, ImportError) as error:
                settings = ", ".join(f"catalog.{k}" for k, _ in options.catalog_properties) or "no catalog.* options"
                raise IcebergOptionError(
                    f"cannot load Iceberg catalog {options.catalog_name!r} ({settings}): {error}"
                ) from None
            _catalogs[key] = catalog
    return catalog


# -- the table ---------------------------------------------------------------------------------


def open_table(options: IcebergSinkOptions, spark_schema: StructType) -> Table:
    """Driver: the table to write, created (with its namespace) from `spark_schema` when
    missing and createTableIfMissing allows; an existing table's columns are checked."""
    catalog = open_catalog(options)
    arrow_schema = spark_to_arrow(spark_schema)
    try:
        table = catalog.load_table(options.table)
    except NoSuchTableError:
        if not options.create_table:
            raise IcebergTableMissing(
                f"Iceberg table {options.table_name} does not exist in catalog {options.catalog_name!r} "
                "(option createTableIfMissing=false)"
            ) from None
        table = _create_table(catalog, options, arrow_schema)
    check_schema(options.table_name, table.schema(), arrow_schema, table.metadata.format_version)
    return table


def _create_table(catalog: Catalog, options: IcebergSinkOptions, arrow_schema: pa.Schema) -> Table:
    if options.namespace:
        try:
            catalog.create_namespace(options.namespace)
        except NamespaceAlreadyExistsError:
            pass
    schema = _fresh_schema(arrow_schema)
    spec = parse_partition_by(options.partition_by, schema) if options.partition_by else UNPARTITIONED_PARTITION_SPEC
    try:
        return catalog.create_table(options.table, schema=schema, partition_spec=spec)
    except TableAlreadyExistsError:  # another writer created it first
        return catalog.load_table(options.table)


def _fresh_schema(arrow_schema: pa.Schema) -> Schema:
    """An Iceberg schema with ids assigned in order, for a new table."""
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(_pyarrow_to_schema_without_ids(arrow_schema))


def spark_to_arrow(spark_schema: StructType) -> pa.Schema:
    """The Arrow schema of the batches Spark hands to `write()` (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


_TRANSFORMS: dict[str, Callable[[], Transform[Any, Any]]] = {
    "identity": IdentityTransform, "year": YearTransform, "years": YearTransform, "month": MonthTransform,
    "months": MonthTransform, "day": DayTransform, "days": DayTransform, "hour": HourTransform,
    "hours": HourTransform,
}
_TERM = re.compile(r"\s*(?:(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([\w.]+)\s*\)|([\w.]+))\s*")


def parse_partition_by(text: str, schema: Schema) -> PartitionSpec:
    """`partitionBy` for a new table: comma-separated `col`, `year(col)`, `month(col)`,
    `day(col)`, `hour(col)`, `bucket(N, col)`, `truncate(W, col)` (Spark SQL's spelling)."""
    fields = []
    for number, term in enumerate(_split_terms(text)):
        match = _TERM.fullmatch(term)
        if match is None:
            raise IcebergOptionError(
                f"option partitionBy: cannot read {term!r}; use col, day(col), bucket(16, col), ...")
        function, width, argument, plain = match.groups()
        column = plain or argument
        try:
            source = schema.find_field(column)
        except ValueError:
            raise IcebergOptionError(f"option partitionBy: no column {column!r} in the DataFrame") from None
        transform: Transform[Any, Any]
        name = column
        if function is None:
            transform = IdentityTransform()
        elif function.lower() in ("bucket", "truncate") and width:
            transform = BucketTransform(int(width)) if function.lower() == "bucket" else TruncateTransform(int(width))
            name = f"{column}_{function.lower()}"
        elif function.lower() in _TRANSFORMS and not width:
            transform = _TRANSFORMS[function.lower()]()
            if function.lower() != "identity":
                name = f"{column}_{function.lower().rstrip('s')}"
        else:
            raise IcebergOptionError(f"option partitionBy: unknown transform {term!r}")
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + number, transform=transform, name=name))
    return PartitionSpec(*fields)


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    terms.append(current)
    return [term for term in terms if term.strip()]


# -- schema check ------------------------------------------------------------------------------


def check_schema(table_name: str, table_schema: Schema, arrow_schema: pa.Schema, format_version: Any = 2) -> None:
    """Raise IcebergSchemaMismatch, naming the column, when rows of `arrow_schema` cannot be
    appended to a table of `table_schema`: a column the table lacks, a required column the
    DataFrame lacks or may leave null, or a type that does not promote to the table's."""
    columns = ", ".join(f"{field.name} {field.field_type}" for field in table_schema.fields)
    table_names = {field.name for field in table_schema.fields}
    for field in arrow_schema:
        if field.name not in table_names:
            raise IcebergSchemaMismatch(
                f"column {field.name!r} of the DataFrame is not a column of Iceberg table {table_name} "
                f"(its columns: {columns}); select only the table's columns or evolve the table's schema first"
            )
    try:
        provided = pyarrow_to_schema(arrow_schema, name_mapping=table_schema.name_mapping,
                                     format_version=format_version)
    except ValueError as error:  # a nested field the table lacks, or a type Iceberg has no equivalent for
        raise IcebergSchemaMismatch(f"the DataFrame does not fit Iceberg table {table_name}: {error}") from None
    for expected in table_schema.fields:
        given = _field(provided, expected.name)
        if given is None:
            if expected.required:
                raise IcebergSchemaMismatch(
                    f"required column {expected.name!r} ({expected.field_type}) of Iceberg table {table_name} "
                    "is missing from the DataFrame"
                )
            continue
        if given.field_type != expected.field_type and expected.field_type.is_primitive:
            try:
                promote(given.field_type, expected.field_type)
            except Exception:  # noqa: BLE001 (pyiceberg raises ResolveError or others for impossible promotions)
                raise IcebergSchemaMismatch(
                    f"column {expected.name!r} is {given.field_type} in the DataFrame but {expected.field_type} "
                    f"in Iceberg table {table_name}; cast it in the query"
                ) from None
        if expected.required and not given.required:
            raise IcebergSchemaMismatch(
                f"column {expected.name!r} is nullable in the DataFrame but required in Iceberg table {table_name}; "
                "filter out nulls and mark it non-nullable, or make the table's column optional"
            )
    try:  # nested fields: pyiceberg's own check, whose message is a table of fields
        _check_schema_compatible(table_schema, provided)
    except ValueError as error:
        raise IcebergSchemaMismatch(f"the DataFrame does not fit Iceberg table {table_name}: {error}") from None


def _field(schema: Schema, name: str) -> NestedField | None:
    for field in schema.fields:
        if field.name == name:
            return field
    return None


# -- what executors need ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteTarget:
    """What a task needs to write data files for the table: its metadata at planning time
    (without the snapshot history, which only grows) and the FileIO's properties. Picklable."""

    table_name: str
    metadata: TableMetadata
    io_properties: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, options: IcebergSinkOptions, table: Table) -> WriteTarget:
        metadata = table.metadata.model_copy(update={
            "snapshots": [], "refs": {}, "snapshot_log": [], "metadata_log": [], "current_snapshot_id": None,
        })
        properties = {**options.catalog_settings, **{k: str(v) for k, v in table.io.properties.items()}}
        return cls(options.table_name, metadata, tuple(sorted(properties.items())))
