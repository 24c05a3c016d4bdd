"""`oncelog transactions`: inspect transactions and recover from hanging ones, like
kafka-transactions.sh.

    list                 ListTransactions on every broker
    describe             DescribeTransactions on the id's coordinator (FindCoordinator)
    describe-producers   DescribeProducers on a partition's leader (also `oncelog producers describe`)
    find-hanging         open transactions on partitions that their coordinator no longer
                         tracks: DescribeProducers, then ListTransactions by producer id,
                         then DescribeTransactions
    abort                WriteTxnMarkers(ABORT) for the open transaction starting at an offset

Standard clients have no API for these, so the commands speak the protocol directly
(client/wire.py); they take the same connection options as every command. Column names
are kafka-transactions.sh's; columns are separated by two spaces. Errors a user can fix
are one line and exit status 1.

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

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from oncelog.admin import output
from oncelog.admin.clients import add_connection_arguments, wire_cluster
from oncelog.client.wire import Cluster, PartitionInfo, describe_error
from oncelog.errors import CommandError
from oncelog.names import INTERNAL_TOPICS, TopicPartition

DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # kafka-transactions.sh's default



def register(commands: argparse._SubParsersAction) -> None:
    transactions = commands.add_parser(
        "transactions", help="list, describe, find hanging and abort transactions (kafka-transactions.sh)"
    )
    actions = transactions.add_subparsers(dest="transactions_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list the transactional ids every coordinator knows")
    add_connection_arguments(listing)
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="describe the state of a transactional id")
    add_connection_arguments(describe)
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(run=run_describe)

    add_describe_producers(actions, "describe-producers")

    hanging = actions.add_parser("find-hanging", help="find open transactions no coordinator will complete")
    add_connection_arguments(hanging)
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
    add_connection_arguments(abort)
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, required=True, help="first offset of the transaction to abort")
    abort.set_defaults(run=run_abort)


def add_describe_producers(actions: argparse._SubParsersAction, name: str, *, alias_of: str | None = None) -> None:
    """`transactions describe-producers`, and its alias `producers describe`."""
    summary = "show the active producers of a partition (DescribeProducers)"
    producers = actions.add_parser(
        name, help=summary + (f"; the same as `oncelog {alias_of}`" if alias_of else ""),
        description="Show the idempotent and transactional producers a partition's leader keeps state for, "
        "as kafka-transactions.sh describe-producers does. CurrentTransactionStartOffset is the first offset "
        "of the producer's open transaction (None: no transaction open), which holds back the partition's "
        "last stable offset; LatestCoordinatorEpoch is -1 until a transaction marker was written."
        + (f" An alias of `oncelog {alias_of}`." if alias_of else ""),
    )
    add_connection_arguments(producers)
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.set_defaults(run=run_describe_producers)


# -- the commands ---------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    with wire_cluster(args) as cluster:
        listings = cluster.list_transactions()
    print_table(
        ("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
        [(s.transactional_id, node, s.producer_id, s.transaction_state) for node, s in listings],
    )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with wire_cluster(args) as cluster:
        coordinator, state = cluster.describe_transaction(args.transactional_id)
    if state.error_code != ErrorCode.none:
        raise CommandError(f"transactional id {args.transactional_id!r}: {describe_error(state.error_code)}")
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
    with wire_cluster(args) as cluster:
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
    with wire_cluster(args) as cluster:
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
            transactional_ids: dict[int, str] = {
                s.producer_id: s.transactional_id
                for _node, s in cluster.list_transactions(producer_ids)
                if s.producer_id in producer_ids
            }
            coordinator_views: dict[str, set[tuple[str, int]]] = {}
            for transactional_id in set(transactional_ids.values()):
                _coordinator, state = cluster.describe_transaction(transactional_id)
                if state.error_code == ErrorCode.none:
                    coordinator_views[transactional_id] = {(t.topic, p) for t in state.topics for p in t.partitions}
                elif state.error_code != ErrorCode.transactional_id_not_found:
                    raise CommandError(
                        f"cannot describe transactional id {transactional_id!r}: {describe_error(state.error_code)}"
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
    with wire_cluster(args) as cluster:
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
            f"{args.topic}-{args.partition} failed: {describe_error(error)}"
        )
    print(
        f"Aborted the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}, "
        f"coordinator epoch {coordinator_epoch}) starting at offset {args.start_offset} of "
        f"{args.topic}-{args.partition}."
    )
    return 0


# -- output -----------------------------------------------------------------------------------


def print_table(headers: tuple[str, ...], rows: list[tuple]) -> None:
    """kafka-transactions.sh's tables: columns two spaces apart."""
    output.print_table(headers, rows, gap="  ")
