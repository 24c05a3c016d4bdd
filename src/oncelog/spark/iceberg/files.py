"""Executor side of the Iceberg sink: one task attempt's rows become Parquet data files in the
table's location, and the commit message that lists them. Also the attempt logs the driver
cleans up with (shared with oncelog.spark.iceberg.commit).

A task attempt
1. takes Spark's Arrow batches in chunks of at most the table's target file size (and
   MAX_CHUNK_BYTES), sorts each chunk by the table's sort order and splits it by the
   table's partition spec (pyiceberg's own partitioning of Arrow tables);
2. before writing a chunk's files, records their paths in a new attempt log,
   `<table location>/oncelog-attempts/<query id>/<batch id>/part-<p>-attempt-<a>-<token>-<n>.json`;
3. writes them with pyiceberg's `write_file` (field ids, column statistics, partition
   values: the DataFiles pyiceberg's own append would commit) under a write uuid unique to
   the attempt, so no two attempts ever write the same path;
4. returns the DataFiles in its commit message. Nothing it writes is visible until the
   driver commits a snapshot listing exactly the winning attempts' files.

An attempt that raises deletes its files. One that is killed, loses to a speculative copy,
or belongs to a run of the batch that never committed leaves files behind: its attempt log
names them, and the driver's commit deletes every logged file that its snapshot does not
reference (oncelog.spark.iceberg.commit.clean_up_batch).

pyiceberg's private `write_file` and `_determine_partitions` are used on purpose: they are
the code its own `Table.append` runs, so files, statistics and partition values come out
the same. `Table.add_files` was the other choice; it reads every file's footer again on the
driver, needs files without field ids (it sets a name mapping on the table), infers each
file's partition from column bounds (only for transforms that keep order), and scans the
table's manifests for duplicates on every call.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO, _determine_partitions, bin_pack_record_batches, pyarrow_to_schema
from pyiceberg.manifest import DATA_FILE_TYPE, DEFAULT_READ_VERSION, DataFile
from pyiceberg.table import TableProperties, WriteTask
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.transforms import IdentityTransform
from pyiceberg.utils.properties import property_as_int
from pyspark.sql.datasource import WriterCommitMessage

from oncelog.spark.iceberg.options import IcebergSinkError
from oncelog.spark.pause import pause_point

logger = logging.getLogger(__name__)

ATTEMPTS_DIR = "oncelog-attempts"
# A chunk is held in memory (sorted and split by partition) before it is written.
MAX_CHUNK_BYTES = 128 * 1024 * 1024
_SORT_ORDER_ID_POSITION = next(
    position for position, field in enumerate(DATA_FILE_TYPE[DEFAULT_READ_VERSION].fields)
    if field.name == "sort_order_id"
)


@dataclass(frozen=True)
class AttemptIdentity:
    """Which attempt of which task of which micro-batch (or batch write) this is."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int

    def describe(self) -> str:
        return f"task {self.partition_id} attempt {self.attempt} of batch {self.batch_id} of query {self.query_id}"


@dataclass(frozen=True)
class IcebergTaskResult(WriterCommitMessage):
    """A task attempt's commit message: the data files it wrote (pyiceberg DataFiles,
    pickled) and the partition spec they were written for."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int
    records: int
    data_files: tuple[DataFile, ...]
    spec_id: int


# -- paths and files ---------------------------------------------------------------------------


def attempts_root(table_location: str) -> str:
    return f"{table_location.rstrip('/')}/{ATTEMPTS_DIR}"


def batch_attempts_dir(table_location: str, query_id: str, batch_id: int) -> str:
    return f"{attempts_root(table_location)}/{query_id}/{batch_id}"


_file_ios: dict[tuple[tuple[str, str], ...], FileIO] = {}
_file_ios_lock = threading.Lock()


def file_io(properties: tuple[tuple[str, str], ...], location: str) -> FileIO:
    """A FileIO for the table's location, kept per process and properties."""
    with _file_ios_lock:
        io = _file_ios.get(properties)
        if io is None:
            io = _file_ios[properties] = load_file_io(dict(properties), location=location)
    return io


def delete_quietly(io: FileIO, paths: Iterable[str]) -> tuple[int, list[str]]:
    """Delete `paths`; returns how many were deleted and those that could not be (a path
    already gone counts as neither)."""
    deleted, failed = 0, []
    for path in paths:
        try:
            io.delete(path)
            deleted += 1
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001 (best effort: any error leaves the file for the report)
            failed.append(path)
    return deleted, failed


def list_files(io: FileIO, directory: str) -> list[str] | None:
    """Every file under `directory` (recursively) as full locations, or None when this FileIO
    cannot list (the caller then reports instead of cleaning up)."""
    if isinstance(io, PyArrowFileIO):
        from pyarrow.fs import FileSelector, FileType

        scheme, netloc, path = PyArrowFileIO.parse_location(directory, io.properties)
        filesystem = io.fs_by_scheme(scheme, netloc)
        infos = filesystem.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
        prefix = f"{scheme}://{netloc}" if scheme in ("hdfs", "viewfs") else f"{scheme}://"
        return [prefix + info.path for info in infos if info.type == FileType.File]
    get_fs = getattr(io, "get_fs", None)  # FsspecFileIO
    if get_fs is None:
        return None
    from urllib.parse import urlparse

    parsed = urlparse(directory)
    filesystem = get_fs(parsed.scheme or "file")
    try:
        found = filesystem.find(directory)
    except FileNotFoundError:
        return []
    scheme = parsed.scheme or "file"
    return [path if "://" in path else f"{scheme}://{path}" for path in found]


def remove_dir(io: FileIO, directory: str) -> None:
    """Remove an (emptied) directory of attempt logs; object stores have none to remove."""
    if not isinstance(io, PyArrowFileIO):
        return
    scheme, netloc, path = PyArrowFileIO.parse_location(directory, io.properties)
    try:
        io.fs_by_scheme(scheme, netloc).delete_dir(path)
    except (OSError, FileNotFoundError):
        pass


def read_attempt_log(io: FileIO, path: str) -> list[str]:
    with io.new_input(path).open() as stream:
        return list(json.loads(stream.read())["files"])


class AttemptLog:
    """The paths an attempt is about to write, recorded before it writes them: one new log
    file per chunk (`<prefix>-<n>.json`), never rewritten, so an attempt killed while
    writing a log loses only that log, whose files it had not started writing."""

    def __init__(self, io: FileIO, prefix: str, attempt: AttemptIdentity) -> None:
        self.io = io
        self.prefix = prefix
        self.attempt = attempt
        self.files: list[str] = []
        self.logs: list[str] = []

    def add(self, paths: list[str]) -> None:
        path = f"{self.prefix}-{len(self.logs)}.json"
        body = json.dumps({"query": self.attempt.query_id, "batch": self.attempt.batch_id,
                           "partition": self.attempt.partition_id, "attempt": self.attempt.attempt,
                           "files": paths}).encode()
        with self.io.new_output(path).create(overwrite=True) as stream:
            stream.write(body)
        self.logs.append(path)
        self.files.extend(paths)

    def remove_with_files(self) -> None:
        """The attempt failed: delete what it wrote, then its logs (best effort)."""
        _, failed = delete_quietly(self.io, self.files)
        if failed:
            logger.warning("%s failed and could not delete %d of its data files (its logs %s-*.json name them): %s",
                           self.attempt.describe(), len(failed), self.prefix, failed[:5])
            return
        delete_quietly(self.io, self.logs)


# -- writing -------------------------------------------------------------------------------------


def write_attempt(
    table_name: str, metadata: TableMetadata, io_properties: tuple[tuple[str, str], ...],
    attempt: AttemptIdentity, batches: Iterable[pa.RecordBatch],
) -> IcebergTaskResult:
    """Executor: write this attempt's rows as data files (see the module docstring)."""
    io = file_io(io_properties, metadata.location)
    write_uuid = uuid.uuid4()
    log_prefix = (f"{batch_attempts_dir(metadata.location, attempt.query_id, attempt.batch_id)}/"
                  f"part-{attempt.partition_id}-attempt-{attempt.attempt}-{write_uuid.hex[:12]}")
    log = AttemptLog(io, log_prefix, attempt)
    counter = itertools.count(0)
    data_files: list[DataFile] = []
    records = 0
    try:
        chunk_bytes = min(MAX_CHUNK_BYTES, property_as_int(
            metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT) or MAX_CHUNK_BYTES)
        for chunk in bin_pack_record_batches(_nonempty(batches), chunk_bytes):
            rows = _normalize(pa.Table.from_batches(chunk))
            data_files.extend(_write_chunk(io, metadata, rows, write_uuid, counter, log))
            records += rows.num_rows
    except BaseException:
        log.remove_with_files()
        raise
    pause_point("iceberg:task-files-written")
    return IcebergTaskResult(
        query_id=attempt.query_id, batch_id=attempt.batch_id, partition_id=attempt.partition_id,
        attempt=attempt.attempt, records=records, data_files=tuple(data_files),
        spec_id=metadata.default_spec_id,
    )


def _nonempty(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if batch.num_rows:
            yield batch


def _normalize(rows: pa.Table) -> pa.Table:
    """Spark's timestamps carry the session's time zone; Iceberg's timestamptz is UTC (the
    same instants: a change of metadata only)."""
    columns, changed = [], False
    for field, column in zip(rows.schema, rows.columns, strict=True):
        if pa.types.is_timestamp(field.type) and field.type.tz not in (None, "UTC"):
            utc = pa.timestamp(field.type.unit, tz="UTC")
            columns.append((field.with_type(utc), column.cast(utc)))
            changed = True
        else:
            columns.append((field, column))
    if not changed:
        return rows
    return pa.Table.from_arrays([column for _, column in columns], schema=pa.schema([f for f, _ in columns]))


def _write_chunk(io: FileIO, metadata: TableMetadata, rows: pa.Table, write_uuid: uuid.UUID,
                 counter: itertools.count[int], log: AttemptLog) -> list[DataFile]:
    from pyiceberg.io.fileformat import FileFormatFactory
    from pyiceberg.io.pyarrow import write_file
    from pyiceberg.manifest import FileFormat

    schema = metadata.schema()
    sort_order = metadata.sort_order()
    rows = sort_rows(rows, metadata)
    task_schema = pyarrow_to_schema(rows.schema, name_mapping=schema.name_mapping,
                                    format_version=metadata.format_version)
    spec = metadata.spec()
    if spec.is_unpartitioned():
        tasks = [WriteTask(write_uuid=write_uuid, task_id=next(counter), schema=task_schema,
                           record_batches=rows.to_batches())]
    else:
        tasks = [WriteTask(write_uuid=write_uuid, task_id=next(counter), schema=task_schema,
                           record_batches=partition.arrow_table_partition.to_batches(),
                           partition_key=partition.partition_key)
                 for partition in _determine_partitions(spec=spec, schema=schema, arrow_table=rows)]
    file_format = FileFormat(metadata.properties.get(TableProperties.WRITE_FILE_FORMAT,
                                                     TableProperties.WRITE_FILE_FORMAT_DEFAULT))
    extension = FileFormatFactory.get(file_format).file_extension()
    locations = load_location_provider(table_location=metadata.location, table_properties=metadata.properties)
    planned = [locations.new_data_location(data_file_name=task.generate_data_file_filename(extension),
                                           partition_key=task.partition_key) for task in tasks]
    log.add(planned)  # before any of them exists
    written = list(write_file(io, metadata, iter(tasks)))
    unplanned = [data_file.file_path for data_file in written if data_file.file_path not in set(planned)]
    if unplanned:  # pyiceberg named them differently: record them too, so cleanup finds them
        log.add(unplanned)
    if sort_order.order_id:
        for data_file in written:
            data_file[_SORT_ORDER_ID_POSITION] = sort_order.order_id
    return written


def sort_rows(rows: pa.Table, metadata: TableMetadata) -> pa.Table:
    """The rows in the table's sort order (each field's transform applied, as Iceberg
    defines it). Null placement follows the first field (Arrow sorts with one placement)."""
    sort_order = metadata.sort_order()
    if not sort_order.fields or rows.num_rows < 2:
        return rows
    schema = metadata.schema()
    keys: list[tuple[str, str]] = []
    extended = rows
    for number, field in enumerate(sort_order.fields):
        column_name = schema.find_column_name(field.source_id)
        if column_name is None or column_name not in rows.column_names:
            raise IcebergSinkError(f"sort order field {field} names a column the rows do not have")
        source_type = schema.find_field(field.source_id).field_type
        values: Any = rows.column(column_name)
        if not isinstance(field.transform, IdentityTransform):
            values = field.transform.pyarrow_transform(source_type)(values)
        key = f"__oncelog_sort_{number}"
        extended = extended.append_column(key, values)
        keys.append((key, "ascending" if field.direction == SortDirection.ASC else "descending"))
    placement = "at_start" if sort_order.fields[0].null_order == NullOrder.NULLS_FIRST else "at_end"
    ordered = extended.sort_by(keys, null_placement=placement)
    return ordered.drop_columns([key for key, _ in keys])
