"""All partition logs of a broker, across its log directories, and the topic metadata.

Each log directory holds:

    __topics.meta                       topic names, ids, partition counts, config overrides
                                        (the same document in every log dir; the highest
                                        generation wins at load)
    recovery-point-offset-checkpoint    per partition: offsets below are fsynced
    log-start-offset-checkpoint         per partition: the log start offset
    replication-offset-checkpoint       per replicated partition: the high watermark
                                        (Kafka's name and text format, checkpoint_file.py)
    .oncelog_cleanshutdown              written last by close(), removed by load()
    .lock                               flock'ed while a broker uses the directory
    <topic>-<partition>/                one partition log each

The first three are versioned and CRC32C-framed (framed_file.py). Topic metadata is
written before partition directories are created and before they are removed, so a crash
in between leaves either empty partitions to create or unclaimed directories, which load
renames to `<name>.<hex>-stray` (as Kafka does with stray logs) rather than deleting.

With `replicated` (cluster mode) every log's high watermark belongs to the replication
side; `checkpoint()` records it and `load()` restores it (capped at the log end offset;
the log start offset when the partition has no entry). Standalone logs keep the high
watermark at the log end offset and write no replication checkpoint. An unreadable
replication checkpoint is logged and ignored like the other checkpoints (deviation:
Kafka fails the log directory): a high watermark restarting at the log start offset only
delays visibility until the leader moves it again.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import re
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog import clock
from oncelog.stats import Histogram
from oncelog.storage.checkpoint_file import read_checkpoint, write_checkpoint
from oncelog.storage.config import TOPIC_CONFIGS, LogConfig
from oncelog.storage.errors import (
    CorruptLogError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
    topic_partition_name,
)
from oncelog.storage.framed_file import (
    fsync_directory,
    read_json_file,
    read_partition_offsets,
    write_framed_file,
    write_json_file,
)
from oncelog.storage.log import LogFlush, PartitionLog
from oncelog.storage.open_files import OpenFiles
from oncelog.storage.producer_state import ProducerStateConfig

logger = logging.getLogger("oncelog.storage")

TOPICS_META_FILE = "__topics.meta"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".oncelog_cleanshutdown"
LOCK_FILE = ".lock"

_TOPICS_META_MAGIC = b"OLTM"
_TOPICS_META_VERSION = 1
_CHECKPOINT_MAGIC = b"OLCP"
_CHECKPOINT_VERSION = 1

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIRECTORY = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)")


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; raises InvalidTopicError."""
    if not name:
        raise InvalidTopicError(name, "the name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(name, "'.' and '..' are not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            name, f"the name is {len(name)} characters long, at most {MAX_TOPIC_NAME_LENGTH} are allowed"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(name, "only ASCII letters, digits, '.', '_' and '-' are allowed")


def new_topic_id() -> uuid.UUID:
    """A random topic id Kafka would accept: not zero, and not base64-encoding to a leading '-'."""
    while True:
        topic_id = uuid.uuid4()
        if urlsafe_b64encode(topic_id.bytes)[:1] != b"-":
            return topic_id


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    config_overrides: Mapping[str, str]  # topic-level keys set on this topic
    config: LogConfig  # the effective config: broker defaults plus overrides


@dataclass(frozen=True)
class NewTopic:
    """One topic for `LogManager.create_topics`."""

    name: str
    num_partitions: int
    configs: Mapping[str, str | None] = field(default_factory=dict)
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class _Opening:
    """One partition log to open (`PartitionLog.open`) or, when `new`, to create
    (`PartitionLog.create`), on any thread: it touches nothing but its own directory."""

    key: tuple[str, int]
    log_dir: Path
    config: LogConfig
    options: Mapping[str, Any]
    new: bool = False

    def open(self) -> PartitionLog:
        topic, partition = self.key
        make = PartitionLog.create if self.new else PartitionLog.open
        return make(self.log_dir / topic_partition_name(topic, partition), topic, partition, self.config,
                    **self.options)


@dataclass
class _TopicRecord:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    config_overrides: dict[str, str] = field(default_factory=dict)
    # The JSON text of the entry, and the (partitions, configs) it was made from: the
    # topic metadata is written whole for each change, and most entries never change.
    _encoded: tuple[tuple[int, dict[str, str]], str] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {
            "topic_id": str(self.topic_id),
            "partitions": self.num_partitions,
            "configs": dict(self.config_overrides),
        }

    def json_text(self) -> str:
        """`to_json()` as JSON text (`"name":{...}`), encoded again only after a change."""
        made_from = (self.num_partitions, self.config_overrides)
        if self._encoded is None or self._encoded[0] != made_from:
            text = json.dumps(self.name) + ":" + json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
            self._encoded = ((self.num_partitions, dict(self.config_overrides)), text)
        return self._encoded[1]


@dataclass(slots=True)
class CheckpointWrite:
    """One log dir's checkpoint files, taken on the loop and written by `run` on any
    thread (each file: temporary file, fsync, rename, directory fsync)."""

    directory: Path
    recovery_points: list[list[Any]]
    log_starts: list[list[Any]]
    high_watermarks: list[tuple[str, int, int]] | None  # None: no replication checkpoint here
    error: StorageError | None = None

    def run(self) -> None:
        try:
            write_json_file(self.directory / RECOVERY_POINT_CHECKPOINT_FILE, _CHECKPOINT_MAGIC,
                            _CHECKPOINT_VERSION, {"offsets": self.recovery_points})
            write_json_file(self.directory / LOG_START_CHECKPOINT_FILE, _CHECKPOINT_MAGIC,
                            _CHECKPOINT_VERSION, {"offsets": self.log_starts})
            if self.high_watermarks is not None:
                write_checkpoint(self.directory / REPLICATION_OFFSET_CHECKPOINT_FILE, self.high_watermarks)
        except StorageError as error:
            self.error = error


class LogManager:
    """Owns every partition log of the broker. Call `load()` before anything else."""

    def __init__(self, log_dirs: list[Path], default_config: LogConfig,
                 producer_state_config: ProducerStateConfig | None = None, *, replicated: bool = False,
                 threads_per_dir: int = 1, max_open_files: int | None = None) -> None:
        """`threads_per_dir` (Kafka's num.recovery.threads.per.data.dir) opens, creates and
        closes that many partition logs per log dir at once: their file system calls may
        overlap. At most `max_open_files` segment files are open at once (default: from
        the process's descriptor limit, open_files.py); the least recently used close."""
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self._threads = max(1, threads_per_dir) * len(self.log_dirs)
        self.open_files = OpenFiles(max_open_files)  # made on the loop's thread, which alone closes
        self._default_config = default_config
        # Broker-wide (producer.id.expiration.ms, producer.id.max.entries.per.partition).
        self.producer_state_config = producer_state_config or ProducerStateConfig()
        self.replicated = replicated  # passed to every log opened or created (see PartitionLog)
        self.flush_stats = Histogram()  # every log's flushes (Kafka's LogFlushRateAndTimeMs)
        self._topics: dict[str, _TopicRecord] = {}
        self._topic_names_by_id: dict[uuid.UUID, str] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self._partitions_in_dir: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        self._collision_keys: dict[str, set[str]] = {}  # a name with '.' as '_': the topics that have it
        self._generation = 0
        self._lock_fds: list[int] = []
        self._loaded = False
        # Log dirs taken offline after an I/O error (set_dir_offline), with the error.
        self.offline_dirs: dict[Path, StorageError] = {}
        self._failure_listeners: list[Callable[[Path, StorageError], object]] = []

    # -- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Lock the log dirs, read topic metadata and checkpoints, open every partition
        (recovering those of a log dir without a clean-shutdown marker)."""
        if self._loaded:
            raise RuntimeError("LogManager.load() called twice")
        try:
            self._load()
        except BaseException:
            for log in self._logs.values():
                log.close_without_flush()
            self._logs.clear()
            self._log_dir_of.clear()
            self._partitions_in_dir = dict.fromkeys(self.log_dirs, 0)
            self._unlock_all()
            raise
        self._loaded = True

    def lock(self) -> None:
        """Create and flock every log dir; StorageError if another process uses one.
        `load()` does it too; a broker calls it first, before anything else touches the
        dirs (meta.properties, the quorum member's data), so that a second broker started
        on the same log.dirs stops without harming the first. Released by `close()`, or
        by `unlock()` when the broker does not get as far as `load()`."""
        if self._lock_fds:
            return
        try:
            for directory in self.log_dirs:
                try:
                    directory.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StorageError(str(directory), f"cannot create log directory: {exc.strerror}",
                                       exc.errno) from exc
                self._lock(directory)
        except BaseException:
            self._unlock_all()
            raise

    def unlock(self) -> None:
        """Release the log dirs' locks taken by `lock()` (only before `load()`)."""
        if self._loaded:
            raise RuntimeError("the logs are loaded: close() releases the locks")
        self._unlock_all()

    def _load(self) -> None:
        self.lock()
        clean = {directory: (directory / CLEAN_SHUTDOWN_MARKER).exists() for directory in self.log_dirs}
        generations = self._read_topics_meta()
        recovery_points = {d: self._read_checkpoint(d / RECOVERY_POINT_CHECKPOINT_FILE) for d in self.log_dirs}
        log_starts = {d: self._read_checkpoint(d / LOG_START_CHECKPOINT_FILE) for d in self.log_dirs}
        high_watermarks = {
            d: self._read_replication_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT_FILE) if self.replicated else {}
            for d in self.log_dirs
        }
        existing = self._partition_directories()

        now_ms = clock.now_ms()
        openings = []
        for record in self._topics.values():
            config = self._effective_config(record, on_load=True)
            for partition in range(record.num_partitions):
                key = (record.name, partition)
                directory = existing.pop(key, None)
                if directory is None:
                    directory = self._least_loaded_dir()
                    logger.warning("%s: no directory found; starting an empty log in %s",
                                   topic_partition_name(*key), directory)
                self._place(key, directory)
                openings.append(_Opening(key, directory, config, {
                    "recover": not clean[directory],
                    # no checkpoint entry: rescan everything, as Kafka does (recovery point 0)
                    "recovery_point": recovery_points[directory].get(key, 0),
                    "log_start_offset": log_starts[directory].get(key),
                    "now_ms": now_ms,
                    "producer_state_config": self.producer_state_config,
                    "replicated": self.replicated,
                    "high_watermark": high_watermarks[directory].get(key),
                    "open_files": self.open_files,
                }))
        opened, failures = self._open_all(openings)
        for key, log in opened.items():
            self._logs[key] = self._watched(log)
        if failures:
            raise failures[0][1]
        for (topic, partition), directory in existing.items():
            self._set_aside_stray(directory, topic_partition_name(topic, partition))
        for directory in self.log_dirs:
            if clean[directory]:
                (directory / CLEAN_SHUTDOWN_MARKER).unlink()
                fsync_directory(directory)
            elif directory in generations:
                logger.info("%s: no clean-shutdown marker; its partitions were recovered", directory)
        if len(set(generations.values())) > 1 or (self._topics and len(generations) < len(self.log_dirs)):
            self._write_topics_meta()  # bring every log dir to the newest generation

    def _lock(self, directory: Path) -> None:
        path = directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(str(path), f"cannot open lock file: {exc.strerror}", exc.errno) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StorageError(str(directory), "log directory is in use by another process", exc.errno) from exc
        self._lock_fds.append(fd)

    def _unlock_all(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)  # closing releases the flock
        self._lock_fds.clear()

    def _read_topics_meta(self) -> dict[Path, int]:
        """Load the newest valid topic metadata; returns each log dir's generation."""
        generations: dict[Path, int] = {}
        newest: dict | None = None
        errors = []
        for directory in self.log_dirs:
            path = directory / TOPICS_META_FILE
            if not path.exists():
                continue
            try:
                _version, document = read_json_file(path, _TOPICS_META_MAGIC, (_TOPICS_META_VERSION,))
                generation = int(document["generation"])
            except (CorruptLogError, KeyError, TypeError, ValueError) as exc:
                logger.error("%s: unreadable topic metadata: %s", path, exc)
                errors.append(exc)
                continue
            generations[directory] = generation
            if newest is None or generation > newest["generation"]:
                newest = document
        if newest is None:
            if errors:
                raise CorruptLogError(str(self.log_dirs[0] / TOPICS_META_FILE),
                                      f"no readable topic metadata in any log directory: {errors[0]}")
            return generations
        try:
            self._generation = int(newest["generation"])
            for name, entry in newest["topics"].items():
                record = _TopicRecord(
                    name=name,
                    topic_id=uuid.UUID(entry["topic_id"]),
                    num_partitions=int(entry["partitions"]),
                    config_overrides={str(k): str(v) for k, v in entry["configs"].items()},
                )
                self._add_record(record)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptLogError(TOPICS_META_FILE, f"malformed topic metadata: {exc!r}") from None
        return generations

    def _write_topics_meta(self) -> None:
        self._generation += 1
        # {"generation": ..., "topics": {name: entry, ...}} from each entry's kept text.
        entries = ",".join(self._topics[name].json_text() for name in sorted(self._topics))
        payload = f'{{"generation":{self._generation},"topics":{{{entries}}}}}'.encode()
        online = self.online_dirs
        if not online:
            raise StorageError(", ".join(map(str, self.log_dirs)), "every log directory is offline")
        for directory in online:  # an offline dir's older copy loses to the newer generation at load
            try:
                write_framed_file(directory / TOPICS_META_FILE, _TOPICS_META_MAGIC, _TOPICS_META_VERSION, payload)
            except StorageError as error:
                self._report(directory, error)
                raise

    def _read_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            return read_partition_offsets(path, _CHECKPOINT_MAGIC, _CHECKPOINT_VERSION)
        except CorruptLogError as exc:
            # Losing a checkpoint costs a longer recovery, never data: carry on without it.
            logger.warning("%s: ignoring unreadable checkpoint: %s", path, exc)
            return {}

    def _read_replication_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            entries = read_checkpoint(path, _parse_partition_offset)
        except FileNotFoundError:
            return {}
        except CorruptLogError as exc:
            logger.warning("%s: ignoring unreadable checkpoint; high watermarks restart at the log start: %s",
                           path, exc)
            return {}
        return {(topic, partition): offset for topic, partition, offset in entries}

    def _partition_directories(self) -> dict[tuple[str, int], Path]:
        """Every `<topic>-<partition>` directory, by partition, with its log dir."""
        found: dict[tuple[str, int], Path] = {}
        for directory in self.log_dirs:
            for entry in os.scandir(directory):
                if not entry.is_dir():
                    continue
                match = _PARTITION_DIRECTORY.fullmatch(entry.name)
                if match is None:
                    continue
                key = (match["topic"], int(match["partition"]))
                if key in found:
                    raise CorruptLogError(entry.path, f"partition also present in {found[key]}")
                found[key] = directory
        return found

    def _set_aside_stray(self, directory: Path, name: str) -> None:
        source = directory / name
        target = directory / f"{name}.{uuid.uuid4().hex}-stray"
        logger.warning("%s: directory belongs to no known topic; renaming it to %s", source, target.name)
        try:
            os.rename(source, target)
        except OSError as exc:
            raise StorageError(str(source), f"cannot set aside stray directory: {exc.strerror}", exc.errno) from exc
        fsync_directory(directory)

    def _least_loaded_dir(self) -> Path:
        online = self.online_dirs
        if not online:
            raise StorageError(", ".join(map(str, self.log_dirs)), "every log directory is offline")
        return min(online, key=self._partitions_in_dir.__getitem__)

    def _place(self, key: tuple[str, int], directory: Path) -> None:
        self._log_dir_of[key] = directory
        self._partitions_in_dir[directory] += 1

    def _unplace(self, key: tuple[str, int]) -> None:
        directory = self._log_dir_of.pop(key, None)
        if directory is not None:
            self._partitions_in_dir[directory] -= 1

    def _close_all(self, logs: Sequence[PartitionLog]) -> list[tuple[PartitionLog, StorageError]]:
        """Close every log (fsyncs, indexes, producer snapshots), `self._threads` at a
        time; each failure with its log, to report on this thread."""
        failures: list[tuple[PartitionLog, StorageError]] = []

        def one(log: PartitionLog) -> None:
            hook, log.storage_failed = log.storage_failed, None  # reported by the caller
            try:
                log.close()
            except StorageError as error:
                failures.append((log, error))
            finally:
                log.storage_failed = hook

        if self._threads == 1 or len(logs) < 2:
            for log in logs:
                one(log)
        else:
            with ThreadPoolExecutor(min(self._threads, len(logs)), thread_name_prefix="oncelog-log-dir") as pool:
                list(pool.map(one, logs))
        return failures

    def _open_all(self, openings: Sequence[_Opening]
                  ) -> tuple[dict[tuple[str, int], PartitionLog], list[tuple[tuple[str, int], LogError]]]:
        """Open every log, `self._threads` at a time: the logs opened, and each failure
        (a LogError) with its partition. Anything else propagates once the threads are
        done, the logs opened so far closed unflushed."""
        opened: dict[tuple[str, int], PartitionLog] = {}
        failures: list[tuple[tuple[str, int], LogError]] = []

        def one(opening: _Opening) -> None:
            try:
                log = opened[opening.key] = opening.open()
            except LogError as error:
                failures.append((opening.key, error))
                return
            if self._threads > 1:  # on a log dir thread: one descriptor per log until the run's trim
                log.release_inactive_descriptors()

        try:
            if self._threads == 1 or len(openings) < 2:
                for opening in openings:
                    one(opening)  # on this thread, which closes the least used files as it goes
            else:
                # The threads add descriptors; between runs, this thread closes the
                # least used ones (OpenFiles: only its owner closes).
                run = max(1, self.open_files.limit // 4)
                with ThreadPoolExecutor(min(self._threads, len(openings)),
                                        thread_name_prefix="oncelog-log-dir") as pool:
                    for start in range(0, len(openings), run):
                        list(pool.map(one, openings[start:start + run]))
                        self.open_files.trim()
        except BaseException:
            for log in opened.values():
                log.close_without_flush()
            raise
        return opened, failures

    def _effective_config(self, record: _TopicRecord, *, on_load: bool = False) -> LogConfig:
        if not on_load:
            return self._default_config.with_overrides(record.config_overrides)
        overrides = dict(record.config_overrides)
        while True:
            try:
                return self._default_config.with_overrides(overrides)
            except InvalidConfigError as exc:
                logger.error("topic %s: ignoring stored override %s", record.name, exc)
                overrides.pop(exc.key, None)

    # -- topics --------------------------------------------------------------------------

    def _info(self, record: _TopicRecord) -> TopicInfo:
        return TopicInfo(
            name=record.name,
            topic_id=record.topic_id,
            num_partitions=record.num_partitions,
            config_overrides=dict(record.config_overrides),
            config=self._effective_config(record, on_load=True),
        )

    def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str | None],
                     topic_id: uuid.UUID | None = None, *, validate_only: bool = False) -> TopicInfo:
        """Create a topic with `num_partitions` empty partitions (CreateTopics)."""
        outcome, = self.create_topics([NewTopic(name, num_partitions, configs, topic_id)],
                                      validate_only=validate_only)
        if isinstance(outcome, LogError):
            raise outcome
        return outcome

    def validate_new_topic(self, name: str, num_partitions: int, configs: Mapping[str, str | None],
                           topic_id: uuid.UUID | None = None) -> TopicInfo:
        """What create_topic would create, raising what it would raise; creates nothing."""
        return self.create_topic(name, num_partitions, configs, topic_id, validate_only=True)

    def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool = False) -> list[TopicInfo | LogError]:
        """Create each topic with its empty partitions, or say why not: one outcome per
        topic, in order (a name given twice exists the second time). The topic metadata
        is written once for them all, then the partitions are created `self._threads` at
        a time. A topic whose partitions could not all be created is answered with the
        error; it exists, with the partitions that were."""
        outcomes: list[TopicInfo | LogError] = []
        accepted: list[tuple[_TopicRecord, LogConfig]] = []
        for topic in topics:
            try:
                record, config = self._new_record(topic)
            except LogError as error:
                outcomes.append(error)
                continue
            outcomes.append(TopicInfo(record.name, record.topic_id, record.num_partitions,
                                      dict(record.config_overrides), config))
            if not validate_only:
                self._add_record(record)
                accepted.append((record, config))
        if not accepted:
            return outcomes
        try:
            self._write_topics_meta()
        except LogError as error:
            for record, _config in accepted:
                self._remove_record(record)
            return [error if isinstance(outcome, TopicInfo) else outcome for outcome in outcomes]
        failed = self._open_new_partitions([(record, range(record.num_partitions), config)
                                            for record, config in accepted])
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, TopicInfo):
                if outcome.name in failed:
                    outcomes[index] = failed[outcome.name]
                else:
                    logger.info("created topic %s (id %s) with %d partition(s)", outcome.name, outcome.topic_id,
                                outcome.num_partitions)
        return outcomes

    def _new_record(self, topic: NewTopic) -> tuple[_TopicRecord, LogConfig]:
        name = topic.name
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(name)
        existing = self._collision_keys.get(name.replace(".", "_"))
        if existing:
            raise InvalidTopicError(name, f"collides with existing topic {min(existing)!r} ('.' and '_' are alike)")
        if topic.num_partitions <= 0:
            raise InvalidPartitionsError(
                name, f"number of partitions must be larger than 0, got {topic.num_partitions}")
        overrides = {key: str(value) for key, value in topic.configs.items() if value is not None}
        config = self._default_config.with_overrides(overrides)
        topic_id = topic.topic_id
        if topic_id is None:
            topic_id = new_topic_id()
        elif topic_id in self._topic_names_by_id:
            raise InvalidTopicError(name, f"topic id {topic_id} is used by topic {self._topic_names_by_id[topic_id]!r}")
        return _TopicRecord(name, topic_id, topic.num_partitions, overrides), config

    def _add_record(self, record: _TopicRecord) -> None:
        self._topics[record.name] = record
        self._topic_names_by_id[record.topic_id] = record.name
        self._collision_keys.setdefault(record.name.replace(".", "_"), set()).add(record.name)

    def _remove_record(self, record: _TopicRecord) -> None:
        del self._topics[record.name]
        del self._topic_names_by_id[record.topic_id]
        key = record.name.replace(".", "_")
        self._collision_keys[key].discard(record.name)
        if not self._collision_keys[key]:
            del self._collision_keys[key]

    def _open_new_partitions(self, growth: Sequence[tuple[_TopicRecord, range, LogConfig]]) -> dict[str, LogError]:
        """Create the empty partitions of each (topic, indexes, config); the first error
        of each topic whose partitions were not all created, by topic name."""
        openings = []
        for record, partitions, config in growth:
            for partition in partitions:
                key = (record.name, partition)
                directory = self._least_loaded_dir()
                self._place(key, directory)
                openings.append(_Opening(key, directory, config, {
                    "producer_state_config": self.producer_state_config, "replicated": self.replicated,
                    "sync_parent": False, "open_files": self.open_files,
                }, new=True))
        opened, failures = self._open_all(openings)
        for key, log in opened.items():
            self._logs[key] = self._watched(log)
        failed: dict[str, LogError] = {}
        for directory in {opening.log_dir for opening in openings}:  # the new directories' entries
            try:
                fsync_directory(directory)
            except StorageError as sync_error:
                self._report(directory, sync_error)
                for opening in openings:
                    if opening.log_dir == directory:
                        failed.setdefault(opening.key[0], sync_error)
        for key, error in failures:
            self._unplace(key)
            failed.setdefault(key[0], error)
        return failed

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data (DeleteTopics)."""
        record = self._topics.get(name)
        if record is None:
            raise UnknownTopicError(name)
        self._remove_record(record)
        try:
            self._write_topics_meta()
        except LogError:
            self._add_record(record)
            raise
        for partition in range(record.num_partitions):
            key = (name, partition)
            log = self._logs.pop(key, None)
            self._unplace(key)
            if log is not None:
                log.delete()
        logger.info("deleted topic %s (id %s)", name, record.topic_id)

    def create_partitions(self, name: str, new_total: int, *, validate_only: bool = False) -> TopicInfo:
        """Grow a topic to `new_total` partitions (CreatePartitions)."""
        record = self._topics.get(name)
        if record is None:
            raise UnknownTopicError(name)
        current = record.num_partitions
        if new_total == current:
            raise InvalidPartitionsError(name, f"topic already has {current} partitions")
        if new_total < current:
            raise InvalidPartitionsError(
                name, f"topic currently has {current} partitions, which is higher than the requested {new_total}"
            )
        if validate_only:
            return dataclasses.replace(self._info(record), num_partitions=new_total)
        record.num_partitions = new_total
        try:
            self._write_topics_meta()
        except LogError:
            record.num_partitions = current
            raise
        failed = self._open_new_partitions([(record, range(current, new_total), self._effective_config(record))])
        if failed:
            raise failed[name]
        return self._info(record)

    def alter_topic_config(self, name: str, configs: Mapping[str, str | None], *, replace: bool = False,
                           validate_only: bool = False) -> TopicInfo:
        """Change a topic's overrides: set each key, or remove it when the value is None.

        With `replace` (legacy AlterConfigs) `configs` becomes the whole override set;
        otherwise it is applied on top of the current one (IncrementalAlterConfigs).
        """
        record = self._topics.get(name)
        if record is None:
            raise UnknownTopicError(name)
        for key in configs:
            if key not in TOPIC_CONFIGS:
                raise InvalidConfigError(key, "unknown topic config")
        overrides = {} if replace else dict(record.config_overrides)
        for key, value in configs.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = str(value)
        config = self._default_config.with_overrides(overrides)
        if validate_only:
            return TopicInfo(name, record.topic_id, record.num_partitions, dict(overrides), config)
        previous = record.config_overrides
        record.config_overrides = overrides
        try:
            self._write_topics_meta()
        except LogError:
            record.config_overrides = previous
            raise
        for partition in range(record.num_partitions):
            log = self._logs.get((name, partition))
            if log is not None:
                log.update_config(config)
        return TopicInfo(name, record.topic_id, record.num_partitions, dict(overrides), config)

    @property
    def default_config(self) -> LogConfig:
        return self._default_config

    def set_default_config(self, config: LogConfig) -> None:
        """New broker-level defaults (dynamic broker config): every log picks them up."""
        self._default_config = config
        for record in self._topics.values():
            effective = self._effective_config(record, on_load=True)
            for partition in range(record.num_partitions):
                log = self._logs.get((record.name, partition))
                if log is not None:
                    log.update_config(effective)

    def topics(self) -> dict[str, TopicInfo]:
        return {name: self._info(record) for name, record in self._topics.items()}

    def topic(self, name: str) -> TopicInfo | None:
        record = self._topics.get(name)
        return None if record is None else self._info(record)

    def partition_count(self, name: str) -> int | None:
        """The topic's partition count, None if it does not exist: `topic(name)` without
        building its effective config (the coordinators ask on every request)."""
        record = self._topics.get(name)
        return None if record is None else record.num_partitions

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._topic_names_by_id.get(topic_id)
        return None if name is None else self._info(self._topics[name])

    def partition(self, name: str, index: int) -> PartitionLog | None:
        return self._logs.get((name, index))

    def partitions(self) -> Iterator[PartitionLog]:
        return iter(list(self._logs.values()))

    def log_dir_of(self, name: str, index: int) -> Path | None:
        return self._log_dir_of.get((name, index))

    # -- failed log dirs (Kafka's LogDirFailureChannel) ----------------------------------

    def add_failure_listener(self, listener: Callable[[Path, StorageError], object]) -> None:
        """`listener(log_dir, error)` on every I/O failure of a log in `log_dir` (and of
        its checkpoints). Standalone nobody listens: each write is tried afresh."""
        self._failure_listeners.append(listener)

    def _watched(self, log: PartitionLog) -> PartitionLog:
        log.storage_failed = self._log_failed
        log.flush_stats = self.flush_stats
        return log

    def _log_failed(self, log: PartitionLog, error: StorageError) -> None:
        directory = self._log_dir_of.get((log.topic, log.partition))
        if directory is not None:
            self._report(directory, error)

    def _report(self, directory: Path, error: StorageError) -> None:
        for listener in self._failure_listeners:
            listener(directory, error)

    @property
    def online_dirs(self) -> list[Path]:
        return [directory for directory in self.log_dirs if directory not in self.offline_dirs]

    def set_dir_offline(self, directory: Path, error: StorageError) -> None:
        """No new partition goes to `directory`, and nothing more is written there (no
        checkpoints, no clean-shutdown marker: the next start recovers its logs)."""
        self.offline_dirs.setdefault(directory, error)

    def set_dir_online(self, directory: Path) -> bool:
        """The dir takes writes again: first each of its logs drops what a failed write
        left past its log end (`PartitionLog.discard_unwritten_tail`). False, and the dir
        stays offline, when that fails."""
        for key, log in list(self._logs.items()):
            if self._log_dir_of.get(key) == directory:
                try:
                    log.discard_unwritten_tail()
                except StorageError as error:
                    logger.error("%s: cannot drop what a failed write left: %s", log.name, error)
                    return False
        self.offline_dirs.pop(directory, None)
        return True

    def is_offline(self, name: str, index: int) -> bool:
        return self._log_dir_of.get((name, index)) in self.offline_dirs

    @staticmethod
    def probe_dir(directory: Path, size: int = 1 << 20) -> StorageError | None:
        """Whether `directory` takes a write of `size` bytes and its fsync again (the
        file is removed after); the error if not."""
        path = directory / ".oncelog-probe"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                chunk = b"\0" * min(size, 1 << 16)
                written = 0
                while written < size:
                    written += os.write(fd, chunk[: size - written])
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return StorageError(str(path), f"probe write failed: {exc.strerror}", exc.errno)
        finally:
            try:
                path.unlink()
            except OSError:
                pass
        return None

    # -- periodic work and shutdown ------------------------------------------------------

    def due_for_flush(self, now_ms: int) -> list[PartitionLog]:
        """The logs whose flush.ms has passed with unflushed data, that rolled, or whose
        directory has unsynced entries."""
        return [log for log in list(self._logs.values()) if log.flush_is_due(now_ms)]

    def take_flushes(self, logs: Iterable[PartitionLog]) -> list[LogFlush]:
        """The flushes of `logs` (those still open here), to `sync` on the flusher thread
        and `finish` back on the loop. A log that cannot take its flush is skipped (its
        storage_failed hook has been told)."""
        flushes = []
        for log in logs:
            if self._logs.get((log.topic, log.partition)) is not log:
                continue  # deleted, or reassigned away, since it was found due
            try:
                flushes.append(log.take_flush())
            except StorageError as error:
                logger.error("%s: cannot flush: %s", log.name, error)
        return flushes

    def apply_retention(self, now_ms: int) -> int:
        """Retention for every log; returns the number of segments deleted."""
        return sum(log.apply_retention(now_ms) for log in list(self._logs.values()))

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start checkpoints of every log dir, and the
        high watermarks of its replicated logs, in the calling thread."""
        for write in self.take_checkpoints():
            write.run()
            if write.error is not None:
                self.checkpoint_failed(write.directory, write.error)
                raise write.error

    def take_checkpoints(self) -> list[CheckpointWrite]:
        """The checkpoints of every online log dir as they are now (taken on the loop), to
        `run` on any thread: their fsyncs must not stall requests."""
        return [self._checkpoint_of(directory) for directory in self.online_dirs]

    def checkpoint_failed(self, directory: Path, error: StorageError) -> None:
        """Back on the loop: a checkpoint write that failed takes its log dir offline."""
        self._report(directory, error)

    def _checkpoint_of(self, directory: Path) -> CheckpointWrite:
        recovery_points = []
        log_starts = []
        high_watermarks = []
        for (topic, partition), log in sorted(self._logs.items()):
            if self._log_dir_of[(topic, partition)] != directory:
                continue
            recovery_points.append([topic, partition, log.recovery_point])
            log_starts.append([topic, partition, log.log_start_offset])
            if log.replicated:
                high_watermarks.append((topic, partition, log.high_watermark))
        replication_checkpoint = directory / REPLICATION_OFFSET_CHECKPOINT_FILE
        replicated = bool(high_watermarks) or self.replicated or replication_checkpoint.exists()
        return CheckpointWrite(directory, recovery_points, log_starts, high_watermarks if replicated else None)

    def close(self) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown markers."""
        if not self._loaded:
            self._unlock_all()
            return
        closing = []
        for key, log in self._logs.items():
            if self._log_dir_of[key] in self.offline_dirs:
                log.close_without_flush()  # recovered at the next start: no marker for its dir
            else:
                closing.append(log)
        failures = self._close_all(closing)
        if failures:
            for log, error in failures:
                self._log_failed(log, error)
            raise failures[0][1]  # no clean-shutdown marker: the next start recovers
        self.checkpoint()
        for directory in self.online_dirs:
            marker = directory / CLEAN_SHUTDOWN_MARKER
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.fsync(fd)
                os.close(fd)
                fsync_directory(directory)
            except OSError as exc:
                raise StorageError(
                    str(marker), f"cannot write clean-shutdown marker: {exc.strerror}", exc.errno
                ) from exc
        self._logs.clear()
        self._log_dir_of.clear()
        self._partitions_in_dir = dict.fromkeys(self.log_dirs, 0)
        self._loaded = False
        self._unlock_all()


def _parse_partition_offset(fields: list[str]) -> tuple[str, int, int]:
    """One "topic partition offset" line of Kafka's OffsetCheckpointFile."""
    topic, partition, offset = fields
    return topic, int(partition), int(offset)
