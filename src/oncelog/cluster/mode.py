"""Cluster mode's parts (kernel/mode.py): a broker of a cluster whose metadata lives in
the controller quorum (etcd), which replicates its partitions and shares its dynamic and
group configs, SCRAM credentials, ACLs and client quotas with every other broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.cluster.client_quotas import shared_client_quotas
from oncelog.cluster.dynamic_configs import ClusterDynamicConfigStore
from oncelog.cluster.group_configs import ClusterGroupConfigStore
from oncelog.cluster.producer_ids import ClusterProducerIds
from oncelog.cluster.runtime import ClusterRuntime, ClusterSnapshot
from oncelog.cluster.security import shared_acls, shared_scram_credentials
from oncelog.cluster.topics import ClusterTopics
from oncelog.kernel import meta_properties
from oncelog.kernel.authorization import ACLS_FILE
from oncelog.kernel.quota_store import FILE_NAME as QUOTAS_FILE
from oncelog.kernel.stores import Stores
from oncelog.security.scram_credentials import CREDENTIALS_FILE

if TYPE_CHECKING:
    from oncelog.cluster.image import MetadataImage
    from oncelog.cluster.settings import ClusterSettings
    from oncelog.config.dynamic_store import Listener as DynamicConfigsListener
    from oncelog.kernel.node import Node
    from oncelog.kernel.quota_store import Listener as QuotasListener
    from oncelog.security.inter_broker import PeerSecurity


class ClusterMode:
    def __init__(self, broker: Node, settings: ClusterSettings, peer_security: PeerSecurity | None) -> None:
        self._broker = broker
        config = broker.config
        self.runtime = ClusterRuntime(broker, settings, peer_security)
        self.leadership = self.runtime.replicas
        self.topics = ClusterTopics(self.runtime, config, lambda: broker.logs)
        self.directory = self.runtime
        self.producer_ids: ClusterProducerIds
        self.replicated = True
        self.checkpoint_interval_ms: int = min(config["log.flush.offset.checkpoint.interval.ms"],
                                               config["replica.high.watermark.checkpoint.interval.ms"])

    async def join(self) -> str:
        config = self._broker.config
        self.runtime.watch_log_dirs()
        self.runtime.start_member()
        proposed = (meta_properties.stored_cluster_id(config.log_dirs) or config["cluster.id"]
                    or meta_properties.new_cluster_id())
        cluster_id = await self.runtime.cluster_id(proposed)
        self.producer_ids = ClusterProducerIds(self.runtime.store)
        await self.producer_ids.start()
        return meta_properties.load_or_create(config.log_dirs, config.node_id, cluster_id or config["cluster.id"])

    async def stores(self, apply_dynamic_configs: DynamicConfigsListener, replace_quotas: QuotasListener) -> Stores:
        # The metadata image brings the configs from the first image on; the credentials,
        # ACLs and quotas are read before the listeners open.
        config = self._broker.config
        directory = config.log_dirs[0]
        return Stores(
            ClusterDynamicConfigStore(self.runtime, apply_dynamic_configs),
            ClusterGroupConfigStore(self.runtime),
            await shared_scram_credentials(self.runtime, directory / CREDENTIALS_FILE),
            await shared_acls(config, self.runtime, directory / ACLS_FILE),
            await shared_client_quotas(self.runtime, replace_quotas, directory / QUOTAS_FILE),
        )

    def lead(self) -> None:
        pass  # the leaderships arrive with the metadata, once open() follows it

    async def open(self) -> None:
        await self.runtime.start()

    async def close(self) -> None:
        await self.runtime.stop()

    def image(self) -> MetadataImage:
        return self.runtime.image

    def snapshot(self) -> ClusterSnapshot:
        runtime = self.runtime
        return ClusterSnapshot(runtime.replicas.snapshot(), runtime.image.controller_id == runtime.node_id,
                               bool(runtime.lease) and not runtime.isolated, runtime.leader_elections)
