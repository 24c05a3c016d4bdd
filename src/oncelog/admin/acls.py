"""`oncelog acls`: add, list and remove ACLs, like kafka-acls.sh.

    oncelog acls --add --allow-principal User:alice --operation Write --topic orders
    oncelog acls --add --allow-principal User:bob --consumer --topic orders --group billing
    oncelog acls --list [--topic orders] [--resource-pattern-type match] [--principal User:alice]
    oncelog acls --remove --allow-principal User:alice --operation Write --topic orders [--force]

Owns the command line: which bindings and filters the options mean (Kafka's
AclCommand: principals x operations x hosts per resource, the --producer and --consumer
sets) and how they print (`ResourcePattern(resourceType=TOPIC, name=orders,
patternType=LITERAL)`, `(principal=User:alice, host=*, operation=WRITE,
permissionType=ALLOW)`). Built on confluent-kafka's AdminClient (CreateAcls,
DescribeAcls, DeleteAcls); operation and resource names, and which operations each
resource type has, come from oncelog.security.acl.

librdkafka drops DescribeAcls' top-level error: a broker without an authorizer
(SECURITY_DISABLED) and a principal that may not describe the cluster
(CLUSTER_AUTHORIZATION_FAILED) both come back as an empty list. So an empty `--list`
asks again: the broker's `authorizer.class.name` (DescribeConfigs) tells the first, the
cluster's authorized operations (DescribeCluster) the second.

Deviations from kafka-acls.sh:
- `--remove` without `--operation` removes every operation of the named principals, and
  without `--allow-host`/`--deny-host` every host (Kafka: only `All` entries from `*`).
- `--principal` also narrows `--remove` (Kafka: `--list` only).
- `--remove` prints what it removed; the confirmation is read from stdin (Kafka needs a
  console), and no answer there is an error.
- `--cluster` always means the literal `kafka-cluster` pattern, whatever
  `--resource-pattern-type` says (Kafka drops it unless the type is literal).
- Not here, because librdkafka cannot send them: `--user-principal`,
  `--delegation-token`, and the operations CreateTokens, DescribeTokens, TwoPhaseCommit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import admin as confluent

from oncelog.admin.clients import (
    add_connection_arguments,
    client_config,
    describe_kafka_error,
    fetch_metadata,
    make_client,
)
from oncelog.errors import CommandError
from oncelog.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    principal_error,
    supported_operations,
)

REQUEST_TIMEOUT_S = 30.0
NO_AUTHORIZER = "SECURITY_DISABLED: no authorizer is configured on the broker (authorizer.class.name)"
# What librdkafka can carry (its enums stop at IDEMPOTENT_WRITE and TRANSACTIONAL_ID).
SENDABLE_OPERATIONS = frozenset(AclOperation(o.value) for o in confluent.AclOperation)
RESOURCE_OPTIONS = "--topic, --group, --transactional-id or --cluster"
# The --producer and --consumer sets, by resource type (the cluster's: with --idempotent).
PRODUCER_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.WRITE, AclOperation.DESCRIBE),
    ResourceType.CLUSTER: (AclOperation.IDEMPOTENT_WRITE,),
}
CONSUMER_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.DESCRIBE),
    ResourceType.GROUP: (AclOperation.READ,),
}


def _operation_name(operation: AclOperation) -> str:
    """Kafka's name for an operation on the command line: IDEMPOTENT_WRITE -> IdempotentWrite."""
    return "".join(word.capitalize() for word in operation.name.split("_"))


def _normalized(name: str) -> str:
    return name.replace("_", "").replace("-", "").strip().upper()


OPERATIONS_BY_NAME = {_normalized(o.name): o for o in AclOperation if o >= AclOperation.ALL}
OPERATION_NAMES = ", ".join(_operation_name(o) for o in AclOperation
                            if o >= AclOperation.ALL and o in SENDABLE_OPERATIONS)
PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
                 "match": PatternType.MATCH, "any": PatternType.ANY}


@dataclass(frozen=True, slots=True, order=True)
class Pattern:
    """A resource pattern, or a filter of them (name None: any name; type ANY or MATCH)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def __str__(self) -> str:  # Kafka's ResourcePattern / ResourcePatternFilter
        name = "<any>" if self.name is None else self.name
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True, order=True)
class Entry:
    """An access control entry, or a filter of them (None: any principal or host)."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:  # Kafka's AccessControlEntry / AccessControlEntryFilter
        return (f"(principal={'<any>' if self.principal is None else self.principal}, "
                f"host={'<any>' if self.host is None else self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


def register(commands: argparse._SubParsersAction) -> None:
    acls = commands.add_parser(
        "acls", help="add, list and remove ACLs (kafka-acls.sh)",
        description="Add, list and remove ACLs, as kafka-acls.sh does: one of --add, --list or --remove; "
                    f"the resources ({RESOURCE_OPTIONS}, with --resource-pattern-type); the principals "
                    "(--allow-principal, --deny-principal) and --operation, or the --producer / --consumer "
                    "sets. The broker needs authorizer.class.name (and the user Cluster ALTER to add or "
                    "remove, DESCRIBE to list).",
        epilog="Deviations from kafka-acls.sh: --remove without --operation removes every operation, "
               "and without --allow-host/--deny-host every host, of the named principals; --principal "
               "also narrows --remove; --remove asks on stdin (y to go on) unless --force. "
               "librdkafka cannot send --user-principal, --delegation-token, CreateTokens, DescribeTokens "
               "or TwoPhaseCommit.",
    )
    add_connection_arguments(acls)
    action = acls.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs (asks first, unless --force)")
    action.add_argument("--list", action="store_true", help="list ACLs (all, or those of the resources given)")
    acls.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                      help="principal to allow, e.g. User:alice (User:* is everyone); repeatable")
    acls.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                      help="principal to deny (deny wins over allow); repeatable")
    acls.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                      help="host the allowed principals may connect from (default: *; --remove: any); repeatable")
    acls.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                      help="host the denied principals are denied from (default: *; --remove: any); repeatable")
    acls.add_argument("--operation", action="append", default=[], metavar="OP",
                      help="operation to allow or deny, repeatable (default: All; --remove: any); one of "
                           f"{OPERATION_NAMES} (any case)")
    acls.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                      help="topic resource ('*': every topic); repeatable")
    acls.add_argument("--group", action="append", default=[], metavar="GROUP",
                      help="consumer group resource ('*': every group); repeatable")
    acls.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                      help="transactional id resource ('*': every id); repeatable")
    acls.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    acls.add_argument("--resource-pattern-type", type=str.lower, choices=list(PATTERN_TYPES), default="literal",
                      help="literal (default) or prefixed; to list or remove also any (every pattern type, "
                           "the exact name) or match (every pattern that applies to the name)")
    acls.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                      help="with --list or --remove: only this principal's ACLs; repeatable")
    acls.add_argument("--producer", action="store_true",
                      help="the producer set: Write, Describe, Create on --topic; Write, Describe on "
                           "--transactional-id")
    acls.add_argument("--idempotent", action="store_true",
                      help="with --producer: also IdempotentWrite on the cluster")
    acls.add_argument("--consumer", action="store_true",
                      help="the consumer set: Read, Describe on --topic; Read on --group")
    acls.add_argument("--force", action="store_true", help="with --remove: do not ask for confirmation")
    acls.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    pattern_type = PATTERN_TYPES[args.resource_pattern_type]
    if args.list:
        return _list(args, _patterns(args, pattern_type, required=False))
    if args.add:
        if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise CommandError(f"a --resource-pattern-type of {args.resource_pattern_type!r} is not valid "
                               "when adding ACLs (literal or prefixed)")
        if not args.allow_principal and not args.deny_principal:
            raise CommandError("--add needs --allow-principal or --deny-principal")
        return _add(args, _bindings(args, _patterns(args, pattern_type, required=True), adding=True))
    return _remove(args, _bindings(args, _patterns(args, pattern_type, required=True), adding=False))


def _check_options(args: argparse.Namespace) -> None:
    """Kafka's AclCommandOptions.checkArgs, as one-line errors."""
    if args.list:
        given = [option for option, value in (
            ("--producer", args.producer), ("--consumer", args.consumer), ("--allow-principal", args.allow_principal),
            ("--deny-principal", args.deny_principal), ("--allow-host", args.allow_host),
            ("--deny-host", args.deny_host)) if value]  # --force is accepted, as kafka-acls.sh does
        if given:
            raise CommandError(f"{given[0]} does not go with --list (use --principal to pick a principal)")
    if args.add and args.principal:
        raise CommandError("--principal goes with --list and --remove; --add takes --allow-principal or "
                           "--deny-principal")
    if args.principal and (args.producer or args.consumer) and args.remove:
        raise CommandError("--principal does not go with --producer or --consumer; use --allow-principal")
    if args.principal and (args.allow_principal or args.deny_principal):
        raise CommandError("--principal and --allow-principal/--deny-principal exclude each other")
    if args.allow_host and not args.allow_principal:
        raise CommandError("--allow-host goes with --allow-principal")
    if args.deny_host and not args.deny_principal:
        raise CommandError("--deny-host goes with --deny-principal")
    for role, given in (("--producer", args.producer), ("--consumer", args.consumer)):
        if given and (args.operation or args.deny_principal):
            raise CommandError(f"{role} sets the operations itself: no --operation, --deny-principal or --deny-host")
    if args.producer and not args.topic:
        raise CommandError("--producer needs --topic")
    if args.idempotent and not args.producer:
        raise CommandError("--idempotent goes with --producer")
    if args.consumer and (not args.topic or not args.group):
        raise CommandError("--consumer needs --topic and --group")
    if (args.producer or args.consumer) and args.cluster:
        raise CommandError("--producer and --consumer take no --cluster (--idempotent adds the cluster ACL)")
    if args.consumer and not args.producer and args.transactional_id:
        raise CommandError("--consumer takes no --transactional-id (that is --producer's)")
    if args.producer and not args.consumer and args.group:
        raise CommandError("--producer takes no --group (that is --consumer's)")
    for option, principals in (("--allow-principal", args.allow_principal), ("--deny-principal", args.deny_principal),
                               ("--principal", args.principal)):
        for principal in principals:
            problem = principal_error(principal.strip())
            if problem is not None:
                raise CommandError(f"{option}: {problem}")


def _patterns(args: argparse.Namespace, pattern_type: PatternType, *, required: bool) -> list[Pattern]:
    """The resources the options name, in the order given (Kafka's getResourceFilter)."""
    patterns = [Pattern(ResourceType.TOPIC, name.strip(), pattern_type) for name in args.topic]
    patterns += [Pattern(ResourceType.GROUP, name.strip(), pattern_type) for name in args.group]
    patterns += [Pattern(ResourceType.TRANSACTIONAL_ID, name, pattern_type) for name in args.transactional_id]
    if args.cluster or args.idempotent:
        patterns.append(Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    if required and not patterns:
        raise CommandError(f"{'--add' if args.add else '--remove'} needs a resource: {RESOURCE_OPTIONS}")
    return list(dict.fromkeys(patterns))


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    operations = []
    for name in args.operation:
        operation = OPERATIONS_BY_NAME.get(_normalized(name))
        if operation is None:
            raise CommandError(f"--operation: unknown operation {name!r}; one of {OPERATION_NAMES}")
        if operation not in SENDABLE_OPERATIONS:
            raise CommandError(f"--operation {_operation_name(operation)}: librdkafka (the admin client oncelog "
                               "uses) cannot send this operation")
        operations.append(operation)
    return list(dict.fromkeys(operations))


def _bindings(args: argparse.Namespace, patterns: list[Pattern], *, adding: bool) -> dict[Pattern, list[Entry]]:
    """The entries to add, or to remove, for each resource (Kafka's getResourceFilterToAcls).
    Removing: an empty list means every entry of the resource."""

    def entries(operations: Iterable[AclOperation]) -> list[Entry]:
        made = []
        for principals, hosts, permission in (
                (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
            host_values: list[str | None] = [h.strip() for h in hosts] or [WILDCARD_HOST if adding else None]
            made += [Entry(principal.strip(), host, operation, permission)
                     for principal in principals for operation in operations for host in host_values]
        made += [Entry(principal.strip(), None, AclOperation.ANY, AclPermissionType.ANY)
                 for principal in args.principal]
        return list(dict.fromkeys(made))

    by_pattern: dict[Pattern, list[Entry]] = {}
    if not args.producer and not args.consumer:
        operations = _operations(args) or [AclOperation.ALL if adding else AclOperation.ANY]
        for pattern in patterns:
            by_pattern[pattern] = entries(operations)
    for given, operations_by_type in ((args.producer, PRODUCER_OPERATIONS), (args.consumer, CONSUMER_OPERATIONS)):
        if not given:
            continue
        for pattern in patterns:
            if pattern.resource_type in operations_by_type:
                existing = by_pattern.setdefault(pattern, [])
                existing += [e for e in entries(operations_by_type[pattern.resource_type]) if e not in existing]
    for pattern, pattern_entries in by_pattern.items():
        valid = supported_operations(pattern.resource_type) | {AclOperation.ALL, AclOperation.ANY}
        unsupported = sorted({e.operation for e in pattern_entries} - valid)
        if unsupported:
            names = ", ".join(_operation_name(o) for o in sorted(valid - {AclOperation.ANY}))
            raise CommandError(f"--operation {_operation_name(unsupported[0])} does not apply to "
                               f"{pattern.resource_type.name}; it has {names}")
    return by_pattern


# -- talking to the cluster ------------------------------------------------------------------


def _admin(args: argparse.Namespace) -> Any:
    admin = make_client(confluent.AdminClient, client_config(args))
    fetch_metadata(admin, args)  # a clear error if the cluster is not reachable (or refuses the login)
    return admin


def _wait(future: Any, args: argparse.Namespace) -> Any:
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        raise CommandError(_error_text(error, args)) from None
    except TimeoutError:
        raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None


def _error_text(error: KafkaException, args: argparse.Namespace) -> str:
    if error.args and isinstance(error.args[0], KafkaError) and error.args[0].code() == KafkaError.SECURITY_DISABLED:
        return NO_AUTHORIZER
    return describe_kafka_error(error, bootstrap=args.bootstrap_server)


_CLIENT_RESOURCE_TYPES = {ResourceType.TOPIC: confluent.ResourceType.TOPIC,
                          ResourceType.GROUP: confluent.ResourceType.GROUP,
                          ResourceType.CLUSTER: confluent.ResourceType.BROKER,  # librdkafka's name for 4
                          ResourceType.TRANSACTIONAL_ID: confluent.ResourceType.TRANSACTIONAL_ID,
                          ResourceType.ANY: confluent.ResourceType.ANY}


def _client_binding(pattern: Pattern, entry: Entry, *, as_filter: bool) -> Any:
    make: Any = confluent.AclBindingFilter if as_filter else confluent.AclBinding  # stubs: str, not str | None
    return make(_CLIENT_RESOURCE_TYPES[pattern.resource_type], pattern.name,
                confluent.ResourcePatternType(pattern.pattern_type.value), entry.principal, entry.host,
                confluent.AclOperation(entry.operation.value), confluent.AclPermissionType(entry.permission_type.value))


ANY_ENTRY = Entry(None, None, AclOperation.ANY, AclPermissionType.ANY)


def _from_client(binding: Any) -> tuple[Pattern, Entry]:
    return (Pattern(ResourceType.from_code(binding.restype.value), binding.name,
                    PatternType.from_code(binding.resource_pattern_type.value)),
            Entry(binding.principal, binding.host, AclOperation.from_code(binding.operation.value),
                  AclPermissionType.from_code(binding.permission_type.value)))


def _describe(admin: Any, args: argparse.Namespace, pattern: Pattern) -> dict[Pattern, set[Entry]]:
    found: dict[Pattern, set[Entry]] = {}
    bindings = _wait(admin.describe_acls(_client_binding(pattern, ANY_ENTRY, as_filter=True),
                                         request_timeout=REQUEST_TIMEOUT_S), args)
    for binding in bindings:
        resource, entry = _from_client(binding)
        found.setdefault(resource, set()).add(entry)
    return found


def _print_entries(heading: str, entries: Iterable[Entry], *, leading_space: bool) -> None:
    """Kafka's layout: the heading, one tab-indented entry a line, then a blank line."""
    lines = "\n".join(f"\t{entry}" for entry in entries)
    print(f"{heading}\n{' ' if leading_space else ''}{lines}\n")


def _add(args: argparse.Namespace, by_pattern: dict[Pattern, list[Entry]]) -> int:
    admin = _admin(args)
    for pattern, entries in by_pattern.items():
        existing = _describe(admin, args, pattern).get(pattern, set())
        new = []
        for entry in entries:
            if entry in existing:
                print(f"Acl (pattern={pattern}, entry={entry}) already exists.")
            else:
                new.append(entry)
        if not new:
            continue
        _print_entries(f"Adding ACLs for resource `{pattern}`: ", new, leading_space=True)
        sys.stdout.flush()
        futures = admin.create_acls([_client_binding(pattern, entry, as_filter=False) for entry in new],
                                    request_timeout=REQUEST_TIMEOUT_S)
        for future in futures.values():
            _wait(future, args)
    return 0


def _list(args: argparse.Namespace, patterns: list[Pattern]) -> int:
    admin = _admin(args)
    found: dict[Pattern, set[Entry]] = {}
    for pattern in patterns or [Pattern(ResourceType.ANY, None, PatternType.ANY)]:
        for resource, entries in _describe(admin, args, pattern).items():
            found.setdefault(resource, set()).update(entries)
    if not found:
        _check_empty_listing(admin, args)
    principals = list(dict.fromkeys(p.strip() for p in args.principal))
    for principal in principals or [None]:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for resource in sorted(found):
            shown = sorted(e for e in found[resource] if principal is None or e.principal == principal)
            if shown:
                _print_entries(f"Current ACLs for resource `{resource}`:", shown, leading_space=False)
    return 0


def _check_empty_listing(admin: Any, args: argparse.Namespace) -> None:
    """An empty DescribeAcls answer may be an error librdkafka dropped: find out which."""
    cluster = _wait(admin.describe_cluster(include_authorized_operations=True, request_timeout=REQUEST_TIMEOUT_S),
                    args)
    node = cluster.controller if cluster.controller is not None else cluster.nodes[0]
    resource = confluent.ConfigResource(confluent.ResourceType.BROKER, str(node.id))
    try:
        configs = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)[resource].result(
            timeout=REQUEST_TIMEOUT_S)
    except (KafkaException, TimeoutError):
        configs = None  # e.g. no Cluster DESCRIBE_CONFIGS: then there is an authorizer
    authorizer = configs.get("authorizer.class.name") if configs is not None else None
    if configs is not None and (authorizer is None or not authorizer.value):
        raise CommandError(NO_AUTHORIZER)
    # Asked for, Kafka answers 0 without Cluster DESCRIBE, which librdkafka hands over as None.
    if confluent.AclOperation.DESCRIBE not in (cluster.authorized_operations or ()):
        raise CommandError("CLUSTER_AUTHORIZATION_FAILED: this user may not describe ACLs (needs Cluster DESCRIBE)")


def _remove(args: argparse.Namespace, by_pattern: dict[Pattern, list[Entry]]) -> int:
    admin = _admin(args)
    for pattern, entries in by_pattern.items():
        if not entries:
            question = f"Are you sure you want to delete all ACLs for resource filter `{pattern}`? (y/n)"
        else:
            lines = "\n".join(f"\t{entry}" for entry in entries)
            question = f"Are you sure you want to remove ACLs: \n {lines}\n from resource filter `{pattern}`? (y/n)"
        if not args.force and not _confirm(question):
            continue
        filters = [_client_binding(pattern, entry, as_filter=True) for entry in entries or [ANY_ENTRY]]
        removed: dict[Pattern, set[Entry]] = {}
        for future in admin.delete_acls(filters, request_timeout=REQUEST_TIMEOUT_S).values():
            for binding in _wait(future, args):
                resource, entry = _from_client(binding)
                removed.setdefault(resource, set()).add(entry)
        if not removed:
            print(f"No ACLs matched resource filter `{pattern}`.")
        for resource in sorted(removed):
            _print_entries(f"Removed ACLs for resource `{resource}`:", sorted(removed[resource]),
                           leading_space=False)
    return 0


def _confirm(question: str) -> bool:
    print(question, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        raise CommandError("--remove asks for confirmation on stdin and got none (use --force to not ask)")
    return answer.strip().lower() == "y"
