"""`oncelog configs`: describe and alter configs, like kafka-configs.sh.

    oncelog configs --describe --entity-type topics --entity-name T [--all]
    oncelog configs --alter --topic T --add-config 'retention.ms=86400000,cleanup.policy=[delete,compact]'
    oncelog configs --alter --topic T --delete-config retention.ms
    oncelog configs --alter --entity-type brokers --entity-default --add-config log.retention.ms=3600000
    oncelog configs --alter --entity-type groups --entity-name G --add-config consumer.session.timeout.ms=50000

`--describe` prints `Dynamic configs for topic T are:` and each override with its
synonyms (`--all`: every key, `All configs for ...`); without a name it describes every
topic. `--alter` sends one IncrementalAlterConfigs (SET for `--add-config` and
`--add-config-file`, DELETE for `--delete-config`) and prints `Completed updating config
for topic T.`. A list value is written in brackets, `key=[a,b]`, as in Kafka's tool.
Entity types: topics, brokers (`--entity-name ID`, or `--entity-default` for the
cluster-wide default), groups (KIP-848 group configs: consumer.session.timeout.ms and
consumer.heartbeat.interval.ms; without a name `--describe` lists every group the brokers
know and every group with configs, as kafka-configs.sh 4.1), and clients and users
(client quotas and SCRAM credentials, below).

Speaks the protocol directly (oncelog.client.wire, like `oncelog transactions`):
librdkafka's admin client cannot name the cluster-wide broker default and keeps one
synonym per key name, where Kafka lists a key once per source. A broker's own resource
goes to that broker, as kafka-configs.sh sends it.

Client quotas (DescribeClientQuotas, AlterClientQuotas), of a client id, a user, or a
user's client id, each name or `--entity-default` (`<default>`):

    oncelog configs --alter --entity-type clients --entity-name c1 --add-config 'producer_byte_rate=1024'
    oncelog configs --alter --entity-type users --entity-name alice --entity-type clients --entity-default \
        --add-config 'consumer_byte_rate=2048,request_percentage=50'
    oncelog configs --alter --user-defaults --delete-config request_percentage
    oncelog configs --describe --entity-type clients [--entity-name c1 | --entity-default]

Keys: producer_byte_rate, consumer_byte_rate, request_percentage and
controller_mutation_rate (which the broker stores but does not enforce). `--describe`
prints `Quota configs for user-principal 'alice', the default client-id are
consumer_byte_rate=2048.0` per entity of exactly those types (a type without a name:
every name of it, and its default), as kafka-configs.sh; values are printed as Java
prints a double, keys in name order (Kafka's tool: a hash map's order). Deleting a key
the entity does not have is an error (`Invalid config(s): k`), as in Kafka's tool.
`--user`, `--client`, `--user-defaults` and `--client-defaults` are short for the
`--entity-type` forms.

Users are also SCRAM credentials, through confluent-kafka's AdminClient (so every
security.protocol works):

    oncelog configs --alter --entity-type users --entity-name alice \
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    oncelog configs --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    oncelog configs --describe --entity-type users [--entity-name alice]

`--describe` prints `SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192` per user that has credentials (a user without any: no
line, as Kafka's tool). Deviation: Kafka's brokers refuse a request that alters one
user twice (DUPLICATE_RESOURCE), which kafka-configs.sh sends for two mechanisms; this
sends one AlterUserScramCredentials per mechanism, and says which were done if one
fails. Passwords (only ever hashed by librdkafka, with a fresh salt) are never printed:
errors about `--add-config` of users do not repeat it. `--add-config-file` keeps them
off the command line. Quota keys and SCRAM mechanisms may be given together for one user
(the quotas are altered first); kafka-configs.sh refuses that ("Cannot alter both quota
and SCRAM credential configs simultaneously"). `--describe` of users prints the quota
lines, then the SCRAM ones (none for `--entity-default` or with clients). The salt is
made as kafka-configs.sh makes it (oncelog.security.sasl.scram.random_salt).
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
import argparse
import decimal
import itertools
import re
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.alter_client_quotas.v1 import request as alter_quotas_v1
from kio.schema.describe_client_quotas.v1 import request as describe_quotas_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.schema.list_config_resources.v1 import request as list_resources_v1
from kio.schema.list_groups.v4 import request as list_groups_v4
from kio.static.primitive import f64, i8

from oncelog.admin.clients import (
    add_connection_arguments,
    client_config,
    describe_kafka_error,
    fetch_metadata,
    make_client,
    read_properties_file,
    wire_cluster,
)
from oncelog.client.wire import Cluster
from oncelog.errors import CommandError
from oncelog.names import INTERNAL_TOPICS
from oncelog.security.sasl.scram import random_salt

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
           7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
# What --describe shows without --all, by entity: the source of the entity's own overrides.
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, GROUP_CONFIG = 1, 2, 3, 8
OWN_SOURCE = {"topics": TOPIC_CONFIG, "brokers": DYNAMIC_BROKER_CONFIG, "groups": GROUP_CONFIG}
USERS, CLIENTS = "users", "clients"  # client quotas and SCRAM credentials: not config resources, see the end
# --entity-type -> (the quota entity type, how kafka-configs.sh names it)
QUOTA_ENTITY_TYPES = {USERS: ("user", "user-principal"), CLIENTS: ("client-id", "client-id")}
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotas
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
MIN_SCRAM_ITERATIONS = DEFAULT_SCRAM_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, its default
REQUEST_TIMEOUT_S = 30.0  # users: each AdminClient request


def register(commands: argparse._SubParsersAction) -> None:
    configs = commands.add_parser(
        "configs", help="describe and alter topic, broker and group configs, client quotas and users' SCRAM "
                        "credentials (kafka-configs.sh)",
        description="Describe and alter configs, as kafka-configs.sh does: one of --describe or --alter, "
                    "and the entity (--entity-type with --entity-name or --entity-default, or --topic, "
                    "--broker, --broker-defaults, --group, --user, --client, --user-defaults, --client-defaults).",
        epilog="Groups (--entity-type groups --entity-name GROUP, KIP-848): consumer.session.timeout.ms, "
               "consumer.heartbeat.interval.ms. "
               "Client quotas (--entity-type clients and/or users, each with --entity-name or --entity-default): "
               f"--add-config 'producer_byte_rate=1024', keys {', '.join(QUOTA_KEYS)} (the last stored, not "
               "enforced). "
               "Users (--entity-type users --entity-name NAME): --add-config "
               "'SCRAM-SHA-256=[iterations=8192,password=P],SCRAM-SHA-512=[password=P]' (iterations: at least "
               f"{MIN_SCRAM_ITERATIONS}, default {DEFAULT_SCRAM_ITERATIONS}), --delete-config SCRAM-SHA-512, "
               "--describe with or without --entity-name. Unlike kafka-configs.sh, whose single request Kafka "
               "refuses (DUPLICATE_RESOURCE) when it names two mechanisms of one user, each mechanism is sent "
               "in a request of its own. Passwords are never printed; --add-config-file keeps them off the "
               "command line.",
    )
    add_connection_arguments(configs)
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    configs.add_argument("--entity-type", action="append", choices=sorted([*ENTITY_TYPES, USERS, CLIENTS]),
                         help="topics, brokers, groups, users or clients (users and clients: once each, together "
                              "for a user's client id)")
    configs.add_argument("--entity-name", action=_EntityName, dest="entity_names",
                         help="the topic, broker id, group, user or client id (one per --entity-type, in order)")
    configs.add_argument("--entity-default", action=_EntityName, dest="entity_names", nargs=0,
                         help="the default of the entity type (brokers: cluster-wide; users, clients: <default>)")
    configs.add_argument("--topic", help="same as --entity-type topics --entity-name TOPIC")
    configs.add_argument("--client", help="same as --entity-type clients --entity-name CLIENT_ID")
    configs.add_argument("--user", help="same as --entity-type users --entity-name USER")
    configs.add_argument("--broker", help="same as --entity-type brokers --entity-name ID")
    configs.add_argument("--group", help="same as --entity-type groups --entity-name GROUP")
    configs.add_argument("--client-defaults", action="store_true",
                         help="same as --entity-type clients --entity-default")
    configs.add_argument("--user-defaults", action="store_true", help="same as --entity-type users --entity-default")
    configs.add_argument("--broker-defaults", action="store_true",
                         help="same as --entity-type brokers --entity-default")
    configs.add_argument("--all", action="store_true",
                         help="with --describe: every config, not only the dynamic ones")
    configs.add_argument("--add-config", metavar="K=V[,K=[A,B]]",
                         help="with --alter: keys to set, comma-separated; a list value in brackets")
    configs.add_argument("--add-config-file", metavar="FILE", help="with --alter: a properties file of keys to set")
    configs.add_argument("--delete-config", metavar="K[,K]", help="with --alter: keys to remove, comma-separated")
    configs.set_defaults(run=run)


class _EntityName(argparse.Action):
    """--entity-name NAME and --entity-default (""), in one list in the order given, as
    kafka-configs.sh pairs them with the --entity-type options."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        names = [*(getattr(namespace, self.dest, None) or []), "" if self.nargs == 0 else values]
        setattr(namespace, self.dest, names)


def run(args: argparse.Namespace) -> int:
    types, names = _entity_lists(args)
    if not args.alter and (args.add_config or args.add_config_file or args.delete_config):
        raise CommandError("--add-config, --add-config-file and --delete-config go with --alter")
    if types and types[0] in QUOTA_ENTITY_TYPES:
        return _alter_quota_entity(args, types, names) if args.alter else _describe_quota_entity(args, types, names)
    entity_type, name = _entity(args, types, names)
    with wire_cluster(args) as cluster:
        if args.alter:
            return _alter(cluster, args, entity_type, name)
        return _describe(cluster, args, entity_type, name)


def _entity_lists(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The entity types and names given, as kafka-configs.sh collects them: --entity-type
    and --entity-name/--entity-default in order, then the shortcuts; a name "" is the default."""
    types, names = list(args.entity_type or []), list(args.entity_names or [])
    for kind, value in (("topics", args.topic), (CLIENTS, args.client), (USERS, args.user), ("brokers", args.broker),
                        ("groups", args.group)):
        if value is not None:
            types.append(kind)
            names.append(value)
    for kind, default in ((CLIENTS, args.client_defaults), (USERS, args.user_defaults),
                          ("brokers", args.broker_defaults)):
        if default:
            types.append(kind)
            names.append("")
    return types, names


def _entity(args: argparse.Namespace, types: list[str], names: list[str]) -> tuple[str, str | None]:
    """(entity type, name) of a config resource; name None: every entity (describe), "" the cluster default."""
    if not types:
        raise CommandError("--entity-type is required (or --topic, --broker, --broker-defaults, --group, --user, "
                           "--client, --user-defaults, --client-defaults)")
    if len(types) > 1 or (len(names) > 1 and "" not in names):
        raise CommandError("name one entity: --topic, --broker, --broker-defaults, --group, "
                           "or --entity-type with --entity-name or --entity-default")
    if len(names) > 1:
        raise CommandError("--entity-name and --entity-default exclude each other")
    [entity_type] = types
    name = names[0] if names else None
    if name == "" and entity_type != "brokers":
        raise CommandError(f"--entity-default applies to brokers, users and clients, not {entity_type}")
    if name is None and args.alter:
        raise CommandError("--alter needs --entity-name or --entity-default")
    return entity_type, name


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
        if entity_type == "groups":
            names = _group_ids(cluster)
        elif entity_type == "topics":
            names = sorted(topic for topic in cluster.metadata(None) if topic not in INTERNAL_TOPICS)
        else:
            raise CommandError(f"--describe of {entity_type} needs --entity-name (or --entity-default)")
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


def _group_ids(cluster: Cluster) -> list[str]:
    """Every group some broker coordinates (ListGroups to each) and every group with
    configs of its own (ListConfigResources), as kafka-configs.sh 4.1 describes groups."""
    cluster.metadata(())  # learns the brokers
    group_ids: set[str] = set()
    for node_id in sorted(cluster.brokers):
        response = cluster.request(list_groups_v4.ListGroupsRequest(states_filter=()), node_id)
        _raise_for(response.error_code, None, "groups", "")
        group_ids.update(group.group_id for group in response.groups)
    listed = cluster.request(list_resources_v1.ListConfigResourcesRequest(
        resource_types=(i8(ENTITY_TYPES["groups"][0]),)))
    _raise_for(listed.error_code, None, "groups", "")
    group_ids.update(resource.resource_name for resource in listed.config_resources)
    return sorted(group_ids)


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


# -- client quotas (users, clients) ------------------------------------------------------------


def _quota_entity(args: argparse.Namespace, types: list[str], names: list[str]) -> list[tuple[str, str | None]]:
    """[(--entity-type, name)]: name None for every name of the type and its default
    (describe only), "" for the default."""
    if len(types) > 2 or len(set(types)) != len(types) or not set(types) <= set(QUOTA_ENTITY_TYPES):
        raise CommandError("client quotas are of users, clients, or a user's client id: --entity-type users and "
                           "--entity-type clients, once each")
    if len(names) > len(types):
        raise CommandError("More entity names specified than entity types")
    if args.alter and len(names) != len(types):
        raise CommandError("--entity-name or --entity-default must be specified with each --entity-type for --alter")
    return list(itertools.zip_longest(types, names[:len(types)]))


def _alter_quota_entity(args: argparse.Namespace, types: list[str], names: list[str]) -> int:
    """kafka-configs.sh --alter of clients and users: quota keys (AlterClientQuotas) and,
    for a named user alone, SCRAM mechanisms (AlterUserScramCredentials)."""
    entity = _quota_entity(args, types, names)
    given = _credentials_to_set(args) if types == [USERS] else _plain_configs_to_set(args)
    deleted = _names(args.delete_config)
    for key in deleted:
        if key in given:
            raise CommandError(f"{key} is both added and deleted")
    if not given and not deleted:
        raise CommandError("--alter needs --add-config, --add-config-file or --delete-config")
    scram_allowed = types == [USERS]
    for verb, keys in (("added", list(given)), ("deleted", deleted)):
        unexpected = [key for key in keys if key not in QUOTA_KEYS and (not scram_allowed or key not in MECHANISMS)]
        if unexpected:
            what = "quota and SCRAM credential configs" if scram_allowed else "quota configs"
            raise CommandError(f"Only {what} can be {verb} for '{types[0]}' using --bootstrap-server. "
                               f"Unexpected config names: Set({', '.join(unexpected)})")
    user, scram_to_set = names[0], {key: value for key, value in given.items() if key in MECHANISMS}
    scram_to_delete = [key for key in deleted if key in MECHANISMS]
    if (scram_to_set or scram_to_delete) and user == "":
        raise CommandError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                           "Credentials using --bootstrap-server.")
    # Kafka's order for SCRAM (deletions, then upsertions); credentials are checked before anything is sent.
    scram: list[tuple[str, Any]] = [(name, UserScramCredentialDeletion(user, MECHANISMS[name]))
                                    for name in scram_to_delete]
    scram += [(name, _upsertion(user, name, credential)) for name, credential in scram_to_set.items()]
    quotas_to_set = {key: value for key, value in given.items() if key in QUOTA_KEYS}
    quotas_to_delete = [key for key in deleted if key in QUOTA_KEYS]
    if quotas_to_set or quotas_to_delete:
        _alter_quotas(args, entity, quotas_to_set, quotas_to_delete)
    if scram:
        _alter_scram_credentials(args, user, scram, quotas_done=bool(quotas_to_set or quotas_to_delete))
    kind, name = entity[0]
    print(f"Completed updating config for {kind[:-1]} {name}." if name
          else f"Completed updating default config for {kind} in the cluster.")
    return 0


def _plain_configs_to_set(args: argparse.Namespace) -> dict[str, str]:
    given: dict[str, str] = {}
    if args.add_config_file:
        given.update(read_properties_file(args.add_config_file))
    if args.add_config:
        given.update(parse_add_config(args.add_config))
    return given


def _alter_quotas(args: argparse.Namespace, entity: list[tuple[str, str | None]], to_set: dict[str, str],
                  to_delete: list[str]) -> None:
    values: dict[str, float] = {}
    for key, text in to_set.items():
        try:
            values[key] = float(text)
        except ValueError:
            raise CommandError(f"Cannot parse quota configuration value for {key}: {text}") from None
    with wire_cluster(args) as cluster:
        if to_delete:  # as kafka-configs.sh: only what the entity has
            current = {key for _entity, values in _described_quotas(cluster, entity) for key in values}
            missing = [key for key in to_delete if key not in current]
            if missing:
                raise CommandError(f"Invalid config(s): {','.join(missing)}")
        ops = [alter_quotas_v1.OpData(key=key, value=f64(value), remove=False) for key, value in values.items()]
        ops += [alter_quotas_v1.OpData(key=key, value=f64(0.0), remove=True) for key in to_delete]
        request = alter_quotas_v1.AlterClientQuotasRequest(entries=(alter_quotas_v1.EntryData(
            entity=tuple(alter_quotas_v1.EntityData(entity_type=QUOTA_ENTITY_TYPES[kind][0], entity_name=name or None)
                         for kind, name in entity),
            ops=tuple(ops)),), validate_only=False)
        [result] = cluster.request(request).entries
        _raise_for(result.error_code, result.error_message, "quotas", "")


def _described_quotas(cluster: Cluster, entity: list[tuple[str, str | None]]) -> list[tuple[Any, dict[str, float]]]:
    """The entities of exactly these types whose names match (None: any name or the
    default), each with its quotas, as kafka-configs.sh asks (a strict filter)."""
    components = tuple(describe_quotas_v1.ComponentData(
        entity_type=QUOTA_ENTITY_TYPES[kind][0],
        match_type=i8(MATCH_SPECIFIED if name is None else MATCH_DEFAULT if name == "" else MATCH_EXACT),
        match=name or None) for kind, name in entity)
    response = cluster.request(describe_quotas_v1.DescribeClientQuotasRequest(components=components, strict=True))
    _raise_for(response.error_code, response.error_message, "quotas", "")
    return [(entry.entity, {value.key: value.value for value in entry.values}) for entry in response.entries or ()]


def _describe_quota_entity(args: argparse.Namespace, types: list[str], names: list[str]) -> int:
    entity = _quota_entity(args, types, names)
    with wire_cluster(args) as cluster:
        described = _described_quotas(cluster, entity)
    words = dict(QUOTA_ENTITY_TYPES.values())
    for entities, values in described:
        named = {data.entity_type: data.entity_name for data in entities}
        text = ", ".join(f"{words[kind]} '{named[kind]}'" if named[kind] is not None else f"the default {words[kind]}"
                         for kind in ("user", "client-id") if kind in named)
        print(f"Quota configs for {text} are "
              + ", ".join(f"{key}={_java_double(value)}" for key, value in sorted(values.items())))
    if CLIENTS not in types and "" not in names:  # as kafka-configs.sh: SCRAM only of named or all users
        _describe_users(args, names[0] if names else None)
    return 0


def _java_double(value: float) -> str:
    """`value` as Java's Double.toString prints it, as kafka-configs.sh prints quotas:
    1024.0, 0.5, 1.0E7."""
    if value != value or value in (float("inf"), float("-inf")):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # the shortest digits that read back as `value`, as Java's
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{len(mantissa) - 1 + exponent}"


# -- users: SCRAM credentials ----------------------------------------------------------------

# kafka-configs.sh's form of a credential: [iterations=N,]password=P (P may hold commas).
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def _mechanism(name: str, option: str) -> ScramMechanism:
    try:
        return MECHANISMS[name]
    except KeyError:
        raise CommandError(f"{option} of users takes {' and '.join(MECHANISMS)}, not {name!r}") from None


def _credentials_to_set(args: argparse.Namespace) -> dict[str, str]:
    """mechanism name -> `[iterations=N,]password=P`; no error repeats the text."""
    given: dict[str, str] = {}
    if args.add_config_file:
        given.update(read_properties_file(args.add_config_file))
    if args.add_config:
        try:
            given.update(parse_add_config(args.add_config))
        except CommandError:
            raise CommandError("--add-config of users expects MECHANISM=[iterations=N,password=P] pairs, "
                               "comma-separated (the value is not shown: it holds a password)") from None
    return {key: value[1:-1] if value.startswith("[") and value.endswith("]") else value
            for key, value in given.items()}


def _upsertion(user: str, mechanism_name: str, credential: str) -> UserScramCredentialUpsertion:
    mechanism = _mechanism(mechanism_name, "--add-config")
    match = _CREDENTIAL.fullmatch(credential)
    if match is None:
        raise CommandError(f"--add-config {mechanism_name}: expected [iterations=N,password=P] "
                           "(the value is not shown: it holds a password)")
    iterations_text, password = match.groups()
    iterations = DEFAULT_SCRAM_ITERATIONS if iterations_text in (None, "", "-1") else int(iterations_text)
    if iterations < MIN_SCRAM_ITERATIONS:
        raise CommandError(f"--add-config {mechanism_name}: iterations {iterations} is less than the minimum "
                           f"{MIN_SCRAM_ITERATIONS}")
    # The salt as kafka-configs.sh makes it (librdkafka's own would be 64 random bytes): the
    # form of the salt the broker shows an unknown user, so a stored one looks the same.
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode(),
                                        salt=random_salt())


def _users_admin(args: argparse.Namespace) -> Any:
    admin = make_client(AdminClient, client_config(args))
    fetch_metadata(admin, args)  # a clear error if the cluster is not reachable (or refuses the login)
    return admin


def _alter_scram_credentials(args: argparse.Namespace, user: str, alterations: list[tuple[str, Any]], *,
                             quotas_done: bool) -> None:
    """Each (mechanism name, deletion or upsertion) of `user`, one request each."""
    admin = _users_admin(args)
    done: list[str] = ["quotas"] if quotas_done else []
    for mechanism_name, alteration in alterations:  # one per request: Kafka refuses a user twice in one
        future = admin.alter_user_scram_credentials([alteration], request_timeout=REQUEST_TIMEOUT_S)[user]
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)
        except (KafkaException, TimeoutError) as error:
            problem = describe_kafka_error(error, bootstrap=args.bootstrap_server) \
                if isinstance(error, KafkaException) else f"no answer within {REQUEST_TIMEOUT_S:.0f}s"
            already = f" ({', '.join(done)} done)" if done else ""
            raise CommandError(f"{mechanism_name} of user {user}{already}: {problem}") from None
        done.append(mechanism_name)


def _describe_users(args: argparse.Namespace, user: str | None) -> int:
    admin = _users_admin(args)
    try:
        if user is None:
            descriptions = admin.describe_user_scram_credentials(request_timeout=REQUEST_TIMEOUT_S).result(
                timeout=REQUEST_TIMEOUT_S)
        else:
            future = admin.describe_user_scram_credentials([user], request_timeout=REQUEST_TIMEOUT_S)[user]
            descriptions = {user: future.result(timeout=REQUEST_TIMEOUT_S)}
    except KafkaException as error:
        code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
        if code != KafkaError.RESOURCE_NOT_FOUND:
            raise CommandError(describe_kafka_error(error, bootstrap=args.bootstrap_server)) from None
        descriptions = {}  # a user without credentials: no line, as kafka-configs.sh
    except TimeoutError:
        raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None
    for name in sorted(descriptions):
        infos = sorted(descriptions[name].scram_credential_infos, key=lambda info: info.mechanism.value)
        text = ", ".join(f"{info.mechanism.name.replace('_', '-')}=iterations={info.iterations}" for info in infos)
        print(f"SCRAM credential configs for user-principal '{name}' are {text}")
    return 0
