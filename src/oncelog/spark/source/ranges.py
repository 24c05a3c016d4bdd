"""Reading one offset range of one partition: the work of one Spark task, on an executor.

A range is [start, end). Offsets are not record counts: under read_committed, control
records (transaction markers) and aborted records occupy offsets the reader never
returns. So the reader never counts records: it fetches from the partition's leader
(oncelog.client, standard Fetch requests) until the offset after the last whole batch
it has seen reaches `end`, and keeps the records below `end`.

Each Fetch answer becomes one Arrow RecordBatch, built a column at a time
(oncelog.client.records); the next Fetch is already on its way while one is decoded.
Connections and metadata are the worker process's (`shared_cluster`), so the tasks of
later micro-batches that land in the same Python worker skip connection set-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import InputPartition

from oncelog.client.cluster import Cluster, UnknownTopic, shared_cluster
from oncelog.client.errors import STALE_LEADER, BrokerError, ConnectionLost
from oncelog.client.fetcher import EARLIEST, LATEST, FetchedPartition, PartitionFetcher, list_offset
from oncelog.client.records import decode_fetched, next_fetch_offset
from oncelog.protocol.record_batch import CorruptRecordError
from oncelog.spark import trace
from oncelog.spark.errors import DataLoss, ReadStalled, SourceError
from oncelog.spark.source.options import SourceOptions
from oncelog.spark.source.rows import arrow_batch
from oncelog.spark.worker import settle

log = logging.getLogger("oncelog.spark")

RETRY_PAUSE_S = 0.05


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task. Planned on the driver,
    pickled to an executor."""

    topic: str
    partition: int
    start: int
    end: int

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def read_range(options: SourceOptions, task: KafkaRange) -> Iterator:
    """Yield pyarrow RecordBatches holding every record a consumer with the options'
    isolation level gets in [task.start, task.end). Runs on an executor."""
    if task.end <= task.start:
        return
    yield from _RangeReader(shared_cluster(options.client), options, task).batches()
    settle()


class _RangeReader:
    def __init__(self, cluster: Cluster, options: SourceOptions, task: KafkaRange) -> None:
        self.cluster = cluster
        self.options = options
        self.task = task
        self.where = f"{task.topic}-{task.partition}"
        self.fetcher = PartitionFetcher(cluster, task.topic, task.partition, options.fetch_settings)

    def batches(self) -> Iterator:
        task = self.task
        position = task.start
        stall_limit_s = self.options.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        where = {"topic": task.topic, "partition": task.partition}
        fetching = trace.Stopwatch("source.fetch_wait", **where)  # waiting for the broker's answers
        decoding = trace.Stopwatch("source.decode", **where)  # records to Arrow columns
        downstream = trace.Stopwatch("source.downstream", **where)  # Spark taking each batch
        rows = 0
        started, clock = time.time(), time.perf_counter()
        try:
            while position < task.end:
                before = position
                fetching.start()
                try:
                    fetched = self._fetch(position)
                except _SkipTo as skip:  # failOnDataLoss=false: lost offsets are skipped
                    position, fetched = max(position, skip.offset), None
                fetching.stop()
                if fetched is not None:
                    decoding.start()
                    position, batch = self._take(fetched, position)
                    self.fetcher.done(fetched)  # the batch holds copies of the records
                    decoding.stop()
                    if batch is not None:
                        rows += batch.num_rows
                        downstream.start()
                        yield batch
                        downstream.stop()
                now = time.monotonic()
                if position > before:
                    last_progress = now
                elif now - last_progress > stall_limit_s:
                    raise ReadStalled(
                        f"no progress reading {self.where} from offset {position} towards {task.end} for "
                        f"kafkaConsumer.pollTimeoutMs={self.options.poll_timeout_ms} "
                        f"(kafka.bootstrap.servers={self.options.bootstrap_servers})"
                    )
        finally:
            self.fetcher.discard_in_flight()
            for watch in (fetching, decoding, downstream):
                watch.record(records=rows)
            trace.record("source.read", started, time.perf_counter() - clock, records=rows, **where)

    def _fetch(self, position: int) -> FetchedPartition | None:
        """The next Fetch answer for `position` (one may already be in flight), or None
        after a failure worth retrying (a pause has been taken)."""
        try:
            if not self.fetcher.in_flight:
                self.fetcher.send(position)
            fetched = self.fetcher.receive()
        except UnknownTopic:
            self._gone(position)
            return None
        except ConnectionLost as error:
            log.info("reading %s at offset %d: %s (retrying)", self.where, position, error)
            self._retry_later()
            return None
        except BrokerError as error:
            if not error.retriable:
                raise SourceError(f"reading {self.where} at offset {position}: {error}") from None
            self._retry_later()
            return None
        if fetched.error == ErrorCode.none:
            return fetched
        self.fetcher.discard_in_flight()
        if fetched.error == ErrorCode.offset_out_of_range:
            self._out_of_range(position)
            return None
        if fetched.error in STALE_LEADER:
            self.cluster.forget_leader(self.task.topic)
            self._retry_later()
            return None
        if fetched.error.retriable:
            self._retry_later()
            return None
        raise SourceError(f"reading {self.where} at offset {position}: {fetched.error.name.upper()}")

    def _take(self, fetched: FetchedPartition, position: int):
        """(new position, the answer's kept records as an Arrow batch or None)."""
        task = self.task
        following = next_fetch_offset(fetched.records, position)
        if position < following < task.end and not self.fetcher.in_flight:
            try:
                self.fetcher.send(following)  # fetched while this answer is decoded
            except (ConnectionLost, BrokerError, UnknownTopic):
                pass  # sent again by the next turn, which handles the failure
        try:
            decoded = decode_fetched(
                fetched.records, start=position, end=task.end, read_committed=self.options.read_committed,
                aborted=fetched.aborted, with_headers=self.options.include_headers,
                verify_crc=self.options.fetch_settings.check_crcs,
            )
        except CorruptRecordError as error:
            raise SourceError(f"reading {self.where} at offset {position}: {error}") from None
        batch = arrow_batch(decoded, task.topic, task.partition, self.options.include_headers) if len(decoded) else None
        return max(position, following), batch

    def _retry_later(self) -> None:
        self.fetcher.discard_in_flight()
        time.sleep(RETRY_PAUSE_S)

    def _out_of_range(self, position: int) -> None:
        """OFFSET_OUT_OF_RANGE: below the log start (deleted by retention) or above the
        log end (a truncated log). Data loss, or skipped when failOnDataLoss is false."""
        task = self.task
        try:
            low = list_offset(self.cluster, task.topic, task.partition, EARLIEST, read_committed=False)
            high = list_offset(self.cluster, task.topic, task.partition, LATEST, read_committed=False)
        except (BrokerError, ConnectionLost, UnknownTopic):
            self._retry_later()
            return None
        if position >= low:
            if position < high:
                return None  # the log moved under the request (a new leader): fetch again
            message = f"offset {position} of {self.where} is beyond the log end {high}"
            if self.options.fail_on_data_loss:
                raise DataLoss(f"{message}; offsets up to {task.end} were expected")
            log.warning("%s; skipping to the range end %d", message, task.end)
            raise _SkipTo(task.end)
        message = f"offsets {position}..{min(low, task.end) - 1} of {self.where} were deleted before they were read"
        if self.options.fail_on_data_loss:
            raise DataLoss(f"{message} (log start offset is now {low}). Set failOnDataLoss=false to skip them.")
        log.warning("%s; skipping to offset %d", message, low)
        raise _SkipTo(min(low, task.end))

    def _gone(self, position: int) -> None:
        """The topic or partition no longer exists (a fresh metadata answer says so)."""
        message = f"{self.where} no longer exists; offsets {position}..{self.task.end - 1} cannot be read"
        if self.options.fail_on_data_loss:
            raise DataLoss(message)
        log.warning("%s; skipping them", message)
        raise _SkipTo(self.task.end)


class _SkipTo(Exception):
    """Internal: continue reading at `offset` (failOnDataLoss=false skipped lost offsets)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
