"""`oncelog groups`: list, describe and delete consumer groups, like kafka-consumer-groups.sh.

    oncelog groups list [--state [STATES]]
    oncelog groups describe (--group G ... | --all-groups) [--members | --state]
    oncelog groups delete --group G ...

Built on confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, DeleteGroups). `describe` shows, per partition the group owns or has an
offset for: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LSO LAG LSO-LAG
CONSUMER-ID HOST CLIENT-ID (OFFSETS_HELP below says what each means). Missing values
print as "-", as Kafka's tool does.
Deviation: the LSO and LSO-LAG columns are oncelog's; Kafka's tool has neither.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from oncelog.admin.clients import add_connection_arguments, client_config, command_error, fetch_metadata, make_client
from oncelog.admin.output import print_table
from oncelog.errors import CommandError

REQUEST_TIMEOUT_S = 30.0

OFFSET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LSO", "LAG", "LSO-LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID")
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_COLUMNS = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")


OFFSETS_HELP = """\
Columns of the offsets view (the default): CURRENT-OFFSET is the group's committed
offset; LOG-END-OFFSET the partition's high watermark (where a read_uncommitted consumer
stops); LSO the last stable offset (where a read_committed consumer stops: the first
offset of the oldest transaction still open on the partition, else the high watermark);
LAG = LOG-END-OFFSET - CURRENT-OFFSET, as in kafka-consumer-groups.sh; LSO-LAG =
LSO - CURRENT-OFFSET, the records a read_committed consumer of the group can read now.
A read_uncommitted group may have read past the LSO, into a transaction still open:
LSO-LAG is then 0 (nothing a read_committed consumer could read yet), never negative,
just as LAG is never negative. "-" means unknown: no committed offset, or the topic is
gone. LSO and LSO-LAG are oncelog's; Kafka's tool shows the others."""


GROUP_TYPES = ("consumer", "share")


def register(commands: argparse._SubParsersAction) -> None:
    groups = commands.add_parser(
        "groups", help="list, describe and delete consumer groups (kafka-consumer-groups.sh)"
    )
    actions = groups.add_subparsers(dest="groups_action", metavar="ACTION", required=True)

    list_ = actions.add_parser("list", help="list consumer groups")
    add_connection_arguments(list_)
    list_.add_argument(
        "--state", nargs="?", const="", default=None, metavar="STATES",
        help="show each group's state; with comma-separated states, only groups in them",
    )
    list_.add_argument("--type", choices=GROUP_TYPES, default="consumer",
                       help="consumer groups (classic and KIP-848; the default) or share groups (KIP-932, as "
                            "`oncelog share-groups list`)")
    list_.set_defaults(run=run_list)

    describe = actions.add_parser(
        "describe", help="offsets and lag, members or state of groups",
        description="Describe consumer groups, like kafka-consumer-groups.sh --describe. " + OFFSETS_HELP,
    )
    add_connection_arguments(describe)
    which = describe.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", metavar="GROUP", help="group to describe (repeatable)")
    which.add_argument("--all-groups", action="store_true", help="describe every group")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="show members instead of offsets")
    view.add_argument("--state", action="store_true", help="show group state instead of offsets")
    describe.add_argument("--type", choices=GROUP_TYPES, default="consumer",
                          help="consumer groups (the default) or share groups (start offsets and lag, as "
                               "`oncelog share-groups describe`)")
    describe.set_defaults(run=run_describe)

    delete = actions.add_parser("delete", help="delete consumer groups with no members")
    add_connection_arguments(delete)
    delete.add_argument("--group", action="append", required=True, metavar="GROUP", help="group (repeatable)")
    delete.set_defaults(run=run_delete)


def _admin(args: argparse.Namespace) -> AdminClient:
    admin = make_client(AdminClient, client_config(args))
    fetch_metadata(admin, args)  # a clear one-line error if the cluster is not reachable
    return admin


def _wait(future: Any, args: argparse.Namespace) -> Any:
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        raise command_error(error, bootstrap=args.bootstrap_server) from None
    except TimeoutError:
        raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None


def _state_name(state: Any) -> str:
    """Kafka's spelling of a group state (confluent-kafka's enum names differ)."""
    names = {
        ConsumerGroupState.STABLE: "Stable",
        ConsumerGroupState.EMPTY: "Empty",
        ConsumerGroupState.DEAD: "Dead",
        ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
        ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    }
    return names.get(state, "Unknown")


# ---- list ---------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    if args.type == "share":
        from oncelog.admin import share_groups

        return share_groups.run_list(args)
    admin = _admin(args)
    result = _wait(admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), args)
    if result.errors:
        raise command_error(result.errors[0], bootstrap=args.bootstrap_server)
    listings = sorted(result.valid, key=lambda listing: listing.group_id)
    if args.state is None:
        for listing in listings:
            print(listing.group_id)
        return 0
    wanted = {state.strip().lower() for state in args.state.split(",") if state.strip()}
    rows = [
        (listing.group_id, _state_name(listing.state))
        for listing in listings
        if not wanted or _state_name(listing.state).lower() in wanted
    ]
    print_table(("GROUP", "STATE"), rows)
    return 0


# ---- describe -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    current_offset: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def run_describe(args: argparse.Namespace) -> int:
    if args.type == "share":
        from oncelog.admin import share_groups

        return share_groups.describe_groups(args)
    admin = _admin(args)
    if args.all_groups:
        listed = _wait(admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), args)
        group_ids = sorted(listing.group_id for listing in listed.valid)
    else:
        group_ids = list(dict.fromkeys(args.group))
    if not group_ids:
        return 0
    descriptions = {group_id: _describe_group(admin, args, group_id) for group_id in group_ids}
    for number, group_id in enumerate(group_ids):
        if number:
            print()
        description = descriptions[group_id]
        if args.state:
            _print_state(description)
        elif args.members:
            _print_members(description)
        else:
            _print_offsets(admin, args, description)
    return 0


def _describe_group(admin: AdminClient, args: argparse.Namespace, group_id: str) -> Any:
    future = admin.describe_consumer_groups([group_id], request_timeout=REQUEST_TIMEOUT_S)[group_id]
    try:
        description = future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        if (error.args and isinstance(error.args[0], KafkaError)
                and error.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND):
            raise CommandError(f"consumer group {group_id!r} does not exist") from None
        raise command_error(error, bootstrap=args.bootstrap_server) from None
    except TimeoutError:
        raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None
    if description.state == ConsumerGroupState.DEAD:
        raise CommandError(f"consumer group {group_id!r} does not exist")
    return description


def _print_state(description: Any) -> None:
    coordinator = description.coordinator
    print_table(STATE_COLUMNS, [(
        description.group_id,
        f"{coordinator.host}:{coordinator.port} ({coordinator.id})" if coordinator is not None else None,
        description.partition_assignor or "",
        _state_name(description.state),
        len(description.members),
    )])


def _print_members(description: Any) -> None:
    if not description.members:
        print(f"Consumer group '{description.group_id}' has no active members.", file=sys.stderr)
    rows = [
        (description.group_id, member.member_id, member.group_instance_id, member.host, member.client_id,
         len(member.assignment.topic_partitions) if member.assignment is not None else 0)
        for member in sorted(description.members, key=lambda m: m.member_id)
    ]
    print_table(MEMBER_COLUMNS, rows)


def _print_offsets(admin: AdminClient, args: argparse.Namespace, description: Any) -> None:
    group_id = description.group_id
    if not description.members:
        print(f"Consumer group '{group_id}' has no active members.", file=sys.stderr)
    request = [ConsumerGroupTopicPartitions(group_id)]
    committed = _wait(admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group_id], args)
    offsets = {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions if tp.offset >= 0}
    rows: dict[tuple[str, int], PartitionRow] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions if member.assignment is not None else ():
            key = (tp.topic, tp.partition)
            rows[key] = PartitionRow(tp.topic, tp.partition, offsets.get(key), member.member_id, member.host,
                                     member.client_id)
    for key, offset in offsets.items():
        if key not in rows:
            rows[key] = PartitionRow(key[0], key[1], offset, None, None, None)
    ordered = [rows[key] for key in sorted(rows)]
    log_end = _end_offsets(admin, args, list(rows), IsolationLevel.READ_UNCOMMITTED)
    stable = _end_offsets(admin, args, list(rows), IsolationLevel.READ_COMMITTED)
    print_table(OFFSET_COLUMNS, [
        (
            group_id, row.topic, row.partition, row.current_offset,
            log_end.get((row.topic, row.partition)), stable.get((row.topic, row.partition)),
            _lag(log_end.get((row.topic, row.partition)), row.current_offset),
            _stable_lag(stable.get((row.topic, row.partition)), row.current_offset),
            row.consumer_id, row.host, row.client_id,
        )
        for row in ordered
    ])


def _lag(end: int | None, current: int | None) -> int | None:
    return None if end is None or current is None else end - current


def _stable_lag(stable: int | None, current: int | None) -> int | None:
    """What a read_committed consumer at `current` can read now: 0, not negative, for a
    read_uncommitted group that has read past the LSO into a transaction still open."""
    lag = _lag(stable, current)
    return None if lag is None else max(0, lag)


def _end_offsets(admin: AdminClient, args: argparse.Namespace, partitions: list[tuple[str, int]],
                 isolation: IsolationLevel) -> dict[tuple[str, int], int]:
    """Latest offsets (the high watermark, or the LSO with read_committed); partitions
    whose topic is gone are left out (shown as "-")."""
    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(topic, partition): OffsetSpec.latest() for topic, partition in partitions},
        isolation_level=isolation, request_timeout=REQUEST_TIMEOUT_S,
    )
    result = {}
    for tp, future in futures.items():
        try:
            result[(tp.topic, tp.partition)] = future.result(timeout=REQUEST_TIMEOUT_S).offset
        except KafkaException as error:
            code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
            if code not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                raise command_error(error, bootstrap=args.bootstrap_server) from None
        except TimeoutError:
            raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None
    return result


# ---- delete -------------------------------------------------------------------------------


def run_delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    group_ids = list(dict.fromkeys(args.group))
    futures = admin.delete_consumer_groups(group_ids, request_timeout=REQUEST_TIMEOUT_S)
    failures = []
    for group_id in group_ids:
        try:
            futures[group_id].result(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as error:
            kafka_error = error.args[0] if error.args and isinstance(error.args[0], KafkaError) else None
            if kafka_error is not None and kafka_error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                failures.append(f"consumer group {group_id!r} does not exist")
            elif kafka_error is not None and kafka_error.code() == KafkaError.NON_EMPTY_GROUP:
                failures.append(f"consumer group {group_id!r} has active members and cannot be deleted")
            else:
                failures.append(f"consumer group {group_id!r}: {command_error(error)}")
    if failures:
        raise CommandError("; ".join(failures))
    quoted = ", ".join(f"'{group_id}'" for group_id in group_ids)
    print(f"Deletion of requested consumer groups ({quoted}) was successful.")
    return 0
