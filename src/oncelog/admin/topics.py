"""`oncelog topics`: create, list, describe, alter and delete topics, like kafka-topics.sh.

Built on confluent-kafka's AdminClient (CreateTopics, Metadata, DescribeConfigs,
CreatePartitions, DeleteTopics). Output and messages follow kafka-topics.sh:
`Created topic T.`, the tab-separated describe layout, silence on delete/alter success.
Deviation: `--topic` is an exact name, not a regular expression.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from oncelog.admin.clients import (
    add_connection_arguments,
    client_config,
    command_error,
    fetch_metadata,
    make_client,
    parse_key_value,
)
from oncelog.errors import CommandError
from oncelog.names import INTERNAL_TOPICS

# Admin requests are answered by the controller; this bounds each one.
REQUEST_TIMEOUT_S = 30.0


def register(commands: argparse._SubParsersAction) -> None:
    topics = commands.add_parser(
        "topics", help="create, list, describe, alter and delete topics (kafka-topics.sh)"
    )
    actions = topics.add_subparsers(dest="topics_action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    add_connection_arguments(create)
    create.add_argument("--topic", required=True)
    create.add_argument(
        "--partitions", type=int, default=-1, help="partition count (default: num.partitions)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas per partition (default: default.replication.factor)",
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config"
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )
    create.set_defaults(run=run_create)

    list_ = actions.add_parser("list", help="list topic names")
    add_connection_arguments(list_)
    list_.add_argument(
        "--exclude-internal", action="store_true", help="leave out internal topics"
    )
    list_.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="show partitions, leaders and configs")
    add_connection_arguments(describe)
    describe.add_argument("--topic", help="topic to describe (default: all)")
    describe.add_argument(
        "--exclude-internal", action="store_true", help="leave out internal topics"
    )
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", help="add partitions to a topic")
    add_connection_arguments(alter)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True, help="new partition count")
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", help="delete a topic")
    add_connection_arguments(delete)
    delete.add_argument("--topic", required=True)
    delete.add_argument(
        "--if-exists", action="store_true", help="succeed if the topic does not exist"
    )
    delete.set_defaults(run=run_delete)


def _admin(args: argparse.Namespace) -> AdminClient:
    return make_client(AdminClient, client_config(args, **{"allow.auto.create.topics": False}))


def _wait(future: Any, args: argparse.Namespace, topic: str | None) -> Any:
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        raise command_error(error, topic=topic) from None
    except TimeoutError:
        raise CommandError(
            f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s"
        ) from None


def _error_code(error: KafkaException) -> int | None:
    if error.args and isinstance(error.args[0], KafkaError):
        return error.args[0].code()
    return None


def run_create(args: argparse.Namespace) -> int:
    if args.partitions == 0 or args.partitions < -1:
        raise CommandError("--partitions must be at least 1")
    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CommandError("--replication-factor must be at least 1")
    configs = dict(parse_key_value(item, "--config") for item in args.config)
    admin = _admin(args)
    fetch_metadata(admin, args)  # a clear error if the cluster is not reachable
    new_topic = NewTopic(
        args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        config=configs,
    )
    future = admin.create_topics([new_topic], request_timeout=REQUEST_TIMEOUT_S)[args.topic]
    try:
        future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        if args.if_not_exists and _error_code(error) == KafkaError.TOPIC_ALREADY_EXISTS:
            return 0
        raise command_error(error, topic=args.topic) from None
    print(f"Created topic {args.topic}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    metadata = fetch_metadata(_admin(args), args)
    for name in sorted(metadata.topics):
        if args.exclude_internal and name in INTERNAL_TOPICS:
            continue
        print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    metadata = fetch_metadata(admin, args, topic=args.topic)
    if args.topic is not None:
        names = [args.topic]
        topic_metadata = metadata.topics.get(args.topic)
        if topic_metadata is None or topic_metadata.error is not None:
            error = topic_metadata.error if topic_metadata is not None else None
            if error is None or error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
            ):
                raise CommandError(f"topic {args.topic!r} does not exist")
            raise command_error(error, topic=args.topic)
    else:
        names = sorted(
            name
            for name in metadata.topics
            if not (args.exclude_internal and name in INTERNAL_TOPICS)
        )
    if not names:
        return 0

    topic_ids = _topic_ids(admin, names)
    configs = _non_default_configs(admin, args, names)
    for name in names:
        partitions = metadata.topics[name].partitions
        replication_factor = max((len(p.replicas) for p in partitions.values()), default=0)
        config_text = ",".join(f"{key}={value}" for key, value in sorted(configs[name].items()))
        print(
            f"Topic: {name}\tTopicId: {topic_ids.get(name, '')}\t"
            f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication_factor}\t"
            f"Configs: {config_text}"
        )
        for partition_id in sorted(partitions):
            partition = partitions[partition_id]
            leader = partition.leader if partition.leader >= 0 else "none"
            print(
                f"\tTopic: {name}\tPartition: {partition_id}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, partition.replicas))}\t"
                f"Isr: {','.join(map(str, partition.isrs))}"
            )
    return 0


def _topic_ids(admin: AdminClient, names: list[str]) -> dict[str, str]:
    """Topic ids through DescribeTopics (Metadata v10+). A broker that does not send
    topic ids leaves the column empty, as kafka-topics.sh does for the zero id."""
    try:
        futures = admin.describe_topics(
            TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S
        )
    except KafkaException:
        return {}
    topic_ids: dict[str, str] = {}
    for name, future in futures.items():
        try:
            description = future.result(timeout=REQUEST_TIMEOUT_S)
        except (KafkaException, TimeoutError):
            continue
        if description.topic_id is None:
            continue
        # Kafka prints a Uuid in URL-safe base64 without padding; confluent-kafka's
        # str() uses the standard alphabet.
        topic_id = str(description.topic_id).translate(str.maketrans("+/", "-_")).rstrip("=")
        if topic_id and topic_id != "AAAAAAAAAAAAAAAAAAAAAA":  # Uuid.ZERO_UUID
            topic_ids[name] = topic_id
    return topic_ids


def _non_default_configs(
    admin: AdminClient, args: argparse.Namespace, names: list[str]
) -> dict[str, dict[str, str]]:
    """Per-topic overrides (DescribeConfigs, source DYNAMIC_TOPIC_CONFIG), the configs
    kafka-topics.sh --describe shows."""
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    configs: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        entries = _wait(future, args, resource.name)
        configs[resource.name] = {
            key: ("" if entry.value is None else entry.value)
            for key, entry in entries.items()
            if _config_source(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG
            and not entry.is_sensitive
        }
    return configs


def _config_source(entry: Any) -> ConfigSource:
    # confluent-kafka hands the source over as the enum or its int, by version.
    return ConfigSource(getattr(entry.source, "value", entry.source))


def run_alter(args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise CommandError("--partitions must be at least 1")
    admin = _admin(args)
    fetch_metadata(admin, args)
    futures = admin.create_partitions(
        [NewPartitions(args.topic, args.partitions)], request_timeout=REQUEST_TIMEOUT_S
    )
    _wait(futures[args.topic], args, args.topic)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    fetch_metadata(admin, args)
    future = admin.delete_topics([args.topic], request_timeout=REQUEST_TIMEOUT_S)[args.topic]
    try:
        future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        if args.if_exists and _error_code(error) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return 0
        raise command_error(error, topic=args.topic) from None
    return 0

