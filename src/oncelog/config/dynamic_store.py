"""Where a broker keeps the dynamic broker configs (oncelog.config.dynamic), and
how a change reaches it: one store per broker, chosen at start-up.

- `FileDynamicConfigStore` (standalone): a framed JSON file in the first log dir,
  `__broker_configs.meta`, replaced crash-safely (temporary file, fsync, rename).
- In cluster mode the metadata store keeps them, shared by every broker
  (oncelog.cluster.dynamic_configs.ClusterDynamicConfigStore).

Both call `on_change(configs)` with the new layers whenever they change (at load too),
so the broker applies them to its topic defaults in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from oncelog.config.dynamic import DynamicBrokerConfigs
from oncelog.storage.errors import CorruptLogError
from oncelog.storage.framed_file import read_json_file, write_json_file

log = logging.getLogger("oncelog.config")

FILE_NAME = "__broker_configs.meta"
_MAGIC = b"OLBC"
_VERSION = 1

# A broker resource's new overrides, from its overrides now.
ResourceChange = Callable[[Mapping[str, str]], dict[str, str]]
Listener = Callable[[DynamicBrokerConfigs], None]


class DynamicConfigStore(Protocol):
    def current(self) -> DynamicBrokerConfigs: ...

    async def alter(self, resource_name: str, change: ResourceChange, check: Callable[[dict[str, str]], None], *,
                    validate_only: bool) -> None:
        """Give broker resource `resource_name` the overrides `change` computes, after
        `check` (which raises to refuse them)."""


class FileDynamicConfigStore:
    def __init__(self, directory: Path, on_change: Listener) -> None:
        self.path = directory / FILE_NAME
        self._on_change = on_change
        self._configs = DynamicBrokerConfigs()

    def load(self) -> None:
        if self.path.exists():
            _version, document = read_json_file(self.path, _MAGIC, (_VERSION,))
            try:
                self._configs = DynamicBrokerConfigs.from_json(document)
            except ValueError as error:
                raise CorruptLogError(str(self.path), str(error)) from None
        self._on_change(self._configs)

    def current(self) -> DynamicBrokerConfigs:
        return self._configs

    async def alter(self, resource_name: str, change: ResourceChange, check: Callable[[dict[str, str]], None], *,
                    validate_only: bool) -> None:
        overrides = change(self._configs.of(resource_name))
        check(overrides)
        if validate_only:
            return
        changed = self._configs.with_overrides(resource_name, overrides)
        write_json_file(self.path, _MAGIC, _VERSION, changed.to_json())  # raises StorageError
        self._configs = changed
        log.info("dynamic broker config %s is now %s", repr(resource_name) if resource_name else "default",
                 overrides or "empty")
        self._on_change(changed)
