"""`oncelog configs`: describe and alter configs, like kafka-configs.sh.

    oncelog configs --describe --entity-type topics --entity-name T [--all]
    oncelog configs --alter --topic T --add-config 'retention.ms=86400000,cleanup.policy=[delete,compact]'
    oncelog configs --alter --topic T --delete-config retention.ms
    oncelog configs --alter --entity-type brokers --entity-default --add-config log.retention.ms=3600000

`--describe` prints `Dynamic configs for topic T are:` and each override with its
synonyms (`--all`: every key, `All configs for ...`); without a name it describes every
topic. `--alter` sends one IncrementalAlterConfigs (SET for `--add-config` and
`--add-config-file`, DELETE for `--delete-config`) and prints `Completed updating config
for topic T.`. A list value is written in brackets, `key=[a,b]`, as in Kafka's tool.
Entity types: topics, brokers (`--entity-name ID`, or `--entity-default` for the
cluster-wide default) and groups (which oncelog's brokers refuse).

Speaks the protocol directly (oncelog.admin.wire, like `oncelog transactions`):
librdkafka's admin client cannot name the cluster-wide broker default and keeps one
synonym per key name, where Kafka lists a key once per source. A broker's own resource
goes to that broker, as kafka-configs.sh sends it.
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
import argparse
from typing import Any

from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.static.primitive import i8

from oncelog.admin.clients import add_connection_arguments, read_properties_file
from oncelog.admin.wire import Cluster
from oncelog.errors import CommandError
from oncelog.names import INTERNAL_TOPICS

SET, DELETE = 0, 1
# --entity-type -> (the resource type, the singular kafka-configs.sh prints)
ENTITY_TYPES = {
    "topics": (2, "topic"),
    "brokers": (4, "broker"),
    "groups": (32, "group"),
}
# DescribeConfigs' config_source, by Kafka's names
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
# What --describe shows without --all, by entity: the source of the entity's own overrides.
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, GROUP_CONFIG = 1, 2, 3, 8
OWN_SOURCE = {"topics": TOPIC_CONFIG, "brokers": DYNAMIC_BROKER_CONFIG, "groups": GROUP_CONFIG}


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
    if not args.alter and (args.add_config or args.add_config_file or args.delete_config):
        raise CommandError("--add-config, --add-config-file and --delete-config go with --alter")
    with Cluster.from_args(args) as cluster:
        if args.alter:
            return _alter(cluster, args, entity_type, name)
        return _describe(cluster, args, entity_type, name)


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


def _node(entity_type: str, name: str) -> int | None:
    """The broker a resource's request goes to: a broker's own resource to that broker."""
    if entity_type != "brokers" or name == "":
        return None
    try:
        return int(name)
    except ValueError:
        raise CommandError(f"--entity-name of brokers must be a broker id, got {name!r}") from None


def _alter(cluster: Cluster, args: argparse.Namespace, entity_type: str, name: str | None) -> int:
    assert name is not None  # _entity requires one for --alter
    to_set: dict[str, str] = {}
    if args.add_config_file:
        to_set.update(read_properties_file(args.add_config_file))
    if args.add_config:
        to_set.update(parse_add_config(args.add_config))
    changes: list[tuple[str, int, str | None]] = [(key, SET, value) for key, value in to_set.items()]
    for key in _names(args.delete_config):
        if key in to_set:
            raise CommandError(f"{key} is both added and deleted")
        changes.append((key, DELETE, None))
    if not changes:
        raise CommandError("--alter needs --add-config, --add-config-file or --delete-config")
    request = alter_v1.IncrementalAlterConfigsRequest(resources=(alter_v1.AlterConfigsResource(
        resource_type=i8(ENTITY_TYPES[entity_type][0]), resource_name=name,
        configs=tuple(alter_v1.AlterableConfig(name=key, config_operation=i8(operation), value=value)
                      for key, operation, value in changes)),), validate_only=False)
    [result] = cluster.request(request, _node(entity_type, name)).responses
    _raise_for(result.error_code, result.error_message, entity_type, name)
    what = f"default config for {entity_type} in the cluster" if name == "" else \
        f"config for {ENTITY_TYPES[entity_type][1]} {name}"
    print(f"Completed updating {what}.")
    return 0


def _describe(cluster: Cluster, args: argparse.Namespace, entity_type: str, name: str | None) -> int:
    if name is None:
        if entity_type != "topics":
            raise CommandError(f"--describe of {entity_type} needs --entity-name (or --entity-default)")
        names = sorted(topic for topic in cluster.metadata(None) if topic not in INTERNAL_TOPICS)
    else:
        names = [name]
    for each in names:
        request = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
            resource_type=i8(ENTITY_TYPES[entity_type][0]), resource_name=each, configuration_keys=None),),
            include_synonyms=True, include_documentation=False)
        [result] = cluster.request(request, _node(entity_type, each)).results
        _raise_for(result.error_code, result.error_message, entity_type, each)
        if each == "":
            print(f"{'All' if args.all else 'Default'} configs for {entity_type} in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {ENTITY_TYPES[entity_type][1]} {each} are:")
        own = DYNAMIC_DEFAULT_BROKER_CONFIG if each == "" else OWN_SOURCE[entity_type]
        for entry in sorted(result.configs, key=lambda entry: entry.name):
            if args.all or entry.config_source == own:
                print(f"  {_entry_line(entry)}")
    return 0


def _raise_for(code: ErrorCode, message: str | None, entity_type: str, name: str) -> None:
    if code == ErrorCode.none:
        return
    if code == ErrorCode.unknown_topic_or_partition and entity_type == "topics":
        raise CommandError(f"topic {name!r} does not exist")
    raise CommandError(f"{code.name.upper()}: {message or 'no message'}")


def _value(value: str | None, sensitive: bool) -> str:
    return "null" if sensitive or value is None else value


def _entry_line(entry: Any) -> str:
    synonyms = ", ".join(f"{SOURCES.get(s.source, s.source)}:{s.name}={_value(s.value, entry.is_sensitive)}"
                         for s in entry.synonyms)
    return (f"{entry.name}={_value(entry.value, entry.is_sensitive)} "
            f"sensitive={'true' if entry.is_sensitive else 'false'} synonyms={{{synonyms}}}")


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
