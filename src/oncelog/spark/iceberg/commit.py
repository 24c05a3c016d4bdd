"""Driver side of the Iceberg sink after the tasks wrote: one snapshot per micro-batch,
committed at most once, and the cleanup of files that no snapshot will reference.

Idempotence. Each snapshot the sink commits carries `oncelog.query-id` and
`oncelog.batch-id` in its summary. Before committing batch N of query Q, the driver walks
the table's current snapshot and its ancestors, newest first, to the first snapshot of Q:
if its batch id is N or later, batch N is in the table and nothing is added (Spark calls
commit(N) again, after re-running the batch, when it stopped between the sink's commit and
its own commit log). Spark commits a query's batches in order, so the newest snapshot of Q
says how far Q got; snapshots of other writers (and of compaction) are walked past. The
check runs again before every retry, so a commit whose outcome was unknown (the catalog
applied it but the answer was lost) is never applied twice.

Concurrency. Another writer committing between our load and our commit makes the catalog
refuse ours (Iceberg's optimistic concurrency: CommitFailedException). pyiceberg itself
retries a fast append on the new head (commit.retry.* table properties) keeping the same
snapshot id; when it gives up, or the outcome is unknown, the loop here reloads the table,
checks the summary again and retries until commitTimeoutMs.

Cleanup. Every task attempt logged the files it was about to write
(oncelog.spark.iceberg.files). Once batch N is in the table, every logged file of N that
N's snapshot does not reference is deleted: failed, killed and speculative attempts, and
whole earlier runs of N that never committed. Logs of earlier batches still present (an
attempt that outlived its batch) are cleaned the same way when their batch's snapshot is
still in the table's history, else left and reported.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from oncelog.spark.iceberg.files import (
    IcebergTaskResult,
    attempts_root,
    batch_attempts_dir,
    delete_quietly,
    list_files,
    read_attempt_log,
    remove_dir,
)
from oncelog.spark.iceberg.options import IcebergCommitError, IcebergSinkOptions
from oncelog.spark.iceberg.table import open_catalog
from oncelog.spark.pause import pause_point

logger = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "oncelog.query-id"
BATCH_ID_PROPERTY = "oncelog.batch-id"

COMMITTED = "committed"
ALREADY_COMMITTED = "already-committed"
EMPTY = "empty"


@dataclass(frozen=True)
class BatchOutcome:
    """What commit(batchId) did."""

    outcome: str  # COMMITTED, ALREADY_COMMITTED or EMPTY (no rows: no snapshot)
    snapshot_id: int | None
    records: int
    data_files: int
    commit_attempts: int
    commit_ms: float
    deleted_files: int = 0  # of failed, killed, speculative or superseded attempts
    left_for_cleanup: tuple[str, ...] = field(default=())  # files that could not be judged or deleted


@dataclass(frozen=True)
class CommittedBatch:
    """Where the table says a query's batch went: its snapshot, when still in the history."""

    snapshot: Snapshot | None


def find_committed(table: Table, query_id: str, batch_id: int) -> CommittedBatch | None:
    """The snapshot that committed `batch_id` of `query_id`, or CommittedBatch(None) when the
    table shows a later batch of the query but not this one's snapshot; None when the batch
    is not in the table."""
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    later_seen = False
    while snapshot is not None:
        summary = snapshot.summary
        if summary is not None and summary.get(QUERY_ID_PROPERTY) == query_id:
            committed = int(summary.get(BATCH_ID_PROPERTY) or -1)
            if committed == batch_id:
                return CommittedBatch(snapshot)
            if committed < batch_id:
                break
            later_seen = True
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return CommittedBatch(None) if later_seen else None


def added_files(table: Table, snapshot: Snapshot) -> set[str]:
    """Paths of the data files `snapshot` added."""
    paths: set[str] = set()
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id:
                paths.add(entry.data_file.file_path)
    return paths


def _retryable(error: BaseException) -> bool:
    if isinstance(error, (CommitFailedException, CommitStateUnknownException)):
        return True
    # SQLite under concurrent writers: "database is locked" (the statement did not apply).
    return type(error).__name__ == "OperationalError" and "locked" in str(error)


def commit_batch(options: IcebergSinkOptions, query_id: str, batch_id: int,
                 results: Sequence[IcebergTaskResult]) -> BatchOutcome:
    """Driver: add the winning attempts' files of `batch_id` in one snapshot, unless the table
    already has the batch; then clean up. Raises IcebergCommitError when it cannot commit
    within commitTimeoutMs."""
    started = time.monotonic()
    deadline = started + options.commit_timeout_ms / 1000
    data_files = [data_file for result in results for data_file in result.data_files]
    records = sum(result.records for result in results)
    catalog = open_catalog(options)
    attempts = 0
    while True:
        table = catalog.load_table(options.table)
        found = find_committed(table, query_id, batch_id)
        if found is not None:
            outcome = BatchOutcome(ALREADY_COMMITTED, found.snapshot.snapshot_id if found.snapshot else None,
                                   records, len(data_files), attempts, _ms_since(started))
            committed = added_files(table, found.snapshot) if found.snapshot is not None else None
            break
        if not data_files:
            outcome = BatchOutcome(EMPTY, None, 0, 0, attempts, _ms_since(started))
            committed = set()
            break
        _check_spec(table, results, batch_id)
        pause_point("iceberg:before-snapshot")
        attempts += 1
        try:
            snapshot_id = _append(table, query_id, batch_id, data_files)
        except Exception as error:
            if not _retryable(error):
                raise
            if time.monotonic() >= deadline:
                raise IcebergCommitError(
                    f"batch {batch_id} of query {query_id}: no snapshot committed to {options.table_name} after "
                    f"{attempts} attempts in {options.commit_timeout_ms} ms (commitTimeoutMs): {error}"
                ) from error
            logger.info("commit of batch %d to %s: %s; retrying", batch_id, options.table_name, error)
            time.sleep(min(2.0, 0.05 * 2 ** min(attempts, 6)) * random.uniform(0.5, 1.0))
            continue
        outcome = BatchOutcome(COMMITTED, snapshot_id, records, len(data_files), attempts, _ms_since(started))
        committed = {data_file.file_path for data_file in data_files}
        pause_point("iceberg:after-snapshot")
        break
    try:  # the batch is in the table: nothing here may fail it
        deleted, left = clean_up_batch(table, query_id, batch_id, committed)
        deleted_earlier, left_earlier = clean_up_earlier_batches(table, query_id, batch_id)
    except Exception as error:  # noqa: BLE001 (listing or reading the logs failed: the next commit tries again)
        logger.warning("batch %d of query %s is in %s; cleaning up its failed attempts' files failed, the next "
                       "commit tries again: %s", batch_id, query_id, options.table_name, error)
        deleted, left, deleted_earlier, left_earlier = 0, [], 0, []
    left = left + left_earlier
    if left:
        logger.warning("batch %d of query %s: %d files of failed attempts could not be removed from %s; "
                       "they are in no snapshot (Iceberg's remove_orphan_files deletes them): %s",
                       batch_id, query_id, len(left), options.table_name, left[:10])
    return BatchOutcome(outcome.outcome, outcome.snapshot_id, outcome.records, outcome.data_files,
                        outcome.commit_attempts, outcome.commit_ms, deleted + deleted_earlier, tuple(left))


def _append(table: Table, query_id: str, batch_id: int, data_files: list) -> int:
    transaction = table.transaction()
    summary = {QUERY_ID_PROPERTY: query_id, BATCH_ID_PROPERTY: str(batch_id)}
    with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
        for data_file in data_files:
            append.append_data_file(data_file)
        snapshot_id = append._snapshot_id
    transaction.commit_transaction()
    return snapshot_id


def _check_spec(table: Table, results: Sequence[IcebergTaskResult], batch_id: int) -> None:
    current = table.metadata.default_spec_id
    written = {result.spec_id for result in results if result.data_files}
    if written - {current}:
        raise IcebergCommitError(
            f"the partition spec of {'.'.join(table.name())} changed (from id {sorted(written)} to {current}) while "
            f"batch {batch_id} was written; restart the query: the batch is written again for the new spec"
        )


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000


# -- cleanup -------------------------------------------------------------------------------------


def clean_up_batch(table: Table, query_id: str, batch_id: int, committed: set[str] | None) -> tuple[int, list[str]]:
    """Delete every file the attempt logs of `batch_id` name that is not in `committed` (the
    batch's snapshot), then the logs. With `committed` None (the snapshot is no longer in the
    history) nothing is deleted and the files are returned for the report."""
    io = table.io
    logs = list_files(io, batch_attempts_dir(table.metadata.location, query_id, batch_id))
    if logs is None:
        return 0, []  # this FileIO cannot list: Iceberg's orphan-file removal is the cleanup
    logged: list[str] = []
    unreadable = []
    for log in logs:
        try:
            logged.extend(read_attempt_log(io, log))
        except Exception:  # noqa: BLE001 (a torn log of a killed attempt: its files are judged by the others)
            unreadable.append(log)
    if committed is None:
        return 0, [path for path in logged if path]
    orphans = [path for path in dict.fromkeys(logged) if path not in committed]
    deleted, failed = delete_quietly(io, orphans)
    if not failed:
        # Only the logs read: one that could not be read may be an attempt's, still being
        # written (a late speculative copy); it stays, with its directory, for a later commit.
        delete_quietly(io, [log for log in logs if log not in unreadable])
        if not unreadable:
            remove_dir(io, batch_attempts_dir(table.metadata.location, query_id, batch_id))
    return deleted, failed


def clean_up_earlier_batches(table: Table, query_id: str, batch_id: int) -> tuple[int, list[str]]:
    """Logs of batches before `batch_id` still present: cleaned when their snapshot is in the
    history, else reported."""
    io: FileIO = table.io
    logs = list_files(io, f"{attempts_root(table.metadata.location)}/{query_id}")
    if not logs:
        return 0, []
    earlier: set[int] = set()
    for log in logs:
        name = log.rsplit("/", 2)
        if len(name) == 3 and name[1].isdigit() and int(name[1]) < batch_id:
            earlier.add(int(name[1]))
    deleted, left = 0, []
    for earlier_batch in sorted(earlier):
        found = find_committed(table, query_id, earlier_batch)
        committed = added_files(table, found.snapshot) if found is not None and found.snapshot is not None else None
        more, failed = clean_up_batch(table, query_id, earlier_batch, committed)
        deleted += more
        left.extend(failed)
    return deleted, left


def abort_batch(options: IcebergSinkOptions, query_id: str | None, batch_id: int,
                results: Sequence[IcebergTaskResult]) -> None:
    """Driver, when the batch failed: delete nothing. The commit may have failed with an
    unknown outcome that the catalog applies later, and another driver (one that outlived
    its replacement) may be writing the same batch: deleting the batch's files here could
    take files a snapshot references. They stay logged; the next commit of the batch (Spark
    runs it again on restart) deletes those its snapshot does not reference, and Iceberg's
    remove_orphan_files removes them if the query never runs again."""
    if results:
        logger.info("batch %d of query %s failed: its %d data files stay until the batch commits again (which "
                    "deletes those it does not reference)", batch_id, query_id or results[0].query_id,
                    sum(len(result.data_files) for result in results))
