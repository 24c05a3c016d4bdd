"""`oncelog share-groups`: list, describe, reset and delete share groups (KIP-932), as
kafka-share-groups.sh does.

    oncelog share-groups list [--state]
    oncelog share-groups describe --group G [--members | --state]
    oncelog share-groups reset-offsets --group G --topic T (--to-earliest | --to-latest | --to-offset N)
                                       [--execute]
    oncelog share-groups delete-offsets --group G --topic T
    oncelog share-groups delete --group G

`oncelog groups list --type share` and `oncelog groups describe --type share` give the
same lists and descriptions.

`describe` shows each share partition's start offset (where the group's next undelivered
record is) and its lag; a partition the group never read shows "-". `reset-offsets` is a
dry run unless `--execute`, and like `delete-offsets` and `delete` needs a group with no
members, as Kafka's. The requests are Kafka's (ListGroups, ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets,
DeleteGroups), sent with the same connection options as every command.
"""

import argparse
from collections.abc import Iterable

from kio.schema.alter_share_group_offsets.v0 import request as alter_offsets
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0 import request as delete_offsets
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_offsets.v8 import request as list_offsets
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from oncelog.admin.clients import add_connection_arguments, wire_cluster
from oncelog.admin.output import print_table
from oncelog.client.wire import Cluster, describe_error
from oncelog.errors import CommandError

GROUP_COORDINATOR = 0
COORDINATOR_WAIT_S = 10.0
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps


def register(commands: argparse._SubParsersAction) -> None:
    share = commands.add_parser("share-groups", help="list, describe, reset and delete share groups "
                                                     "(kafka-share-groups.sh)")
    actions = share.add_subparsers(dest="share_groups_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list share groups")
    add_connection_arguments(listing)
    listing.add_argument("--state", action="store_true", help="show each group's state")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="start offsets and lag, members or state of a share group")
    add_connection_arguments(describe)
    describe.add_argument("--group", required=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="show members instead of offsets")
    view.add_argument("--state", action="store_true", help="show group state instead of offsets")
    describe.set_defaults(run=run_describe)

    reset = actions.add_parser("reset-offsets", help="set where an empty share group starts on a topic "
                                                     "(a dry run unless --execute)")
    add_connection_arguments(reset)
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="each partition's log start offset")
    to.add_argument("--to-latest", action="store_true", help="each partition's end (high watermark)")
    to.add_argument("--to-offset", type=int, metavar="OFFSET", help="this offset on every partition")
    reset.add_argument("--execute", action="store_true", help="make the change (default: show it only)")
    reset.set_defaults(run=run_reset)

    forget = actions.add_parser("delete-offsets", help="forget an empty share group's share partitions of a topic")
    add_connection_arguments(forget)
    forget.add_argument("--group", required=True)
    forget.add_argument("--topic", required=True)
    forget.set_defaults(run=run_delete_offsets)

    delete = actions.add_parser("delete", help="delete a share group with no members")
    add_connection_arguments(delete)
    delete.add_argument("--group", required=True)
    delete.set_defaults(run=run_delete)


def _error(what: str, code: ErrorCode, message: str | None = None) -> CommandError:
    explanation = describe_error(code)
    if message and message.upper() != explanation:
        explanation = f"{explanation}: {message}"
    return CommandError(f"{what}: {explanation}")


def _coordinator(cluster: Cluster, group: str) -> int:
    return cluster.coordinator(group, GROUP_COORDINATOR, COORDINATOR_WAIT_S)


def _listed(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(group id, state) of every share group, from every broker (each lists those it
    coordinates), sorted."""
    with wire_cluster(args) as cluster:
        if not cluster.brokers:
            cluster.metadata(())
        listed = []
        for node_id in sorted(cluster.brokers):
            response = cluster.request(ListGroupsRequest(states_filter=(), types_filter=("share",)), node_id)
            if response.error_code != ErrorCode.none:
                raise _error(f"ListGroups on broker {node_id}", response.error_code)
            listed += [(group.group_id, group.group_state) for group in response.groups]
    return sorted(listed)


def run_list(args: argparse.Namespace) -> int:
    """`--state` shows each group's state; from `oncelog groups list --type share` it may
    also name the states to list (comma-separated)."""
    listed = _listed(args)
    if isinstance(args.state, str) and args.state.strip():
        wanted = {state.strip().lower() for state in args.state.split(",") if state.strip()}
        listed = [(group_id, state) for group_id, state in listed if state.lower() in wanted]
    if args.state not in (None, False):
        print_table(("GROUP", "STATE"), listed)
    else:
        for group_id, _state in listed:
            print(group_id)
    return 0


def describe_groups(args: argparse.Namespace) -> int:
    """`oncelog groups describe --type share`: each group of `--group` (or every share
    group with `--all-groups`), as `share-groups describe` shows one."""
    groups = [group_id for group_id, _state in _listed(args)] if args.all_groups else list(dict.fromkeys(args.group))
    for number, group_id in enumerate(groups):
        if number:
            print()
        run_describe(argparse.Namespace(**{**vars(args), "group": group_id}))
    return 0


def _described(cluster: Cluster, coordinator: int, group: str):
    response = cluster.request(ShareGroupDescribeRequest(group_ids=(GroupId(group),),
                                                         include_authorized_operations=False), coordinator)
    [described] = response.groups
    if described.error_code != ErrorCode.none:
        raise _error(f"share group {group!r}", described.error_code, described.error_message)
    return described


def run_describe(args: argparse.Namespace) -> int:
    with wire_cluster(args) as cluster:
        coordinator = _coordinator(cluster, args.group)
        described = _described(cluster, coordinator, args.group)
        if args.state:
            host, port = cluster.brokers.get(coordinator, ("?", 0))
            print_table(("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"),
                        [(args.group, f"{host}:{port} ({coordinator})", described.group_state,
                          len(described.members))])
            return 0
        if args.members:
            print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"), [
                (args.group, m.member_id, m.client_host, m.client_id,
                 sum(len(t.partitions) for t in m.assignment.topic_partitions),
                 ",".join(f"{t.topic_name}:{','.join(map(str, t.partitions))}"
                          for t in m.assignment.topic_partitions) or "-")
                for m in described.members])
            return 0
        request = describe_offsets.DescribeShareGroupOffsetsRequest(groups=(
            describe_offsets.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(args.group), topics=None),))
        [group] = cluster.request(request, coordinator).groups
    if group.error_code != ErrorCode.none:
        raise _error(f"share group {args.group!r}", group.error_code, group.error_message)
    rows = []
    for topic in sorted(group.topics, key=lambda t: t.topic_name):
        for partition in sorted(topic.partitions, key=lambda p: p.partition_index):
            if partition.error_code != ErrorCode.none:
                raise _error(f"{topic.topic_name}-{partition.partition_index}", partition.error_code)
            rows.append((args.group, topic.topic_name, partition.partition_index,
                         "-" if partition.start_offset < 0 else partition.start_offset,
                         "-" if partition.lag < 0 else partition.lag))
    print_table(("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"), rows)
    return 0


def _log_offsets(cluster: Cluster, topic: str, timestamp: int) -> dict[int, int]:
    """partition -> its earliest (EARLIEST) or latest (LATEST) offset, from each leader."""
    partitions = cluster.metadata([topic]).get(topic)
    if not partitions:
        raise CommandError(f"topic {topic!r} does not exist")
    found: dict[int, int] = {}
    for info in partitions:
        request = list_offsets.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(0), topics=(list_offsets.ListOffsetsTopic(
                name=TopicName(topic), partitions=(list_offsets.ListOffsetsPartition(
                    partition_index=i32(info.partition), current_leader_epoch=i32(-1),
                    timestamp=i64(timestamp)),)),))
        [answer] = cluster.request(request, info.leader).topics[0].partitions
        if answer.error_code != ErrorCode.none:
            raise _error(f"{topic}-{info.partition}", answer.error_code)
        found[info.partition] = answer.offset
    return found


def run_reset(args: argparse.Namespace) -> int:
    with wire_cluster(args) as cluster:
        if args.to_offset is not None:
            if args.to_offset < 0:
                raise CommandError(f"--to-offset must be at least 0, got {args.to_offset}")
            partitions = cluster.metadata([args.topic]).get(args.topic)
            if not partitions:
                raise CommandError(f"topic {args.topic!r} does not exist")
            targets = {info.partition: args.to_offset for info in partitions}
        else:
            targets = _log_offsets(cluster, args.topic, EARLIEST if args.to_earliest else LATEST)
        if args.execute:
            coordinator = _coordinator(cluster, args.group)
            response = cluster.request(alter_offsets.AlterShareGroupOffsetsRequest(
                group_id=GroupId(args.group), topics=(alter_offsets.AlterShareGroupOffsetsRequestTopic(
                    topic_name=TopicName(args.topic), partitions=tuple(
                        alter_offsets.AlterShareGroupOffsetsRequestPartition(partition_index=i32(p),
                                                                             start_offset=i64(offset))
                        for p, offset in sorted(targets.items()))),)), coordinator)
            if response.error_code != ErrorCode.none:
                raise _error(f"share group {args.group!r}", response.error_code, response.error_message)
            _check_partitions(args.topic, (p for t in response.responses for p in t.partitions))
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"),
                [(args.group, args.topic, p, offset) for p, offset in sorted(targets.items())])
    return 0


def _check_partitions(topic: str, partitions: Iterable) -> None:
    for partition in partitions:
        if partition.error_code != ErrorCode.none:
            raise _error(f"{topic}-{partition.partition_index}", partition.error_code, partition.error_message)


def run_delete_offsets(args: argparse.Namespace) -> int:
    with wire_cluster(args) as cluster:
        coordinator = _coordinator(cluster, args.group)
        response = cluster.request(delete_offsets.DeleteShareGroupOffsetsRequest(
            group_id=GroupId(args.group), topics=(delete_offsets.DeleteShareGroupOffsetsRequestTopic(
                topic_name=TopicName(args.topic)),)), coordinator)
    if response.error_code != ErrorCode.none:
        raise _error(f"share group {args.group!r}", response.error_code, response.error_message)
    for topic in response.responses:
        if topic.error_code != ErrorCode.none:
            raise _error(f"topic {topic.topic_name!r}", topic.error_code, topic.error_message)
    print(f"Deleted the share group {args.group!r}'s offsets of topic {args.topic!r}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with wire_cluster(args) as cluster:
        coordinator = _coordinator(cluster, args.group)
        [result] = cluster.request(DeleteGroupsRequest(groups_names=(GroupId(args.group),)), coordinator).results
    if result.error_code != ErrorCode.none:
        raise _error(f"share group {args.group!r}", result.error_code)
    print(f"Deleted share group {args.group!r}.")
    return 0
