"""The sink's options, parsed once into a frozen, picklable `SinkOptions`, and the sink's
errors. Names follow Spark's Kafka sink (`kafka.bootstrap.servers`, `topic`, `kafka.*`);
`mode`, `transactionalIdPrefix`, `checkpointLocation` and `clusterTimeoutMs` are
oncelog's. Spark hands options over lower-cased; any bad value is a `SinkOptionError`
that names the option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from oncelog.client.config import ClientConfig, ConfigError, librdkafka_settings
from oncelog.client.producer import ProducerSettings
from oncelog.spark.errors import SourceError
from oncelog.spark.option_values import positive_int
from oncelog.spark.paths import local_path

PARTITION_MODE = "partition"
BATCH_MODE = "batch"
MODES = (PARTITION_MODE, BATCH_MODE)


class SinkError(SourceError):
    """Base class of the sink's errors."""


class SinkOptionError(SinkError, ValueError):
    """An option is missing, unknown, or has a value the sink cannot use."""


class SinkWriteError(SinkError):
    """Records could not be written or their transaction could not be ended."""


_SUPPORTED = (
    "kafka.bootstrap.servers",
    "topic",
    "topics",
    "mode",
    "transactionalIdPrefix",
    "checkpointLocation",
    "clusterTimeoutMs",
    "microBatchId",
)
_SUPPORTED_LOWER = {name.lower(): name for name in _SUPPORTED}
# Options Spark's own DataStreamWriter/DataFrameWriter put into the map it hands over.
_SPARK_WRITER_OPTIONS = {
    "queryname", "path", "asyncprogresstrackingenabled", "asyncprogresstrackingcheckpointintervalms",
}

# Producer settings the sink owns.
_FORBIDDEN_CLIENT_SETTINGS = {
    "transactional.id": "the sink names its transactions (see transactionalIdPrefix)",
    "enable.idempotence": "the sink's producers are always idempotent and transactional",
    "key.serializer": "key and value are written as the binary or string columns give them",
    "value.serializer": "key and value are written as the binary or string columns give them",
}

_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,100}")
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


# librdkafka's partitioners the sink implements (kafka.partitioner). murmur2_random, the
# default, is the Java producer's: keyed rows land where Spark's Kafka sink puts them.
PARTITIONERS = ("murmur2_random", "murmur2", "consistent_random", "consistent", "random")


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    mode: str
    transactional_id_prefix: str
    checkpoint_location: Path | None
    cluster_timeout_ms: int
    client: ClientConfig
    producer_settings: ProducerSettings
    partitioner: str = PARTITIONERS[0]
    # kafka.* options without the prefix (bootstrap.servers excluded).
    client_settings: tuple[tuple[str, str], ...] = ()
    # Option `topics`: every topic the rows may name (a row naming another fails its
    # task); in mode=batch the gate covers them all from the first micro-batch. Empty: any.
    topics: tuple[str, ...] = ()
    # Option `microBatchId`: a batch write that is this micro-batch of the streaming query
    # whose checkpointLocation is given, from `foreachBatch` (update output mode).
    micro_batch_id: int | None = None

    @property
    def cluster_timeout_s(self) -> float:
        return self.cluster_timeout_ms / 1000


def parse_sink_options(raw: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    options = {str(key).lower(): str(value) for key, value in raw.items()}
    for key in options:
        if not key.startswith("kafka.") and key not in _SUPPORTED_LOWER and key not in _SPARK_WRITER_OPTIONS:
            raise SinkOptionError(
                f"unknown option {key!r} for the oncelog sink; it takes {', '.join(_SUPPORTED)} and kafka.*"
            )
    bootstrap = options.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise SinkOptionError(
            "option kafka.bootstrap.servers is required: host:port[,host:port...] of the cluster"
        )
    topic = options.get("topic", "").strip() or None
    if topic is not None and not _TOPIC_NAME.fullmatch(topic):
        raise SinkOptionError(f"option topic: {topic!r} is not a legal Kafka topic name")
    topics = _topics(options.get("topics", ""), topic)
    micro_batch_id = _micro_batch_id(options.get("microbatchid"), streaming)
    mode = options.get("mode", PARTITION_MODE).strip().lower()
    if mode not in MODES:
        raise SinkOptionError(
            f"option mode={options['mode']!r}: use partition (each task's rows atomic, any Kafka "
            "2.5+ cluster) or batch (each micro-batch atomic, oncelog broker with 2PC)"
        )
    prefix = options.get("transactionalidprefix", "oncelog-sink").strip()
    if not _PREFIX.fullmatch(prefix):
        raise SinkOptionError(
            f"option transactionalIdPrefix={prefix!r}: use 1-100 characters of letters, digits, '.', '_', '-'"
        )
    checkpoint = _checkpoint_path(options.get("checkpointlocation"))
    if micro_batch_id is not None and checkpoint is None:
        raise SinkOptionError("option microBatchId needs option checkpointLocation: the streaming query's "
                              "checkpoint, where the sink reads the query id and records its commits")
    if (streaming or micro_batch_id is not None) and mode == BATCH_MODE and checkpoint is None:
        raise SinkOptionError(
            "mode=batch needs option checkpointLocation on the writer, the same path as the "
            "query's checkpoint (set it with .option(\"checkpointLocation\", path) rather than "
            "spark.sql.streaming.checkpointLocation): the sink records each micro-batch's commit decision there"
        )
    settings = _client_settings(options)
    acks = dict(settings).get("acks", "all").lower()
    if acks not in ("all", "-1"):
        raise SinkOptionError(f"option kafka.acks={acks}: transactions are written with acks=all")
    partitioner = dict(settings).get("partitioner", PARTITIONERS[0])
    if partitioner not in PARTITIONERS:
        raise SinkOptionError(f"option kafka.partitioner={partitioner}: use one of {', '.join(PARTITIONERS)}")
    try:
        client = ClientConfig.from_settings(bootstrap, dict(settings))
        producer_settings = ProducerSettings.from_settings(dict(settings))
    except ConfigError as error:
        raise SinkOptionError(f"option kafka.{error}") from None
    return SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic,
        mode=mode,
        transactional_id_prefix=prefix,
        checkpoint_location=checkpoint,
        cluster_timeout_ms=positive_int(options, "clusterTimeoutMs", 60_000, SinkOptionError),
        client=client,
        producer_settings=producer_settings,
        partitioner=partitioner,
        client_settings=settings,
        topics=topics,
        micro_batch_id=micro_batch_id,
    )


def _micro_batch_id(raw: str | None, streaming: bool) -> int | None:
    if raw is None:
        return None
    if streaming:
        raise SinkOptionError("option microBatchId is for a batch write inside foreachBatch; a streaming "
                              "query's micro-batches are numbered by Spark")
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise SinkOptionError(f"option microBatchId={raw!r}: use foreachBatch's batch id, an integer >= 0")
    return value


def _topics(raw: str, topic: str | None) -> tuple[str, ...]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    for name in names:
        if not _TOPIC_NAME.fullmatch(name):
            raise SinkOptionError(f"option topics: {name!r} is not a legal Kafka topic name")
    if names and topic is not None and topic not in names:
        raise SinkOptionError(f"option topic={topic} is not one of option topics={','.join(names)}")
    return tuple(sorted(set(names)))


_checked_settings: set[tuple[tuple[str, str], ...]] = set()


def check_client_settings(options: SinkOptions) -> None:
    """Driver: librdkafka checks the `kafka.*` names and values (the sink's own client uses
    some of them and ignores the rest, so a typo must fail here). Once per process per
    settings, with a producer given no broker to connect to."""
    if options.client_settings in _checked_settings:
        return
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({**librdkafka_settings(options.client_settings), "bootstrap.servers": "", "log_level": 0})
    except (KafkaException, ValueError, TypeError) as error:
        detail = error.args[0].str() if error.args and hasattr(error.args[0], "str") else str(error)
        raise SinkOptionError(f"kafka.* options rejected by librdkafka: {detail}") from None
    _checked_settings.add(options.client_settings)


def _checkpoint_path(raw: str | None) -> Path | None:
    if raw is None or not raw.strip():
        return None
    path = local_path(raw)
    if path is None:
        raise SinkOptionError(
            f"option checkpointLocation={raw!r}: the sink reads and writes it with plain file "
            "calls, so it must be a local path or a filesystem mounted on the driver"
        )
    return path


def _client_settings(options: dict[str, str]) -> tuple[tuple[str, str], ...]:
    settings = []
    for key, value in sorted(options.items()):
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        setting = key[len("kafka."):]
        if setting in _FORBIDDEN_CLIENT_SETTINGS:
            raise SinkOptionError(f"option {key} is not allowed: {_FORBIDDEN_CLIENT_SETTINGS[setting]}")
        settings.append((setting, value))
    return tuple(settings)
