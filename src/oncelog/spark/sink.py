"""`df.writeStream.format("oncelog")`: an exactly-once Kafka sink for Structured Streaming,
and `df.write.format("oncelog")` for batch DataFrames. See docs/spark.md, "Sink".

Two modes (option `mode`):

- `partition` (default, any Kafka 2.5+ cluster): each task writes its rows in one
  transaction under `transactional.id = <prefix>-<queryId>-<partitionId>`, so a retried
  or speculative attempt fences the earlier one (init_transactions). In the same
  transaction it commits offset `batchId + 1` for `<marker topic>-0` to the marker group
  named like the transactional id (TxnOffsetCommit, generation -1: the group has no
  members). A re-run of the batch reads that offset (read_committed, so require_stable)
  and writes nothing when it is past the batch. Each task's output is atomic; a
  micro-batch is not.
- `batch` (oncelog broker with KIP-939): each task attempt writes its rows in its own
  transaction and hands it over still open (InitProducerId v6, keepPreparedTxn); the
  driver's `commit(batchId)` records its decision durably under the checkpoint, then
  commits the recorded transactions and aborts everything else of the batch. A "gate"
  transaction opened before the tasks write holds every output partition's last stable
  offset below the batch's records until all of them are committed, so a read_committed
  consumer sees a micro-batch's records of a partition all at once.

Where code runs:
- `OncelogDataSource.streamWriter()` / `writer()` (source.py) call `stream_writer()` /
  `batch_writer()` here, on the driver, once per micro-batch for the tasks and again in the
  fresh Python worker that runs `commit`/`abort` (no driver state survives between calls).
- `write()` runs on executors: one call per task attempt, rows as pyarrow RecordBatches.
- Writers are pickled to executors: they hold only options and plain values.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from oncelog.spark.errors import ClusterUnreachable, TwoPhaseCommitUnavailable
from oncelog.spark.sink_options import (
    BATCH_MODE,
    PARTITION_MODE,
    SinkError,
    SinkOptionError,
    SinkOptions,
    SinkWriteError,
    parse_sink_options,
)

if TYPE_CHECKING:
    from oncelog.spark.twophase import TwoPhaseClient

# Header of the gate transaction's one record per partition (aborted, so read_committed
# consumers never see it; read_uncommitted ones do).
GATE_HEADER = "oncelog.sink.gate"
SINK_STATE_DIR = "oncelog-sink"
DECISIONS_KEPT = 100  # like spark.sql.streaming.minBatchesToRetain's default

# Fault injection for the kill and speculation tests: with
# ONCELOG_SINK_PAUSE_AT=<point>[,<point>...] and ONCELOG_SINK_PAUSE_FILE=<path>, the first
# process to reach a listed point creates the file (naming the point) and sleeps until it
# is killed (by the test, or by Spark when a speculative copy has won). Unset, this costs
# one getenv.
PAUSE_AT_ENV = "ONCELOG_SINK_PAUSE_AT"
PAUSE_FILE_ENV = "ONCELOG_SINK_PAUSE_FILE"


def pause_point(name: str) -> None:
    points = os.environ.get(PAUSE_AT_ENV)
    if not points or name not in points.split(","):
        return
    try:
        descriptor = os.open(os.environ[PAUSE_FILE_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(descriptor, name.encode())
    os.close(descriptor)
    while True:  # until the test kills the process group
        time.sleep(1)


def two_phase_client(bootstrap_servers: str, timeout_s: float) -> TwoPhaseClient:
    """The KIP-939 wire client, imported only where batch mode needs it: its protocol
    entities (kio) cost every fresh Python worker that loads the sink ~0.1 s to import."""
    from oncelog.spark.twophase import TwoPhaseClient

    return TwoPhaseClient(bootstrap_servers, timeout_s)


# -- entry points (called by OncelogDataSource) -----------------------------------------------


def stream_writer(raw_options, schema: StructType) -> OncelogStreamWriter:
    """Driver: the writer of one micro-batch (or the one that commits it). Fails here, before
    any task runs, on bad options, a schema without the needed columns, an unreachable
    cluster, or (mode=batch) a cluster without 2PC."""
    options = parse_sink_options(raw_options, streaming=True)
    check_input_schema(schema, options)
    writer = OncelogStreamWriter(options, schema)
    if options.mode == BATCH_MODE:
        writer.prepare_batch_on_driver()
    else:
        check_reachable(options)
    return writer


def batch_writer(raw_options, schema: StructType) -> OncelogBatchWriter:
    """Driver: the writer of a batch `df.write.format("oncelog")`."""
    options = parse_sink_options(raw_options, streaming=False)
    check_input_schema(schema, options)
    check_reachable(options)
    return OncelogBatchWriter(options, schema)


# -- input rows --------------------------------------------------------------------------------

HEADERS_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
_COLUMN_TYPES = {
    "value": (BinaryType(), StringType()),
    "key": (BinaryType(), StringType()),
    "topic": (StringType(),),
    "partition": (IntegerType(),),
}


def check_input_schema(schema: StructType, options: SinkOptions) -> None:
    """The columns of Spark's Kafka sink: value (required), key, topic, partition, headers.
    Other columns are ignored, as Spark's Kafka sink ignores them."""
    fields = {field.name.lower(): field for field in schema.fields}
    if "value" not in fields:
        raise SinkOptionError(
            f"the oncelog sink needs a 'value' column (binary or string); the rows have {schema.simpleString()}"
        )
    for name, allowed in _COLUMN_TYPES.items():
        column = fields.get(name)
        if column is not None and column.dataType not in allowed:
            raise SinkOptionError(
                f"column {name!r} must be {' or '.join(t.simpleString() for t in allowed)}, "
                f"not {column.dataType.simpleString()}"
            )
    headers = fields.get("headers")
    if headers is not None and not _is_headers_type(headers.dataType):
        raise SinkOptionError(
            "column 'headers' must be array<struct<key:string,value:binary>>, "
            f"not {headers.dataType.simpleString()}"
        )
    if options.topic is None and "topic" not in fields:
        raise SinkOptionError(
            "option topic is required when the rows have no 'topic' column (it names the topic to write to)"
        )


def _is_headers_type(data_type) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    element = data_type.elementType
    names = [f.name.lower() for f in element.fields]
    return (
        names == ["key", "value"]
        and isinstance(element.fields[0].dataType, StringType)
        and isinstance(element.fields[1].dataType, BinaryType)
    )


@dataclass
class Rows:
    """One Arrow batch's rows as Python lists, a column at a time."""

    values: list
    keys: list | None
    topics: list | None
    partitions: list | None
    headers: list | None

    @classmethod
    def of(cls, batch) -> Rows:
        names = {name.lower(): index for index, name in enumerate(batch.schema.names)}

        def column(name):
            index = names.get(name)
            return None if index is None else batch.column(index).to_pylist()

        return cls(column("value"), column("key"), column("topic"), column("partition"), column("headers"))

    def __len__(self) -> int:
        return len(self.values)

    def first_topic(self, default: str | None) -> str:
        return self.topic(0, default)

    def topic(self, index: int, default: str | None) -> str:
        topic = self.topics[index] if self.topics is not None else None
        topic = topic if topic is not None else default
        if topic is None:
            raise SinkWriteError("a row has a null 'topic' and option topic is not set")
        return topic


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else value


class RowProducer:
    """Produces rows with a confluent-kafka producer and collects delivery errors (a
    delivery error fails the task: its transaction must not commit)."""

    def __init__(self, producer, options: SinkOptions) -> None:
        self.producer = producer
        self.options = options
        self.count = 0
        self.topics: set[str] = set()
        self.errors: list[str] = []

    def _delivered(self, error, message) -> None:
        if error is not None and len(self.errors) < 5:
            self.errors.append(f"{message.topic()}-{message.partition()}: {error}")

    def produce(self, rows: Rows) -> None:
        produce = self.producer.produce
        for index in range(len(rows)):
            topic = rows.topic(index, self.options.topic)
            arguments = {"value": _as_bytes(rows.values[index]), "on_delivery": self._delivered}
            if rows.keys is not None and rows.keys[index] is not None:
                arguments["key"] = _as_bytes(rows.keys[index])
            if rows.partitions is not None and rows.partitions[index] is not None:
                arguments["partition"] = rows.partitions[index]
            if rows.headers is not None and rows.headers[index]:
                arguments["headers"] = [(h["key"], h["value"]) for h in rows.headers[index]]
            while True:
                try:
                    produce(topic, **arguments)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.producer.poll(0.05)
            self.topics.add(topic)
        self.count += len(rows)
        self.producer.poll(0)

    def flush(self, timeout_s: float) -> None:
        remaining = self.producer.flush(timeout_s)
        if remaining:
            raise SinkWriteError(f"{remaining} records were not acknowledged within {timeout_s:.0f}s")
        if self.errors:
            raise SinkWriteError("records could not be written: " + "; ".join(self.errors))

    @classmethod
    def write_all(cls, producer, options: SinkOptions, first: Rows, rest: Iterable[Rows],
                  timeout_s: float) -> RowProducer:
        """Produce `first` and every batch of `rest`, then flush: every row acknowledged
        (in the producer's open transaction) or SinkWriteError."""
        writer = cls(producer, options)
        writer.produce(first)
        for more in rest:
            writer.produce(more)
        writer.flush(timeout_s)
        return writer


def _nonempty_rows(batches: Iterable) -> Iterator[Rows]:
    for batch in batches:
        if batch.num_rows:
            yield Rows.of(batch)


# -- commit messages and task identity ---------------------------------------------------------


@dataclass(frozen=True)
class TaskIdentity:
    """Which task attempt of which micro-batch of which query this write is."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int

    @classmethod
    def current(cls, options: SinkOptions) -> TaskIdentity:
        """Executor: from Spark's TaskContext. The query id (stable across restarts from one
        checkpoint) is the local property sql.streaming.queryId; the checkpoint's metadata
        file is the fallback."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise SinkError("write() must run inside a Spark task")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if batch_id is None:
            raise SinkError("the streaming oncelog sink runs only in Structured Streaming queries")
        query_id = context.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            query_id = read_query_id(options)
        return cls(query_id, int(batch_id), context.partitionId(), context.attemptNumber())


@dataclass(frozen=True)
class TaskResult(WriterCommitMessage):
    """What a task attempt reports to the driver's commit."""

    mode: str
    query_id: str
    batch_id: int
    partition_id: int
    attempt: int
    records: int
    transactional_id: str | None = None  # batch mode: the prepared transaction; None when no rows
    producer_id: int = -1
    producer_epoch: int = -1
    skipped: bool = False  # partition mode: this batch's rows were committed by an earlier run
    topics: tuple[str, ...] = ()


def read_query_id(options: SinkOptions) -> str:
    """The query id from `<checkpointLocation>/metadata`, which Spark writes before the first
    micro-batch."""
    if options.checkpoint_location is None:
        raise SinkError(
            "the query id is unknown here: Spark did not set sql.streaming.queryId and option "
            "checkpointLocation is not set"
        )
    path = options.checkpoint_location / "metadata"
    try:
        with open(path) as metadata:
            return json.loads(metadata.readline())["id"]
    except (OSError, ValueError, KeyError) as error:
        raise SinkOptionError(
            f"option checkpointLocation={options.checkpoint_location}: cannot read the query id "
            f"from {path} ({error}); it must be the same path as the query's checkpointLocation"
        ) from None


# -- driver checks -------------------------------------------------------------------------


def check_reachable(options: SinkOptions) -> None:
    """Driver: one metadata round trip, so an unreachable cluster fails the query with a
    message naming the option instead of failing every task attempt after its timeout."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # Quiet (critical only): the outcome is reported by the exception below, and the
    # client can outlive this call in a reused Python worker.
    admin = AdminClient({**options.common_client_config(), "log_level": 2})
    try:
        admin.list_topics(timeout=min(options.cluster_timeout_s, 30.0))
    except KafkaException as error:
        raise ClusterUnreachable(
            f"no answer from kafka.bootstrap.servers={options.bootstrap_servers} "
            f"(waited up to clusterTimeoutMs={min(options.cluster_timeout_ms, 30000)}): {error}"
        ) from None


# -- streaming writer ------------------------------------------------------------------------


class OncelogStreamWriter(DataSourceStreamArrowWriter):
    """Writes one micro-batch; see the module docstring. Created on the driver per
    micro-batch and pickled to executors; `commit`/`abort` run on a fresh instance."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # Unique to this execution of the micro-batch: batch mode's transactional ids carry
        # it, so a batch re-run after a restart never reuses (and, through init_transactions,
        # aborts) a transaction an earlier run handed to the driver and may have decided on.
        self.run_token = uuid.uuid4().hex[:8]

    # Executor ------------------------------------------------------------------------------

    def write(self, iterator: Iterator) -> TaskResult:
        """Executor: this task's rows (pyarrow RecordBatches), written transactionally."""
        return self.write_as(TaskIdentity.current(self.options), iterator)

    def write_as(self, task: TaskIdentity, iterator: Iterable) -> TaskResult:
        """`write()` for an explicit task identity (tests replay attempts with it)."""
        if self.options.mode == PARTITION_MODE:
            return write_partition_mode(self.options, task, iterator)
        return write_batch_mode(self.options, task, self.run_token, iterator)

    # Driver --------------------------------------------------------------------------------

    def prepare_batch_on_driver(self) -> None:
        """Driver, mode=batch, before the batch's tasks write: check the cluster does 2PC and
        open the gate."""
        query_id = read_query_id(self.options)
        with two_phase_client(self.options.bootstrap_servers, self.options.cluster_timeout_s) as client:
            client.check_two_phase_commit()
            BatchCommitter(self.options, query_id, client).open_gate()

    def commit(self, messages: list, batchId: int) -> None:
        """Driver, after every task of the batch succeeded. Idempotent per batchId: Spark calls
        it again after a restart when it stopped before writing its commit log."""
        if self.options.mode == PARTITION_MODE:
            pause_point("commit:return:partition")  # the tasks committed; nothing is left to do
            return
        query_id = read_query_id(self.options)
        with two_phase_client(self.options.bootstrap_servers, self.options.cluster_timeout_s) as client:
            BatchCommitter(self.options, query_id, client).commit(_results(messages), batchId)
        pause_point("commit:return:batch")

    def abort(self, messages: list, batchId: int) -> None:
        """Driver, when the batch failed (or commit raised). Partition mode: tasks that
        committed stay committed, and a re-run skips them. Batch mode: aborts the batch's
        transactions unless a commit decision was already recorded."""
        if self.options.mode == PARTITION_MODE:
            return
        query_id = read_query_id(self.options)
        with two_phase_client(self.options.bootstrap_servers, self.options.cluster_timeout_s) as client:
            BatchCommitter(self.options, query_id, client).abort(_results(messages), batchId)


def _results(messages: list) -> list[TaskResult]:
    return [message for message in messages if isinstance(message, TaskResult)]


# -- partition mode (executor) ------------------------------------------------------------------


def partition_transactional_id(options: SinkOptions, query_id: str, partition_id: int) -> str:
    return f"{options.transactional_id_prefix}-{query_id}-{partition_id}"


def write_partition_mode(options: SinkOptions, task: TaskIdentity, batches: Iterable) -> TaskResult:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    rows = _nonempty_rows(batches)
    first = next(rows, None)
    result = TaskResult(PARTITION_MODE, task.query_id, task.batch_id, task.partition_id, task.attempt, 0)
    if first is None:
        return result
    transactional_id = partition_transactional_id(options, task.query_id, task.partition_id)
    marker = TopicPartition(options.topic or first.first_topic(None), 0)
    timeout = options.cluster_timeout_s
    producer = Producer(options.producer_config(transactional_id))
    marker_group = Consumer({
        **options.common_client_config(), "group.id": transactional_id, "enable.auto.commit": False,
        # read_committed makes OffsetFetch ask require_stable: an offset still pending in a
        # transaction is waited for, never read as absent.
        "isolation.level": "read_committed",
    })
    began = False
    try:
        # Fences every earlier attempt of this partition and aborts what it left open.
        producer.init_transactions(timeout)
        committed = _committed_offset(marker_group, marker, timeout)
        if committed.offset > task.batch_id:
            for _ in rows:  # an earlier attempt or run committed this batch's rows
                pass
            return TaskResult(**{**asdict(result), "skipped": True})
        producer.begin_transaction()
        began = True
        writer = RowProducer.write_all(producer, options, first, rows, timeout)
        pause_point("partition:before-task-commit")  # every row is in the open transaction
        producer.send_offsets_to_transaction(
            [TopicPartition(marker.topic, 0, task.batch_id + 1)], marker_group.consumer_group_metadata(), timeout
        )
        producer.commit_transaction(timeout)
        began = False
        pause_point("partition:after-task-commit")
        return TaskResult(**{**asdict(result), "records": writer.count, "topics": tuple(sorted(writer.topics))})
    except (KafkaException, SystemError) as error:  # SystemError: see _kafka_error
        raise SinkWriteError(_describe_kafka_error(error, options, transactional_id, task, producer)) from None
    finally:
        if began:
            try:
                producer.abort_transaction(5)
            except Exception:  # fenced or unreachable: the next attempt's init aborts it
                pass
        marker_group.close()


# OffsetFetch answers a client retries after finding the group coordinator again (it
# moved with its `__consumer_offsets` partition's leader, or is still loading it).
_COORDINATOR_MOVING = frozenset({"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"})
COMMITTED_RETRY_S = 0.2


def _committed_offset(marker_group, marker, timeout: float):
    """The marker group's committed offset for `marker`, asked again while the group's
    coordinator moves or loads (as a Kafka client retries those answers), until `timeout`."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            (committed,) = marker_group.committed([marker], max(deadline - time.monotonic(), COMMITTED_RETRY_S))
            return committed
        except KafkaException as exception:
            error = exception.args[0] if exception.args else None
            moving = isinstance(error, KafkaError) and (error.retriable() or error.name() in _COORDINATOR_MOVING)
            if not moving or time.monotonic() + COMMITTED_RETRY_S >= deadline:
                raise
            time.sleep(COMMITTED_RETRY_S)


def _describe_kafka_error(error, options: SinkOptions, transactional_id: str, task: TaskIdentity,
                          producer) -> str:
    from confluent_kafka import KafkaError

    kafka_error = _kafka_error(error) or _fatal_error(producer)
    where = f"task {task.partition_id} attempt {task.attempt} of batch {task.batch_id} ({transactional_id!r})"
    if kafka_error is None:
        return f"{where}: the producer failed: {error!r}"
    code = kafka_error.code()
    if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        return f"{where} was fenced by a newer attempt of the same task (a retry or speculative copy)"
    if code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        return (
            f"{where}: kafka.bootstrap.servers={options.bootstrap_servers} did not answer within "
            f"clusterTimeoutMs={options.cluster_timeout_ms}: {error}"
        )
    return f"{where}: {kafka_error}"


def _fatal_error(producer):
    """The producer's fatal error, if it has one: abort_transaction reports it (and, unlike
    any other call, can never make a partial transaction visible)."""
    from confluent_kafka import KafkaException

    try:
        producer.abort_transaction(5)
    except KafkaException as error:
        return _kafka_error(error)
    except Exception:
        return None
    return None


def _kafka_error(error: BaseException):
    """The KafkaError behind an exception. confluent-kafka 2.16's flush() raises a
    SystemError (sometimes with the KafkaError as its context) when the producer hit a
    fatal error, such as being fenced, while serving delivery callbacks."""
    from confluent_kafka import KafkaError

    for candidate in (error, error.__context__):
        if candidate is None:
            continue
        if isinstance(candidate, KafkaError):
            return candidate
        if candidate.args and isinstance(candidate.args[0], KafkaError):
            return candidate.args[0]
    return None


# -- batch mode (executor) --------------------------------------------------------------------


def batch_transactional_prefix(options: SinkOptions, query_id: str) -> str:
    return f"{options.transactional_id_prefix}-{query_id}-"


def batch_transactional_id(options: SinkOptions, task: TaskIdentity, run_token: str) -> str:
    return (
        f"{batch_transactional_prefix(options, task.query_id)}{task.batch_id}-{run_token}-"
        f"{task.partition_id}-{task.attempt}"
    )


def write_batch_mode(options: SinkOptions, task: TaskIdentity, run_token: str, batches: Iterable) -> TaskResult:
    from confluent_kafka import KafkaException, Producer

    transactional_id = batch_transactional_id(options, task, run_token)
    timeout = options.cluster_timeout_s
    result = TaskResult(BATCH_MODE, task.query_id, task.batch_id, task.partition_id, task.attempt, 0)
    rows = _nonempty_rows(batches)
    first = next(rows, None)
    if first is None:
        return result
    producer = Producer(options.producer_config(transactional_id))
    handed_over = False
    try:
        producer.init_transactions(timeout)
        producer.begin_transaction()
        writer = RowProducer.write_all(producer, options, first, rows, timeout)
        pause_point("batch:before-handover")  # every row is in the open transaction
        with two_phase_client(options.bootstrap_servers, timeout) as client:
            kept = client.keep_prepared(transactional_id)
        handed_over = True
        if not kept.has_ongoing:
            raise SinkWriteError(
                f"the transaction of {transactional_id!r} ended before it was handed over "
                "(did the task run longer than kafka.transaction.timeout.ms?)"
            )
        pause_point("batch:after-handover")
        return TaskResult(
            **{**asdict(result), "records": writer.count, "transactional_id": transactional_id,
               "producer_id": kept.producer_id, "producer_epoch": kept.producer_epoch,
               "topics": tuple(sorted(writer.topics))},
        )
    except (KafkaException, SystemError) as error:  # SystemError: see _kafka_error
        raise SinkWriteError(_describe_kafka_error(error, options, transactional_id, task, producer)) from None
    finally:
        if not handed_over:
            try:
                producer.abort_transaction(5)
            except Exception:  # the driver's cleanup aborts whatever is left open
                pass


# -- batch mode (driver) ----------------------------------------------------------------------


@dataclass
class Decision:
    """The driver's commit decision for one micro-batch, persisted before any EndTxn."""

    query_id: str
    batch_id: int
    transactions: list[dict]  # transactional_id, producer_id, producer_epoch, records, partition_id
    done: bool = False
    version: int = 1
    topics: list[str] = field(default_factory=list)


class SinkState:
    """`<checkpointLocation>/oncelog-sink/`: `batch-<id>.json` decisions and `topics.json`
    (topics the sink has written, which the gate covers). Writes are atomic and durable:
    temporary file, fsync, rename, fsync of the directory."""

    def __init__(self, checkpoint: Path) -> None:
        self.directory = checkpoint / SINK_STATE_DIR

    def _path(self, batch_id: int) -> Path:
        return self.directory / f"batch-{batch_id}.json"

    def load(self, batch_id: int) -> Decision | None:
        try:
            with open(self._path(batch_id)) as file:
                return Decision(**json.load(file))
        except FileNotFoundError:
            return None

    def save(self, decision: Decision) -> None:
        self._write(self._path(decision.batch_id), asdict(decision))
        old = self._path(decision.batch_id - DECISIONS_KEPT)
        old.unlink(missing_ok=True)

    def topics(self) -> list[str]:
        try:
            with open(self.directory / "topics.json") as file:
                return json.load(file)
        except FileNotFoundError:
            return []

    def add_topics(self, topics: Iterable[str]) -> None:
        known = self.topics()
        merged = sorted(set(known) | set(topics))
        if merged != known:
            self._write(self.directory / "topics.json", merged)

    def _write(self, path: Path, content) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
        with open(temporary, "w") as file:
            json.dump(content, file, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


class BatchCommitter:
    """The driver's side of mode=batch for one query: decide, commit, clean up, gate."""

    def __init__(self, options: SinkOptions, query_id: str, client: TwoPhaseClient) -> None:
        assert options.checkpoint_location is not None
        self.options = options
        self.query_id = query_id
        self.client = client
        self.state = SinkState(options.checkpoint_location)
        self.prefix = batch_transactional_prefix(options, query_id)
        self.gate_prefix = f"{self.prefix}gate-"

    def commit(self, results: list[TaskResult], batch_id: int) -> None:
        decision = self.state.load(batch_id)
        if decision is None:
            decision = self._decide(results, batch_id)
            pause_point("batch:after-decision")
        if not decision.done:
            for transaction in decision.transactions:
                self._commit_recorded(transaction)
            pause_point("batch:after-commit")
        # Everything else of this batch (losing attempts, an earlier run's tasks) and late
        # leftovers of earlier batches must be gone before the gate opens the partitions.
        self._abort_leftovers(batch_id, {t["transactional_id"] for t in decision.transactions})
        for transaction in decision.transactions:
            self.client.wait_complete(transaction["transactional_id"])
        self.close_gate()
        if not decision.done:
            decision.done = True
            self.state.save(decision)

    def abort(self, results: list[TaskResult], batch_id: int) -> None:
        decision = self.state.load(batch_id)
        if decision is not None and not decision.done:
            return  # decided: only a commit(batch_id) may end these transactions, and it will
        kept = set() if decision is None else {t["transactional_id"] for t in decision.transactions}
        for result in results:
            if result.transactional_id and result.transactional_id not in kept:
                self._abort(result.transactional_id)
        self._abort_leftovers(batch_id, kept)
        self.close_gate()

    def _decide(self, results: list[TaskResult], batch_id: int) -> Decision:
        transactions = []
        for result in results:
            if result.query_id != self.query_id:
                raise SinkOptionError(
                    f"task results belong to query {result.query_id} but checkpointLocation="
                    f"{self.options.checkpoint_location} holds query {self.query_id}: option "
                    "checkpointLocation must be the query's own checkpoint location"
                )
            if result.batch_id != batch_id:
                raise SinkError(f"commit of batch {batch_id} got the result of batch {result.batch_id}")
            if result.transactional_id is None:
                continue
            # Last chance to refuse: after the decision is saved every one must commit.
            described = self.client.describe(result.transactional_id)
            if (described.state, described.producer_id) != ("Ongoing", result.producer_id):
                raise SinkWriteError(
                    f"the prepared transaction of task {result.partition_id} attempt {result.attempt} "
                    f"({result.transactional_id!r}) is no longer open (state {described.state or 'unknown'}); "
                    "the batch will be re-run"
                )
            transactions.append({
                "transactional_id": result.transactional_id, "producer_id": result.producer_id,
                "producer_epoch": result.producer_epoch, "records": result.records,
                "partition_id": result.partition_id, "attempt": result.attempt,
            })
        topics = sorted({topic for result in results for topic in result.topics})
        decision = Decision(self.query_id, batch_id, transactions, topics=topics)
        self.state.add_topics(topics)
        self.state.save(decision)
        return decision

    def _commit_recorded(self, transaction: dict) -> None:
        transactional_id = transaction["transactional_id"]
        kept = self.client.keep_prepared(transactional_id)
        if not kept.has_ongoing:
            return  # an earlier commit() of this batch already committed it
        if kept.ongoing_producer_id != transaction["producer_id"] or (
            kept.ongoing_producer_epoch < transaction["producer_epoch"]
        ):
            # Only this sink uses these ids and never reuses one: a different transaction
            # here means something outside the sink wrote under the id.
            raise SinkError(
                f"{transactional_id!r} holds producer {kept.ongoing_producer_id} epoch "
                f"{kept.ongoing_producer_epoch}, not the recorded producer {transaction['producer_id']} "
                f"epoch {transaction['producer_epoch']}: refusing to commit a transaction the sink did not decide on"
            )
        self.client.end(transactional_id, kept.producer_id, kept.producer_epoch, commit=True)

    def _abort(self, transactional_id: str) -> None:
        kept = self.client.keep_prepared(transactional_id)
        if kept.has_ongoing:
            self.client.end(transactional_id, kept.producer_id, kept.producer_epoch, commit=False)
            self.client.wait_complete(transactional_id)

    def _abort_leftovers(self, batch_id: int, kept: set[str]) -> None:
        """Abort open transactions of batches up to `batch_id` that the decision does not
        name: losing attempts, the tasks of an earlier run of the batch, and speculative
        attempts that handed over after their batch committed."""
        batch_of = re.compile(re.escape(self.prefix) + r"(\d+)-.+")
        for transactional_id in self.client.list_ongoing(re.escape(self.prefix) + r"\d+-.+"):
            match = batch_of.fullmatch(transactional_id)
            if match and int(match.group(1)) <= batch_id and transactional_id not in kept:
                self._abort(transactional_id)

    # The gate: one record per output partition in a transaction that is kept open (2PC, no
    # timeout) from before the batch's tasks write until after its transactions are all
    # committed, then aborted. The LSO of each partition stays at the gate's record, below
    # all of the batch's records, until then, and moves past all of them at once.

    def open_gate(self) -> None:
        open_gates = self._open_gates()
        for gate_id in open_gates:
            # Already open (the batch is being re-run, or this is commit's writer). Owning it
            # with keepPreparedTxn also lifts the timeout of a gate whose opener died before
            # handing it over, and checks the brokers allow 2PC.
            self.client.keep_prepared(gate_id)
        if open_gates:
            return
        topics = sorted(set(self.state.topics()) | ({self.options.topic} if self.options.topic else set()))
        partitions = self._partitions(topics) if topics else []
        if not partitions:
            # Nothing to hold back yet; still make sure 2PC is allowed (ApiVersions cannot tell).
            self.client.keep_prepared(f"{self.options.transactional_id_prefix}-{self.query_id}-probe")
            return
        from confluent_kafka import KafkaException, Producer

        # A new id for every gate: an id is used for one transaction only, so its epoch
        # never runs out however long the query runs.
        gate_id = f"{self.gate_prefix}{uuid.uuid4().hex[:8]}"
        timeout = self.options.cluster_timeout_s
        producer = Producer({**self.options.producer_config(gate_id), "transaction.timeout.ms": 900_000})
        try:
            producer.init_transactions(timeout)
            producer.begin_transaction()
            for topic, partition in partitions:
                producer.produce(topic, value=b"", partition=partition, headers=[(GATE_HEADER, b"")])
            if producer.flush(timeout):
                raise SinkWriteError(f"the gate records of {gate_id!r} were not acknowledged in {timeout:.0f}s")
            self.client.keep_prepared(gate_id)
        except KafkaException as error:
            raise SinkWriteError(f"could not open the gate transaction {gate_id!r}: {error}") from None

    def close_gate(self) -> None:
        for gate_id in self._open_gates():
            self._abort(gate_id)

    def _open_gates(self) -> list[str]:
        return self.client.list_ongoing(re.escape(self.gate_prefix) + ".+")

    def _partitions(self, topics: list[str]) -> list[tuple[str, int]]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.options.common_client_config())
        metadata = admin.list_topics(timeout=self.options.cluster_timeout_s)
        found = []
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue  # not created yet: nothing of it to hold back
            found.extend((topic, partition) for partition in sorted(described.partitions))
        return found


def abandon_query(bootstrap_servers: str, query_id: str, transactional_id_prefix: str = "oncelog-sink",
                  timeout_s: float = 60.0) -> list[str]:
    """Abort every transaction a mode=batch query left open (prepared tasks and its gate),
    for a query that will never run again: they have no timeout and hold back the LSO of
    the partitions they wrote. Returns the transactional ids it aborted."""
    pattern = re.escape(f"{transactional_id_prefix}-{query_id}-") + ".+"
    aborted = []
    with two_phase_client(bootstrap_servers, timeout_s) as client:
        for transactional_id in client.list_ongoing(pattern):
            kept = client.keep_prepared(transactional_id)
            if kept.has_ongoing:
                client.end(transactional_id, kept.producer_id, kept.producer_epoch, commit=False)
                client.wait_complete(transactional_id)
                aborted.append(transactional_id)
    return aborted


# -- batch DataFrame writes ---------------------------------------------------------------------


@dataclass(frozen=True)
class BatchWriteResult(WriterCommitMessage):
    partition_id: int
    records: int


class OncelogBatchWriter(DataSourceArrowWriter):
    """`df.write.format("oncelog")`: each task writes its rows in one transaction (a retried
    task fences and aborts its failed predecessor's open transaction, but a task that
    committed and is then re-run for another reason writes again: at least once)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.job_token = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator) -> BatchWriteResult:
        from confluent_kafka import KafkaException, Producer
        from pyspark import TaskContext

        partition_id = TaskContext.get().partitionId()
        transactional_id = f"{self.options.transactional_id_prefix}-write-{self.job_token}-{partition_id}"
        rows = _nonempty_rows(iterator)
        first = next(rows, None)
        if first is None:
            return BatchWriteResult(partition_id, 0)
        timeout = self.options.cluster_timeout_s
        producer = Producer(self.options.producer_config(transactional_id))
        task = TaskIdentity("write-" + self.job_token, 0, partition_id, TaskContext.get().attemptNumber())
        try:
            producer.init_transactions(timeout)
            producer.begin_transaction()
            writer = RowProducer.write_all(producer, self.options, first, rows, timeout)
            producer.commit_transaction(timeout)
            return BatchWriteResult(partition_id, writer.count)
        except (KafkaException, SystemError) as error:
            raise SinkWriteError(_describe_kafka_error(error, self.options, transactional_id, task, producer)) from None

    def commit(self, messages: list) -> None:
        """Driver: every task committed its own transaction already."""

    def abort(self, messages: list) -> None:
        """Driver: tasks that committed stay committed (at least once)."""


__all__ = [
    "OncelogStreamWriter", "OncelogBatchWriter", "TaskIdentity", "TaskResult", "stream_writer", "batch_writer",
    "TwoPhaseCommitUnavailable", "ClusterUnreachable", "GATE_HEADER", "abandon_query",
]
