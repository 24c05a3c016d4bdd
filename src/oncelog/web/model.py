"""What the web console shows, as plain values: one `ConsoleView` per request, built on
the broker's event loop (oncelog.broker.console_source) and turned into the JSON the
page reads (`as_json`). Nothing here touches broker state or bytes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TransactionView:
    """A transactional id this broker coordinates whose transaction is not finished."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # Kafka's name: Ongoing, PrepareCommit, PrepareAbort, ...
    started_ms: int  # -1: unknown
    timeout_ms: int
    partitions: tuple[str, ...]  # "topic-partition"
    age_ms: int
    # Open longer than its timeout: the coordinator should have aborted it (a stuck
    # coordinator, or a KIP-939 prepared transaction waiting for its external decision).
    hanging: bool
    prepared: bool = False  # KIP-939: kept prepared for an external decision, never times out


@dataclass(frozen=True, slots=True)
class TopicView:
    topic: str
    partitions: int  # here (cluster mode: the topic's, from the image)
    replication_factor: int
    size_bytes: int  # of the partitions this broker holds
    messages_in_per_s: float  # over the last sample interval, as Kafka's MessagesInPerSec (leader appends)
    bytes_in_per_s: float
    bytes_out_per_s: float  # to consumers (BytesOutPerSec; replicas' fetches not counted)


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    size_bytes: int
    producers: int  # producer ids with state here
    open_transactions: int
    oldest_transaction_age_ms: int | None  # None: no transaction open here
    late: bool  # the oldest open transaction is past transaction.max.timeout.ms plus 5 minutes
    leader: int | None = None  # cluster mode, from the metadata image
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()

    @property
    def lso_lag(self) -> int:
        return self.high_watermark - self.last_stable_offset


@dataclass(frozen=True, slots=True)
class GroupOffsetView:
    topic: str
    partition: int
    committed: int
    lag: int | None  # to the high watermark; None where this broker has no copy of the log
    lag_stable: int | None  # to the last stable offset: what read_committed members still read


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partitions) it holds now


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    members: int
    offsets: tuple[GroupOffsetView, ...]
    pending_transactional_offsets: int  # offsets of open transactions (KIP-447), not yet visible
    # A marker group of the Spark sink (oncelog.names): the id of the query whose pipeline
    # it belongs to. None: a consumer group.
    pipeline_query: str | None = None
    member_list: tuple[MemberView, ...] = ()  # classic and KIP-848 members alike


@dataclass(frozen=True, slots=True)
class BrokerView:
    node_id: int
    host: str
    port: int
    controller: bool
    leaders: int  # partitions it leads
    replicas: int  # partitions it holds a replica of
    in_isr: int  # of those, in the ISR


@dataclass(frozen=True, slots=True)
class ConsoleView:
    node_id: int
    cluster_id: str
    mode: str  # standalone | cluster
    now_ms: int
    transactions: tuple[TransactionView, ...]
    partitions: tuple[PartitionView, ...]
    groups: tuple[GroupView, ...]
    brokers: tuple[BrokerView, ...] = ()  # cluster mode
    topics: tuple[TopicView, ...] = ()
    under_min_isr: int | None = 0  # None: not the signed-in principal's to see (no Cluster DESCRIBE)
    under_replicated: int | None = 0
    late_transaction_ms: int = 0
    # commit / abort / timed_out / fenced, since start (empty: not the principal's to see)
    completed: dict[str, int] = field(default_factory=dict)

    def as_json(self, *, lso_history: dict[str, Any], pipelines: list[dict[str, Any]],
                pipelines_error: str | None) -> dict[str, Any]:
        partitions = []
        for each in self.partitions:
            entry = asdict(each)
            entry["lso_lag"] = each.lso_lag
            partitions.append(entry)
        return {
            "node_id": self.node_id, "cluster_id": self.cluster_id, "mode": self.mode, "now_ms": self.now_ms,
            "transactions": [asdict(each) for each in self.transactions],
            "partitions": partitions,
            "groups": [asdict(each) for each in self.groups],
            "topics": [asdict(each) for each in self.topics],
            "brokers": [asdict(each) for each in self.brokers],
            "under_min_isr": self.under_min_isr, "under_replicated": self.under_replicated,
            "late_transaction_ms": self.late_transaction_ms, "completed": self.completed,
            "lso_history": lso_history,
            "pipelines": pipelines, "pipelines_error": pipelines_error,
        }
