"""`oncelog configs`: describe and alter configs, like kafka-configs.sh.

Built on confluent-kafka's AdminClient (DescribeConfigs, IncrementalAlterConfigs). The
options and output are kafka-configs.sh's:

    oncelog configs --describe --entity-type topics --entity-name T [--all]
    oncelog configs --alter --topic T --add-config 'retention.ms=86400000,cleanup.policy=[delete,compact]'
    oncelog configs --alter --topic T --delete-config retention.ms

`--describe` prints `Dynamic configs for topic T are:` and each override with its
synonyms (`--all`: every key, `All configs for ...`); without a name it describes every
topic. `--alter` sends one IncrementalAlterConfigs (SET for `--add-config` and
`--add-config-file`, DELETE for `--delete-config`) and prints `Completed updating config
for topic T.`. A list value is written in brackets, `key=[a,b]`, as in Kafka's tool.
Entity types: topics, brokers (`--entity-name ID` or `--entity-default`) and groups; the
broker answers for what it supports (oncelog's brokers take their keys from
server.properties only, so altering brokers or groups fails with the broker's message).
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from oncelog.admin.clients import (
    add_connection_arguments,
    client_config,
    command_error,
    fetch_metadata,
    make_client,
    read_properties_file,
)
from oncelog.errors import CommandError
from oncelog.names import INTERNAL_TOPICS

REQUEST_TIMEOUT_S = 30.0

# --entity-type -> (the resource type, the singular kafka-configs.sh prints)
ENTITY_TYPES = {
    "topics": (ResourceType.TOPIC, "topic"),
    "brokers": (ResourceType.BROKER, "broker"),
    "groups": (ResourceType.GROUP, "group"),
}


def register(commands: argparse._SubParsersAction) -> None:
    configs = commands.add_parser(
        "configs", help="describe and alter topic, broker and group configs (kafka-configs.sh)",
        description="Describe and alter configs, as kafka-configs.sh does: one of --describe or --alter, "
                    "and the entity (--entity-type with --entity-name or --entity-default, or --topic, "
                    "--broker, --broker-defaults, --group).",
    )
    add_connection_arguments(configs)
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    configs.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), help="topics, brokers or groups")
    configs.add_argument("--entity-name", help="the topic, broker id or group")
    configs.add_argument("--entity-default", action="store_true",
                         help="the cluster-wide default of the entity type (brokers)")
    configs.add_argument("--topic", help="same as --entity-type topics --entity-name TOPIC")
    configs.add_argument("--broker", help="same as --entity-type brokers --entity-name ID")
    configs.add_argument("--broker-defaults", action="store_true",
                         help="same as --entity-type brokers --entity-default")
    configs.add_argument("--group", help="same as --entity-type groups --entity-name GROUP")
    configs.add_argument("--all", action="store_true",
                         help="with --describe: every config, not only the dynamic ones")
    configs.add_argument("--add-config", metavar="K=V[,K=[A,B]]",
                         help="with --alter: keys to set, comma-separated; a list value in brackets")
    configs.add_argument("--add-config-file", metavar="FILE", help="with --alter: a properties file of keys to set")
    configs.add_argument("--delete-config", metavar="K[,K]", help="with --alter: keys to remove, comma-separated")
    configs.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    entity_type, name = _entity(args)
    admin = make_client(AdminClient, client_config(args))
    fetch_metadata(admin, args)  # a clear error if the cluster is not reachable
    if args.alter:
        return _alter(admin, args, entity_type, name)
    if args.add_config or args.add_config_file or args.delete_config:
        raise CommandError("--add-config, --add-config-file and --delete-config go with --alter")
    return _describe(admin, args, entity_type, name)


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, name); name None: every entity (describe), "" the cluster default."""
    shortcuts = [(kind, value) for kind, value in (("topics", args.topic), ("brokers", args.broker),
                                                   ("groups", args.group)) if value is not None]
    if args.broker_defaults:
        shortcuts.append(("brokers", ""))
    if shortcuts:
        if len(shortcuts) > 1 or args.entity_type or args.entity_name is not None or args.entity_default:
            raise CommandError("name one entity: --topic, --broker, --broker-defaults, --group, "
                               "or --entity-type with --entity-name or --entity-default")
        return shortcuts[0]
    if args.entity_type is None:
        raise CommandError("--entity-type is required (or --topic, --broker, --broker-defaults, --group)")
    if args.entity_default:
        if args.entity_name is not None:
            raise CommandError("--entity-name and --entity-default exclude each other")
        if args.entity_type != "brokers":
            raise CommandError(f"--entity-default applies to brokers, not {args.entity_type}")
        return args.entity_type, ""
    if args.entity_name is None and args.alter:
        raise CommandError("--alter needs --entity-name or --entity-default")
    return args.entity_type, args.entity_name


def _label(entity_type: str, name: str) -> str:
    singular = ENTITY_TYPES[entity_type][1]
    return f"default config for {entity_type} in the cluster" if name == "" else f"config for {singular} {name}"


def _alter(admin: AdminClient, args: argparse.Namespace, entity_type: str, name: str | None) -> int:
    assert name is not None  # _entity requires one for --alter
    changes: list[ConfigEntry] = []
    to_set: dict[str, str] = {}
    if args.add_config_file:
        to_set.update(read_properties_file(args.add_config_file))
    if args.add_config:
        to_set.update(parse_add_config(args.add_config))
    for key, value in to_set.items():
        changes.append(ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET))
    for key in _names(args.delete_config):
        if key in to_set:
            raise CommandError(f"{key} is both added and deleted")
        changes.append(ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE))
    if not changes:
        raise CommandError("--alter needs --add-config, --add-config-file or --delete-config")
    resource = _resource(entity_type, name, incremental_configs=changes)
    future = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)[resource]
    _wait(future, args, name if entity_type == "topics" else None)
    print(f"Completed updating {_label(entity_type, name)}.")
    return 0


def _describe(admin: AdminClient, args: argparse.Namespace, entity_type: str, name: str | None) -> int:
    if name is None:
        if entity_type != "topics":
            raise CommandError(f"--describe of {entity_type} needs --entity-name (or --entity-default)")
        names = sorted(topic for topic in fetch_metadata(admin, args).topics if topic not in INTERNAL_TOPICS)
    else:
        names = [name]
    for each in names:
        resource = _resource(entity_type, each)
        future = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)[resource]
        entries = _wait(future, args, each if entity_type == "topics" else None)
        shown = sorted(
            (entry for entry in entries.values() if args.all or _source(entry) in _DYNAMIC),
            key=lambda entry: entry.name,
        )
        if each == "":
            print(f"{'All' if args.all else 'Default'} configs for {entity_type} in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {ENTITY_TYPES[entity_type][1]} {each} are:")
        for entry in shown:
            print(f"  {_entry_line(entry)}")
    return 0


_DYNAMIC = frozenset({ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
                      ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.GROUP_CONFIG})


def _resource(entity_type: str, name: str, **changes: Any) -> ConfigResource:
    if name == "":  # librdkafka refuses a broker resource without a name (Kafka's cluster default)
        raise CommandError("the cluster-wide broker default (--entity-default) cannot be named through "
                           "librdkafka's admin client; oncelog has no dynamic broker configs: see each "
                           "broker's with --describe --broker ID --all")
    return ConfigResource(ENTITY_TYPES[entity_type][0], name, **changes)


def _entry_line(entry: Any) -> str:
    value = "null" if entry.is_sensitive or entry.value is None else entry.value
    synonyms = ", ".join(
        f"{_source(synonym).name}:{synonym.name}="
        f"{'null' if synonym.is_sensitive or synonym.value is None else synonym.value}"
        for synonym in entry.synonyms.values()
    )
    return f"{entry.name}={value} sensitive={'true' if entry.is_sensitive else 'false'} synonyms={{{synonyms}}}"


def _source(entry: Any) -> ConfigSource:
    # confluent-kafka hands the source over as the enum or its int, by version.
    return ConfigSource(getattr(entry.source, "value", entry.source))


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's --add-config: `k=v` pairs separated by commas; a value in
    brackets (`k=[a,b]`) may hold commas."""
    pairs: dict[str, str] = {}
    depth = 0
    current = ""
    items: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise CommandError(f"--add-config: unbalanced ']' in {text!r}")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise CommandError(f"--add-config: unbalanced '[' in {text!r}")
    items.append(current)
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--add-config expects KEY=VALUE pairs, got {item!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs[key.strip()] = value
    return pairs


def _names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _wait(future: Any, args: argparse.Namespace, topic: str | None) -> Any:
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        raise command_error(error, topic=topic) from None
    except TimeoutError:
        raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None
