"""Topic-level log configuration: Kafka's keys, defaults, parsing and validation.

`LogConfig` holds the effective settings of one partition log. Its defaults are Kafka's
broker defaults; `LogConfig.from_broker_properties` takes them from server.properties
keys (`log.segment.bytes`, `log.retention.hours`, ...), and `with_overrides` applies a
topic's own overrides (`segment.bytes`, `retention.ms`, ...), validating them as Kafka
does. `TOPIC_CONFIGS` is the one table tying the three spellings together.

Accepted but not acted on yet (stored and described, no effect): segment.jitter.ms,
file.delete.delay.ms (segments are deleted at once), compression.type (batches are
stored as produced), min.insync.replicas and unclean.leader.election.enable (single
node), preallocate. cleanup.policy=compact and the compaction settings
(delete.retention.ms, min.cleanable.dirty.ratio, min.compaction.lag.ms,
max.compaction.lag.ms) drive the log cleaner (cleaner.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"

_INTEGER = re.compile(r"[+-]?[0-9]+")


# ---------------------------------------------------------------------------------------
# Parsers: string -> value, raising ValueError with a message fit for InvalidConfigError.


def _integer(low: int, high: int, minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        text = text.strip()
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{text!r} is not an integer")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"{value} does not fit in {'a long' if high == LONG_MAX else 'an int'}")
        if minimum is not None and value < minimum:
            raise ValueError(f"value {value} must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"value {value} must be at most {maximum}")
        return value

    return parse


def _int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    return _integer(INT_MIN, INT_MAX, minimum, maximum)


def _long(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    return _integer(LONG_MIN, LONG_MAX, minimum, maximum)


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError(f"{text!r} is not true or false")


def _ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"value {value} must be between 0 and 1")
    return value


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return parse


def _cleanup_policy(text: str) -> str:
    """delete, compact, both, or (Kafka 4.2) none: infinite retention, nothing cleaned."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if item not in (CLEANUP_DELETE, CLEANUP_COMPACT):
            raise ValueError(f"{item!r} is not one of delete, compact")
    return ",".join(dict.fromkeys(items))


def render_config_value(value: Any) -> str:
    """A value as Kafka spells it in DescribeConfigs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One topic-level config: its Kafka key, LogConfig field, parser and broker default key.

    `broker_fallbacks` lists coarser broker keys consulted when `broker_key` is absent,
    most precise first, each with the factor that turns its unit into the field's unit
    (Kafka: log.retention.ms wins over log.retention.minutes over log.retention.hours).
    """

    name: str
    field: str
    parse: Callable[[str], Any]
    broker_key: str
    broker_fallbacks: tuple[tuple[str, int], ...] = ()
    doc: str = ""


_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

TOPIC_CONFIGS: Mapping[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey("cleanup.policy", "cleanup_policy", _cleanup_policy, "log.cleanup.policy",
                  doc="delete and/or compact"),
        ConfigKey("compression.type", "compression_type",
                  _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
                  "compression.type", doc="accepted; batches are stored as produced"),
        ConfigKey("delete.retention.ms", "delete_retention_ms", _long(minimum=0),
                  "log.cleaner.delete.retention.ms"),
        ConfigKey("file.delete.delay.ms", "file_delete_delay_ms", _long(minimum=0),
                  "log.segment.delete.delay.ms"),
        ConfigKey("flush.messages", "flush_messages", _long(minimum=1), "log.flush.interval.messages",
                  doc="fsync after this many messages since the last flush"),
        ConfigKey("flush.ms", "flush_ms", _long(minimum=0), "log.flush.interval.ms",
                  doc="fsync when this long has passed since the last flush"),
        ConfigKey("index.interval.bytes", "index_interval_bytes", _int(minimum=0),
                  "log.index.interval.bytes"),
        ConfigKey("max.compaction.lag.ms", "max_compaction_lag_ms", _long(minimum=1),
                  "log.cleaner.max.compaction.lag.ms"),
        ConfigKey("max.message.bytes", "max_message_bytes", _int(minimum=0), "message.max.bytes",
                  doc="largest batch accepted"),
        ConfigKey("message.timestamp.type", "message_timestamp_type", _one_of(CREATE_TIME, LOG_APPEND_TIME),
                  "log.message.timestamp.type"),
        ConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", _ratio,
                  "log.cleaner.min.cleanable.ratio"),
        ConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", _long(minimum=0),
                  "log.cleaner.min.compaction.lag.ms"),
        ConfigKey("min.insync.replicas", "min_insync_replicas", _int(minimum=1), "min.insync.replicas"),
        ConfigKey("preallocate", "preallocate", _boolean, "log.preallocate"),
        ConfigKey("retention.bytes", "retention_bytes", _long(), "log.retention.bytes",
                  doc="-1: no size limit"),
        ConfigKey("retention.ms", "retention_ms", _long(minimum=-1), "log.retention.ms",
                  (("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS)),
                  doc="-1: no time limit"),
        ConfigKey("segment.bytes", "segment_bytes", _int(minimum=14), "log.segment.bytes"),
        ConfigKey("segment.index.bytes", "segment_index_bytes", _int(minimum=4), "log.index.size.max.bytes"),
        ConfigKey("segment.jitter.ms", "segment_jitter_ms", _long(minimum=0), "log.roll.jitter.ms",
                  (("log.roll.jitter.hours", _HOUR_MS),)),
        ConfigKey("segment.ms", "segment_ms", _long(minimum=1), "log.roll.ms",
                  (("log.roll.hours", _HOUR_MS),)),
        ConfigKey("unclean.leader.election.enable", "unclean_leader_election_enable", _boolean,
                  "unclean.leader.election.enable"),
    )
}


# Topic keys whose value is a comma-separated list (IncrementalAlterConfigs' APPEND and
# SUBTRACT work on these only).
TOPIC_LIST_KEYS = frozenset({"cleanup.policy"})


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective settings of one partition log, with Kafka's defaults."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * _HOUR_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * _HOUR_MS
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    cleanup_policy: str = CLEANUP_DELETE
    message_timestamp_type: str = CREATE_TIME
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60_000
    delete_retention_ms: int = 24 * _HOUR_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False

    @property
    def deletes_old_segments(self) -> bool:
        """Whether retention applies (cleanup.policy contains delete)."""
        return CLEANUP_DELETE in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy contains compact)."""
        return CLEANUP_COMPACT in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def with_overrides(self, overrides: Mapping[str, str | None]) -> LogConfig:
        """This config with topic-level overrides applied; None values are ignored.

        Raises InvalidConfigError naming the first unknown key or bad value.
        """
        changes: dict[str, Any] = {}
        for key, text in overrides.items():
            definition = TOPIC_CONFIGS.get(key)
            if definition is None:
                raise InvalidConfigError(key, "unknown topic config")
            if text is None:
                continue
            try:
                changes[definition.field] = definition.parse(str(text))
            except ValueError as exc:
                raise InvalidConfigError(key, f"invalid value {text!r}: {exc}") from None
        return dataclasses.replace(self, **changes) if changes else self

    def to_kafka_dict(self) -> dict[str, str]:
        """Every topic-level key with its value as Kafka spells it (for DescribeConfigs)."""
        return {
            name: render_config_value(getattr(self, definition.field))
            for name, definition in sorted(TOPIC_CONFIGS.items())
        }

    @classmethod
    def from_broker_properties(cls, properties: Mapping[str, str]) -> LogConfig:
        """Defaults for every topic, from broker keys (server.properties and --override).

        Keys that are not log settings are ignored. For retention and roll time the most
        precise key present wins (ms, then minutes, then hours), as in Kafka.
        """
        changes: dict[str, Any] = {}
        for definition in TOPIC_CONFIGS.values():
            for broker_key, factor in ((definition.broker_key, 1), *definition.broker_fallbacks):
                text = properties.get(broker_key)
                if text is None:
                    continue
                try:
                    if factor == 1:
                        value = definition.parse(str(text))
                    else:
                        value = _long(minimum=-1)(str(text))
                        value = value * factor if value >= 0 else value
                        definition.parse(str(value))  # range check in the field's unit
                except ValueError as exc:
                    raise InvalidConfigError(broker_key, f"invalid value {text!r}: {exc}") from None
                changes[definition.field] = value
                break
        return dataclasses.replace(cls(), **changes)
