"""Where a broker keeps the group configs (oncelog.config.groups): one store per
broker, chosen at start-up.

- `FileGroupConfigStore` (standalone): a framed JSON file in the first log dir, beside
  the dynamic broker configs, `__group_configs.meta`, replaced crash-safely (temporary
  file, fsync, rename) before the request is answered.
- In cluster mode the metadata store keeps them, shared by every broker
  (oncelog.cluster.group_configs.ClusterGroupConfigStore).

The coordinator reads a group's values from `current()` at each use (the next heartbeat
of a member gets the new interval and is given the new session timeout), so a change
needs no listener.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from oncelog.config.groups import GroupConfigs
from oncelog.storage.errors import CorruptLogError
from oncelog.storage.framed_file import read_json_file, write_json_file

log = logging.getLogger("oncelog.config")

FILE_NAME = "__group_configs.meta"
_MAGIC = b"OLGC"
_VERSION = 1

# A group's new overrides, from its overrides now.
GroupChange = Callable[[Mapping[str, str]], dict[str, str]]


class GroupConfigStore(Protocol):
    def current(self) -> GroupConfigs: ...

    async def alter(self, group_id: str, change: GroupChange, check: Callable[[dict[str, str]], None], *,
                    validate_only: bool) -> None:
        """Give group `group_id` the overrides `change` computes, after `check` (which
        raises ConfigChangeError to refuse them)."""


class FileGroupConfigStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self._configs = GroupConfigs()

    def load(self) -> None:
        if self.path.exists():
            _version, document = read_json_file(self.path, _MAGIC, (_VERSION,))
            try:
                self._configs = GroupConfigs.from_json(document)
            except ValueError as error:
                raise CorruptLogError(str(self.path), str(error)) from None

    def current(self) -> GroupConfigs:
        return self._configs

    async def alter(self, group_id: str, change: GroupChange, check: Callable[[dict[str, str]], None], *,
                    validate_only: bool) -> None:
        overrides = change(self._configs.of(group_id))
        check(overrides)
        if validate_only or overrides == self._configs.of(group_id):
            return
        changed = self._configs.with_overrides(group_id, overrides)
        write_json_file(self.path, _MAGIC, _VERSION, changed.to_json())  # raises StorageError
        self._configs = changed
        log.info("group %s configs are now %s", group_id, overrides or "empty")
