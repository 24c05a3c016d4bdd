"""What the web console (oncelog.web) shows of this broker, read on the event loop.

`console_view` copies the state it describes into plain values (oncelog.web.model): the
transactions this broker coordinates that are not finished, every local partition's
offsets and producers, the groups it coordinates with their lag (the Spark sink's marker
groups named by the query they belong to), and in cluster mode the brokers and ISR of the
metadata image. `ConsoleSource` is what the HTTP threads call: it
asks the loop for that view and the LSO-lag history, and reads the pipelines' reports
(on the calling thread; they come from a topic, not from broker state).

With an authorizer the view is cut, on the loop, to what the signed-in principal may
DESCRIBE (`visible_to`), as Kafka's own APIs filter: partitions and LSO-lag series by
Topic DESCRIBE (Metadata); groups by Group DESCRIBE and their offsets by Topic DESCRIBE
(DescribeGroups, OffsetFetch); open transactions by TransactionalId DESCRIBE and their
partitions by Topic DESCRIBE (ListTransactions, DescribeTransactions); brokers, ISR
counts and the coordinator's totals by Cluster DESCRIBE; the pipelines' reports by Topic
READ on their topic (what reading them through Kafka needs). It also checks a SASL
user's password (SCRAM or PLAIN) for the HTTP sign-in and aborts an open transaction for
one who holds Cluster ALTER, as the coordinator aborts a timed-out one. The message
browser's records (oncelog.broker.console_records) are read on the loop too, for a
principal with Topic READ.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs

from oncelog.broker.config_sources import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    Entry,
)
from oncelog.broker.console_groups import ResetError, ResetRequest, reset_offsets
from oncelog.broker.console_peers import PeerConfigError
from oncelog.broker.console_records import QueryError, RecordsQuery, records_json
from oncelog.clock import now_ms
from oncelog.config.broker import is_sensitive
from oncelog.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    parse_assignment,
)
from oncelog.coordinator.txn.state import COMPLETED, TransactionState
from oncelog.kernel.quotas import QuotaConfigs, QuotaEntity, entity_text
from oncelog.kernel.topics import TopicRequestError
from oncelog.names import sink_marker_query
from oncelog.pacing import Steps, run_paced, run_steps, time_sliced
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import CLUSTER_NAME, AclBinding, AclBindingFilter, AclOperation, ResourceType
from oncelog.security.passwords import password_matches
from oncelog.security.sasl.scram import SCRAM_MECHANISMS, ScramCredential
from oncelog.web.history import LagHistory
from oncelog.web.model import (
    BrokerView,
    ConsoleView,
    GroupOffsetView,
    GroupView,
    MemberView,
    PartitionsQuery,
    PartitionView,
    TopicView,
    TransactionView,
)
from oncelog.web.pipelines import REPORT_TOPIC, PipelineReports

if TYPE_CHECKING:
    from oncelog.cluster.image import MetadataImage
    from oncelog.coordinator.group.coordinator import GroupCoordinator
    from oncelog.coordinator.txn.coordinator import TransactionCoordinator
    from oncelog.kernel.authorization import Acls
    from oncelog.kernel.node import Leadership, OverridesChange
    from oncelog.storage.log import PartitionLog

_T = TypeVar("_T")
VIEW_TIMEOUT_S = 5.0  # a request gives up when the loop does not answer in this time
ACTION_TIMEOUT_S = 30.0  # a browse of records, a reset waiting for its replicas
PEER_DESCRIBE_TIMEOUT_S = 10.0  # another broker's configs, the wait for its connection included
ANONYMOUS = "User:ANONYMOUS"  # whom a view asked for without a principal is cut for, with an authorizer
_PREPARED_TIMEOUT_MS = 2**31 - 1  # KIP-939: a transaction kept prepared for its external decision
MAX_SECURITY_ROWS = 10_000  # ACLs and quota entities per answer (`acls_total` counts them all)
MAX_CONFIG_NAME_CHARS = 255
SOURCE_NAMES = {  # Kafka's ConfigSource names
    DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG", DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG", STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG",
    DEFAULT_CONFIG: "DEFAULT_CONFIG",
}
log = logging.getLogger("oncelog.console")


@dataclass(frozen=True)
class ConsoleParts:
    """What the view reads, all owned by the loop."""

    node_id: int
    cluster_id: Callable[[], str]
    logs: Callable[[], Iterable[PartitionLog]]
    txn_coordinator: TransactionCoordinator
    group_coordinator: GroupCoordinator
    image: Callable[[], MetadataImage | None]  # cluster mode: the metadata image this broker acts on
    default_min_insync_replicas: int
    late_transaction_ms: int  # an open transaction older than this is late (Kafka's definition)
    # Signing in (only with an authorizer): the ACLs, SCRAM credentials and the listeners' PLAIN users.
    acls: Callable[[], Acls | None] = lambda: None
    scram_lookup: Callable[[str, str], ScramCredential | None] = lambda _user, _mechanism: None
    plain_users: tuple[Mapping[str, str], ...] = ()
    # The message browser: a partition's log here, None when this broker has no replica of it;
    # and, without an authorizer, whether a Kafka listener lets anyone read (then so may the console).
    log_of: Callable[[str, int], PartitionLog | None] = lambda _topic, _partition: None
    records_open: bool = False
    # The offset reset: who leads each partition (it plans from the leaders' logs).
    leadership: Leadership | None = None
    # The security views: the stored client quotas.
    client_quotas: Callable[[], QuotaConfigs] = dict
    # The topics' traffic counters (TopicStats): (topic, messages in, bytes in, bytes out).
    topic_traffic: Callable[[], Iterable[tuple[str, int, int, int]]] = tuple
    # A topic's configs as DescribeConfigs gives them (None: no such topic here), and
    # changing one (TopicAdmin.alter_configs: its override set, from the current one).
    topic_configs: Callable[[str], list[Entry] | None] = lambda _topic: None
    broker_configs: Callable[[], list[Entry]] = list  # this broker's, as DescribeConfigs gives them
    # Another broker's (cluster mode: asked of it; PeerConfigError when it cannot answer).
    peer_broker_configs: Callable[[int], Awaitable[list[Entry]]] | None = None
    alter_topic_configs: Callable[[str, OverridesChange], Awaitable[None]] | None = None


def console_view(parts: ConsoleParts, rates: Mapping[str, tuple[float, float, float]] | None = None) -> ConsoleView:
    """The view; `rates`: per topic, (messages in, bytes in, bytes out) per second."""
    return run_steps(console_view_steps(parts, rates))


def console_view_steps(parts: ConsoleParts,
                       rates: Mapping[str, tuple[float, float, float]] | None = None) -> Steps[ConsoleView]:
    """`console_view`, yielding between partitions: a broker of 10,000 partitions takes
    about 60 ms to describe them, which the loop serves other clients between."""
    now = now_ms()
    image = parts.image()
    logs = {(log.topic, log.partition): log for log in parts.logs()}
    partitions = []
    for _key, log in sorted(logs.items()):
        if log.closed:
            continue  # deleted while this pass gave the loop away
        partitions.append(_partition(log, image, now, parts.late_transaction_ms))
        yield
    # The groups, topics, brokers and ISR counts of one moment: read after the last yield.
    logs = {(log.topic, log.partition): log for log in parts.logs()}
    image = parts.image()
    stats = parts.txn_coordinator.stats
    completed = {"commit": stats.commits, "abort": stats.aborts, "timed_out": stats.timed_out,
                 "fenced": stats.fenced}
    return ConsoleView(
        node_id=parts.node_id, cluster_id=parts.cluster_id(), mode="standalone" if image is None else "cluster",
        now_ms=now, transactions=_transactions(parts.txn_coordinator, now),
        partitions=tuple(partitions),
        groups=_groups(parts.group_coordinator, logs),
        brokers=_brokers(image) if image is not None else (),
        topics=_topics(logs, image, rates or {}),
        under_min_isr=_under_min_isr(image, parts.default_min_insync_replicas) if image is not None else 0,
        under_replicated=sum(len(p.isr) < len(p.replicas) for p in image.partitions.values()) if image else 0,
        late_transaction_ms=parts.late_transaction_ms, completed=completed,
    )


Permission = Callable[[AclOperation, ResourceType, str], bool]


def visible_to(view: ConsoleView, history: dict[str, Any], may: Permission) -> tuple[ConsoleView, dict[str, Any]]:
    """`view` and the LSO-lag `history` cut to what `may` allows (see the module's docstring)."""
    topics: dict[str, bool] = {}

    def topic(name: str) -> bool:
        allowed = topics.get(name)
        if allowed is None:
            allowed = topics[name] = may(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        return allowed

    def topic_of(partition: str) -> str:  # "topic-partition"
        return partition.rpartition("-")[0]

    cluster = may(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    transactions = tuple(
        replace(each, partitions=tuple(p for p in each.partitions if topic(topic_of(p))))
        for each in view.transactions
        if may(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, each.transactional_id))
    groups = tuple(replace(each, offsets=tuple(o for o in each.offsets if topic(o.topic)),
                           member_list=tuple(replace(m, assignment=tuple(a for a in m.assignment if topic(a[0])))
                                             for m in each.member_list))
                   for each in view.groups if may(AclOperation.DESCRIBE, ResourceType.GROUP, each.group_id))
    cut = replace(
        view, transactions=transactions, partitions=tuple(p for p in view.partitions if topic(p.topic)),
        topics=tuple(t for t in view.topics if topic(t.topic)),
        groups=groups, brokers=view.brokers if cluster else (),
        under_min_isr=view.under_min_isr if cluster else None,
        under_replicated=view.under_replicated if cluster else None,
        completed=view.completed if cluster else {})
    series = {key: values for key, values in history.get("series", {}).items() if topic(topic_of(key))}
    return cut, {**history, "series": series}


def _transactions(coordinator: TransactionCoordinator, now: int) -> tuple[TransactionView, ...]:
    views = []
    for metadata in coordinator.txns.values():
        state: TransactionState = metadata.state
        if state in COMPLETED or state is TransactionState.DEAD:
            continue
        started = metadata.txn_start_timestamp
        age = max(now - started, 0) if started > 0 else 0
        prepared = state is TransactionState.ONGOING and metadata.txn_timeout_ms == _PREPARED_TIMEOUT_MS
        views.append(TransactionView(
            metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, state.display_name, started,
            metadata.txn_timeout_ms, tuple(sorted(f"{topic}-{partition}" for topic, partition in metadata.partitions)),
            age, hanging=not prepared and age > metadata.txn_timeout_ms, prepared=prepared,
        ))
    return tuple(sorted(views, key=lambda view: -view.age_ms))


def _partition(log: PartitionLog, image: MetadataImage | None, now: int, late_ms: int) -> PartitionView:
    state = log.producer_state
    started = state.oldest_open_transaction_started_ms()
    age = None if started is None else max(now - started, 0)
    record = image.partitions.get((log.topic, log.partition)) if image is not None else None
    return PartitionView(
        log.topic, log.partition, log.log_start_offset, log.log_end_offset, log.high_watermark,
        log.last_stable_offset, log.size_in_bytes, len(state.producers), state.open_transaction_count(), age,
        late=age is not None and age > late_ms,
        leader=record.leader if record is not None else None,
        replicas=record.replicas if record is not None else (),
        isr=record.isr if record is not None else (),
    )


def _groups(coordinator: GroupCoordinator, logs: dict[tuple[str, int], PartitionLog]) -> tuple[GroupView, ...]:
    views = []
    for listed in coordinator.list_groups():
        group = coordinator.group(listed.group_id)
        if group is None:
            continue
        offsets = []
        for (topic, partition), committed in sorted(group.offsets.items()):
            offset = committed.value.offset
            log = logs.get((topic, partition))
            offsets.append(GroupOffsetView(
                topic, partition, offset,
                None if log is None else max(log.high_watermark - offset, 0),
                None if log is None else max(log.last_stable_offset - offset, 0),
            ))
        views.append(GroupView(
            group.group_id, group.state.value, group.protocol_type or "", group.protocol_name or "",
            group.generation_id, len(group.members), tuple(offsets),
            sum(len(pending) for pending in group.pending_txn_offsets.values()),
            pipeline_query=sink_marker_query(group.group_id, listed.protocol_type, group.offsets.keys()),
            member_list=_members(coordinator, group.group_id),
        ))
    return tuple(sorted(views, key=lambda view: view.group_id))


def _topics(logs: Mapping[tuple[str, int], PartitionLog], image: MetadataImage | None,
            rates: Mapping[str, tuple[float, float, float]]) -> tuple[TopicView, ...]:
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    for (topic, _partition), log in logs.items():
        sizes[topic] = sizes.get(topic, 0) + log.size_in_bytes
        counts[topic] = counts.get(topic, 0) + 1
    views = []
    for topic in sorted(sizes):
        partitions, factor = counts[topic], 1
        if image is not None and (record := image.topics.get(topic)) is not None:
            partitions = record.partitions
            first = image.partitions.get((topic, 0))
            factor = len(first.replicas) if first is not None else 0
        messages_in, bytes_in, bytes_out = rates.get(topic, (0.0, 0.0, 0.0))
        views.append(TopicView(topic, partitions, factor, sizes[topic], messages_in, bytes_in, bytes_out))
    return tuple(views)


def _members(coordinator: GroupCoordinator, group_id: str) -> tuple[MemberView, ...]:
    """A group's members with what each holds now, as DescribeGroups (classic: the
    consumer protocol's assignment) or ConsumerGroupDescribe (KIP-848) gives them."""
    if coordinator.is_consumer_group(group_id):
        _error, _message, summary = coordinator.consumer_group_describe(group_id)
        return () if summary is None else tuple(
            MemberView(m.member_id, m.instance_id, m.client_id, m.client_host,
                       tuple((topic.topic_name, tuple(sorted(topic.partitions))) for topic in m.assignment))
            for m in summary.members)
    _error, classic = coordinator.describe_group(group_id)
    if classic is None:
        return ()
    return tuple(MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            _assignment(classic.protocol_type, m.assignment)) for m in classic.members)


def _assignment(protocol_type: str, data: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A classic member's partitions, when its group speaks the consumer protocol."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not data:
        return ()
    try:
        return parse_assignment(data)
    except ConsumerProtocolError:
        return ()


def _brokers(image: MetadataImage) -> tuple[BrokerView, ...]:
    views = []
    for node_id, registration in sorted(image.brokers.items()):
        leaders = replicas = in_isr = 0
        for record in image.partitions.values():
            leaders += record.leader == node_id
            if node_id in record.replicas:
                replicas += 1
                in_isr += node_id in record.isr
        views.append(BrokerView(node_id, registration.host, registration.port, image.controller_id == node_id,
                                leaders, replicas, in_isr))
    return tuple(views)


def _under_min_isr(image: MetadataImage, default_min_isr: int) -> int:
    count = 0
    for (topic, _partition), record in image.partitions.items():
        configs = image.topics[topic].configs if topic in image.topics else {}
        count += len(record.isr) < int(configs.get("min.insync.replicas", default_min_isr))
    return count


class ConsoleSource:
    """Called on the HTTP threads: the console's JSON."""

    def __init__(self, loop: asyncio.AbstractEventLoop, parts: ConsoleParts, history: LagHistory,
                 pipelines: PipelineReports) -> None:
        self._loop = loop
        self._parts = parts
        self._history = history
        self._pipelines = pipelines
        self._rates = _Rates()
        self._browsing = False  # a records call is running (on the loop)
        self._describing = False  # another broker is being asked for its configs (on the loop)

    def view(self, principal: str | None, host: str, query: PartitionsQuery) -> dict[str, Any]:
        """The console's JSON, as much of it as `principal` (connected from `host`) may
        see (everything without an authorizer), with the page of partitions `query` asks for."""
        view, history, reports_visible = self._call_async(lambda: self._view_on_loop(principal, host))
        pipelines, error = self._pipelines.read() if reports_visible else ([], None)
        return view.as_json(lso_history=history, pipelines=pipelines, pipelines_error=error, query=query)

    async def _view_on_loop(self, principal: str | None, host: str) -> tuple[ConsoleView, dict[str, Any], bool]:
        view = await run_paced(console_view_steps(self._parts, self._rates.per_second), time_sliced())
        history = self._history.as_json()
        acls = self._parts.acls()
        if acls is None:
            return view, history, True
        authorizer, who = acls.authorizer, principal or ANONYMOUS

        def may(operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
            return authorizer.authorize(who, host, operation, resource_type, name)

        view, history = visible_to(view, history, may)
        return view, history, may(AclOperation.READ, ResourceType.TOPIC, REPORT_TOPIC)

    def sample(self) -> None:
        """One LSO-lag sample of every local partition, and the topics' rates since the last
        sample (on the loop, by the broker's timer)."""
        now = now_ms()
        self._history.record(now, {f"{log.topic}-{log.partition}": log.high_watermark - log.last_stable_offset
                                   for log in self._parts.logs()})
        self._rates.record(now, self._parts.topic_traffic())

    def close(self) -> None:
        self._pipelines.close()

    # -- signing in and aborting (only with an authorizer) ---------------------------------------

    @property
    def sign_in_enabled(self) -> bool:
        """The console offers actions only where the broker can tell who may take them."""
        return self._parts.acls() is not None

    def authenticate(self, user: str, password: str) -> str | None:
        """The principal of `user` if `password` is theirs (SCRAM credentials or a
        listener's PLAIN users), else None. The key derivation runs on this (HTTP) thread."""
        parts = self._parts
        credentials = self._call(lambda: {mechanism: parts.scram_lookup(user, mechanism)
                                          for mechanism in SCRAM_MECHANISMS})
        if password_matches(user, password, scram_lookup=lambda _u, mechanism: credentials.get(mechanism),
                            plain_users=parts.plain_users):
            return f"User:{user}"
        return None

    def may_abort(self, principal: str, host: str) -> bool:
        """Aborting another producer's transaction is an operator's act: Cluster ALTER, as
        kafka-transactions.sh abort needs (its WriteTxnMarkers)."""
        return self._call(lambda: self._may_abort(principal, host))

    def abort(self, principal: str, host: str, transactional_id: str) -> tuple[int, str]:
        """(HTTP status, message) of aborting `transactional_id`'s open transaction."""
        return self._call(lambda: self._abort(principal, host, transactional_id))

    def records(self, principal: str | None, host: str, topic: str, query: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) of the message browser: the records the query string asks
        of `topic`, with their fate, for a principal with Topic READ (what a Fetch of them
        needs). The query is checked here, on the HTTP thread."""
        try:
            asked = RecordsQuery.parse(topic, query)
        except QueryError as error:
            return 400, {"error": str(error)}
        return self._call_async(lambda: self._records(principal or ANONYMOUS, host, asked), ACTION_TIMEOUT_S)

    async def _records(self, principal: str, host: str, query: RecordsQuery) -> tuple[int, dict[str, Any]]:
        acls = self._parts.acls()
        if acls is None and not self._parts.records_open:
            return 403, {"error": "without an authorizer the console shows records only where a Kafka listener lets "
                                  "anyone read them (PLAINTEXT, or SSL without ssl.client.auth=required); set "
                                  "authorizer.class.name to sign in"}
        if acls is not None and not acls.authorizer.authorize(principal, host, AclOperation.READ,
                                                              ResourceType.TOPIC, query.topic):
            return 403, {"error": f"{principal} may not read topic {query.topic!r} (needs Topic READ)"}
        log = self._parts.log_of(query.topic, query.partition)
        if log is None:
            return 404, {"error": f"this broker has no replica of {query.topic}-{query.partition}"}
        if self._browsing:  # one at a time: each may read tens of megabytes, paced on the loop
            return 429, {"error": "another browse of this broker's records is running; try again"}
        self._browsing = True
        try:
            return 200, await records_json(log, query)
        finally:
            self._browsing = False

    def reset_offsets(self, principal: str, host: str, body: object) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) of planning or executing a group's offset reset
        (oncelog.broker.console_groups), for a principal with Group READ and Topic READ."""
        try:
            request = ResetRequest.parse(body)
        except ResetError as error:
            return error.status, {"error": str(error)}
        return self._call_async(lambda: self._reset_offsets(principal, host, request), ACTION_TIMEOUT_S)

    async def _reset_offsets(self, principal: str, host: str, request: ResetRequest) -> tuple[int, dict[str, Any]]:
        acls = self._parts.acls()
        if acls is None:
            return 403, {"error": "this broker has no authorizer: the console changes nothing"}
        for resource_type, name in ((ResourceType.GROUP, request.group), (ResourceType.TOPIC, request.topic)):
            if not acls.authorizer.authorize(principal, host, AclOperation.READ, resource_type, name):
                return 403, {"error": f"{principal} may not reset the offsets of group {request.group!r} on "
                                      f"topic {request.topic!r} (needs Group READ and Topic READ)"}
        leadership = self._parts.leadership
        if leadership is None:
            return 403, {"error": "this console cannot reset offsets"}
        try:
            return 200, await reset_offsets(self._parts.group_coordinator, leadership, self._parts.node_id,
                                            self._parts.log_of, request, f"{principal} (console, {host})")
        except ResetError as error:
            return error.status, {"error": str(error)}

    def topic_configs(self, principal: str | None, host: str, topic: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) of a topic's configs with their sources, for a principal with
        Topic DESCRIBE_CONFIGS, as DescribeConfigs answers (a password's value never shown)."""
        return self._call(lambda: self._topic_configs(principal or ANONYMOUS, host, topic))

    def _topic_configs(self, principal: str, host: str, topic: str) -> tuple[int, dict[str, Any]]:
        acls = self._parts.acls()
        if acls is not None and not acls.authorizer.authorize(principal, host, AclOperation.DESCRIBE_CONFIGS,
                                                              ResourceType.TOPIC, topic):
            return 403, {"error": f"{principal} may not describe the configs of topic {topic!r} "
                                  "(needs Topic DESCRIBE_CONFIGS)"}
        entries = self._parts.topic_configs(topic)
        if entries is None:
            return 404, {"error": f"this broker has no replica of topic {topic!r}"}
        return 200, {"topic": topic, "configs": _configs_json(entries)}

    def broker_configs(self, principal: str | None, host: str, query: str = "") -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) of a broker's configs with their sources (this one's, or with
        `broker=N` in `query` another's of its cluster), for a principal with Cluster
        DESCRIBE_CONFIGS, as DescribeConfigs answers for the broker resource."""
        try:
            node_id = _broker_id(query, self._parts.node_id)
        except ValueError as error:
            return 400, {"error": str(error)}
        return self._call_async(lambda: self._broker_configs(principal or ANONYMOUS, host, node_id),
                                PEER_DESCRIBE_TIMEOUT_S + 1)

    async def _broker_configs(self, principal: str, host: str, node_id: int) -> tuple[int, dict[str, Any]]:
        if not self._may(principal, host, AclOperation.DESCRIBE_CONFIGS):
            return 403, {"error": f"{principal} may not describe the broker's configs (needs Cluster DESCRIBE_CONFIGS)"}
        if node_id == self._parts.node_id:
            return 200, {"node_id": node_id, "configs": _configs_json(self._parts.broker_configs())}
        if self._parts.peer_broker_configs is None or self._parts.image() is None:
            return 404, {"error": f"broker {node_id} is not this one, and a standalone broker has no other"}
        if self._describing:  # one at a time: a broker that does not answer holds one HTTP worker, not all
            return 429, {"error": "another broker's configs are being asked for; try again"}
        self._describing = True
        try:
            async with asyncio.timeout(PEER_DESCRIBE_TIMEOUT_S):
                entries = await self._parts.peer_broker_configs(node_id)
        except PeerConfigError as error:
            return error.status, {"error": str(error)}
        except TimeoutError:
            return 502, {"error": f"broker {node_id} did not answer in {PEER_DESCRIBE_TIMEOUT_S:.0f} s"}
        finally:
            self._describing = False
        return 200, {"node_id": node_id, "configs": _configs_json(entries)}

    def alter_topic_config(self, principal: str, host: str, topic: str, body: object) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) of setting (`{"name": ..., "value": ...}`) or removing
        (`"value": null`) one of a topic's configs, as IncrementalAlterConfigs SET and
        DELETE do, for a principal with Topic ALTER_CONFIGS."""
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or "value" not in body \
                or not (body["value"] is None or isinstance(body["value"], str)) \
                or not 0 < len(body["name"]) <= MAX_CONFIG_NAME_CHARS:
            return 400, {"error": 'expected {"name": "...", "value": "..." or null}'}
        name, value = body["name"], body["value"]
        return self._call_async(lambda: self._alter_topic_config(principal, host, topic, name, value),
                                ACTION_TIMEOUT_S)

    async def _alter_topic_config(self, principal: str, host: str, topic: str, name: str,
                                  value: str | None) -> tuple[int, dict[str, Any]]:
        acls, alter = self._parts.acls(), self._parts.alter_topic_configs
        if acls is None or alter is None:
            return 403, {"error": "this broker has no authorizer: the console changes nothing"}
        if not acls.authorizer.authorize(principal, host, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, topic):
            return 403, {"error": f"{principal} may not alter the configs of topic {topic!r} "
                                  "(needs Topic ALTER_CONFIGS)"}

        def change(current: Mapping[str, str]) -> dict[str, str]:
            changed = dict(current)
            if value is None:
                changed.pop(name, None)
            else:
                changed[name] = value
            return changed

        try:
            await alter(topic, change)
        except TopicRequestError as error:
            return 400, {"error": f"{error.code.name}: {error}"}
        log.info("config %s of topic %r %s by %s (console, %s)", name, topic,
                 "removed" if value is None else "set", principal, host)
        return 200, {"message": f"{name} of {topic} {'removed' if value is None else 'set'}"}

    def security(self, principal: str | None, host: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) of the security views: the ACLs (as DescribeAcls gives them, to
        a principal with Cluster DESCRIBE) and the client quotas (as DescribeClientQuotas, to
        one with Cluster DESCRIBE_CONFIGS); without an authorizer no ACLs, every quota."""
        return self._call(lambda: self._security(principal or ANONYMOUS, host))

    def _security(self, principal: str, host: str) -> tuple[int, dict[str, Any]]:
        acls = self._parts.acls()
        may_acls = acls is not None and self._may(principal, host, AclOperation.DESCRIBE)
        may_quotas = self._may(principal, host, AclOperation.DESCRIBE_CONFIGS)
        if acls is not None and not (may_acls or may_quotas):
            return 403, {"error": f"{principal} may not describe ACLs or quotas "
                                  "(needs Cluster DESCRIBE or DESCRIBE_CONFIGS)"}
        bindings = acls.describe(AclBindingFilter()) if acls is not None and may_acls else []
        shown = bindings[:MAX_SECURITY_ROWS]
        return 200, {
            "authorizer": acls is not None,
            "acls": [_acl_json(binding) for binding in shown] if may_acls else None,
            "acls_total": len(bindings),
            "quotas": [_quota_json(entity, values) for entity, values in
                       sorted(self._parts.client_quotas().items(), key=lambda item: entity_text(item[0]))
                       ][:MAX_SECURITY_ROWS] if may_quotas else None,
        }

    def may_describe_cluster(self, principal: str, host: str) -> bool:
        """What /metrics needs of a principal when it requires credentials (it names every
        topic and group): Cluster DESCRIBE."""
        return self._call(lambda: self._may(principal, host, AclOperation.DESCRIBE))

    def _may(self, principal: str, host: str, operation: AclOperation) -> bool:
        """Without an authorizer, everyone may."""
        acls = self._parts.acls()
        return acls is None or acls.authorizer.authorize(principal, host, operation, ResourceType.CLUSTER,
                                                         CLUSTER_NAME)

    def _may_abort(self, principal: str, host: str) -> bool:
        acls = self._parts.acls()
        return acls is not None and acls.authorizer.authorize(principal, host, AclOperation.ALTER,
                                                              ResourceType.CLUSTER, CLUSTER_NAME)

    def _abort(self, principal: str, host: str, transactional_id: str) -> tuple[int, str]:
        coordinator = self._parts.txn_coordinator
        if not self._may_abort(principal, host):
            return 403, f"{principal} may not abort transactions (needs Cluster ALTER)"
        code = coordinator.abort_ongoing(transactional_id, now_ms(), by=f"{principal} (console, {host})")
        if code == ErrorCode.transactional_id_not_found:
            return 404, f"this broker coordinates no transactional id {transactional_id!r}"
        if code != ErrorCode.none:
            return 409, f"the transaction of {transactional_id!r} is not open (or is already ending)"
        return 200, f"aborting the transaction of {transactional_id!r}; its producer is fenced"

    def _call(self, work: Callable[[], _T]) -> _T:
        async def on_loop() -> _T:
            return work()

        return self._call_async(on_loop)

    def _call_async(self, work: Callable[[], Awaitable[_T]], timeout_s: float = VIEW_TIMEOUT_S) -> _T:
        future = asyncio.run_coroutine_threadsafe(_awaited(work), self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise


def _acl_json(binding: AclBinding) -> dict[str, str]:
    pattern, entry = binding.pattern, binding.entry
    return {"resource_type": pattern.resource_type.name, "name": pattern.name,
            "pattern_type": pattern.pattern_type.name, "principal": entry.principal, "host": entry.host,
            "operation": entry.operation.name, "permission": entry.permission_type.name}


def _quota_json(entity: QuotaEntity, values: Mapping[str, float]) -> dict[str, Any]:
    return {"entity": [{"type": kind, "name": name} for kind, name in entity], "values": dict(sorted(values.items()))}


async def _awaited(work: Callable[[], Awaitable[_T]]) -> _T:
    return await work()


class _Rates:
    """Each topic's messages and bytes per second between the last two samples."""

    def __init__(self) -> None:
        self._last: tuple[int, dict[str, tuple[int, int, int]]] | None = None
        self.per_second: dict[str, tuple[float, float, float]] = {}

    def record(self, now: int, counters: Iterable[tuple[str, int, int, int]]) -> None:
        current = {topic: (messages_in, bytes_in, bytes_out) for topic, messages_in, bytes_in, bytes_out in counters}
        if self._last is not None and now > self._last[0]:
            then, before = self._last
            seconds = (now - then) / 1000
            self.per_second = {}
            for topic, (messages_in, bytes_in, bytes_out) in current.items():
                was = before.get(topic, (0, 0, 0))
                self.per_second[topic] = ((messages_in - was[0]) / seconds, (bytes_in - was[1]) / seconds,
                                          (bytes_out - was[2]) / seconds)
        self._last = (now, current)


def _configs_json(entries: list[Entry]) -> list[dict[str, Any]]:
    """DescribeConfigs' entries for the console: a password's value is never shown."""
    return [{"name": key, "value": None if is_sensitive(key) else value,
             "source": SOURCE_NAMES.get(source, str(source)), "sensitive": is_sensitive(key)}
            for key, value, source, _synonyms in entries]


def _broker_id(query: str, default: int) -> int:
    """The `broker` of /api/broker/configs' query string (absent: `default`)."""
    fields = parse_qs(query, max_num_fields=2)
    values = fields.get("broker", [])
    if len(fields) > 1 or len(values) > 1:
        raise ValueError("expected at most one query parameter, broker")
    if not values:
        return default
    text = values[0]
    if not re.fullmatch(r"[0-9]{1,10}", text) or int(text) > 2**31 - 1:  # ASCII digits: int() takes "٣"
        raise ValueError("broker must be a broker id (an integer from 0)")
    return int(text)
