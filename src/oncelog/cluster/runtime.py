"""A broker's life in a cluster: its quorum member, its registration, the metadata image
it follows, and (on one controller at a time) the reactions to brokers coming and going.

- **Quorum member.** A node with the controller role runs an etcd member as a child
  process (killed with the node: PR_SET_PDEATHSIG), as a KRaft combined node runs its
  controller.
- **Registration.** A broker registers under a lease of `broker.session.timeout.ms`,
  renewed every `broker.heartbeat.interval.ms`. A lapsed lease deletes the
  registration: the broker is fenced, as Kafka's controller fences a broker that
  missed its heartbeats. Before registering, a (re)starting broker takes itself out
  of every ISR and leadership its previous incarnation held (what the controller would
  do on seeing it gone); its replicas then catch up and rejoin the ISR.
- **Metadata.** The image is a range of the cluster's keys followed by a watch from
  the next revision; every change reaches the replica manager and the coordinators.
- **Controller.** Controller-role nodes campaign for the `controller` key under their
  lease. The active one elects leaders from the ISR when brokers are fenced and
  gives a leaderless partition back to its last ISR member when that returns. Its
  writes compare the controller key's create revision, so a deposed controller's
  writes fail.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.cluster.etcd import (
    Compare,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    LeaseNotFound,
    Op,
    WatchCompacted,
)
from oncelog.cluster.etcd_member import EtcdMember
from oncelog.cluster.fetcher import ReplicaFetchers
from oncelog.cluster.image import BrokerRegistration, Keys, MetadataDelta, MetadataImage
from oncelog.cluster.metadata_store import MetadataConflict, MetadataStore
from oncelog.cluster.placement import elect_leader, elect_on_return
from oncelog.cluster.replica_manager import ReplicaManager
from oncelog.cluster.settings import ClusterSettings

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

log = logging.getLogger("oncelog.cluster")

CLUSTER_ID_KEY = "/oncelog/cluster-id"
ETCD_DATA_DIR = "__cluster_metadata-etcd"


def member_name(node_id: int) -> str:
    return f"oncelog-{node_id}"


class ClusterRuntime:
    def __init__(self, broker: Broker, settings: ClusterSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.node_id = settings.node_id
        self.member: EtcdMember | None = None
        self.client = EtcdClient(list(settings.endpoints), request_timeout_s=settings.request_timeout_ms / 1000)
        self.keys: Keys | None = None
        self.store: MetadataStore | None = None
        self.image = MetadataImage.empty()
        self.replicas = ReplicaManager(broker, self)
        self.fetchers = ReplicaFetchers(broker, self.inter_broker_address)
        self.broker_epoch = -1
        self.lease = 0
        self.controller_revision: int | None = None  # set while this node is the active controller
        self._listeners: list = []  # called with (image, delta) after the replica manager
        self._revision_waiters: list[tuple[int, asyncio.Future]] = []
        self._tasks: list[asyncio.Task] = []
        self._reconcile_wanted = asyncio.Event()
        self._registration: BrokerRegistration | None = None

    # ---- start-up -------------------------------------------------------------------------

    def start_member(self) -> None:
        """Start this node's quorum member (controller role) before anything talks to it."""
        if not self.settings.is_controller:
            return
        own = self.settings.own_voter()
        peer = self.settings.own_peer()
        data_dir = Path(self.broker.config.log_dirs[0]) / ETCD_DATA_DIR
        election = self.settings.election_timeout_ms
        self.member = EtcdMember(
            member_name(self.node_id), data_dir, own.url, peer.url, self.settings.initial_cluster(member_name),
            election_timeout_ms=election, heartbeat_interval_ms=max(election // 10, 10),
            log_path=Path(self.broker.config.log_dirs[0]) / "etcd.log",
        )
        self.member.start()

    async def cluster_id(self, proposed: str) -> str:
        """The cluster's id: the first broker to start stores its id, every other adopts it."""
        while True:
            try:
                result = await self.client.txn(
                    [Compare.create_revision(CLUSTER_ID_KEY, "=", 0)],
                    [Op.put(CLUSTER_ID_KEY, proposed.encode())],
                    [Op.range(CLUSTER_ID_KEY)],
                )
                break
            except EtcdUnavailable as error:
                log.info("waiting for the metadata quorum at %s: %s", ", ".join(self.settings.endpoints), error)
                await asyncio.sleep(0.5)
        cluster_id = proposed if result.succeeded else result.responses[0][0].value.decode()
        self.keys = Keys(cluster_id)
        self.store = MetadataStore(self.client, self.keys)
        return cluster_id

    async def start(self) -> None:
        """Load the image, register, and follow the metadata (the listener is up). What
        the previous process of this broker led or was in sync for is given up first,
        before the image is acted on: a restarting broker must not lead, load a
        coordinator or take writes on the strength of its previous leaderships."""
        revision, kvs = await self._range()
        if await self._fence_previous_incarnation(MetadataImage.from_kvs(revision, kvs)):
            revision, kvs = await self._range()
        self._publish(MetadataImage.from_kvs(revision, kvs))
        await self._register()
        self._tasks.append(asyncio.create_task(self._follow_metadata(), name="metadata-watch"))
        self._tasks.append(asyncio.create_task(self._keep_alive(), name="broker-heartbeat"))
        self._tasks.append(asyncio.create_task(self._every(self.broker.config["replica.lag.time.max.ms"] / 2,
                                                           self.replicas.shrink_isrs), name="isr-shrink"))
        if self.settings.is_controller:
            self._tasks.append(asyncio.create_task(self._control(), name="controller"))
        await self.wait_for_revision(self.broker_epoch)  # the image has this broker's registration

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.close()
        self.replicas.close()
        if self.lease:
            try:  # leaderships move at once instead of after the session timeout
                await asyncio.wait_for(self.client.lease_revoke(self.lease), 2)
            except Exception:
                pass
        await self.client.close()
        if self.member is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.member.stop)

    # ---- metadata -------------------------------------------------------------------------

    def add_listener(self, listener) -> None:
        self._listeners.append(listener)

    def inter_broker_address(self, node_id: int) -> tuple[str, int] | None:
        registration = self.image.brokers.get(node_id)
        if registration is None:
            return None
        return registration.inter_broker_host, registration.inter_broker_port

    async def wait_for_revision(self, revision: int, timeout_s: float = 10.0) -> bool:
        """Wait until the local image includes `revision` (a write of ours is visible)."""
        if self.image.revision >= revision:
            return True
        future = asyncio.get_running_loop().create_future()
        self._revision_waiters.append((revision, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def _range(self) -> tuple[int, list]:
        while True:
            try:
                result = await self.client.range(self.keys.prefix, prefix=True)
                return result.revision, result.kvs
            except EtcdUnavailable as error:
                log.info("metadata quorum unavailable: %s", error)
                await asyncio.sleep(0.5)

    async def _follow_metadata(self) -> None:
        while True:
            try:
                async for revision, events in self.client.watch(self.keys.prefix, prefix=True,
                                                                start_revision=self.image.revision + 1):
                    image, delta = self.image.apply(revision, events)
                    self._publish(image, delta)
            except WatchCompacted:
                revision, kvs = await self._range()
                fresh = MetadataImage.from_kvs(revision, kvs)
                self._publish(fresh, MetadataDelta.diff(self.image, fresh))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("metadata watch failed (%s); resuming", error)
                await asyncio.sleep(0.5)

    def _publish(self, image: MetadataImage, delta: MetadataDelta | None = None) -> None:
        if delta is None:
            delta = MetadataDelta.diff(MetadataImage.empty(), image)
            self._drop_strays(image)
        old = self.image
        self.image = image
        for node_id in delta.registered_brokers:
            if node_id != self.node_id and node_id in old.brokers:
                self.fetchers.leader_moved(node_id)
        self.replicas.apply(image, delta)
        for listener in self._listeners:
            try:
                listener(image, delta)
            except Exception:
                log.exception("metadata listener %s failed", listener)
        if delta.unregistered_brokers or delta.registered_brokers or delta.changed_partitions \
                or delta.controller_changed:
            self._reconcile_wanted.set()
        waiting, self._revision_waiters = self._revision_waiters, []
        for revision, future in waiting:
            if image.revision >= revision:
                if not future.done():
                    future.set_result(None)
            else:
                self._revision_waiters.append((revision, future))

    def _drop_strays(self, image: MetadataImage) -> None:
        """Local topics the cluster no longer has (deleted while this broker was down)."""
        for name, info in list(self.broker.logs.topics().items()):
            topic = image.topics.get(name)
            if topic is None or topic.topic_id != info.topic_id:
                log.info("dropping stray local topic %s (id %s)", name, info.topic_id)
                self.broker.logs.delete_topic(name)

    # ---- registration and heartbeats --------------------------------------------------------

    async def _register(self) -> None:
        ttl_s = max(1, round(self.settings.session_timeout_ms / 1000))
        self.lease = await self._retry(lambda: self.client.lease_grant(ttl_s))
        await self._fence_previous_incarnation(self.image)
        broker = self.broker
        self._registration = BrokerRegistration(
            node_id=self.node_id, host=broker.host, port=broker.port,
            inter_broker_host=broker.inter_broker_host, inter_broker_port=broker.bound_port,
            incarnation=str(uuid.uuid4()), epoch=-1,
        )
        self.broker_epoch = await self._retry(lambda: self.store.register_broker(self._registration, self.lease))
        log.info("broker %d registered with epoch %d", self.node_id, self.broker_epoch)

    async def _fence_previous_incarnation(self, image: MetadataImage) -> bool:
        """Leave every ISR and leadership held before this start (or before the session
        lapsed): this process may have lost what its previous one acknowledged as
        replicated (an unflushed tail). Whether anything had to change."""
        live = set(image.live_broker_ids()) - {self.node_id}
        changed = False
        for record in list(image.partitions.values()):
            if self.node_id in record.isr or record.leader == self.node_id:
                await self._retry(lambda record=record: self.store.change_partition(
                    record, lambda current: elect_leader(current, live)))
                changed = True
        return changed

    async def _keep_alive(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.lease_keepalive(self.lease)
            except LeaseNotFound:
                log.warning("broker %d: session expired (fenced); registering again", self.node_id)
                self.controller_revision = None
                try:
                    await self._register()
                except Exception:
                    log.exception("re-registration failed")
            except (EtcdError, OSError) as error:
                log.info("heartbeat failed: %s", error)

    # ---- the controller ------------------------------------------------------------------------

    async def _control(self) -> None:
        while True:
            try:
                if self.image.controller_id == -1 or self.controller_revision is None:
                    won = await self.store.campaign(self.node_id, self.lease)
                    if won is not None:
                        self.controller_revision = won
                        log.info("node %d is the active controller (revision %d)", self.node_id, won)
                if self.controller_revision is not None:
                    await self._reconcile()
            except asyncio.CancelledError:
                raise
            except (EtcdError, MetadataConflict, OSError) as error:
                log.info("controller step failed: %s", error)
                if isinstance(error, MetadataConflict):
                    self.controller_revision = None
            self._reconcile_wanted.clear()
            try:
                await asyncio.wait_for(self._reconcile_wanted.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
            if self.image.controller_id != self.node_id:
                self.controller_revision = None

    async def _reconcile(self) -> None:
        """Elect leaders for partitions whose leader or ISR members are fenced, and
        return leaderless partitions to their last ISR member when it is back."""
        live = set(self.image.live_broker_ids())
        for record in list(self.image.partitions.values()):
            needs = (record.leader not in live) or any(r not in live for r in record.isr)
            if not needs:
                continue

            def change(current, live=live):
                return elect_leader(current, live) or elect_on_return(current, live)

            stored = await self.store.change_partition(record, change, controller_revision=self.controller_revision)
            if stored is not None:
                log.info("%s-%d: leader %d -> %d (epoch %d), ISR %s", stored.topic, stored.partition, record.leader,
                         stored.leader, stored.leader_epoch, list(stored.isr))

    # ---- helpers ------------------------------------------------------------------------

    async def _retry(self, operation, attempts: int = 100):
        for attempt in range(attempts):
            try:
                return await operation()
            except EtcdUnavailable as error:
                if attempt == attempts - 1:
                    raise
                log.info("metadata quorum unavailable (%s); retrying", error)
                await asyncio.sleep(0.2)

    async def _every(self, interval_ms: float, work) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 10) / 1000)
            try:
                work()
            except Exception:
                log.exception("periodic task %s failed", work)

