"""Standalone mode's parts (kernel/mode.py): one broker that leads every partition, with
its cluster id, producer ids, dynamic and group configs, SCRAM credentials, ACLs and
client quotas in files of its first log dir."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oncelog.config.dynamic_store import FileDynamicConfigStore
from oncelog.config.group_store import FileGroupConfigStore
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.txn.coordinator_epoch import next_coordinator_epoch
from oncelog.kernel import meta_properties
from oncelog.kernel.authorization import Acls
from oncelog.kernel.leadership import StandaloneLeadership
from oncelog.kernel.peer import NoPeers
from oncelog.kernel.quota_store import FileClientQuotaStore
from oncelog.kernel.stores import Stores
from oncelog.kernel.topics import StandaloneTopics
from oncelog.security.scram_credentials import CREDENTIALS_FILE, FileScramCredentialStore

if TYPE_CHECKING:
    from oncelog.config.dynamic_store import Listener as DynamicConfigsListener
    from oncelog.kernel.node import Node
    from oncelog.kernel.quota_store import Listener as QuotasListener

log = logging.getLogger("oncelog.broker")


class StandaloneMode:
    def __init__(self, broker: Node) -> None:
        self._broker = broker
        config = broker.config
        self.leadership = StandaloneLeadership(
            broker.node_id, lambda: broker.logs, broker.endpoints.get, broker.partition_appended)
        self.topics = StandaloneTopics(broker.node_id, config, lambda: broker.logs, self.leadership)
        self.directory = NoPeers()
        self.producer_ids: ProducerIdManager
        self.replicated = False
        self.checkpoint_interval_ms: int = config["log.flush.offset.checkpoint.interval.ms"]

    async def join(self) -> str:
        config = self._broker.config
        self.producer_ids = ProducerIdManager(config.log_dirs[0])
        return meta_properties.load_or_create(config.log_dirs, config.node_id, config["cluster.id"])

    async def stores(self, apply_dynamic_configs: DynamicConfigsListener, replace_quotas: QuotasListener) -> Stores:
        config = self._broker.config
        directory = config.log_dirs[0]
        dynamic_configs = FileDynamicConfigStore(directory, apply_dynamic_configs)
        dynamic_configs.load()
        group_configs = FileGroupConfigStore(directory)
        group_configs.load()
        client_quotas = FileClientQuotaStore(directory, replace_quotas)
        client_quotas.load()
        return Stores(dynamic_configs, group_configs, FileScramCredentialStore(directory / CREDENTIALS_FILE),
                      Acls.from_config(config, directory), client_quotas)

    def lead(self) -> None:
        coordinator_epoch = next_coordinator_epoch(self._broker.config.log_dirs[0])
        log.info("coordinator epoch %d", coordinator_epoch)
        self.leadership.lead_existing(coordinator_epoch)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def image(self) -> None:
        return None

    def snapshot(self) -> None:
        return None
