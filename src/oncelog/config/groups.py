"""Group configs (KIP-848): a consumer group's own session timeout and heartbeat interval,
set with IncrementalAlterConfigs/AlterConfigs on a GROUP resource (type 32, named by the
group id) whether or not the group exists yet.

The keys, as Kafka 4's GroupConfig (its share.* and streams.* keys are left out: oncelog
has no share or streams groups):
- `consumer.session.timeout.ms`: how long the coordinator waits for a member's heartbeat
  before removing it; default the broker's group.consumer.session.timeout.ms.
- `consumer.heartbeat.interval.ms`: what ConsumerGroupHeartbeat tells the members;
  default the broker's group.consumer.heartbeat.interval.ms.

A group's overrides are checked as Kafka's GroupConfigManager checks them, on the broker's
values with the overrides over them: an unknown key is INVALID_CONFIG `Unknown group
config name: K`; a value that is no int or below 1 INVALID_CONFIG in ConfigDef's words; then
each key within the broker's group.consumer.min/max.* bounds, and the session timeout
above the heartbeat interval, with Kafka's messages. The bounds are checked when a value
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
INT_MAX = 2**31 - 1
_INT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class GroupKey:
    """A group config key: the broker key its default comes from, and the broker keys
    that bound it."""

    broker_key: str
    min_key: str
    max_key: str


GROUP_KEYS: Mapping[str, GroupKey] = MappingProxyType({
    SESSION_TIMEOUT: GroupKey("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                              "group.consumer.max.session.timeout.ms"),
    HEARTBEAT_INTERVAL: GroupKey("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
                                 "group.consumer.max.heartbeat.interval.ms"),
})
# The broker keys a check reads (BrokerConfig keys, all ints).
BROKER_KEYS = tuple(key for group_key in GROUP_KEYS.values()
                    for key in (group_key.broker_key, group_key.min_key, group_key.max_key))


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
    values = {key: parse_int(key, overrides[key]) if key in overrides else broker[group_key.broker_key]
              for key, group_key in GROUP_KEYS.items()}
    for key in (HEARTBEAT_INTERVAL, SESSION_TIMEOUT):  # Kafka's order
        group_key = GROUP_KEYS[key]
        if values[key] < broker[group_key.min_key]:
            raise ConfigChangeError(ErrorCode.invalid_config,
                                    f"{key} must be greater than or equal to {group_key.min_key}")
        if values[key] > broker[group_key.max_key]:
            raise ConfigChangeError(ErrorCode.invalid_config,
                                    f"{key} must be less than or equal to {group_key.max_key}")
    if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
        raise ConfigChangeError(ErrorCode.invalid_config,
                                f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")


class StoredGroupTimings:
    """The group coordinator's view of the stored group configs (its `GroupTimings`):
    a group's own values, None where it has none and the broker's apply."""

    def __init__(self, current: Callable[[], GroupConfigs]) -> None:
        self._current = current

    def session_timeout_ms(self, group_id: str) -> int | None:
        return self._current().int_value(group_id, SESSION_TIMEOUT)

    def heartbeat_interval_ms(self, group_id: str) -> int | None:
        return self._current().int_value(group_id, HEARTBEAT_INTERVAL)
