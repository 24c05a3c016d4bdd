"""The broker, the composition root: builds every part, in its mode, and owns the loop's timers.

Everything here runs on the broker's single asyncio loop; handlers call these methods
and never share state across threads. Timers (flush, retention, checkpoints, log
cleaning) post their work back onto the same loop. One exception, as Kafka's cleaner
thread: the heavy part of a log-cleaning round (reading, filtering and rewriting
segment files) runs on the broker's single cleaner thread; it touches files only, and
the loop plans each round and swaps its result in (storage/cleaner.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.broker import config_sources
from oncelog.broker.console_peers import PeerConfigs
from oncelog.broker.console_source import ConsoleParts, ConsoleSource
from oncelog.broker.listener_setup import listener_bindings, plain_users
from oncelog.broker.metrics import (
    LATE_TRANSACTION_BUFFER_MS,
    BrokerSnapshot,
    CleanerSnapshot,
    PartitionSnapshot,
    metrics_registry,
)
from oncelog.broker.modes import mode_for
from oncelog.broker.server import KafkaServer
from oncelog.broker.topic_stats import TopicStats
from oncelog.clock import now_ms
from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.config.dynamic import BROKER_LEVEL_KEYS, DynamicBrokerConfigs, topic_defaults
from oncelog.config.groups import StoredGroupTimings
from oncelog.coordinator.group import GroupCoordinator
from oncelog.coordinator.group.scheduler import LoopScheduler
from oncelog.coordinator.group.state import DEAD
from oncelog.coordinator.share.groups import ShareGroups
from oncelog.coordinator.share.manager import SharePartitions
from oncelog.coordinator.share.persister import SharePersister
from oncelog.coordinator.share.settings import ShareGroupSettings
from oncelog.coordinator.share.state_topic import ShareStateTopic
from oncelog.coordinator.txn.coordinator import TransactionCoordinator
from oncelog.kernel.fetch_sessions import FetchSessionCache
from oncelog.kernel.fetch_waiters import FetchWaiters
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.kernel.peer import PeerPool
from oncelog.names import SHARE_GROUP_STATE, TopicPartition
from oncelog.security.listeners import SecurityProtocol
from oncelog.security.scram_credentials import load_fake_salt_key
from oncelog.security.tls import TlsConfigError, server_context
from oncelog.storage.cleaner import CleanerConfig, LogCleaner
from oncelog.storage.config import LogConfig
from oncelog.storage.errors import InvalidConfigError
from oncelog.storage.log import LogFlush
from oncelog.storage.manager import CheckpointWrite, LogManager
from oncelog.storage.producer_state import ProducerStateConfig
from oncelog.web.history import SAMPLE_INTERVAL_MS, LagHistory
from oncelog.web.http import ConsoleApp
from oncelog.web.pipelines import PipelineReports
from oncelog.web.server import HttpLimits, HttpListener, listener_names
from oncelog.web.sign_in import SignIns

if TYPE_CHECKING:
    from oncelog.broker.modes import Mode
    from oncelog.config.dynamic_store import DynamicConfigStore
    from oncelog.config.group_store import GroupConfigStore
    from oncelog.kernel.authorization import Acls
    from oncelog.kernel.node import ProducerIdSource
    from oncelog.kernel.quota_store import ClientQuotaStore
    from oncelog.security.scram_credentials import ScramCredentialStore

log = logging.getLogger("oncelog.broker")

NON_ROUTABLE = frozenset({"0.0.0.0", "::"})  # bound to every interface: not an address to advertise



class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.cluster_id: str = ""
        self.host = ""  # the first listener's address, as advertised to clients
        self.port = 0
        self.bound_port = 0  # where the first listener really is (differs behind a proxy)
        self.endpoints: dict[str, tuple[str, int]] = {}  # each listener's advertised address, by name
        self.inter_broker_host = ""  # where other brokers reach this one (the inter-broker listener, bound)
        self.inter_broker_port = 0
        # The stores (files standalone, the metadata quorum in cluster mode), set by start():
        # SCRAM credentials (AlterUserScramCredentials), salted and hashed; the ACLs
        # (authorizer.class.name; None: everything is allowed); client quotas, enforced by
        # self.server.quotas; dynamic broker configs; the groups' own configs (KIP-848).
        self.scram_credentials: ScramCredentialStore
        self.acls: Acls | None = None
        self.client_quotas: ClientQuotaStore
        self.dynamic_configs: DynamicConfigStore
        self.group_configs: GroupConfigStore
        # Set by start(), before anything uses them.
        self.logs: LogManager
        self.producer_ids: ProducerIdSource
        self.txn_coordinator: TransactionCoordinator
        self.group_coordinator: GroupCoordinator
        # Share groups (KIP-932): their membership, the share partitions led here and
        # their sessions, and the share coordinator's __share_group_state.
        self.share_groups: ShareGroups
        self.share_partitions: SharePartitions
        self.share_state: ShareStateTopic
        self.cleaner: LogCleaner
        self._cleaner_thread: ThreadPoolExecutor | None = None  # log.cleaner.threads=1
        self.server = KafkaServer(self)
        # Fetches waiting for data (Fetch's max_wait_ms), woken by every append.
        self.fetch_waiters = FetchWaiters()
        self.partition_appended = self.fetch_waiters.partition_appended
        self.wait_for_append = self.fetch_waiters.wait_for_append
        # Where standalone and cluster mode differ (broker/modes.py), chosen once: who leads
        # what and when a write is replicated, topic administration, where the other
        # brokers are, and (from start()) the producer ids and the stores.
        self.mode: Mode = mode_for(self)
        self.leadership = self.mode.leadership
        self.topics = self.mode.topics
        self.directory = self.mode.directory
        self._timers: list[asyncio.Task] = []
        self.http: HttpListener | None = None  # http.listener: /metrics and the console
        self._console: ConsoleSource | None = None
        self._peer_configs = PeerConfigs(self)  # the console's: other brokers' configs
        self.topic_stats = TopicStats()  # per-topic traffic, counted by Produce and Fetch
        # KIP-227: consumers' and followers' incremental fetch sessions (a restart starts with none).
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.producers_expired = 0  # by the producer-expiry timer, for /metrics
        self._stopped = asyncio.Event()

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        started = time.perf_counter()
        try:
            defaults = LogConfig().with_overrides(self.config.log_defaults())
        except InvalidConfigError as error:
            raise ConfigError(f"invalid log settings: {error}") from None
        self.logs = LogManager(self.config.log_dirs, defaults, ProducerStateConfig(
            producer_id_expiration_ms=self.config["producer.id.expiration.ms"],
            max_entries=self.config["producer.id.max.entries.per.partition"],
        ), replicated=self.mode.replicated, threads_per_dir=self.config["num.recovery.threads.per.data.dir"])
        # Before anything touches the log dirs: a second broker on them stops here.
        self.logs.lock()
        try:
            # Cluster membership (quorum member, cluster id) or standalone identity, and
            # the producer-id source: what must exist before the logs are opened.
            self.cluster_id = await self.mode.join()
            self.producer_ids = self.mode.producer_ids
            self.logs.load()
        except BaseException:
            self.logs.unlock()
            raise
        await self._start_after_logs(started)

    async def _start_after_logs(self, started: float) -> None:
        # Read before the listeners open; the dynamic configs apply at once.
        stores = await self.mode.stores(self.apply_dynamic_configs, self.server.quotas.replace)
        self.dynamic_configs, self.group_configs = stores.dynamic_configs, stores.group_configs
        self.scram_credentials, self.acls = stores.scram_credentials, stores.acls
        self.client_quotas = stores.client_quotas
        self.cleaner = LogCleaner(self.logs, CleanerConfig(
            enabled=self.config["log.cleaner.enable"],
            dedupe_buffer_size=self.config["log.cleaner.dedupe.buffer.size"],
            io_buffer_load_factor=self.config["log.cleaner.io.buffer.load.factor"],
        ))
        self._cleaner_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncelog-log-cleaner")
        self._flusher_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncelog-log-flusher")
        # Each coordinator loads the partitions of its internal topic this broker leads
        # as their leadership is announced: standalone, all of them now (groups before
        # transactions: markers the transaction coordinator completes on load must find
        # the pending transactional offsets), at a coordinator epoch above every earlier
        # start's; in cluster mode as the leaderships arrive with the metadata
        # (self.mode.open below). The group coordinator reads the groups' own configs
        # (KIP-848) at each use.
        self.group_coordinator = GroupCoordinator(self, group_timings=StoredGroupTimings(self.group_configs.current))
        self.txn_coordinator = TransactionCoordinator(self)
        self._start_share_groups()
        self.leadership.add_leadership_listener(self._coordinator_leadership)
        self.mode.lead()
        await self._listen()
        await self.mode.open()
        self._timers = [
            asyncio.create_task(self._flush_logs()),
            asyncio.create_task(self._every(self.config["log.retention.check.interval.ms"], self._retention)),
            asyncio.create_task(self._checkpoint_logs(self.mode.checkpoint_interval_ms)),
            asyncio.create_task(self._clean_logs()),
            asyncio.create_task(
                self._every(self.config["producer.id.expiration.check.interval.ms"], self._expire_producers)
            ),
            asyncio.create_task(self._every(
                self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                lambda: self.txn_coordinator.abort_timed_out(now_ms()),
            )),
            asyncio.create_task(self._every(
                self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                lambda: self.txn_coordinator.expire_ids(now_ms()),
            )),
        ]
        if self.config.http_listener is not None:
            self._start_http(*self.config.http_listener)
        log.info(
            "broker %d of cluster %s listening on %s:%d, advertised as %s:%d (started in %.0f ms)",
            self.node_id, self.cluster_id, self.inter_broker_host, self.bound_port, self.host, self.port,
            (time.perf_counter() - started) * 1000,
        )

    async def _listen(self) -> None:
        """Every listener: bound, with what it advertises (port 0: the port it got)."""
        fake_salt_key = load_fake_salt_key(self.config.log_dirs[0])  # what SCRAM shows unknown users
        bound = await self.server.start(listener_bindings(self.config, self.scram_credentials.lookup, fake_salt_key))
        for spec in self.config.listeners:
            _bound_host, bound_port = bound[spec.name]
            advertised = spec.advertised
            host = advertised.host if advertised is not None and advertised.host else spec.bind.host
            if not host:  # every interface, as Kafka: the machine's name
                host = socket.getfqdn()
            elif host in NON_ROUTABLE:
                raise ConfigError(f"advertised.listeners: listener {spec.name} would advertise the non-routable "
                                  f"address {host}; give the address clients use in advertised.listeners")
            self.endpoints[spec.name] = (host, advertised.port if advertised is not None and advertised.port
                                         else bound_port)
        first = self.config.listeners[0]
        self.host, self.port = self.endpoints[first.name]
        self.bound_port = bound[first.name][1]
        inter_broker = self.config.inter_broker_listener
        self.inter_broker_host = inter_broker.bind.host or bound[inter_broker.name][0]
        self.inter_broker_port = bound[inter_broker.name][1]
        if len(self.endpoints) > 1:
            log.info("listeners: %s", ", ".join(f"{spec.name} ({spec.protocol.value}) on "
                                                f"{bound[spec.name][0]}:{bound[spec.name][1]}"
                                                for spec in self.config.listeners))

    def apply_dynamic_configs(self, configs: DynamicBrokerConfigs) -> None:
        """New dynamic broker configs: every topic without its own override gets the
        defaults they give at once, and the broker-level keys take their new values."""
        layered = configs.layered(self.node_id, self.config.explicit)
        try:
            defaults = topic_defaults(layered)
        except (ConfigError, InvalidConfigError) as error:  # checked when set: a value this version refuses
            log.error("dynamic broker configs not applied: %s", error)
            return
        self.config.apply_dynamic(layered, BROKER_LEVEL_KEYS)
        self.logs.set_default_config(defaults)

    def _start_http(self, host: str, port: int) -> None:
        """`http.listener`: /metrics and the console, and the LSO-lag samples its charts draw."""
        loop = asyncio.get_running_loop()
        parts = ConsoleParts(
            self.node_id, lambda: self.cluster_id, self.logs.partitions, self.txn_coordinator,
            self.group_coordinator, self.mode.image,
            self.config["min.insync.replicas"],
            self.config["transaction.max.timeout.ms"] + LATE_TRANSACTION_BUFFER_MS,
            acls=lambda: self.acls, scram_lookup=self.scram_credentials.lookup,
            plain_users=plain_users(self.config), log_of=self.logs.partition,
            client_quotas=self.client_quotas.current, topic_traffic=lambda: (
                (t.topic, t.messages_in, t.bytes_in, t.bytes_out) for t in self.topic_stats.snapshot()),
            topic_configs=self._topic_configs, alter_topic_configs=self.topics.alter_configs,
            broker_configs=lambda: config_sources.broker_entries(self, config_sources.layers(self)),
            peer_broker_configs=self._peer_configs.describe,
            records_open=self._kafka_readable_without_credentials(), leadership=self.leadership)
        self._console = ConsoleSource(loop, parts, LagHistory(), PipelineReports(self._plaintext_bootstrap()))
        self._console.sample()
        self._timers.append(asyncio.create_task(self._every(SAMPLE_INTERVAL_MS, self._console.sample)))
        config = self.config
        app = ConsoleApp(
            metrics_registry(loop, self._metrics_snapshot, resource_names=config["http.metrics.resource.names"]),
            self._console, SignIns(self._console.authenticate),
            metrics_require_auth=config["http.metrics.require.auth"],
            failed_sign_in_delay_s=config["connection.failed.authentication.delay.ms"] / 1000)
        hosts = listener_names(host, (advertised for advertised, _port in self.endpoints.values()),
                               config["http.allowed.hosts"])
        limits = HttpLimits(config["http.max.connections"], config["http.worker.threads"],
                            config["http.request.timeout.ms"] / 1000)
        self.http = HttpListener(host, port, app, hosts, limits, tls=self._http_tls())
        self.http.start()

    def _kafka_readable_without_credentials(self) -> bool:
        """Whether a Kafka listener lets anyone read (PLAINTEXT, or SSL without required
        client certificates): without an authorizer the console then shows records too."""
        for spec in self.config.listeners:
            if spec.protocol is SecurityProtocol.PLAINTEXT:
                return True
            client_auth = self.config.for_listener(spec.name, "ssl.client.auth")
            if spec.protocol is SecurityProtocol.SSL and client_auth != "required":
                return True
        return False

    def _topic_configs(self, topic: str) -> list[config_sources.Entry] | None:
        """A topic's configs as DescribeConfigs gives them (the console's view); None: not here."""
        info = self.logs.topics().get(topic)
        return None if info is None else config_sources.topic_entries(info, config_sources.layers(self))

    def _http_tls(self) -> ssl.SSLContext | None:
        """http.ssl.enabled: the HTTP listener's TLS, from the broker's ssl.* keys and its own http.ssl.*."""
        if not self.config["http.ssl.enabled"]:
            return None
        try:
            context = server_context(self.config.http_ssl_settings())
        except TlsConfigError as error:
            raise ConfigError(f"http.listener (http.ssl.enabled): {error}") from None
        context.set_alpn_protocols(["http/1.1"])
        return context

    def _plaintext_bootstrap(self) -> str | None:
        """host:port of a PLAINTEXT listener (the console reads the pipelines' reports there),
        or None when every listener needs TLS or SASL."""
        for spec in self.config.listeners:
            if spec.protocol is SecurityProtocol.PLAINTEXT:
                host, port = self.endpoints[spec.name]
                return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return None

    def _metrics_snapshot(self) -> BrokerSnapshot:
        """What /metrics reports, read on the loop (oncelog.broker.metrics)."""
        offline = self.logs.offline_dirs
        partitions = [
            PartitionSnapshot(log.topic, log.partition, log.log_start_offset, log.log_end_offset,
                              log.high_watermark, log.last_stable_offset, log.size_in_bytes, len(log.segments),
                              len(log.producer_state.producers),
                              log.producer_state.oldest_open_transaction_started_ms())
            for log in self.logs.partitions()
        ]
        transactions: dict[str, int] = {}
        for metadata in self.txn_coordinator.txns.values():
            state = metadata.state.display_name
            transactions[state] = transactions.get(state, 0) + 1
        names = {key: handler.name for key, handler in self.server.handlers.items()}
        txn_stats = self.txn_coordinator.stats_snapshot()
        fetch_waiting = self.fetch_waiters.waiting()
        return BrokerSnapshot({str(directory): directory in offline for directory in self.logs.log_dirs},
                              partitions, transactions, self.server.request_stats.snapshot(names), txn_stats,
                              self.topic_stats.snapshot(), now_ms(),
                              self.config["transaction.max.timeout.ms"] + LATE_TRANSACTION_BUFFER_MS,
                              self.producers_expired, self.mode.snapshot(),
                              self.group_coordinator.snapshot(),
                              CleanerSnapshot(dataclasses.replace(self.cleaner.totals), self.cleaner.rounds_aborted,
                                              len(self.cleaner.uncleanable), self.cleaner.max_dirty_ratio(now_ms())),
                              fetch_waiting, self.logs.flush_stats.snapshot())

    async def stop(self) -> None:
        """Stop accepting requests, then flush and close every log with checkpoints."""
        if self.http is not None:
            self.http.stop()
        self._peer_configs.close()
        if self._console is not None:
            self._console.close()
        for task in self._timers:
            task.cancel()
        # A cancelled cleaning round aborts, waits for the cleaner thread and discards
        # its output before the gather returns: no cleaner I/O once the logs close.
        await asyncio.gather(*self._timers, return_exceptions=True)
        if self._cleaner_thread is not None:
            self._cleaner_thread.shutdown(wait=True)
            self._flusher_thread.shutdown(wait=True)
        if hasattr(self, "txn_coordinator"):  # start() got as far as the coordinators
            self.group_coordinator.close()  # no session or rebalance timer may fire while the logs close
            self.txn_coordinator.close()
            self.share_groups.close()
            await self.share_partitions.close()
            self._share_peers.close()
        await self.server.close()
        await self.mode.close()
        self.fetch_waiters.cancel_all()
        if self.logs is not None:
            self.logs.close()
        self._stopped.set()
        log.info("broker %d stopped cleanly", self.node_id)

    async def _every(self, interval_ms: int, work) -> None:
        interval = max(interval_ms, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                work()
            except Exception:
                log.exception("periodic task %s failed", getattr(work, "__name__", work))

    async def _flush_logs(self) -> None:
        """Kafka's log flusher: every log.flush.scheduler.interval.ms, flush the logs that
        rolled, whose flush.ms passed or whose directory changed. The fsyncs run on the
        flusher thread, FLUSH_BATCH logs at a time (each holds a few descriptors open):
        a rolled segment of hundreds of megabytes takes its time to reach the disk, and
        requests go on meanwhile."""
        interval = max(self.config["log.flush.scheduler.interval.ms"], 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                due = self.logs.due_for_flush(now_ms())
                for start in range(0, len(due), FLUSH_BATCH):
                    await self._flush(self.logs.take_flushes(due[start:start + FLUSH_BATCH]))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("flushing the logs failed")

    async def _flush(self, flushes: list[LogFlush]) -> None:
        if not flushes:
            return
        syncing = asyncio.get_running_loop().run_in_executor(self._flusher_thread, _sync_all, flushes)
        try:
            await asyncio.shield(syncing)
        except BaseException:
            await asyncio.wait([syncing])  # a thread cannot be interrupted
            for flush in flushes:
                flush.discard()  # the next tick, or closing the logs, flushes everything
            raise
        for flush in flushes:
            try:
                flush.finish()
            except Exception:
                log.exception("%s: flush failed", flush.log.name)

    def _retention(self) -> None:
        self.logs.apply_retention(now_ms())

    async def _checkpoint_logs(self, interval_ms: int) -> None:
        """Every interval, the recovery-point, log-start and high-watermark checkpoints,
        written on the flusher thread: each file costs two fsyncs, which a slow disk can
        make seconds. One write at a time; the next waits for the interval after it."""
        interval = max(interval_ms, 10) / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                writes = self.logs.take_checkpoints()
                writing = loop.run_in_executor(self._flusher_thread, _run_all, writes)
                try:
                    await asyncio.shield(writing)
                except asyncio.CancelledError:
                    await asyncio.wait([writing])  # a thread cannot be interrupted
                    raise
                for write in writes:
                    if write.error is not None:
                        log.error("cannot write the checkpoints of %s: %s", write.directory, write.error)
                        self.logs.checkpoint_failed(write.directory, write.error)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing the checkpoints failed")

    async def _clean_logs(self) -> None:
        """Kafka's cleaner thread loop: clean the filthiest compacted partition, round
        after round while one qualifies and rounds make progress, then back off for
        log.cleaner.backoff.ms (dynamic: read at every pause). Each round's heavy part
        runs on the cleaner thread."""
        loop = asyncio.get_running_loop()

        def run_in_cleaner_thread(step):
            return loop.run_in_executor(self._cleaner_thread, step)

        while True:
            await asyncio.sleep(max(self.config["log.cleaner.backoff.ms"], 10) / 1000)
            try:
                while True:
                    stats = await self.cleaner.clean_filthiest_in_thread(now_ms(), run_in_cleaner_thread)
                    if stats is None or stats.end_offset <= stats.first_dirty_offset:
                        break  # nothing qualifies, the round was aborted or made no progress
            except Exception:
                log.exception("log cleaning failed")

    def _expire_producers(self) -> None:
        """Drop producer state idle past producer.id.expiration.ms (open transactions stay)."""
        now = now_ms()
        for partition_log in self.logs.partitions():
            expired = partition_log.expire_producers(now)
            self.producers_expired += len(expired)
            if expired:
                log.info("%s: expired %d idle producer(s)", partition_log.name, len(expired))

    def _start_share_groups(self) -> None:
        settings = ShareGroupSettings(self.config, self.group_configs.current)
        coordinator = self.group_coordinator

        def other_group(group_id: str) -> bool:
            group = coordinator.group(group_id)
            return group is not None and group.state != DEAD

        self.share_state = ShareStateTopic(self)
        self._share_peers = PeerPool(self, "share-state")
        persister = SharePersister(self.share_state, self.leadership.leader_of, self._share_peers.get, self.node_id,
                                   self.config["share.coordinator.write.timeout.ms"] / 1000)
        self.share_groups = ShareGroups(
            self.logs, LoopScheduler(), timings=settings.timings, max_size=lambda: self.config["group.share.max.size"],
            owner_error=coordinator.owner_error, other_group=other_group)
        self.share_partitions = SharePartitions(self, self.share_state, persister, settings.settings,
                                                self.wait_for_append)
        self.share_partitions.start()

    def _coordinator_leadership(self, tp: TopicPartition, leader: bool, leader_epoch: int) -> None:
        """A coordinator's partition moved to or away from this broker."""
        topic, partition = tp
        if topic == CONSUMER_OFFSETS:
            self.group_coordinator.on_leadership(partition, leader, leader_epoch)
        elif topic == TRANSACTION_STATE:
            self.txn_coordinator.on_leadership(partition, leader, leader_epoch)
        elif topic == SHARE_GROUP_STATE:
            self.share_state.on_leadership(partition, leader, leader_epoch)
        else:  # cluster mode announces every partition: its share partitions follow it
            self.share_partitions.on_leadership(tp, leader)


FLUSH_BATCH = 64  # logs the flusher thread syncs at a time


def _run_all(writes: list[CheckpointWrite]) -> None:
    """The flusher thread's checkpoint work: each write keeps its own failure."""
    for write in writes:
        write.run()


def _sync_all(flushes: list[LogFlush]) -> None:
    """The flusher thread's work: each flush keeps its own failure for `finish`."""
    for flush in flushes:
        flush.sync()


def data_dir_config(data_dir: Path, **overrides: str) -> dict[str, str]:
    """Settings for a broker on loopback with a free port and its logs under data_dir."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(data_dir),
        **overrides,
    }
