"""The source's options, parsed once into a frozen, picklable `SourceOptions`.

Names and meanings follow Spark's built-in Kafka connector so a job can switch between
`format("kafka")` and `format("oncelog")` by changing the format name. Spark hands the
options over lower-cased (they are case-insensitive), so every lookup here is lower-case.
Any bad value is a `SourceOptionError` that names the option.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from oncelog.client.config import ClientConfig, ConfigError
from oncelog.client.fetcher import FetchSettings
from oncelog.spark.errors import SourceOptionError
from oncelog.spark.option_values import positive_int

# Kafka's sentinel offsets, as Spark's JSON offsets use them.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]

CLIENT_PREFIX = "kafka."
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

# Client settings the source owns: letting a user set them would break how ranges are read.
_FORBIDDEN_CLIENT_SETTINGS = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the source never commits offsets to a group; Spark's checkpoint holds them",
    "enable.auto.offset.store": "the source never commits offsets to a group",
    "enable.partition.eof": "the source reads exact offset ranges",
    "key.deserializer": "key and value are always binary columns; cast them in Spark",
    "value.deserializer": "key and value are always binary columns; cast them in Spark",
}

# Options of Spark's Kafka source that this source does not implement.
_UNSUPPORTED = (
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "maxrecordsperpartition",
)

_SUPPORTED = (
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "includeHeaders",
    "failOnDataLoss",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "fetchOffset.timeoutMs",
)
_SUPPORTED_LOWER = {name.lower(): name for name in _SUPPORTED}


@dataclass(frozen=True)
class Subscribe:
    """`subscribe`: a fixed list of topics; each must exist."""

    topics: tuple[str, ...]

    def describe(self) -> str:
        return f"subscribe={','.join(self.topics)}"


@dataclass(frozen=True)
class SubscribePattern:
    """`subscribePattern`: every non-internal topic whose whole name matches, now or later."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None

    def describe(self) -> str:
        return f"subscribePattern={self.pattern}"


@dataclass(frozen=True)
class Assign:
    """`assign`: fixed topic-partitions; each must exist."""

    partitions: tuple[TopicPartitionKey, ...]

    def describe(self) -> str:
        return "assign=" + json.dumps(_group_partitions(self.partitions), sort_keys=True)


Subscription = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True)
class OffsetsSpec:
    """`startingOffsets` / `endingOffsets`: "earliest", "latest", or per-partition offsets
    where -2 means earliest and -1 latest."""

    default: int  # EARLIEST or LATEST: used for every partition when `specific` is None
    specific: tuple[tuple[TopicPartitionKey, int], ...] | None = None

    @property
    def specific_map(self) -> dict[TopicPartitionKey, int] | None:
        return None if self.specific is None else dict(self.specific)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting_offsets: OffsetsSpec
    ending_offsets: OffsetsSpec | None  # batch queries only
    max_offsets_per_trigger: int | None
    include_headers: bool
    fail_on_data_loss: bool
    isolation_level: str
    group_id_prefix: str
    poll_timeout_ms: int
    metadata_timeout_ms: int
    metadata_retries: int
    metadata_retry_interval_ms: int
    # How executors reach the cluster (oncelog.client), from kafka.bootstrap.servers and kafka.*.
    client: ClientConfig
    # kafka.* options without the prefix (bootstrap.servers excluded): the executors' fetch
    # settings, and the driver's AdminClient (confluent-kafka), which also checks their names.
    client_settings: tuple[tuple[str, str], ...] = field(default=())

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    @property
    def fetch_settings(self) -> FetchSettings:
        return FetchSettings.from_settings(dict(self.client_settings), read_committed=self.read_committed)


def parse_options(raw: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate Spark's option map. `streaming` None checks what both modes share (from
    `schema()`, which does not know the mode); True/False add the mode's own rules."""
    options = {str(key).lower(): str(value) for key, value in raw.items()}
    _reject_unknown(options)

    bootstrap = options.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise SourceOptionError(
            "option kafka.bootstrap.servers is required: host:port[,host:port...] of the cluster"
        )
    subscription = _parse_subscription(options)

    starting_default = LATEST if streaming else EARLIEST
    starting = _parse_offsets_spec(
        "startingOffsets", options.get("startingoffsets"), starting_default, subscription
    )
    ending = None
    if "endingoffsets" in options:
        if streaming:
            raise SourceOptionError(
                "option endingOffsets is for batch queries (spark.read); a streaming query "
                "reads until it is stopped, or use trigger(availableNow=True)"
            )
        ending = _parse_offsets_spec(
            "endingOffsets", options["endingoffsets"], LATEST, subscription
        )
    elif streaming is False:
        ending = OffsetsSpec(LATEST)

    if streaming is False:
        if starting.default == LATEST and starting.specific is None:
            raise SourceOptionError("startingOffsets=latest is not allowed in a batch query")
        if any(offset == LATEST for _, offset in starting.specific or ()):
            raise SourceOptionError("startingOffsets: -1 (latest) is not allowed in a batch query")
        assert ending is not None
        if ending.default == EARLIEST and ending.specific is None:
            raise SourceOptionError("endingOffsets=earliest is not allowed: use latest or offsets")
        if any(offset == EARLIEST for _, offset in ending.specific or ()):
            raise SourceOptionError("endingOffsets: -2 (earliest) is not allowed")

    client_settings = _client_settings(options)
    isolation = dict(client_settings).get("isolation.level", READ_COMMITTED)
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise SourceOptionError(
            f"option kafka.isolation.level={isolation!r}: use read_committed or read_uncommitted"
        )

    try:
        client = ClientConfig.from_settings(bootstrap, dict(client_settings))
        FetchSettings.from_settings(dict(client_settings), read_committed=True)
    except ConfigError as error:
        raise SourceOptionError(f"option kafka.{error}") from None
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=positive_int(options, "maxOffsetsPerTrigger", None),
        include_headers=_boolean(options, "includeHeaders", False),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        isolation_level=isolation,
        group_id_prefix=options.get("groupidprefix", "spark-kafka-source"),
        poll_timeout_ms=positive_int(options, "kafkaConsumer.pollTimeoutMs", 120_000),
        metadata_timeout_ms=positive_int(options, "fetchOffset.timeoutMs", 30_000),
        metadata_retries=positive_int(options, "fetchOffset.numRetries", 3),
        metadata_retry_interval_ms=positive_int(options, "fetchOffset.retryIntervalMs", 10),
        client=client,
        client_settings=client_settings,
    )


# -- pieces --------------------------------------------------------------------------------


def _reject_unknown(options: dict[str, str]) -> None:
    for key in options:
        if key.startswith(CLIENT_PREFIX) or key in _SUPPORTED_LOWER:
            continue
        if key in _UNSUPPORTED:
            raise SourceOptionError(
                f"option {key} of Spark's Kafka source is not supported by oncelog"
            )
        raise SourceOptionError(
            f"unknown option {key!r}; the oncelog source takes {', '.join(_SUPPORTED)} and kafka.*"
        )


def _parse_subscription(options: dict[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in options]
    if len(given) != 1:
        raise SourceOptionError(
            "exactly one of the options subscribe, subscribePattern, assign is required"
            + (f" (got {', '.join(_SUPPORTED_LOWER[name] for name in given)})" if given else "")
        )
    kind = given[0]
    value = options[kind].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(topic.strip() for topic in value.split(",") if topic.strip()))
        if not topics:
            raise SourceOptionError("option subscribe: give a comma-separated list of topics")
        for topic in topics:
            _check_topic_name("subscribe", topic)
        return Subscribe(topics)
    if kind == "subscribepattern":
        if not value:
            raise SourceOptionError("option subscribePattern: give a regular expression")
        try:
            re.compile(value)
        except re.error as error:
            raise SourceOptionError(
                f"option subscribePattern={value!r} is not a regular expression: {error}"
            ) from None
        return SubscribePattern(value)
    parsed = _json_object("assign", value)
    partitions: list[TopicPartitionKey] = []
    for topic, numbers in parsed.items():
        _check_topic_name("assign", topic)
        if not isinstance(numbers, list) or not all(_is_int(n) and n >= 0 for n in numbers):
            raise SourceOptionError(
                f'option assign: topic {topic!r} needs a list of partition numbers, like {{"{topic}": [0, 1]}}'
            )
        partitions.extend((topic, number) for number in numbers)
    if not partitions:
        raise SourceOptionError("option assign names no partitions")
    return Assign(tuple(sorted(set(partitions))))


def _parse_offsets_spec(
    name: str, value: str | None, default: int, subscription: Subscription
) -> OffsetsSpec:
    if value is None:
        return OffsetsSpec(default)
    value = value.strip()
    if value.lower() == "earliest":
        return OffsetsSpec(EARLIEST)
    if value.lower() == "latest":
        return OffsetsSpec(LATEST)
    parsed = _json_object(name, value, hint='"earliest", "latest" or ')
    specific: list[tuple[TopicPartitionKey, int]] = []
    for topic, by_partition in parsed.items():
        if not isinstance(by_partition, dict):
            raise SourceOptionError(
                f'option {name}: topic {topic!r} needs an object of partition offsets, like {{"{topic}": {{"0": 42}}}}'
            )
        for partition, offset in by_partition.items():
            try:
                number = int(partition)
            except ValueError:
                raise SourceOptionError(
                    f"option {name}: {partition!r} of topic {topic!r} is not a partition number"
                ) from None
            if not _is_int(offset) or offset < EARLIEST:
                raise SourceOptionError(
                    f"option {name}: offset {offset!r} of {topic}-{partition} must be -2 (earliest), "
                    "-1 (latest) or a non-negative offset"
                )
            specific.append(((topic, number), offset))
    _check_offsets_match_subscription(name, [tp for tp, _ in specific], subscription)
    return OffsetsSpec(default, tuple(sorted(specific)))


def _check_offsets_match_subscription(
    name: str, partitions: list[TopicPartitionKey], subscription: Subscription
) -> None:
    if isinstance(subscription, Subscribe):
        outside = sorted({topic for topic, _ in partitions} - set(subscription.topics))
    elif isinstance(subscription, SubscribePattern):
        outside = sorted({topic for topic, _ in partitions if not subscription.matches(topic)})
    else:
        outside = [f"{t}-{p}" for t, p in sorted(set(partitions) - set(subscription.partitions))]
    if outside:
        raise SourceOptionError(
            f"option {name} names {', '.join(outside)}, outside {subscription.describe()}"
        )


def _client_settings(options: dict[str, str]) -> tuple[tuple[str, str], ...]:
    settings = []
    for key, value in sorted(options.items()):
        if not key.startswith(CLIENT_PREFIX) or key == "kafka.bootstrap.servers":
            continue
        setting = key[len(CLIENT_PREFIX) :]
        if setting in _FORBIDDEN_CLIENT_SETTINGS:
            raise SourceOptionError(
                f"option {key} is not allowed: {_FORBIDDEN_CLIENT_SETTINGS[setting]}"
            )
        settings.append((setting, value))
    return tuple(settings)


def _boolean(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise SourceOptionError(f"option {name}={raw!r}: use true or false")


def _json_object(name: str, value: str, hint: str = "") -> dict:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise SourceOptionError(
            f"option {name}={value!r} is not {hint}a JSON object: {error}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise SourceOptionError(f"option {name}={value!r} must be {hint}a non-empty JSON object")
    return parsed


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _check_topic_name(option: str, topic: str) -> None:
    if not _TOPIC_NAME.fullmatch(topic):
        raise SourceOptionError(f"option {option}: {topic!r} is not a legal Kafka topic name")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _group_partitions(partitions) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped
