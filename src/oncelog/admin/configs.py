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
cluster-wide default), groups (which oncelog's brokers refuse) and users (SCRAM
credentials, below).

Speaks the protocol directly (oncelog.admin.wire, like `oncelog transactions`):
librdkafka's admin client cannot name the cluster-wide broker default and keeps one
synonym per key name, where Kafka lists a key once per source. A broker's own resource
goes to that broker, as kafka-configs.sh sends it.

Users are SCRAM credentials, through confluent-kafka's AdminClient (so every
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
off the command line.
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
import argparse
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
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.static.primitive import i8

from oncelog.admin.clients import (
    add_connection_arguments,
    client_config,
    describe_kafka_error,
    fetch_metadata,
    make_client,
    read_properties_file,
)
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
USERS = "users"  # SCRAM credentials: not a config resource, see the section at the end
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
MIN_SCRAM_ITERATIONS = DEFAULT_SCRAM_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, its default
REQUEST_TIMEOUT_S = 30.0  # users: each AdminClient request


def register(commands: argparse._SubParsersAction) -> None:
    configs = commands.add_parser(
        "configs", help="describe and alter topic, broker and group configs and users' SCRAM credentials "
                        "(kafka-configs.sh)",
        description="Describe and alter configs, as kafka-configs.sh does: one of --describe or --alter, "
                    "and the entity (--entity-type with --entity-name or --entity-default, or --topic, "
                    "--broker, --broker-defaults, --group).",
        epilog="Users (--entity-type users --entity-name NAME): --add-config "
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
    configs.add_argument("--entity-type", choices=sorted([*ENTITY_TYPES, USERS]),
                         help="topics, brokers, groups or users")
    configs.add_argument("--entity-name", help="the topic, broker id, group or user")
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
    if entity_type == USERS:
        return _alter_users(args, name) if args.alter else _describe_users(args, name)
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
        if args.entity_type != "brokers":  # users: Kafka's default quotas, which oncelog does not have
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


# -- users: SCRAM credentials ----------------------------------------------------------------

# kafka-configs.sh's form of a credential: [iterations=N,]password=P (P may hold commas).
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def _mechanism(name: str, option: str) -> ScramMechanism:
    try:
        return MECHANISMS[name]
    except KeyError:
        raise CommandError(f"{option} of users takes {' and '.join(MECHANISMS)} (oncelog has no client quotas), "
                           f"not {name!r}") from None


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
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())


def _users_admin(args: argparse.Namespace) -> Any:
    admin = make_client(AdminClient, client_config(args))
    fetch_metadata(admin, args)  # a clear error if the cluster is not reachable (or refuses the login)
    return admin


def _alter_users(args: argparse.Namespace, user: str | None) -> int:
    assert user is not None  # _entity requires one for --alter
    to_set = _credentials_to_set(args)
    to_delete = _names(args.delete_config)
    for name in to_delete:
        _mechanism(name, "--delete-config")
        if name in to_set:
            raise CommandError(f"{name} is both added and deleted")
    # Kafka's order (deletions, then upsertions); credentials are checked before anything is sent.
    alterations: list[tuple[str, Any]] = [(name, UserScramCredentialDeletion(user, MECHANISMS[name]))
                                          for name in to_delete]
    alterations += [(name, _upsertion(user, name, credential)) for name, credential in to_set.items()]
    if not alterations:
        raise CommandError("--alter needs --add-config, --add-config-file or --delete-config")
    admin = _users_admin(args)
    done: list[str] = []
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
    print(f"Completed updating config for user {user}.")
    return 0


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
