"""`oncelog transactions`: inspect transactions and recover from hanging ones, like
kafka-transactions.sh.

    list                 ListTransactions on every broker
    describe             DescribeTransactions on the id's coordinator (FindCoordinator)
    describe-producers   DescribeProducers on a partition's leader (as `oncelog producers describe`)
    find-hanging         open transactions on partitions that their coordinator no longer
                         tracks: DescribeProducers, then ListTransactions by producer id,
                         then DescribeTransactions
    abort                WriteTxnMarkers(ABORT) for the open transaction starting at an offset

Standard clients have no API for these, so the commands speak the protocol directly
(WireClient with kio request entities). Column names are kafka-transactions.sh's; columns
are separated by two spaces. Errors a user can fix are one line and exit status 1.

find-hanging follows Kafka's rule: a transaction is hanging when it is open on the
partition (DescribeProducers' current_txn_start_offset >= 0), its producer's last write is
older than --max-transaction-timeout (minutes; Kafka's default 15, and any transaction the
coordinator still tracks is aborted by it within transaction.max.timeout.ms), and the
coordinator does not account for it: no transactional id has that producer id, the id is
not found, or the id's current transaction does not include the partition.

Deviations: find-hanging without --topic or --broker-id searches every non-internal topic
(kafka-transactions.sh insists on one of them); abort takes only --start-offset (the form
for brokers 3.0 and newer) and prints one line on success.
"""

# No `from __future__ import annotations`: kio reads the field types of the response
# classes below at run time.
import argparse
import os
import struct
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_producers.v0.request import TopicRequest as DescribeProducersTopic
from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.serial import entity_reader
from kio.static.primitive import i16, i64

from oncelog.cli import CommandError
from oncelog.protocol import framing
from oncelog.protocol.client import WireClient, encode_request

DEFAULT_BOOTSTRAP = "localhost:9092"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
TRANSACTION_COORDINATOR = 1  # FindCoordinator key_type
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # kafka-transactions.sh's default
COORDINATOR_RETRIES = 20  # while __transaction_state is being created or loaded
COORDINATOR_RETRY_S = 0.25
RETRIABLE_COORDINATOR_ERRORS = frozenset({
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
})

TopicPartition = tuple[str, int]


def register(commands: argparse._SubParsersAction) -> None:
    transactions = commands.add_parser(
        "transactions", help="list, describe, find hanging and abort transactions (kafka-transactions.sh)"
    )
    actions = transactions.add_subparsers(dest="transactions_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list the transactional ids every coordinator knows")
    _bootstrap_argument(listing)
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="describe the state of a transactional id")
    _bootstrap_argument(describe)
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(run=run_describe)

    producers = actions.add_parser(
        "describe-producers", help="show the active producers of a partition (DescribeProducers)"
    )
    _bootstrap_argument(producers)
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.set_defaults(run=run_describe_producers)

    hanging = actions.add_parser("find-hanging", help="find open transactions no coordinator will complete")
    _bootstrap_argument(hanging)
    hanging.add_argument("--topic", help="search only this topic (default: every non-internal topic)")
    hanging.add_argument("--partition", type=int, help="search only this partition of --topic")
    hanging.add_argument("--broker-id", type=int, help="search only partitions with a replica on this broker")
    hanging.add_argument(
        "--max-transaction-timeout", type=int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
        help="the brokers' transaction.max.timeout.ms in minutes: younger transactions are not reported "
        f"(default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})",
    )
    hanging.set_defaults(run=run_find_hanging)

    abort = actions.add_parser("abort", help="abort a hanging transaction (writes an ABORT marker)")
    _bootstrap_argument(abort)
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, required=True, help="first offset of the transaction to abort")
    abort.set_defaults(run=run_abort)


def _bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=os.environ.get("ONCELOG_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT[,HOST:PORT]",
        help=f"broker(s) to connect to (default: $ONCELOG_BOOTSTRAP, else {DEFAULT_BOOTSTRAP})",
    )


# -- talking to the cluster -----------------------------------------------------------------


class _WireClient(WireClient):
    def request_as(self, entity, response_class: type):
        """As `request`, decoding the response with `response_class` (same wire layout)."""
        self._correlation += 1
        self.send_raw(encode_request(entity, self._correlation))
        frame = self.read_frame()
        (correlation,) = struct.unpack_from(">i", frame, 0)
        if correlation != self._correlation:
            raise ConnectionError(f"response correlation id {correlation}, expected {self._correlation}")
        position = framing.skip_tagged_fields(frame, 4) if response_class.__flexible__ else 4
        response, _ = entity_reader(response_class)(frame, position)
        return response


# DescribeTransactions v0 with transaction_start_time read as plain int64 milliseconds:
# kio 0.6.5 reads it as a datetime and refuses -1, which Kafka (and oncelog) send for an
# id with no transaction in progress. Same wire layout as kio's classes.
_DT = describe_transactions_v0


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionStateV0:
    __type__: ClassVar = _DT.TransactionState.__type__
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar = _DT.ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: _DT.i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[_DT.TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponseV0:
    __type__: ClassVar = _DT.DescribeTransactionsResponse.__type__
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar = _DT.ResponseHeader
    throttle_time: _DT.i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[TransactionStateV0, ...]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]


class Cluster:
    """Connections to the brokers of one cluster, opened on first use, by node id."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = None
        errors = []
        for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
            try:
                self._bootstrap = _WireClient.connect(address)
                break
            except (OSError, ValueError) as error:
                errors.append(f"{address}: {getattr(error, 'strerror', None) or error}")
        if self._bootstrap is None:
            raise CommandError(f"cannot connect to {bootstrap}: {'; '.join(errors) or 'no address given'}")
        self._clients = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        for client in (self._bootstrap, *self._clients.values()):
            client.close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def request(self, entity, node_id: int | None = None, response_class: type | None = None):
        client = self._bootstrap if node_id is None else self._client(node_id)
        try:
            if response_class is not None:
                return client.request_as(entity, response_class)
            return client.request(entity)
        except (OSError, ConnectionError) as error:
            raise CommandError(f"{type(entity).__name__} failed: {error}") from None

    def _client(self, node_id: int) -> _WireClient:
        if node_id not in self._clients:
            if node_id not in self.brokers:
                self.metadata(())
            if node_id not in self.brokers:
                raise CommandError(f"broker {node_id} is not in the cluster's metadata")
            host, port = self.brokers[node_id]
            try:
                self._clients[node_id] = _WireClient(host, port)
            except OSError as error:
                raise CommandError(f"cannot connect to broker {node_id} at {host}:{port}: {error.strerror or error}")
        return self._clients[node_id]

    def metadata(self, topics: Iterable[str] | None) -> dict[str, list[PartitionInfo]]:
        """Partitions by topic (all topics when `topics` is None); also learns the brokers.
        An unknown topic is a CommandError."""
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
            allow_auto_topic_creation=False,  # v1-v3 would create a misspelt topic
        )
        response = self.request(request)
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        found = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                raise CommandError(f"topic {topic.name!r}: {_describe_error(topic.error_code)}")
            found[topic.name] = sorted(
                (PartitionInfo(topic.name, p.partition_index, p.leader_id, tuple(p.replica_nodes))
                 for p in topic.partitions),
                key=lambda info: info.partition,
            )
        return found

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        for info in self.metadata([topic])[topic]:
            if info.partition == partition:
                return info
        raise CommandError(f"partition {topic}-{partition} does not exist")

    def transaction_coordinator(self, transactional_id: str) -> int:
        for _attempt in range(COORDINATOR_RETRIES):
            response = self.request(FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_COORDINATOR))
            if response.error_code == ErrorCode.none:
                self.brokers[response.node_id] = (response.host, response.port)
                return response.node_id
            if response.error_code not in RETRIABLE_COORDINATOR_ERRORS:
                break
            time.sleep(COORDINATOR_RETRY_S)
        raise CommandError(
            f"no transaction coordinator for transactional id {transactional_id!r}: "
            f"{response.error_message or _describe_error(response.error_code)}"
        )

    def describe_producers(self, partitions: Iterable[PartitionInfo]) -> dict[TopicPartition, tuple]:
        """Active producers by partition, asking each partition's leader."""
        by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for info in partitions:
            by_leader[info.leader][info.topic].append(info.partition)
        found = {}
        for leader, topics in by_leader.items():
            response = self.request(
                DescribeProducersRequest(topics=tuple(
                    DescribeProducersTopic(name=topic, partition_indexes=tuple(indexes))
                    for topic, indexes in topics.items()
                )),
                leader,
            )
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.error_code != ErrorCode.none:
                        raise CommandError(
                            f"cannot describe the producers of {topic.name}-{partition.partition_index}: "
                            f"{partition.error_message or _describe_error(partition.error_code)}"
                        )
                    found[(topic.name, partition.partition_index)] = partition.active_producers
        return found

    def list_transactions(self, producer_ids: Iterable[int] = ()) -> list[tuple[int, object]]:
        """(coordinator node id, listing) from every broker, as Kafka's admin client does."""
        if not self.brokers:
            self.metadata(())
        listings = []
        for node_id in sorted(self.brokers):
            response = self.request(ListTransactionsRequest(producer_id_filters=tuple(producer_ids)), node_id)
            if response.error_code != ErrorCode.none:
                raise CommandError(
                    f"ListTransactions on broker {node_id} failed: {_describe_error(response.error_code)}"
                )
            listings += [(node_id, state) for state in response.transaction_states]
        return listings

    def describe_transaction(self, transactional_id: str):
        """(coordinator node id, the DescribeTransactions entry); its error_code says
        TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know."""
        coordinator = self.transaction_coordinator(transactional_id)
        response = self.request(DescribeTransactionsRequest(transactional_ids=(transactional_id,)), coordinator,
                                DescribeTransactionsResponseV0)
        (state,) = response.transaction_states
        return coordinator, state


# -- the commands ---------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    with Cluster(args.bootstrap_server) as cluster:
        listings = cluster.list_transactions()
    print_table(
        ("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
        [(s.transactional_id, node, s.producer_id, s.transaction_state) for node, s in listings],
    )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with Cluster(args.bootstrap_server) as cluster:
        coordinator, state = cluster.describe_transaction(args.transactional_id)
    if state.error_code != ErrorCode.none:
        raise CommandError(f"transactional id {args.transactional_id!r}: {_describe_error(state.error_code)}")
    start_ms = state.transaction_start_time
    now = time.time_ns() // 1_000_000
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    print_table(
        ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"),
        [(coordinator, state.transactional_id, state.producer_id, state.producer_epoch, state.transaction_state,
          int(state.transaction_timeout.total_seconds() * 1000),
          "None" if start_ms < 0 else start_ms, "None" if start_ms < 0 else now - start_ms, partitions)],
    )
    return 0


def run_describe_producers(args: argparse.Namespace) -> int:
    with Cluster(args.bootstrap_server) as cluster:
        producers = cluster.describe_producers([cluster.partition(args.topic, args.partition)])
    print_table(
        ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
         "CurrentTransactionStartOffset"),
        [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
          "None" if p.current_txn_start_offset < 0 else p.current_txn_start_offset)
         for p in producers[(args.topic, args.partition)]],
    )
    return 0


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


def run_find_hanging(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise CommandError("--partition requires --topic")
    if args.max_transaction_timeout < 0:
        raise CommandError("--max-transaction-timeout must not be negative")
    max_timeout_ms = args.max_transaction_timeout * 60_000
    with Cluster(args.bootstrap_server) as cluster:
        partitions = _partitions_to_search(cluster, args.topic, args.partition, args.broker_id)
        now = time.time_ns() // 1_000_000
        candidates = [
            OpenTransaction(topic, partition, p.producer_id, p.producer_epoch, p.coordinator_epoch,
                            p.current_txn_start_offset, p.last_timestamp)
            for (topic, partition), producers in cluster.describe_producers(partitions).items()
            for p in producers
            if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms
        ]
        hanging = []
        if candidates:
            producer_ids = {c.producer_id for c in candidates}
            transactional_ids = {
                s.producer_id: s.transactional_id
                for _node, s in cluster.list_transactions(producer_ids)
                if s.producer_id in producer_ids
            }
            coordinator_views = {}
            for transactional_id in set(transactional_ids.values()):
                _coordinator, state = cluster.describe_transaction(transactional_id)
                if state.error_code == ErrorCode.none:
                    coordinator_views[transactional_id] = {(t.topic, p) for t in state.topics for p in t.partitions}
                elif state.error_code != ErrorCode.transactional_id_not_found:
                    raise CommandError(
                        f"cannot describe transactional id {transactional_id!r}: {_describe_error(state.error_code)}"
                    )
            hanging = hanging_transactions(candidates, transactional_ids, coordinator_views)
    print_table(
        ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
         "Duration(min)"),
        [(h.topic, h.partition, h.producer_id, h.producer_epoch, h.coordinator_epoch, h.start_offset,
          h.last_timestamp, (now - h.last_timestamp) // 60_000) for h in hanging],
    )
    return 0


def hanging_transactions(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
                         coordinator_views: dict[str, set[TopicPartition]]) -> list[OpenTransaction]:
    """The open transactions no coordinator will complete: their producer id maps to no
    transactional id, or the id is unknown to its coordinator (absent from
    `coordinator_views`), or the id's current transaction does not hold the partition."""
    hanging = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer_id)
        partitions = coordinator_views.get(transactional_id) if transactional_id is not None else None
        if partitions is None or (candidate.topic, candidate.partition) not in partitions:
            hanging.append(candidate)
    return sorted(hanging, key=lambda h: (h.topic, h.partition, h.start_offset))


def _partitions_to_search(cluster: Cluster, topic: str | None, partition: int | None,
                          broker_id: int | None) -> list[PartitionInfo]:
    if topic is not None and partition is not None:
        return [cluster.partition(topic, partition)]
    metadata = cluster.metadata(None if topic is None else [topic])
    if broker_id is not None and broker_id not in cluster.brokers:
        raise CommandError(f"broker {broker_id} is not in the cluster")
    return [
        info
        for name, infos in sorted(metadata.items())
        if topic is not None or name not in INTERNAL_TOPICS
        for info in infos
        if broker_id is None or broker_id in info.replicas
    ]


def run_abort(args: argparse.Namespace) -> int:
    with Cluster(args.bootstrap_server) as cluster:
        info = cluster.partition(args.topic, args.partition)
        producers = cluster.describe_producers([info])[(args.topic, args.partition)]
        matching = [p for p in producers if p.current_txn_start_offset == args.start_offset]
        if not matching:
            raise CommandError(
                f"no open transaction starts at offset {args.start_offset} of {args.topic}-{args.partition}"
            )
        producer = matching[0]
        # A producer that never received a marker reports coordinator epoch -1; 0 is not
        # above any coordinator epoch the partition can have seen (as Kafka's tool does).
        coordinator_epoch = max(producer.coordinator_epoch, 0)
        response = cluster.request(
            WriteTxnMarkersRequest(markers=(WritableTxnMarker(
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                transaction_result=False,  # ABORT
                topics=(WritableTxnMarkerTopic(name=args.topic, partition_indexes=(args.partition,)),),
                coordinator_epoch=coordinator_epoch,
            ),)),
            info.leader,
        )
    error = response.markers[0].topics[0].partitions[0].error_code
    if error != ErrorCode.none:
        raise CommandError(
            f"aborting the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}) on "
            f"{args.topic}-{args.partition} failed: {_describe_error(error)}"
        )
    print(
        f"Aborted the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}, "
        f"coordinator epoch {coordinator_epoch}) starting at offset {args.start_offset} of "
        f"{args.topic}-{args.partition}."
    )
    return 0


# -- output -----------------------------------------------------------------------------------


def print_table(headers: tuple[str, ...], rows: list[tuple]) -> None:
    cells = [tuple(str(value) for value in row) for row in rows]
    widths = [max(len(header), *(len(row[i]) for row in cells)) if cells else len(header)
              for i, header in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


_ERROR_TEXT = {
    ErrorCode.unknown_topic_or_partition: "no such topic or partition",
    ErrorCode.transactional_id_not_found: "not found",
}


def _describe_error(code: ErrorCode) -> str:
    """Kafka's error name, after a few words where the name alone is cryptic."""
    name = code.name.upper()
    return f"{_ERROR_TEXT[code]} ({name})" if code in _ERROR_TEXT else name
