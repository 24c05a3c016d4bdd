"""Dynamic broker configs in cluster mode: one key of the metadata store,
`configs/brokers` (the cluster default and every broker's own, oncelog.config.dynamic's
JSON form), shared by every broker. A change is a read-modify-write under etcd's compare;
each broker applies what its metadata image holds, the writer once its image has the
write (so an AlterConfigs answer means this broker already acts on it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from oncelog.cluster.etcd import Compare, EtcdUnavailable, Op
from oncelog.cluster.image import (
    MetadataDelta,
    MetadataImage,
    decode_broker_configs,
    encode_broker_configs,
)
from oncelog.config.changes import ConfigChangeError
from oncelog.config.dynamic import DynamicBrokerConfigs
from oncelog.config.dynamic_store import Listener, ResourceChange
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.cluster.runtime import ClusterRuntime

log = logging.getLogger("oncelog.config")

WRITE_ATTEMPTS = 5


class ClusterDynamicConfigStore:
    def __init__(self, runtime: ClusterRuntime, on_change: Listener) -> None:
        self._runtime = runtime
        self._on_change = on_change
        self._configs = DynamicBrokerConfigs()
        runtime.add_listener(self._metadata_changed)

    def _metadata_changed(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if not delta.broker_configs_changed:
            return
        try:
            self._configs = DynamicBrokerConfigs.from_json(image.broker_configs)
        except ValueError as error:
            log.error("dynamic broker configs in the metadata store not applied: %s", error)
            return
        self._on_change(self._configs)

    def current(self) -> DynamicBrokerConfigs:
        return self._configs

    async def alter(self, resource_name: str, change: ResourceChange, check: Callable[[dict[str, str]], None], *,
                    validate_only: bool) -> None:
        runtime = self._runtime
        key = runtime.keys.broker_configs
        for _ in range(WRITE_ATTEMPTS):
            try:
                stored = await runtime.client.get(key)
            except EtcdUnavailable as error:
                raise ConfigChangeError(ErrorCode.request_timed_out,
                                        f"the metadata quorum did not answer: {error}") from None
            try:
                configs = DynamicBrokerConfigs() if stored is None else \
                    DynamicBrokerConfigs.from_json(decode_broker_configs(stored))
            except ValueError as error:  # MetadataFormatError too: a record this version cannot read
                raise ConfigChangeError(ErrorCode.unknown_server_error,
                                        f"the stored dynamic broker configs cannot be read: {error}") from None
            overrides = change(configs.of(resource_name))
            check(overrides)
            if validate_only:
                return
            changed = configs.with_overrides(resource_name, overrides)
            compare = Compare.mod_revision(key, "=", stored.mod_revision) if stored is not None else \
                Compare.create_revision(key, "=", 0)
            try:
                result = await runtime.client.txn([compare], [Op.put(key, encode_broker_configs(changed.to_json()))])
            except EtcdUnavailable as error:
                raise ConfigChangeError(ErrorCode.request_timed_out,
                                        f"the metadata quorum did not answer: {error}") from None
            if not result.succeeded:
                continue  # changed meanwhile: compute the change again on what is there now
            if not await runtime.wait_for_revision(result.revision):
                raise ConfigChangeError(
                    ErrorCode.request_timed_out,
                    "the dynamic broker configs were written, but this broker has not seen them yet")
            log.info("dynamic broker config %s is now %s", repr(resource_name) if resource_name else "default",
                     overrides or "empty")
            return
        raise ConfigChangeError(ErrorCode.request_timed_out,
                                f"the dynamic broker configs kept changing during {WRITE_ATTEMPTS} attempts")
