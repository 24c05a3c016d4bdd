"""A share group's settings: its group configs (config/groups.py) over the broker's
group.share.* keys, read at each use so an IncrementalAlterConfigs applies at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog.config import groups as keys
from oncelog.coordinator.share.groups import ShareTimings


@dataclass(frozen=True, slots=True)
class ShareSettings:
    lock_duration_ms: int
    read_committed: bool
    auto_offset_reset: str  # "earliest", "latest" or "by_duration:<ISO-8601 duration>"
    delivery_limit: int
    max_in_flight: int

    def reset_duration_ms(self) -> int | None:
        """by_duration's duration, None for earliest and latest."""
        if not self.auto_offset_reset.startswith(keys.BY_DURATION):
            return None
        return keys.duration_ms(self.auto_offset_reset.removeprefix(keys.BY_DURATION))


class Config(Protocol):
    def __getitem__(self, key: str) -> Any: ...


class ShareGroupSettings:
    """`current()`: every group's own configs (the broker's GroupConfigStore);
    `broker`: the broker's config."""

    def __init__(self, broker: Config, current: Callable[[], keys.GroupConfigs]) -> None:
        self._broker = broker
        self._current = current

    def _int(self, group_id: str, key: str) -> int:
        own = self._current().int_value(group_id, key)
        return own if own is not None else int(self._broker[keys.GROUP_KEYS[key].broker_key or key])

    def _str(self, group_id: str, key: str) -> str:
        own = self._current().of(group_id).get(key)
        return own.strip() if own is not None else str(keys.GROUP_KEYS[key].default)

    def settings(self, group_id: str) -> ShareSettings:
        return ShareSettings(
            lock_duration_ms=self._int(group_id, keys.SHARE_RECORD_LOCK_DURATION),
            read_committed=self._str(group_id, keys.SHARE_ISOLATION_LEVEL) == "read_committed",
            auto_offset_reset=self._str(group_id, keys.SHARE_AUTO_OFFSET_RESET),
            delivery_limit=int(self._broker["group.share.delivery.count.limit"]),
            max_in_flight=int(self._broker["group.share.partition.max.record.locks"]),
        )

    def timings(self, group_id: str) -> ShareTimings:
        return ShareTimings(self._int(group_id, keys.SHARE_SESSION_TIMEOUT),
                            self._int(group_id, keys.SHARE_HEARTBEAT_INTERVAL))
