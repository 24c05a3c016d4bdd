"""Group configs (KIP-848): a consumer group's own session timeout and heartbeat interval,
set with IncrementalAlterConfigs/AlterConfigs on a GROUP resource (type 32, named by the
group id) whether or not the group exists yet.

The keys, as Kafka 4's GroupConfig (its streams.* keys are left out: oncelog has no
streams groups):
- `consumer.session.timeout.ms`: how long the coordinator waits for a member's heartbeat
  before removing it; default the broker's group.consumer.session.timeout.ms.
- `consumer.heartbeat.interval.ms`: what ConsumerGroupHeartbeat tells the members;
  default the broker's group.consumer.heartbeat.interval.ms.
- Share groups (KIP-932): `share.session.timeout.ms`, `share.heartbeat.interval.ms` and
  `share.record.lock.duration.ms` (defaults and bounds the broker's group.share.*),
  `share.auto.offset.reset` (latest, earliest or by_duration:<ISO-8601 duration>; where
  a new share partition starts) and `share.isolation.level` (read_uncommitted or
  read_committed).

A group's overrides are checked as Kafka's GroupConfigManager checks them, on the broker's
values with the overrides over them: an unknown key is INVALID_CONFIG `Unknown group
config name: K`; a value that is no int or below 1, or a string not among its choices, INVALID_CONFIG in
ConfigDef's words; then each int within the broker's min/max bounds, and each session
timeout above its heartbeat interval, with Kafka's messages. The bounds are checked when a value
is set only: a stored value stays in force if the broker later starts with other bounds.

This module is the domain: the overrides of every group as a value (`GroupConfigs`), the
check, and the coordinator's view of them (`StoredGroupTimings`). Where they are kept is
the broker's `GroupConfigStore` (oncelog.config.group_store: a file standalone,
the metadata store in cluster mode, oncelog.cluster.group_configs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from oncelog.config.changes import ConfigChangeError
from oncelog.protocol.messages import ErrorCode

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
INT_MAX = 2**31 - 1
_INT = re.compile(r"[+-]?[0-9]+")
# share.auto.offset.reset's third form: by_duration:<ISO-8601 duration>, as Java's Duration.parse reads it.
BY_DURATION = "by_duration:"
_DURATION = re.compile(r"P(?:(?P<d>[0-9]+)D)?(?:T(?:(?P<h>[0-9]+)H)?(?:(?P<m>[0-9]+)M)?"
                       r"(?:(?P<s>[0-9]+(?:\.[0-9]{1,9})?)S)?)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class GroupKey:
    """A group config key: an int whose default is a broker key's, bounded by two others,
    or a string among `choices` with its own `default`."""

    broker_key: str | None
    min_key: str | None = None
    max_key: str | None = None
    default: str | None = None
    choices: tuple[str, ...] = ()

    @property
    def is_int(self) -> bool:
        return self.broker_key is not None


GROUP_KEYS: Mapping[str, GroupKey] = MappingProxyType({
    SESSION_TIMEOUT: GroupKey("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                              "group.consumer.max.session.timeout.ms"),
    HEARTBEAT_INTERVAL: GroupKey("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
                                 "group.consumer.max.heartbeat.interval.ms"),
    SHARE_SESSION_TIMEOUT: GroupKey("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                                    "group.share.max.session.timeout.ms"),
    SHARE_HEARTBEAT_INTERVAL: GroupKey("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
                                       "group.share.max.heartbeat.interval.ms"),
    SHARE_RECORD_LOCK_DURATION: GroupKey("group.share.record.lock.duration.ms",
                                         "group.share.min.record.lock.duration.ms",
                                         "group.share.max.record.lock.duration.ms"),
    SHARE_AUTO_OFFSET_RESET: GroupKey(None, default="latest", choices=("latest", "earliest")),
    SHARE_ISOLATION_LEVEL: GroupKey(None, default="read_uncommitted", choices=("read_committed", "read_uncommitted")),
})
# The broker keys a check reads (BrokerConfig keys, all ints).
BROKER_KEYS: tuple[str, ...] = tuple(key for group_key in GROUP_KEYS.values()
                                     for key in (group_key.broker_key, group_key.min_key, group_key.max_key)
                                     if key is not None)
# (session timeout, heartbeat interval) pairs: the first must be greater.
_TIMEOUT_PAIRS = ((SESSION_TIMEOUT, HEARTBEAT_INTERVAL), (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL))


def default_value(key: str, broker: Mapping[str, int]) -> str:
    """A group key's value where the group sets none: its broker key's, or its own default."""
    broker_key = GROUP_KEYS[key].broker_key
    return str(broker[broker_key]) if broker_key is not None else str(GROUP_KEYS[key].default)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (`PT1H`, `P1DT30M`) in milliseconds, None if it is not one."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper() in ("P", "PT"):
        return None
    days, hours, minutes = (int(match.group(name) or 0) for name in "dhm")
    seconds = float(match.group("s") or 0)
    return round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


@dataclass(frozen=True)
class GroupConfigs:
    """The overrides of every group that has some (a group without any is not kept)."""

    per_group: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_group", MappingProxyType(
            {group: MappingProxyType(dict(values)) for group, values in self.per_group.items() if values}))

    def of(self, group_id: str) -> Mapping[str, str]:
        return self.per_group.get(group_id, {})

    def with_overrides(self, group_id: str, overrides: Mapping[str, str]) -> GroupConfigs:
        return GroupConfigs({**self.per_group, group_id: overrides})

    def int_value(self, group_id: str, key: str) -> int | None:
        """The group's own value of `key`, None when it has none (or one this version cannot read)."""
        value = self.of(group_id).get(key)
        if value is None:
            return None
        try:
            return int(value.strip())
        except ValueError:
            return None

    def to_json(self) -> dict:
        return {"groups": {group: dict(values) for group, values in sorted(self.per_group.items())}}

    @classmethod
    def from_json(cls, document: Mapping) -> GroupConfigs:
        groups = document.get("groups", {})
        if not isinstance(groups, dict):
            raise ValueError(f"malformed group configs: {document!r}")
        for group, values in groups.items():
            if not isinstance(values, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
                raise ValueError(f"malformed configs of group {group!r}: {values!r}")
        return cls(groups)


def parse_int(key: str, value: str) -> int:
    """A group config value as Kafka's ConfigDef reads an INT at least 1 (raises ConfigChangeError)."""
    text = value.strip()
    number = int(text) if _INT.fullmatch(text) else None
    if number is None or not -INT_MAX - 1 <= number <= INT_MAX:
        raise ConfigChangeError(ErrorCode.invalid_config,
                                f"Invalid value {value} for configuration {key}: Not a number of type INT")
    if number < 1:
        raise ConfigChangeError(ErrorCode.invalid_config,
                                f"Invalid value {value} for configuration {key}: Value must be at least 1")
    return number


def normalized(overrides: Mapping[str, str]) -> dict[str, str]:
    """The overrides with each int written as Kafka writes it back (" +50000" is "50000")."""
    return {key: str(int(value.strip())) if _INT.fullmatch(value.strip()) else value
            for key, value in overrides.items()}


def check_group_id(group_id: str) -> None:
    """A group resource must name a group: Kafka has no default group resource."""
    if not group_id:
        raise ConfigChangeError(ErrorCode.invalid_request, "Default group resources are not allowed.")


def check(overrides: Mapping[str, str], broker: Mapping[str, int]) -> None:
    """Raise ConfigChangeError, as Kafka answers, unless `overrides` may become a group's
    configs; `broker`: the broker keys of BROKER_KEYS and their values."""
    for key in overrides:
        if key not in GROUP_KEYS:
            raise ConfigChangeError(ErrorCode.invalid_config, f"Unknown group config name: {key}")
    for key, group_key in GROUP_KEYS.items():
        if group_key.is_int or key not in overrides:
            continue
        value = overrides[key].strip()
        if value in group_key.choices:
            continue
        if key == SHARE_AUTO_OFFSET_RESET and value.startswith(BY_DURATION):
            if duration_ms(value.removeprefix(BY_DURATION)) is None:
                raise ConfigChangeError(ErrorCode.invalid_config,
                                        f"Invalid value {overrides[key]} for configuration {key}: Unable to parse "
                                        "duration string after by_duration.")
            continue
        raise ConfigChangeError(ErrorCode.invalid_config,
                                f"Invalid value {overrides[key]} for configuration {key}: String must be one of: "
                                f"{', '.join(group_key.choices)}")
    values: dict[str, int] = {}
    for key, group_key in GROUP_KEYS.items():  # Kafka's order: each interval before its timeout
        if group_key.broker_key is None or group_key.min_key is None or group_key.max_key is None:
            continue
        values[key] = parse_int(key, overrides[key]) if key in overrides else broker[group_key.broker_key]
        if values[key] < broker[group_key.min_key]:
            raise ConfigChangeError(ErrorCode.invalid_config,
                                    f"{key} must be greater than or equal to {group_key.min_key}")
        if values[key] > broker[group_key.max_key]:
            raise ConfigChangeError(ErrorCode.invalid_config,
                                    f"{key} must be less than or equal to {group_key.max_key}")
    for timeout, interval in _TIMEOUT_PAIRS:
        if values[timeout] <= values[interval]:
            raise ConfigChangeError(ErrorCode.invalid_config, f"{timeout} must be greater than {interval}")


class StoredGroupTimings:
    """The group coordinator's view of the stored group configs (its `GroupTimings`):
    a group's own values, None where it has none and the broker's apply."""

    def __init__(self, current: Callable[[], GroupConfigs]) -> None:
        self._current = current

    def session_timeout_ms(self, group_id: str) -> int | None:
        return self._current().int_value(group_id, SESSION_TIMEOUT)

    def heartbeat_interval_ms(self, group_id: str) -> int | None:
        return self._current().int_value(group_id, HEARTBEAT_INTERVAL)
