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
- **Isolation.** A broker that cannot renew its lease knows, once the lease's time is up,
  that the quorum may have fenced it and elected others. From then on it acts on a
  fenced view of the image (`MetadataImage.fenced_view`): it leads nothing, loads no
  coordinator and names no leader for what it led, so clients go elsewhere. When it
  reaches the quorum again it re-reads the image, registers again if its lease is gone,
  and acts on what the store says. Unless no quorum can exist: when the voters answer
  that they are down or have no leader, and too few stay silent to make a majority,
  nobody can fence the broker or elect others (a new etcd leader extends every lease
  by its whole time), so it keeps what it leads, as Kafka's brokers do without their
  controllers, and looks again every third of a session.
- **Failed log dirs.** An I/O error in a log dir takes it offline (Kafka's
  LogDirFailureChannel): its replicas stop, and the broker leaves the cluster at once
  (lease revoked: the controller moves its leaderships and ISR places, the coordinators
  move with their partitions) while it acts on the fenced view. A dir that failed for
  want of space is probed every few seconds and, once it takes writes again, the broker
  registers again as a new incarnation and catches up, as after a restart; any other
  I/O error keeps the dir offline until the broker is restarted, as in Kafka.
  Deviation: Kafka keeps a broker with several log dirs in the cluster for its healthy
  ones; oncelog takes the whole broker out.
- **Quorum member.** A member that exits (e.g. on a full disk) is started again after a
  pause that grows with each exit.
- **Controller.** Controller-role nodes campaign for the `controller` key under their
  lease. The active one elects leaders from the ISR when brokers are fenced, gives a
  leaderless partition back to its last ISR member when that returns, and every
  `leader.imbalance.check.interval.seconds` moves leaderships back to preferred
  replicas that are live and in the ISR (`auto.leader.rebalance.enable`). Its writes
  compare the controller key's create revision, so a deposed controller's writes fail.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import uuid
from dataclasses import dataclass
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
from oncelog.cluster.image import BrokerRegistration, Keys, MetadataDelta, MetadataImage, PartitionRecord
from oncelog.cluster.metadata_store import MetadataConflict, MetadataStore
from oncelog.cluster.placement import (
    elect_leader,
    elect_on_return,
    elect_preferred,
    election_order,
    imbalanced_partitions,
)
from oncelog.cluster.replica_manager import ReplicaManager, ReplicationSnapshot
from oncelog.cluster.settings import ClusterSettings
from oncelog.security.inter_broker import PeerSecurity
from oncelog.storage.errors import StorageError

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.cluster")

CLUSTER_ID_KEY = "/oncelog/cluster-id"
ETCD_DATA_DIR = "__cluster_metadata-etcd"
LOG_DIR_PROBE_INTERVAL_S = 2.0  # how often a log dir that filled up is tried again
MEMBER_RESTART_PAUSE_S = 1.0  # before starting an exited quorum member again; doubles up to:
MEMBER_RESTART_PAUSE_MAX_S = 30.0


def member_name(node_id: int) -> str:
    return f"oncelog-{node_id}"


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Cluster mode: replication here, and this broker's standing in the cluster."""

    replication: ReplicationSnapshot
    active_controller: bool
    session_active: bool  # registered, and the lease confirmed in time (not isolated)
    leader_elections: int


class ClusterRuntime:
    def __init__(self, broker: Node, settings: ClusterSettings, peer_security: PeerSecurity | None = None) -> None:
        self.broker = broker
        self.settings = settings
        self.peer_security = peer_security  # TLS and SASL to the other brokers' inter-broker listener
        self.node_id = settings.node_id
        self.member: EtcdMember | None = None
        self.client = EtcdClient(list(settings.endpoints), request_timeout_s=settings.request_timeout_ms / 1000)
        # Set by cluster_id(), the first thing start-up asks the quorum.
        self.keys: Keys
        self.store: MetadataStore
        self.confirmed = MetadataImage.empty()  # the store's image, as far as the watch got
        self.image = MetadataImage.empty()  # what this broker acts on: `confirmed`, or its fenced view
        self.isolated = False  # the session could not be confirmed in time
        self.leader_elections = 0  # partition leaders this broker changed as controller, for /metrics
        self._session_deadline = 0.0  # loop time until which the lease is surely alive
        self._quorum_lost = False  # the voters showed that no quorum can exist (_probe_quorum)
        self._quorum_probe: asyncio.Task | None = None
        self.replicas = ReplicaManager(broker, self)
        self.fetchers = ReplicaFetchers(broker, self.inter_broker_address, peer_security)
        self.broker_epoch = -1
        self.lease = 0
        self.controller_revision: int | None = None  # set while this node is the active controller
        self._balance_due: tuple[int | None, float] = (None, 0.0)  # (controller revision, loop time)
        self._listeners: list = []  # called with (image, delta) after the replica manager
        self._revision_waiters: list[tuple[int, asyncio.Future]] = []
        self._tasks: list[asyncio.Task] = []
        self._watch: asyncio.Task | None = None
        self._reconcile_wanted = asyncio.Event()
        self._registration: BrokerRegistration | None = None
        self._lasting_dir_failures: set[Path] = set()  # offline until a restart
        self._dir_probe: asyncio.Task | None = None

    # ---- start-up -------------------------------------------------------------------------

    def watch_log_dirs(self) -> None:
        """Once the logs exist (before they load): a failed log dir is this runtime's to
        report. Failures are reported from inside the failed call, on any thread (the
        cleaner's too): handled next on the event loop, outside that call."""
        loop = asyncio.get_running_loop()
        self.broker.logs.add_failure_listener(
            lambda directory, error: loop.call_soon_threadsafe(self._log_dir_failed, directory, error))

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
        image = MetadataImage.from_kvs(revision, kvs)
        self._drop_strays(image)
        self._publish(image)
        await self._register()
        self._watch = asyncio.create_task(self._follow_metadata(), name="metadata-watch")
        self._tasks.append(asyncio.create_task(self._keep_alive(), name="broker-heartbeat"))
        self._tasks.append(asyncio.create_task(self._every(self._session_check_ms(), self._check_session),
                                               name="session-check"))
        self._tasks.append(asyncio.create_task(self._every(self.broker.config["replica.lag.time.max.ms"] / 2,
                                                           self.replicas.shrink_isrs), name="isr-shrink"))
        if self.settings.is_controller:
            self._tasks.append(asyncio.create_task(self._control(), name="controller"))
        if self.member is not None:
            self._tasks.append(asyncio.create_task(self._supervise_member(self.member), name="quorum-member"))
        await self.wait_for_revision(self.broker_epoch)  # the image has this broker's registration

    async def stop(self) -> None:
        optional = (self._watch, self._dir_probe, self._quorum_probe)
        tasks = [*self._tasks, *(task for task in optional if task is not None)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.fetchers.close()
        self.replicas.close()
        if self.lease:
            try:  # leaderships move at once instead of after the session timeout
                async with asyncio.timeout(2):
                    await self.client.lease_revoke(self.lease)
            except Exception:  # noqa: BLE001, S110 (best effort: unrevoked, the lease expires after the session timeout)
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
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(future)
            return True
        except TimeoutError:
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
                                                                start_revision=self.confirmed.revision + 1):
                    image, delta = self.confirmed.apply(revision, events)
                    self._publish(image, delta)
            except WatchCompacted:
                revision, kvs = await self._range()
                self._publish(MetadataImage.from_kvs(revision, kvs))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 (the watch must survive any failure: it resumes)
                log.warning("metadata watch failed (%s); resuming", error)
                await asyncio.sleep(0.5)

    def _publish(self, confirmed: MetadataImage, delta: MetadataDelta | None = None) -> None:
        """Take `confirmed` (the store's image; `delta` from the previous one if known)
        and act on it, or on its fenced view while isolated."""
        previous, self.confirmed = self.confirmed, confirmed
        image = confirmed.fenced_view(self.node_id) if self.isolated else confirmed
        if delta is None or image is not confirmed or self.image is not previous:
            delta = MetadataDelta.diff(self.image, image)  # `delta` is from `previous`, not from what we act on
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
        asked = asyncio.get_running_loop().time()
        self.lease = await self._retry(lambda: self.client.lease_grant(ttl_s))
        self._session_deadline = asked + ttl_s  # etcd may grant more, never less
        await self._fence_previous_incarnation(self.confirmed)
        broker = self.broker
        self._registration = BrokerRegistration(
            node_id=self.node_id, host=broker.host, port=broker.port,
            inter_broker_host=broker.inter_broker_host, inter_broker_port=broker.inter_broker_port,
            incarnation=str(uuid.uuid4()), epoch=-1, endpoints=dict(broker.endpoints),
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
        loop = asyncio.get_running_loop()
        interval = self.settings.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self.broker_epoch >= 0:
                asked = loop.time()
                try:
                    ttl_s = await self.client.lease_keepalive(self.lease)
                except LeaseNotFound:
                    log.warning("broker %d: session expired (fenced); registering again", self.node_id)
                    self.broker_epoch = -1
                except (EtcdError, OSError) as error:
                    log.info("heartbeat failed: %s", error)
                    continue
                else:
                    # etcd renewed the lease after `asked`: it lives at least until asked + TTL.
                    self._session_deadline = asked + ttl_s
                    self._quorum_lost = False
            if self.broker.logs.offline_dirs:
                continue  # out of the cluster until every log dir is back (_probe_offline_dirs)
            if self.isolated or self.broker_epoch < 0:
                try:
                    await self._rejoin()
                except (EtcdError, MetadataConflict, OSError) as error:
                    log.warning("broker %d: rejoining the cluster failed (%s); retrying", self.node_id, error)

    def _session_check_ms(self) -> int:
        return max(50, min(self.settings.heartbeat_interval_ms // 4, 250))

    def _check_session(self) -> None:
        """Once the lease may have lapsed, the quorum may have fenced this broker and
        elected others in its place: stop acting as leader and coordinator now, unless
        no quorum can exist (then look at the voters again first)."""
        loop = asyncio.get_running_loop()
        if self.isolated or self._quorum_probe is not None or loop.time() < self._session_deadline:
            return
        if not self._quorum_lost:
            self._fence_for_silence()
        self._quorum_probe = loop.create_task(self._probe_quorum(), name="quorum-probe")

    def _fence_for_silence(self) -> None:
        log.warning("broker %d: no word from the metadata quorum within the session (%d ms); leading and "
                    "coordinating nothing until it is reachable again", self.node_id, self.settings.session_timeout_ms)
        self._act_fenced()

    async def _probe_quorum(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            lost = await self._no_quorum_possible()
            if lost:
                if not self._quorum_lost:
                    log.warning("broker %d: the metadata quorum has lost its majority (its voters are down or "
                                "have no leader): nobody can fence this broker or elect others meanwhile, so it "
                                "keeps what it leads", self.node_id)
                self._quorum_lost = True
                self._session_deadline = loop.time() + self.settings.session_timeout_ms / 3000
                if self.isolated and self.broker_epoch >= 0 and not self.broker.logs.offline_dirs:
                    self.isolated = False
                    self._publish(self.confirmed)
            elif self._quorum_lost:
                self._quorum_lost = False
                self._fence_for_silence()
        finally:
            self._quorum_probe = None

    async def _no_quorum_possible(self) -> bool:
        """Whether the voters show that no etcd leader can exist now: none knows one, and
        the silent ones (which might follow one we cannot see) are fewer than a majority.
        Without the voter list (a broker-only node) nothing can be shown."""
        urls = [voter.url for voter in self.settings.voters]
        if not urls:
            return False
        timeout_s = min(1.0, self.settings.request_timeout_ms / 2000)
        states = await asyncio.gather(*(self.client.member_state(url, timeout_s) for url in urls))
        return "leader" not in states and states.count("unknown") < len(urls) // 2 + 1

    def _act_fenced(self) -> None:
        self.isolated = True
        self.controller_revision = None
        self._publish(self.confirmed)

    async def _rejoin(self) -> None:
        """In touch with the quorum again: read the image afresh (the watch may have
        missed the whole time), register again if the session lapsed (giving up what
        the fenced incarnation held), then act on the store's image again."""
        if not self.isolated:
            self._act_fenced()  # a lapsed session: fenced until registered again
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        revision, kvs = await self._range()
        self._publish(MetadataImage.from_kvs(revision, kvs))
        self._watch = asyncio.create_task(self._follow_metadata(), name="metadata-watch")
        if self.broker_epoch < 0:
            await self._register()
            await self.wait_for_revision(self.broker_epoch)
        self.isolated = False
        self._publish(self.confirmed)
        log.info("broker %d: in touch with the metadata quorum again (epoch %d, revision %d)", self.node_id,
                 self.broker_epoch, self.image.revision)

    # ---- failed log dirs ----------------------------------------------------------------------

    def _log_dir_failed(self, directory: Path, error: StorageError) -> None:
        logs = self.broker.logs
        if directory in logs.offline_dirs:
            return
        logs.set_dir_offline(directory, error)
        recoverable = error.errno in (errno.ENOSPC, errno.EDQUOT)
        if not recoverable:
            self._lasting_dir_failures.add(directory)
        log.error("log dir %s is offline (%s): broker %d leaves the cluster, its leaderships and coordinators "
                  "move to other brokers, %s", directory, error, self.node_id,
                  "until the dir takes writes again" if recoverable else "until the broker is restarted")
        self.replicas.take_dir_offline(directory)
        if self.broker_epoch >= 0:
            self.broker_epoch = -1  # registers again, as a new incarnation, once every log dir is back
            lease, self.lease = self.lease, 0
            asyncio.get_running_loop().create_task(self._leave(lease))
        if not self.isolated:
            self._act_fenced()
        if recoverable and self._dir_probe is None:
            self._dir_probe = asyncio.get_running_loop().create_task(self._probe_offline_dirs(), name="log-dir-probe")

    async def _leave(self, lease: int) -> None:
        """Revoke the lease: the registration goes, and the controller reacts at once."""
        try:
            async with asyncio.timeout(self.settings.request_timeout_ms / 1000):
                await self.client.lease_revoke(lease)
        except (EtcdError, OSError, TimeoutError) as error:
            log.info("broker %d: leaving the cluster by revoking its lease failed (%s); it lapses on its own",
                     self.node_id, error)

    async def _probe_offline_dirs(self) -> None:
        """Bring back each dir that failed for want of space once it takes writes again.
        The broker rejoins (`_keep_alive`) when no dir is offline any more."""
        loop = asyncio.get_running_loop()
        logs = self.broker.logs
        try:
            while set(logs.offline_dirs) - self._lasting_dir_failures:
                await asyncio.sleep(LOG_DIR_PROBE_INTERVAL_S)
                for directory in set(logs.offline_dirs) - self._lasting_dir_failures:
                    failure = await loop.run_in_executor(None, logs.probe_dir, directory)
                    if failure is None and logs.set_dir_online(directory):
                        log.info("log dir %s takes writes again: it is back online", directory)
                        self.replicas.resume_replicas()
        finally:
            self._dir_probe = None

    # ---- the quorum member ------------------------------------------------------------------

    async def _supervise_member(self, member: EtcdMember) -> None:
        """Start the quorum member again when it exits: on this (the event loop's, long
        lived) thread, as PR_SET_PDEATHSIG follows the thread that started it."""
        pause = MEMBER_RESTART_PAUSE_S
        while True:
            await asyncio.sleep(1.0)
            if member.alive:
                pause = max(MEMBER_RESTART_PAUSE_S, pause / 2)
                continue
            code = member.process.returncode if member.process is not None else None
            log.error("the quorum member of node %d exited (status %s); starting it again in %.0f s. Its log ends:"
                      "\n%s", self.node_id, code, pause, member.log_tail(2000))
            await asyncio.sleep(pause)
            pause = min(pause * 2, MEMBER_RESTART_PAUSE_MAX_S)
            member.process = None
            try:
                member.start()
            except (OSError, RuntimeError) as error:
                log.error("the quorum member of node %d did not start: %s", self.node_id, error)

    # ---- the controller ------------------------------------------------------------------------

    async def _control(self) -> None:
        while True:
            try:
                if self.isolated:
                    pass  # fenced, as far as this broker can tell: not a candidate
                elif self.image.controller_id == -1 or self.controller_revision is None:
                    won = await self.store.campaign(self.node_id, self.lease)
                    if won is not None:
                        self.controller_revision = won
                        log.info("node %d is the active controller (revision %d)", self.node_id, won)
                if self.controller_revision is not None:
                    await self._reconcile()
                    await self._balance_leaders_when_due()
            except asyncio.CancelledError:
                raise
            except (EtcdError, MetadataConflict, OSError) as error:
                log.info("controller step failed: %s", error)
                if isinstance(error, MetadataConflict):
                    self.controller_revision = None
            self._reconcile_wanted.clear()
            try:
                async with asyncio.timeout(1.0):
                    await self._reconcile_wanted.wait()
            except TimeoutError:
                pass
            if self.image.controller_id != self.node_id:
                self.controller_revision = None

    async def _reconcile(self) -> None:
        """Elect leaders for partitions whose leader or ISR members are fenced, and
        return leaderless partitions to their last ISR member when it is back: all of
        them in one write, as Kafka's controller fences a broker with one batch of
        records. When something changed meanwhile, partition by partition, each read
        again on a conflict: the ISRs of partitions that keep their leader first
        (`election_order`)."""
        revision = self.controller_revision
        if revision is None:
            return
        live = set(self.image.live_broker_ids())
        records = election_order(list(self.image.partitions.values()), live)

        def change(current: PartitionRecord) -> PartitionRecord | None:
            return elect_leader(current, live) or elect_on_return(current, live)

        changes = [(record, changed) for record in records if (changed := change(record)) is not None]
        if not changes:
            return
        written = await self.store.change_partitions(changes, controller_revision=revision)
        for (record, _), stored in zip(changes, written, strict=False):
            self._elected(record, stored)
        for record, _ in changes[len(written):]:
            again = await self.store.change_partition(record, change, controller_revision=revision)
            if again is not None:
                self._elected(record, again)

    def _elected(self, record: PartitionRecord, stored: PartitionRecord) -> None:
        self.leader_elections += stored.leader != record.leader
        log.info("%s-%d: leader %d -> %d (epoch %d), ISR %s", stored.topic, stored.partition, record.leader,
                 stored.leader, stored.leader_epoch, list(stored.isr))

    async def _balance_leaders_when_due(self) -> None:
        """Kafka's automatic leader rebalance: every leader.imbalance.check.interval.seconds
        of being the active controller, leaderships go back to their preferred replicas
        on the brokers whose imbalance is above leader.imbalance.per.broker.percentage
        (`imbalanced_partitions`), each a PREFERRED election of its own."""
        settings = self.settings
        if not settings.auto_leader_rebalance:
            return
        now = asyncio.get_running_loop().time()
        revision, due = self._balance_due
        if revision != self.controller_revision:  # newly the controller: a whole interval first
            self._balance_due = (self.controller_revision, now + settings.leader_imbalance_check_interval_ms / 1000)
            return
        if now < due:
            return
        self._balance_due = (revision, now + settings.leader_imbalance_check_interval_ms / 1000)
        live = set(self.image.live_broker_ids())
        for record in imbalanced_partitions(list(self.image.partitions.values()), live,
                                            settings.leader_imbalance_percentage):

            def change(current, live=live):
                return elect_preferred(current, live)

            stored = await self.store.change_partition(record, change, controller_revision=self.controller_revision)
            if stored is not None:
                self.leader_elections += 1
                log.info("%s-%d: leader %d -> %d (epoch %d), the preferred replica again", stored.topic,
                         stored.partition, record.leader, stored.leader, stored.leader_epoch)

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

