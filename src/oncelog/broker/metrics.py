"""The broker's Prometheus metrics: `http.listener=HOST:PORT` (off when empty) serves
`/metrics` in Prometheus text format, through prometheus_client, on the HTTP listener's
threads (oncelog.web.http, which also serves the console).

Each scrape asks the event loop, which owns every piece of broker state, for a snapshot
(`MetricsSource`), and turns it into metric families. Gauges are read from the state
they describe; counters and histograms are kept by the part that owns what they count
(the server's `RequestStats`, the transaction coordinator's `TxnStats`) and copied into
the snapshot. Names follow Prometheus conventions and mirror Kafka's JMX metrics;
docs/metrics.md maps each to Kafka's.

What is exported so far: the log directories (Kafka's LogManager OfflineLogDirectoryCount
and LogDirectoryOffline), each local partition's log (start and end offsets, size,
segments, as Kafka's Log metrics; high watermark, last stable offset and Kafka's
Partition LastStableOffsetLag), producer state (producer ids per partition, the age of
the oldest open transaction, Kafka's PartitionsWithLateTransactionsCount, expirations),
the transactions this broker coordinates (by state; completed by result, marker latency,
timeouts, fencing), requests per API, each topic's traffic (Kafka's BrokerTopicMetrics),
replication in cluster mode (Kafka's ReplicaManager gauges, follower lag, the controller,
this broker's session), the groups coordinated here (by state, rebalances, each group's
committed offsets and lag to the high watermark and to the LSO; not the Spark sink's
marker groups, oncelog.names), the log cleaner (rounds, bytes, records removed, Kafka's
max-dirty-percent and uncleanable partitions) and the process (prometheus_client's
collectors). Families without a Kafka counterpart
are named `oncelog_*`.

`http.metrics.resource.names=false` leaves out every family with a sample labelled by a
topic or a consumer group name (`RESOURCE_LABELS`): the names clients chose stay off the
scrape, and the broker-wide families (counts, totals, requests per API) remain. The cut is
made on the families built, so a family added later is cut too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from oncelog.broker.request_stats import ApiSnapshot
from oncelog.broker.topic_stats import TopicSnapshot
from oncelog.cluster.runtime import ClusterSnapshot
from oncelog.coordinator.group.api import GroupsSnapshot
from oncelog.coordinator.txn.stats import TxnStatsSnapshot
from oncelog.names import sink_marker_query
from oncelog.protocol.error_counts import error_name
from oncelog.stats import BUCKETS_S, HistogramSnapshot
from oncelog.storage.cleaner import CleanerTotals

SNAPSHOT_TIMEOUT_S = 5.0  # a scrape gives up when the loop does not answer in this time
RESOURCE_LABELS = frozenset({"topic", "consumergroup"})  # labels whose values clients chose


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    size_bytes: int
    segments: int
    producers: int = 0  # producer ids with state here
    oldest_transaction_started_ms: int | None = None  # None: no transaction open here


@dataclass(frozen=True, slots=True)
class CleanerSnapshot:
    totals: CleanerTotals  # a copy
    rounds_aborted: int
    uncleanable: int
    max_dirty_ratio: float


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """What the loop saw at one moment: each log directory with whether it is offline,
    each local partition's log, and the coordinated transactions by state name."""

    offline: dict[str, bool]
    partitions: list[PartitionSnapshot] = field(default_factory=list)
    transactions: dict[str, int] = field(default_factory=dict)
    requests: list[ApiSnapshot] = field(default_factory=list)
    txn_stats: TxnStatsSnapshot | None = None  # None: no transaction coordinator
    topics: list[TopicSnapshot] = field(default_factory=list)
    now_ms: int = 0  # when the snapshot was taken (the transaction ages are measured to it)
    late_transaction_ms: int = 0  # an open transaction older than this is late
    producers_expired: int = 0
    cluster: ClusterSnapshot | None = None  # None: standalone
    groups: GroupsSnapshot | None = None  # None: no group coordinator
    cleaner: CleanerSnapshot | None = None
    fetch_waiting: int = 0  # long-polling fetches (Kafka's Fetch purgatory)
    flushes: HistogramSnapshot | None = None  # every log's flushes


MetricsSource = Callable[[], BrokerSnapshot]  # runs on the event loop

_PARTITION_GAUGES = (  # (name, help, attribute)
    ("kafka_log_log_start_offset", "First offset of the partition's log (Kafka's Log LogStartOffset).",
     "log_start_offset"),
    ("kafka_log_log_end_offset", "Offset after the last record of the log (Kafka's Log LogEndOffset).",
     "log_end_offset"),
    ("kafka_log_size_bytes", "Bytes of the log's segments (Kafka's Log Size).", "size_bytes"),
    ("kafka_log_num_log_segments", "Segments of the log (Kafka's Log NumLogSegments).", "segments"),
    ("oncelog_log_high_watermark", "Offset up to which records are on every in-sync replica.", "high_watermark"),
    ("oncelog_log_last_stable_offset",
     ("read_committed's bound: the high watermark, or the first offset of the oldest transaction not yet "
      "decided and replicated."), "last_stable_offset"),
)


class _BrokerCollector(Collector):
    def __init__(self, loop: asyncio.AbstractEventLoop, source: MetricsSource, resource_names: bool = True) -> None:
        self._loop = loop
        self._source = source
        self._resource_names = resource_names

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        for family in self._families():
            if self._resource_names or not any(RESOURCE_LABELS & sample.labels.keys() for sample in family.samples):
                yield family

    def _families(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        snapshot = asyncio.run_coroutine_threadsafe(self._snapshot(), self._loop).result(SNAPSHOT_TIMEOUT_S)
        offline = GaugeMetricFamily(
            "kafka_log_offline_log_directory_count",
            "Log directories of this broker that are offline (Kafka's OfflineLogDirectoryCount).",
            value=sum(snapshot.offline.values()),
        )
        yield offline
        per_dir = GaugeMetricFamily(
            "kafka_log_log_directory_offline",
            "1 while the log directory is offline, else 0 (Kafka's LogDirectoryOffline).",
            labels=["log_directory"],
        )
        for directory, is_offline in sorted(snapshot.offline.items()):
            per_dir.add_metric([directory], 1 if is_offline else 0)
        yield per_dir
        yield from _partition_families(snapshot.partitions)
        yield from _producer_families(snapshot)
        if snapshot.cluster is not None:
            yield from _cluster_families(snapshot.cluster)
        if snapshot.groups is not None:
            yield from _group_families(snapshot.groups, snapshot.partitions)
        if snapshot.cleaner is not None:
            yield from _cleaner_families(snapshot.cleaner)
        transactions = GaugeMetricFamily(
            "oncelog_transactions",
            "Transactional ids this broker coordinates, by the state of their transaction.",
            labels=["state"],
        )
        for state, count in sorted(snapshot.transactions.items()):
            transactions.add_metric([state], count)
        yield transactions
        yield from _request_families(snapshot.requests)
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatory_size",
            "Requests waiting: fetches long-polling for data, acks=all produces waiting for the high watermark "
            "(cluster mode) (Kafka's DelayedOperationPurgatory PurgatorySize).", labels=["delayed_operation"])
        purgatory.add_metric(["Fetch"], snapshot.fetch_waiting)
        purgatory.add_metric(["Produce"], snapshot.cluster.replication.produce_waiting if snapshot.cluster else 0)
        yield purgatory
        yield from _topic_families(snapshot.topics)
        if snapshot.txn_stats is not None:
            yield from _txn_families(snapshot.txn_stats)
        loads = HistogramMetricFamily(
            "oncelog_coordinator_partition_load_seconds",
            "Loading an internal partition when this broker became its coordinator (Kafka's "
            "partition-load-time-max and -avg, KIP-484).", labels=["coordinator"])
        if snapshot.txn_stats is not None:
            stats = snapshot.txn_stats
            loads.add_metric(["transaction"], _buckets(stats.loads_cumulative, stats.loads_count),
                             sum_value=stats.loads_total_s)
        if snapshot.groups is not None:
            groups = snapshot.groups
            loads.add_metric(["group"], _buckets(groups.loads_cumulative, groups.loads_count),
                             sum_value=groups.loads_total_s)
        yield loads
        if snapshot.flushes is not None:
            flushes = HistogramMetricFamily(
                "kafka_log_logflushstats_log_flush_seconds",
                "Flushes of a log to disk (fsync of its new segments' data, indexes and directory), by "
                "log.flush.interval.messages, log.flush.interval.ms, segment rolls and shutdown (Kafka's "
                "LogFlushStats LogFlushRateAndTimeMs).")
            flushes.add_metric([], _buckets(snapshot.flushes.cumulative, snapshot.flushes.count),
                               sum_value=snapshot.flushes.total_s)
            yield flushes

    async def _snapshot(self) -> BrokerSnapshot:
        return self._source()


def _request_families(requests: list[ApiSnapshot]) -> Iterator[
        GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
    count = CounterMetricFamily("kafka_network_request_requests", "Requests handled, by API (Kafka's "
                                "RequestMetrics RequestsPerSec).", labels=["request"])
    in_flight = GaugeMetricFamily("oncelog_network_requests_in_flight", "Requests being handled now, by API.",
                                  labels=["request"])
    seconds = HistogramMetricFamily(
        "oncelog_network_request_handle_seconds",
        "How long handlers took, by API: from the decoded request to the response built, waits for "
        "replication (acks=all) and long polls included.", labels=["request"])
    errors = CounterMetricFamily(
        "kafka_network_request_errors", "Error codes in responses, by API and error, NONE included (Kafka's "
        "RequestMetrics ErrorsPerSec): one per partition, group or key the response answers.",
        labels=["request", "error"])
    for api in requests:
        count.add_metric([api.api], api.count)
        for code, occurrences in sorted(api.errors.items()):
            errors.add_metric([api.api, error_name(code)], occurrences)
        in_flight.add_metric([api.api], api.in_flight)
        seconds.add_metric([api.api], _buckets(api.cumulative, api.count), sum_value=api.total_s)
    yield count
    yield errors
    yield in_flight
    yield seconds


_TOPIC_COUNTERS = (  # (name, help, attribute): Kafka's BrokerTopicMetrics
    ("kafka_server_brokertopicmetrics_bytes_in", "Bytes of records produced (BytesInPerSec).", "bytes_in"),
    ("kafka_server_brokertopicmetrics_messages_in", "Records produced (MessagesInPerSec).", "messages_in"),
    ("kafka_server_brokertopicmetrics_bytes_out", "Bytes of records fetched by consumers (BytesOutPerSec).",
     "bytes_out"),
    ("kafka_server_brokertopicmetrics_failed_produce_requests",
     "Partitions of Produce requests answered with an error (FailedProduceRequestsPerSec).", "failed_produce"),
    ("kafka_server_brokertopicmetrics_failed_fetch_requests",
     "Partitions of consumers' Fetch requests answered with an error (FailedFetchRequestsPerSec).", "failed_fetch"),
)


def _buckets(cumulative: tuple[int, ...], count: int) -> list[tuple[str, int]]:
    """A histogram's (upper bound, cumulative count) pairs from oncelog.stats.Histogram's."""
    return [*((str(bound), below) for bound, below in zip(BUCKETS_S, cumulative, strict=True)), ("+Inf", count)]


def _topic_families(topics: list[TopicSnapshot]) -> Iterator[CounterMetricFamily]:
    for name, documentation, attribute in _TOPIC_COUNTERS:
        family = CounterMetricFamily(name, documentation, labels=["topic"])
        for each in topics:
            family.add_metric([each.topic], getattr(each, attribute))
        yield family


def _txn_families(stats: TxnStatsSnapshot) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
    completed = CounterMetricFamily("oncelog_transactions_completed",
                                    "Transactions whose markers are written, by result.", labels=["result"])
    completed.add_metric(["commit"], stats.commits)
    completed.add_metric(["abort"], stats.aborts)
    yield completed
    yield CounterMetricFamily("oncelog_transactions_timed_out",
                              "Transactions the coordinator aborted for outliving their timeout.",
                              value=stats.timed_out)
    yield CounterMetricFamily("oncelog_producers_fenced",
                              "Producers fenced by a new instance's InitProducerId, their open transaction aborted.",
                              value=stats.fenced)
    markers = HistogramMetricFamily(
        "oncelog_transaction_markers_seconds",
        "From the decision (PrepareCommit/PrepareAbort written) to every marker written "
        "(CompleteCommit/CompleteAbort).")
    markers.add_metric([], _buckets(stats.markers_cumulative, stats.markers_count), sum_value=stats.markers_total_s)
    yield GaugeMetricFamily("oncelog_transactions_completing",
                            "Transactions decided whose markers are being written now (the marker queue).",
                            value=stats.completing)
    yield GaugeMetricFamily("oncelog_transactions_prepared",
                            "KIP-939 transactions kept prepared for an external decision (2PC): they never time out.",
                            value=stats.prepared)
    yield markers


def _partition_families(partitions: list[PartitionSnapshot]) -> Iterator[GaugeMetricFamily]:
    labels = ["topic", "partition"]
    for name, documentation, attribute in _PARTITION_GAUGES:
        family = GaugeMetricFamily(name, documentation, labels=labels)
        for each in partitions:
            family.add_metric([each.topic, str(each.partition)], getattr(each, attribute))
        yield family
    lag = GaugeMetricFamily(
        "kafka_cluster_partition_last_stable_offset_lag",
        "High watermark minus last stable offset: records read_committed consumers wait for "
        "(Kafka's Partition LastStableOffsetLag).",
        labels=labels,
    )
    for each in partitions:
        lag.add_metric([each.topic, str(each.partition)], each.high_watermark - each.last_stable_offset)
    yield lag


# Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS: a transaction open this long
# past transaction.max.timeout.ms is late (its coordinator should have aborted it).
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


def _producer_families(snapshot: BrokerSnapshot) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    labels = ["topic", "partition"]
    producers = GaugeMetricFamily("oncelog_log_producers",
                                  "Producer ids with state in the partition (idempotence and transactions).",
                                  labels=labels)
    age = GaugeMetricFamily(
        "oncelog_log_oldest_transaction_age_seconds",
        "Age of the oldest transaction open in the partition (0: none): from its first batch here. It holds "
        "the last stable offset back for its whole life.", labels=labels)
    late = 0
    for each in snapshot.partitions:
        key = [each.topic, str(each.partition)]
        producers.add_metric(key, each.producers)
        started = each.oldest_transaction_started_ms
        age_ms = 0 if started is None else max(snapshot.now_ms - started, 0)
        age.add_metric(key, age_ms / 1000)
        late += started is not None and age_ms > snapshot.late_transaction_ms
    yield producers
    yield age
    yield GaugeMetricFamily("kafka_server_replicamanager_producer_id_count",
                            "Producer ids with state, over every partition here (Kafka's ReplicaManager "
                            "ProducerIdCount).", value=sum(each.producers for each in snapshot.partitions))
    yield GaugeMetricFamily(
        "kafka_server_replicamanager_partitions_with_late_transactions_count",
        "Partitions whose oldest open transaction is older than transaction.max.timeout.ms plus 5 minutes: "
        "a hanging transaction (Kafka's ReplicaManager PartitionsWithLateTransactionsCount).", value=late)
    yield CounterMetricFamily("oncelog_producers_expired",
                              "Producer ids forgotten after producer.id.expiration.ms without a write.",
                              value=snapshot.producers_expired)


def _cluster_families(cluster: ClusterSnapshot) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    replication = cluster.replication
    gauges = (  # (name, help, value): Kafka's ReplicaManager and KafkaController gauges
        ("kafka_server_replicamanager_partition_count", "Replicas on this broker (Kafka's PartitionCount).",
         replication.partitions),
        ("kafka_server_replicamanager_leader_count", "Partitions this broker leads (Kafka's LeaderCount).",
         replication.leaders),
        ("kafka_server_replicamanager_under_replicated_partitions",
         "Partitions led here whose ISR is smaller than their replica set (Kafka's UnderReplicatedPartitions).",
         replication.under_replicated),
        ("kafka_server_replicamanager_under_min_isr_partition_count",
         ("Partitions led here whose ISR is below min.insync.replicas: acks=all writes and transaction markers "
         "fail (Kafka's UnderMinIsrPartitionCount)."), replication.under_min_isr),
        ("kafka_controller_kafkacontroller_active_controller_count",
         "1 on the active controller, else 0 (Kafka's ActiveControllerCount).", int(cluster.active_controller)),
        ("oncelog_cluster_session_active",
         ("1 while this broker is registered and its session confirmed by the metadata quorum; 0 while it is "
         "fenced or cannot reach the quorum (it then leads and coordinates nothing)."), int(cluster.session_active)),
    )
    for name, documentation, value in gauges:
        yield GaugeMetricFamily(name, documentation, value=value)
    yield CounterMetricFamily("kafka_server_replicamanager_isr_shrinks",
                              "ISR shrinks this broker wrote as leader (Kafka's IsrShrinksPerSec).",
                              value=replication.isr_shrinks)
    yield CounterMetricFamily("kafka_server_replicamanager_isr_expands",
                              "ISR expansions this broker wrote as leader (Kafka's IsrExpandsPerSec).",
                              value=replication.isr_expands)
    yield CounterMetricFamily("oncelog_controller_leader_elections",
                              "Partition leaders this broker moved while it was the active controller.",
                              value=cluster.leader_elections)
    lag = GaugeMetricFamily(
        "oncelog_replica_lag_records",
        "On the leader: its log end offset minus the follower's, as of the follower's last fetch (-1: none yet).",
        labels=["topic", "partition", "replica"])
    for each in replication.follower_lags:
        lag.add_metric([each.topic, str(each.partition), str(each.replica)], each.records)
    yield lag


def _group_families(groups: GroupsSnapshot, partitions: list[PartitionSnapshot]) -> Iterator[
        GaugeMetricFamily | CounterMetricFamily]:
    by_state = GaugeMetricFamily(
        "oncelog_groups", "Groups this broker coordinates, by state and protocol type (Kafka's group-coordinator "
        "classic-group-count and NumGroups<State>).", labels=["state", "protocol_type"])
    for (state, protocol_type), count in sorted(groups.by_state.items()):
        by_state.add_metric([state, protocol_type], count)
    yield by_state
    yield CounterMetricFamily("oncelog_group_rebalances", "Rebalances begun by the groups coordinated here "
                              "(Kafka's group-rebalance-count).", value=groups.rebalances)
    labels = ["consumergroup", "topic", "partition"]
    offsets = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                "The group's committed offset (kafka_exporter's name).", labels=labels)
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag", "High watermark minus the group's committed offset, where this broker has the "
        "partition's log (kafka_exporter's name).", labels=labels)
    stable_lag = GaugeMetricFamily(
        "oncelog_consumergroup_lag_stable",
        "Last stable offset minus the group's committed offset: what a read_committed consumer of the group has "
        "left to read; the rest of the lag waits for open transactions.", labels=labels)
    logs = {(p.topic, p.partition): p for p in partitions}
    committed_partitions: dict[str, set[tuple[str, int]]] = {}
    for group, topic, partition in groups.committed:
        committed_partitions.setdefault(group, set()).add((topic, partition))
    for (group, topic, partition), committed in sorted(groups.committed.items()):
        # The Spark sink's marker groups count micro-batches, not records read: a lag of
        # theirs means nothing, and no rule on these families should have to know them.
        if sink_marker_query(group, groups.protocol_types.get(group, ""), committed_partitions[group]) is not None:
            continue
        key = [group, topic, str(partition)]
        offsets.add_metric(key, committed)
        local = logs.get((topic, partition))
        if local is not None:
            lag.add_metric(key, max(local.high_watermark - committed, 0))
            stable_lag.add_metric(key, max(local.last_stable_offset - committed, 0))
    yield offsets
    yield lag
    yield stable_lag


def _cleaner_families(cleaner: CleanerSnapshot) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    totals = cleaner.totals
    yield GaugeMetricFamily(
        "kafka_log_logcleanermanager_max_dirty_percent",
        "The highest share of uncleaned bytes over the compacted partitions, in percent (Kafka's "
        "LogCleanerManager max-dirty-percent).", value=round(cleaner.max_dirty_ratio * 100, 2))
    yield GaugeMetricFamily(
        "kafka_log_logcleanermanager_uncleanable_partitions_count",
        "Partitions the cleaner gave up on after a failed round, until restart (Kafka's "
        "uncleanable-partitions-count).", value=cleaner.uncleanable)
    rounds = CounterMetricFamily("oncelog_log_cleaner_rounds", "Cleaning rounds, by result (an aborted round's "
                                 "output is discarded: the log changed under it).", labels=["result"])
    rounds.add_metric(["completed"], totals.rounds)
    rounds.add_metric(["aborted"], cleaner.rounds_aborted)
    yield rounds
    yield CounterMetricFamily("oncelog_log_cleaner_read_bytes", "Bytes the completed rounds read.",
                              value=totals.bytes_read)
    yield CounterMetricFamily("oncelog_log_cleaner_written_bytes", "Bytes the completed rounds kept.",
                              value=totals.bytes_written)
    yield CounterMetricFamily("oncelog_log_cleaner_records_removed", "Records compaction removed.",
                              value=totals.records_removed)
    yield GaugeMetricFamily("oncelog_log_cleaner_last_round_seconds",
                            "How long the last completed round took (Kafka's max-clean-time-secs is the "
                            "longest of its last run).", value=totals.last_round_seconds)


def metrics_registry(loop: asyncio.AbstractEventLoop, source: MetricsSource, *,
                     resource_names: bool = True) -> CollectorRegistry:
    """The registry `/metrics` serves (oncelog.web.http): the broker's families, read on
    `loop` (without those labelled by topic or group names unless `resource_names`), and
    the process itself: CPU seconds, resident memory, open files (process_*) and the
    Python version (python_info), as every prometheus_client program has them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_BrokerCollector(loop, source, resource_names))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
