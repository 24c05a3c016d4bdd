"""What the web console shows, as plain values: one `ConsoleView` per request, built on
the broker's event loop (oncelog.broker.console_source) and turned into the JSON the
page reads (`as_json`). Nothing here touches broker state or bytes.

The partitions table is the one list that grows with the broker (10,000 partitions and
more), so it is paged here, not in the page: `PartitionsQuery` (from /api/console's query
string) picks the partitions shown, sorted and filtered over all of them, and the JSON
carries that page, the count of the rest and the LSO-lag series of only the partitions
drawn (the page's and the chart's). Every other list is as long as the groups,
transactions or topics are and pages in the browser.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qs


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


CHARTED_PARTITIONS = 8  # the chart draws the partitions with the largest LSO lag in its window
MAX_PAGE_ROWS = 500
DEFAULT_PAGE_ROWS = 100
MAX_FILTER_CHARS = 256
MAX_FILTER_WORDS = 16
QUERY_FIELDS = ("partitions_page", "partitions_limit", "partitions_sort", "partitions_order", "partitions_filter",
                "internal")
_DECIMAL = re.compile(r"[0-9]{1,10}")  # ASCII digits only: str.isdigit() takes "²", which int() refuses
# The partitions table's sortable columns, as `sort` names them: each partition's value
# (a partition without an open transaction has no age: it sorts as -1).
PARTITION_SORTS = {
    "partition": lambda p: (p.topic, p.partition),
    "leader": lambda p: -1 if p.leader is None else p.leader,
    "log_start_offset": lambda p: p.log_start_offset,
    "high_watermark": lambda p: p.high_watermark,
    "last_stable_offset": lambda p: p.last_stable_offset,
    "lso_lag": lambda p: p.lso_lag,
    "producers": lambda p: p.producers,
    "open_transactions": lambda p: p.open_transactions,
    "oldest_transaction_age_ms": lambda p: -1 if p.oldest_transaction_age_ms is None else p.oldest_transaction_age_ms,
    "size_bytes": lambda p: p.size_bytes,
}


class QueryError(ValueError):
    """A query string the console does not take (answered 400 with this message)."""


@dataclass(frozen=True, slots=True)
class PartitionsQuery:
    """Which page of the partitions table /api/console answers: `limit` rows from row
    `page * limit` of the partitions whose row holds every word of `words`, in `sort`
    order (ties by topic and partition); internal topics (named from "_") only with
    `internal`."""

    page: int = 0
    limit: int = DEFAULT_PAGE_ROWS
    sort: str = "partition"
    descending: bool = False
    words: tuple[str, ...] = ()
    internal: bool = False

    @classmethod
    def parse(cls, query: str) -> PartitionsQuery:
        """From `partitions_page`, `partitions_limit`, `partitions_sort`, `partitions_order`
        (asc, desc), `partitions_filter` and `internal` (0, 1); each at most once."""
        try:
            fields = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=8)
        except ValueError as error:
            raise QueryError("too many query parameters") from error
        for name, values in fields.items():
            if name not in QUERY_FIELDS:
                raise QueryError(f"unknown query parameter {name[:40]!r}; expected {', '.join(QUERY_FIELDS)}")
            if len(values) > 1:
                raise QueryError(f"{name} is given more than once")
        one = {name: values[0] for name, values in fields.items()}
        sort = one.get("partitions_sort", "partition")
        if sort not in PARTITION_SORTS:
            raise QueryError(f"partitions_sort must be one of {', '.join(PARTITION_SORTS)}")
        order = one.get("partitions_order", "asc")
        if order not in ("asc", "desc"):
            raise QueryError("partitions_order must be asc or desc")
        text = one.get("partitions_filter", "")
        if len(text) > MAX_FILTER_CHARS:
            raise QueryError(f"partitions_filter is longer than {MAX_FILTER_CHARS} characters")
        words = tuple(dict.fromkeys(text.lower().split()))
        if len(words) > MAX_FILTER_WORDS:
            raise QueryError(f"partitions_filter has more than {MAX_FILTER_WORDS} words")
        internal = one.get("internal", "0")
        if internal not in ("0", "1"):
            raise QueryError("internal must be 0 or 1")
        return cls(_bounded(one, "partitions_page", 0, 10**9, 0),
                   _bounded(one, "partitions_limit", 1, MAX_PAGE_ROWS, DEFAULT_PAGE_ROWS), sort, order == "desc",
                   words, internal == "1")

    def shown(self, topic: str) -> bool:
        return self.internal or not topic.startswith("_")

    def matches(self, partition: PartitionView) -> bool:
        """Every word is in the row's partition name ("topic-partition") or its placement."""
        if not self.words:
            return True
        text = f"{partition.topic}-{partition.partition} {_placement(partition)}".lower()
        return all(word in text for word in self.words)

    def select(self, partitions: tuple[PartitionView, ...]) -> tuple[list[PartitionView], int, int]:
        """(the page's rows, how many rows match, the page shown: the last one when
        `page` is past it). `partitions` come in topic and partition order."""
        rows = [each for each in partitions if self.shown(each.topic) and self.matches(each)]
        if self.sort != "partition" or self.descending:
            rows.sort(key=PARTITION_SORTS[self.sort], reverse=self.descending)  # stable: ties stay in order
        page = min(self.page, max(len(rows) - 1, 0) // self.limit)
        return rows[page * self.limit:(page + 1) * self.limit], len(rows), page


def _bounded(fields: dict[str, str], name: str, low: int, high: int, default: int) -> int:
    text = fields.get(name)
    if text is None:
        return default
    if not _DECIMAL.fullmatch(text) or not low <= int(text) <= high:
        raise QueryError(f"{name} must be an integer from {low} to {high}")
    return int(text)


def _placement(partition: PartitionView) -> str:
    """Its leader and ISR as the table shows them (standalone: "this broker")."""
    if partition.leader is None:
        return "this broker"
    return f"{partition.leader} / [{','.join(map(str, partition.isr))}]"


def charted(series: dict[str, list[int | None]], shown, count: int = CHARTED_PARTITIONS) -> list[str]:
    """The keys of the `count` series with the largest peak above zero, of the topics
    `shown` lets through, largest first (ties by name)."""
    peaks = []
    for key, values in series.items():
        peak = max((value for value in values if value is not None), default=0)
        if peak > 0 and shown(key.rpartition("-")[0]):
            peaks.append((-peak, key))
    return [key for _peak, key in heapq.nsmallest(count, peaks)]


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
                pipelines_error: str | None, query: PartitionsQuery | None = None) -> dict[str, Any]:
        """The JSON of /api/console, with the page of partitions `query` asks for."""
        query = query or PartitionsQuery()
        rows, matching, page = query.select(self.partitions)
        partitions = []
        for each in rows:
            entry = asdict(each)
            entry["lso_lag"] = each.lso_lag
            partitions.append(entry)
        series = lso_history.get("series", {})
        chart = charted(series, query.shown)
        drawn = {*chart, *(f"{each.topic}-{each.partition}" for each in rows)}
        return {
            "node_id": self.node_id, "cluster_id": self.cluster_id, "mode": self.mode, "now_ms": self.now_ms,
            "transactions": [asdict(each) for each in self.transactions],
            "partitions": partitions,
            "partitions_page": {"page": page, "limit": query.limit, "matching": matching,
                                "sort": query.sort, "order": "desc" if query.descending else "asc"},
            "max_lso_lag": max((each.lso_lag for each in self.partitions), default=0),
            "late_partitions": sum(each.late for each in self.partitions),
            "groups": [asdict(each) for each in self.groups],
            "topics": [asdict(each) for each in self.topics],
            "brokers": [asdict(each) for each in self.brokers],
            "under_min_isr": self.under_min_isr, "under_replicated": self.under_replicated,
            "late_transaction_ms": self.late_transaction_ms, "completed": self.completed,
            "lso_history": {"times_ms": lso_history.get("times_ms", []), "charted": chart,
                            "series": {key: values for key, values in series.items() if key in drawn}},
            "pipelines": pipelines, "pipelines_error": pipelines_error,
        }
