"""`format("oncelog")`: a Kafka-protocol source for Spark batch and streaming queries,
through PySpark's Python Data Source API (no JVM connector jar). Writing
(`streamWriter`, `writer`) is delegated to oncelog.spark.sink.

Where things run:
- `OncelogDataSource` is created from the options on the driver (in Python workers Spark
  starts for planning) and pickled to executors with the readers it makes.
- `OncelogBatchReader.__init__` and `partitions()` run on the driver: they ask the
  cluster for partitions and offsets once and plan one `KafkaRange` per partition.
- `OncelogStreamReader.initialOffset/latestOffset/partitions/commit` run on the driver,
  in one long-lived Python worker per query run; they ask the cluster each time.
- `read()` of both readers runs on executors: it opens a confluent-kafka consumer,
  reads one range, and yields pyarrow RecordBatches.

Readers are pickled to executors, so they hold only options and plain values; the
driver's AdminClient (`ClusterView`) is created lazily and dropped when pickling.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from oncelog.spark import trace
from oncelog.spark.errors import DataLoss, SourceOptionError
from oncelog.spark.source.offsets import (
    ClusterView,
    PartitionOffsets,
    describe_partitions,
    from_json,
    limit_offsets,
    to_json,
)
from oncelog.spark.source.options import EARLIEST, LATEST, OffsetsSpec, SourceOptions, parse_options
from oncelog.spark.source.ranges import KafkaRange, read_range
from oncelog.spark.source.rows import kafka_schema

FORMAT_NAME = "oncelog"

# The initial offset of a stream starting at "latest", until batch 0 resolves it. "$" is
# not allowed in topic names, so it cannot be mistaken for offsets.
PENDING_LATEST = {"$startingOffsets": "latest"}


class OncelogDataSource(DataSource):
    """The data source Spark finds under `format("oncelog")` once `register(spark)` ran.

    Options mirror Spark's Kafka source (see docs/spark.md). Created on the driver;
    pickled to executors."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        """Driver. The fixed Kafka row schema; validates the options so a mistake fails at
        `load()`."""
        options = parse_options(self.options, streaming=None)
        return kafka_schema(options.include_headers)

    def reader(self, schema: StructType) -> OncelogBatchReader:
        """Driver: a batch reader; resolves partitions and offsets now."""
        options = parse_options(self.options, streaming=False)
        _check_schema(schema, options)
        return OncelogBatchReader(options)

    def streamReader(self, schema: StructType) -> OncelogStreamReader:
        """Driver: a stream reader. Does not contact the cluster (Spark also builds one just
        to pickle `read()` to executors)."""
        options = parse_options(self.options, streaming=True)
        _check_schema(schema, options)
        return OncelogStreamReader(options)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """Driver: the exactly-once sink's writer for one micro-batch (oncelog.spark.sink)."""
        from oncelog.spark.sink.writers import stream_writer

        return stream_writer(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        """Driver: the sink's writer for a batch `df.write.format("oncelog")`."""
        from oncelog.spark.sink.writers import batch_writer

        return batch_writer(self.options, schema)


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = kafka_schema(options.include_headers)
    if schema != expected:
        raise SourceOptionError(
            f"the oncelog source has a fixed schema ({expected.simpleString()}); "
            f"do not set one with .schema() (got {schema.simpleString()})"
        )


class OncelogBatchReader(DataSourceReader):
    """`spark.read.format("oncelog")`: reads startingOffsets..endingOffsets of every
    subscribed partition. Built on the driver (where it asks the cluster for offsets,
    once); pickled to executors with the planned ranges."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.ranges = _plan_batch(options)

    def partitions(self) -> list[KafkaRange]:
        """Driver: one task per partition with something to read."""
        return list(self.ranges)

    def read(self, partition: InputPartition) -> Iterator:
        """Executor: the records of one range as pyarrow RecordBatches."""
        if not isinstance(partition, KafkaRange):  # Spark's placeholder when nothing is planned
            return iter(())
        return read_range(self.options, partition)


def _plan_batch(options: SourceOptions) -> list[KafkaRange]:
    cluster = ClusterView(options)
    partitions = cluster.subscribed_partitions(require_existing=True)
    assert options.ending_offsets is not None
    start = _resolve(cluster, options.starting_offsets, partitions)
    end = _resolve(cluster, options.ending_offsets, partitions)
    _check_not_deleted(cluster, options, start)
    latest = cluster.latest(partitions)
    beyond = {tp: offset for tp, offset in end.items() if offset > latest[tp]}
    if beyond:
        detail = ", ".join(
            f"{t}-{p} at {offset} (latest {latest[(t, p)]})"
            for (t, p), offset in sorted(beyond.items())
        )
        # Reading would wait for records that may never come: say so now instead.
        raise SourceOptionError(f"endingOffsets lie beyond the latest offsets: {detail}")
    ranges = []
    for tp in partitions:
        if start[tp] > end[tp]:
            raise SourceOptionError(
                f"startingOffsets {start[tp]} of {tp[0]}-{tp[1]} is after its endingOffsets {end[tp]}"
            )
        if end[tp] > start[tp]:
            ranges.append(KafkaRange(tp[0], tp[1], start[tp], end[tp]))
    return ranges


def _resolve(cluster: ClusterView, spec: OffsetsSpec, partitions: list) -> PartitionOffsets:
    """Offsets for `partitions` per startingOffsets/endingOffsets: sentinels become the
    cluster's earliest/latest offsets."""
    specific = spec.specific_map
    if specific is not None:
        missing = sorted(set(partitions) - set(specific))
        if missing:
            raise SourceOptionError(
                f"offsets JSON must name every subscribed partition; missing {describe_partitions(missing)}"
            )
        unknown = sorted(set(specific) - set(partitions))
        if unknown:
            raise SourceOptionError(
                f"offsets JSON names partitions that do not exist: {describe_partitions(unknown)}"
            )
        wanted = {tp: specific[tp] for tp in partitions}
    else:
        wanted = dict.fromkeys(partitions, spec.default)
    earliest = cluster.earliest([tp for tp, offset in wanted.items() if offset == EARLIEST])
    latest = cluster.latest([tp for tp, offset in wanted.items() if offset == LATEST])
    return {
        tp: earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
        for tp, offset in wanted.items()
    }


def _starts_at_latest(spec: OffsetsSpec) -> bool:
    if spec.specific is None:
        return spec.default == LATEST
    return any(offset == LATEST for _, offset in spec.specific)


def _check_not_deleted(
    cluster: ClusterView, options: SourceOptions, start: PartitionOffsets
) -> None:
    """Starting offsets below the log start offset name deleted records."""
    if not options.fail_on_data_loss:
        return
    earliest = cluster.earliest(start)
    gone = {tp: (offset, earliest[tp]) for tp, offset in start.items() if offset < earliest[tp]}
    if gone:
        detail = ", ".join(
            f"{t}-{p} from {offset} (log starts at {low})"
            for (t, p), (offset, low) in sorted(gone.items())
        )
        raise DataLoss(
            f"records to read were deleted: {detail}. Set failOnDataLoss=false to skip them."
        )


class OncelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("oncelog")`.

    Offsets are `{"topic": {"partition": next offset}}`. Each micro-batch reads from the
    previous batch's end to the latest stable offset (or fewer offsets under
    maxOffsetsPerTrigger). Partitions created later, and new topics matching
    subscribePattern, are read from their beginning (offset 0), as Spark's Kafka source
    reads them from earliest.

    Offset methods run on the driver; `read()` runs on executors. Picklable: the
    ClusterView is dropped when pickled and rebuilt on first use."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterView | None = None
        self._available_now_target: PartitionOffsets | None = None
        self._latest_seen: PartitionOffsets | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    @property
    def cluster(self) -> ClusterView:
        if self._cluster is None:
            self._cluster = ClusterView(self.options)
        return self._cluster

    # Driver ------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Driver, for a new query (and again if it restarts before batch 0 committed):
        where reading starts. A subscribed topic that does not exist is an error.

        "earliest" and explicit offsets resolve to offsets now. "latest" must not: Spark
        calls this again when batch 0 is re-run, and the latest offset will have moved. So
        it returns `PENDING_LATEST`, `latestOffset` resolves it once, and batch 0 (which
        reads nothing) records the resolved offsets in Spark's offset log."""
        partitions = self.cluster.subscribed_partitions(require_existing=True)
        if _starts_at_latest(self.options.starting_offsets):
            return dict(PENDING_LATEST)
        start = _resolve(self.cluster, self.options.starting_offsets, partitions)
        _check_not_deleted(self.cluster, self.options, start)
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """Driver: maxOffsetsPerTrigger, as a row limit."""
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Driver, at the start of a Trigger.AvailableNow run: fixes the target as the latest
        offsets now; later batches never read past it and the run ends there."""
        partitions = self.cluster.subscribed_partitions(require_existing=False)
        self._available_now_target = self.cluster.latest(partitions)
        self._latest_seen = self._available_now_target

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Driver, before each micro-batch: where the next batch ends. Asks the cluster for
        the partitions and their latest stable offsets (unless an AvailableNow target is
        fixed), never goes below `start`, and honours `limit`."""
        with trace.step("source.latest_offset"):
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        if start == PENDING_LATEST:
            partitions = self.cluster.subscribed_partitions(require_existing=True)
            return to_json(_resolve(self.cluster, self.options.starting_offsets, partitions))
        start_offsets = from_json(start)
        if self._available_now_target is not None:
            latest = dict(self._available_now_target)
        else:
            partitions = self.cluster.subscribed_partitions(require_existing=False)
            latest = self.cluster.latest(partitions)
            self._latest_seen = latest
        self._check_partitions_kept(start_offsets, latest)
        new_partitions = [tp for tp in latest if tp not in start_offsets]
        if new_partitions:
            self._check_new_partitions_complete(new_partitions)
        end = {tp: max(start_offsets.get(tp, 0), offset) for tp, offset in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(start_offsets, end, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise SourceOptionError(f"read limit {limit!r} is not supported by the oncelog source")
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        """Driver: the latest offsets seen by the last `latestOffset`, for query progress."""
        return None if self._latest_seen is None else to_json(self._latest_seen)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        """Driver: one task per partition whose offset moves. A partition absent from
        `start` is new since the previous batch and is read from offset 0. The batch that
        resolves `PENDING_LATEST` reads nothing."""
        with trace.step("source.partitions"):
            return self._partitions(start, end)

    def _partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        if start == PENDING_LATEST:
            return []
        start_offsets = from_json(start)
        ranges = []
        for (topic, partition), end_offset in from_json(end).items():
            start_offset = start_offsets.get((topic, partition), 0)
            if end_offset < start_offset:
                message = (
                    f"offsets of {topic}-{partition} went backwards from {start_offset} to "
                    f"{end_offset} (was the topic deleted and created again?)"
                )
                if self.options.fail_on_data_loss:
                    raise DataLoss(message)
                continue
            if end_offset > start_offset:
                ranges.append(KafkaRange(topic, partition, start_offset, end_offset))
        return ranges

    def commit(self, end: dict) -> None:
        """Driver: Spark finished everything up to `end`. Nothing to do: the checkpoint,
        not a consumer group, holds the source's progress."""

    def stop(self) -> None:
        """Driver, when the query stops."""
        self._cluster = None

    def _check_partitions_kept(self, start: PartitionOffsets, latest: PartitionOffsets) -> None:
        gone = [tp for tp in start if tp not in latest]
        if gone and self.options.fail_on_data_loss:
            raise DataLoss(
                f"partitions {describe_partitions(gone)} were being read but no longer exist "
                "(topic deleted?). Set failOnDataLoss=false to carry on without them."
            )

    def _check_new_partitions_complete(self, new_partitions: list) -> None:
        """New partitions are read from offset 0; if retention already deleted their first
        records, those were lost before the query could see them."""
        if not self.options.fail_on_data_loss:
            return
        earliest = self.cluster.earliest(new_partitions)
        late = {tp: low for tp, low in earliest.items() if low > 0}
        if late:
            raise DataLoss(
                "new partitions start after offset 0, some records were deleted before they "
                f"were read: {', '.join(f'{t}-{p} at {low}' for (t, p), low in sorted(late.items()))}"
            )

    # Executor ----------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator:
        """Executor: the records of one range as pyarrow RecordBatches."""
        assert isinstance(partition, KafkaRange), partition
        return read_range(self.options, partition)
