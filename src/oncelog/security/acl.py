"""Kafka's ACL vocabulary: resource types, pattern types, operations and permission types
with their wire codes, ACL bindings and the filters that select them, what CreateAcls
refuses, and which operations each resource type has. Pure values: no bytes, no I/O.

An ACL binding reads "principal P is ALLOWED/DENIED operation O from host H on the
resources matched by pattern (type, name, LITERAL/PREFIXED)". A LITERAL pattern named
"*" matches every resource of its type; a PREFIXED pattern matches the names that start
with its name. Principals are "Type:name" strings ("User:alice"); "User:*" is every
principal, host "*" every host.

Filters (DescribeAcls, DeleteAcls) select bindings: a None string matches anything, an
ANY enum value matches any value, and pattern type MATCH selects the bindings that would
apply to the named resource (the literal one, the "*" wildcard and the covering prefixes).

The authorizer itself is oncelog.security.authorizer; persistence oncelog.security.acl_store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Self

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the only name a CLUSTER resource has

# What Metadata, DescribeCluster, DescribeGroups... answer in an authorized-operations
# field the client did not ask for (Kafka's Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class _KafkaCode(IntEnum):
    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member with wire code `code`, or UNKNOWN for a code this broker does not
        know, as Kafka's `fromCode` answers."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)  # every one of these enums has UNKNOWN = 0


class ResourceType(_KafkaCode):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaCode):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: the patterns that apply to the filter's name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaCode):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2  # in a binding: every operation
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939


class AclPermissionType(_KafkaCode):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


CONCRETE_RESOURCE_TYPES = tuple(t for t in ResourceType if t > ResourceType.ANY)
CONCRETE_OPERATIONS = tuple(o for o in AclOperation if o > AclOperation.ALL)  # what a request asks for


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice"; "User:*" for every principal
    host: str  # a client address; "*" for every host
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        entry = self.entry
        return (f"{entry.principal} is {entry.permission_type.name} {entry.operation.name} from host "
                f"{entry.host} on {self.pattern}")

    def as_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding (Kafka's AclBinding.toFilter)."""
        pattern, entry = self.pattern, self.entry
        return AclBindingFilter(
            ResourcePatternFilter(pattern.resource_type, pattern.name, pattern.pattern_type),
            AccessControlEntryFilter(entry.principal, entry.host, entry.operation, entry.permission_type),
        )


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type is not PatternType.MATCH:
            return self.name == pattern.name
        # MATCH: the patterns an access to the resource named `self.name` would consult.
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type is AclPermissionType.ANY or self.permission_type == entry.permission_type))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = ResourcePatternFilter()
    entry_filter: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)


MATCH_ALL = AclBindingFilter()


def principal_error(principal: str) -> str | None:
    """Why `principal` is not a "Type:name" principal (Kafka's SecurityUtils.parseKafkaPrincipal), or None."""
    if ":" not in principal:
        return f"expected a string in format principalType:principalName but got {principal}"
    return None


def validate_new_binding(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses `binding` with INVALID_REQUEST, in Kafka's words, or None.

    The checks of Kafka's broker (AclApis: the CLUSTER name, an empty name) come first,
    then the controller's (AclControlManager.validateNewAcl), then the principal's form.
    Deviation: Kafka's KRaft controller fails the whole request on a malformed principal;
    this refuses just that binding (as Kafka's ZooKeeper authorizer did).
    """
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not pattern.name:
        return "Invalid empty resource name"
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {entry.operation.name}"
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {entry.permission_type.name}"
    return principal_error(entry.principal)


def validate_filter(binding_filter: AclBindingFilter) -> str | None:
    """Why DeleteAcls refuses `binding_filter` with INVALID_REQUEST, in Kafka's words, or None."""
    pattern, entry = binding_filter.pattern_filter, binding_filter.entry_filter
    if pattern.resource_type is ResourceType.UNKNOWN or pattern.pattern_type is PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if entry.operation is AclOperation.UNKNOWN or entry.permission_type is AclPermissionType.UNKNOWN:
        return "Unknown entryFilter."
    return None


_O = AclOperation
# Kafka's AclEntry.supportedOperations. Deviation: Kafka 3.9+ adds DESCRIBE_CONFIGS and
# ALTER_CONFIGS to GROUP for KIP-848 group configs, which oncelog does not have.
SUPPORTED_OPERATIONS: Mapping[ResourceType, frozenset[AclOperation]] = MappingProxyType({
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
})


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    try:
        return SUPPORTED_OPERATIONS[resource_type]
    except KeyError:
        raise ValueError(f"{resource_type.name} is not a concrete resource type") from None


def authorized_operations_bits(operations: Iterable[AclOperation]) -> int:
    """The authorized-operations field of Metadata, DescribeGroups...: bit `code` set for
    each operation (Kafka's Utils.to32BitField)."""
    bits = 0
    for operation in operations:
        bits |= 1 << operation
    return bits


# What Kafka answers for each resource type when no authorizer is configured: every
# operation the type supports (TOPIC 3576, GROUP 3400, CLUSTER 8096, TRANSACTIONAL_ID 33040,
# DELEGATION_TOKEN 256, USER 24576).
NO_AUTHORIZER_OPERATIONS_BITS: Mapping[ResourceType, int] = MappingProxyType({
    resource_type: authorized_operations_bits(operations) for resource_type, operations in SUPPORTED_OPERATIONS.items()
})
