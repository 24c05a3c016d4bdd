"""Standalone and cluster mode: the parts where they differ, as one interface.

A broker chooses its mode once, when it is made (`broker.broker.Broker`, by `mode_for`):
a `broker.standalone.StandaloneMode` without `controller.quorum.voters` (or
`controller.quorum.bootstrap.servers`), else a `cluster.mode.ClusterMode`. Each builds
its set of parts in the order start-up needs them, and nothing else asks which mode it
runs in:

- made: `leadership`, `topics` and `directory`. Standalone: this broker leads every
  partition, creates topics in its own logs and has no peers. Cluster: the replica
  manager, topics in the metadata quorum, the other brokers of the image.
- `join`, before the logs load: the cluster id (meta.properties standalone, the
  quorum's in cluster mode, after this node's etcd member is started) and the producer
  ids (a file; blocks reserved in etcd).
- `stores`, after: dynamic and group configs, SCRAM credentials, ACLs and client
  quotas (files in the first log dir; the metadata quorum, shared by every broker).
- `lead`, once the coordinators exist: standalone, every internal partition at a new
  coordinator epoch; in cluster mode nothing, as the leaderships arrive with the metadata.
- `open`, once the listeners are bound: cluster mode registers and follows the metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from oncelog.broker.listener_setup import inter_broker_security
from oncelog.broker.standalone import StandaloneMode
from oncelog.cluster.mode import ClusterMode
from oncelog.cluster.settings import cluster_settings

if TYPE_CHECKING:
    from oncelog.cluster.image import MetadataImage
    from oncelog.cluster.runtime import ClusterSnapshot
    from oncelog.config.dynamic_store import Listener as DynamicConfigsListener
    from oncelog.kernel.node import BrokerDirectory, Leadership, Node, ProducerIdSource, TopicAdmin
    from oncelog.kernel.quota_store import Listener as QuotasListener
    from oncelog.kernel.stores import Stores


class Mode(Protocol):
    """One mode's parts; `leadership`, `topics` and `directory` exist once it is made,
    `producer_ids` once it has joined."""

    @property
    def leadership(self) -> Leadership: ...
    @property
    def topics(self) -> TopicAdmin: ...
    @property
    def directory(self) -> BrokerDirectory: ...
    @property
    def producer_ids(self) -> ProducerIdSource: ...
    @property
    def replicated(self) -> bool: ...  # the logs keep high-watermark checkpoints
    @property
    def checkpoint_interval_ms(self) -> int: ...

    async def join(self) -> str:
        """Before the logs load: this broker's cluster id, checked against meta.properties."""
        ...
    async def stores(self, apply_dynamic_configs: DynamicConfigsListener, replace_quotas: QuotasListener) -> Stores:
        """After the logs load, before the listeners open: the stores, loaded."""
        ...
    def lead(self) -> None:
        """The coordinators exist: they may be told what they lead."""
        ...
    async def open(self) -> None:
        """The listeners are bound."""
        ...
    async def close(self) -> None: ...
    def image(self) -> MetadataImage | None:
        """The metadata image this broker acts on (None standalone: there is none)."""
        ...
    def snapshot(self) -> ClusterSnapshot | None:
        """For /metrics: replication and this broker's standing (None standalone)."""
        ...


def mode_for(broker: Node) -> Mode:
    """The broker's mode, from its config: cluster mode when it names a controller quorum."""
    settings = cluster_settings(broker.config)
    if settings is None:
        return StandaloneMode(broker)
    return ClusterMode(broker, settings, inter_broker_security(broker.config))
