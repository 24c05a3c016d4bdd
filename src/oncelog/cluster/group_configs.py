"""Group configs (KIP-848) in cluster mode: one key of the metadata store,
`configs/groups` (every group's overrides, oncelog.config.groups's JSON form),
shared by every broker, as Kafka keeps them as ConfigRecords of its metadata log.
Standalone brokers keep them in a file (oncelog.config.group_store).

A change is planned on the key as the quorum has it and put under a compare-and-swap
(`SharedDocument`), planned again when another broker wrote first; the broker that wrote
answers once its own image has the write. Every broker reads the key from the image its
metadata watch keeps (`MetadataImage.group_configs`) at each use, so whichever broker
coordinates a group acts on its configs, from the first image on (before the
coordinator's partitions load from it). A quorum that does not answer is
REQUEST_TIMED_OUT; retrying is safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from oncelog.cluster.image import decode_group_configs, encode_group_configs
from oncelog.cluster.kv import KeyValue
from oncelog.cluster.security import NotStored, SharedDocument
from oncelog.config.changes import ConfigChangeError
from oncelog.config.group_store import GroupChange
from oncelog.config.groups import GroupConfigs
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.cluster.runtime import ClusterRuntime

log = logging.getLogger("oncelog.config")


def _configs_of(document: Mapping[str, Any]) -> GroupConfigs:
    """The group configs of `MetadataImage.group_configs` (or decode_group_configs). Raises ValueError."""
    return GroupConfigs.from_json({"groups": dict(document.get("groups", {}))})


class ClusterGroupConfigStore:
    def __init__(self, runtime: ClusterRuntime) -> None:
        self._runtime = runtime
        self._document = SharedDocument(runtime, runtime.keys.group_configs, "the group configs")
        self._configs = GroupConfigs()
        self._read: Mapping[str, Any] | None = None  # the image's document `_configs` was read from

    def current(self) -> GroupConfigs:
        """The group configs of this broker's metadata image (read again when the image's changed)."""
        document = self._runtime.image.group_configs
        if document is not self._read:
            self._read = document
            try:
                self._configs = _configs_of(document)
            except ValueError as error:
                log.error("the group configs in the metadata quorum (revision %d) cannot be read, the previous "
                          "ones stay: %s", self._runtime.image.revision, error)
        return self._configs

    async def alter(self, group_id: str, change: GroupChange, check: Callable[[dict[str, str]], None], *,
                    validate_only: bool) -> None:
        if validate_only:  # checked on what this broker's image holds
            check(change(self.current().of(group_id)))
            return

        async def plan(stored: KeyValue | None) -> bytes | None:
            configs = GroupConfigs() if stored is None else _configs_of(decode_group_configs(stored))
            overrides = change(configs.of(group_id))
            check(overrides)  # ConfigChangeError: refused, nothing written
            if overrides == configs.of(group_id):
                return None
            return encode_group_configs(configs.with_overrides(group_id, overrides).to_json())

        try:
            await self._document.change(plan)
        except NotStored as error:
            log.warning("group %s configs not stored: %s", group_id, error)
            code = ErrorCode.request_timed_out if error.retriable else ErrorCode.unknown_server_error
            raise ConfigChangeError(code, str(error)) from None
        log.info("group %s configs are now %s", group_id, dict(self.current().of(group_id)) or "empty")
