"""The broker's authorizer: Kafka's StandardAuthorizer over an in-memory set of ACL
bindings. Where the bindings come from (a file, the cluster's metadata store) is the
caller's business: it hands them in and calls add / remove / replace_all on changes.

How `authorize` decides, as Kafka does:

- A super user may do anything.
- The ACLs that apply to a resource are its LITERAL pattern, the LITERAL "*" of its type
  and every PREFIXED pattern whose name starts the resource's name; of their entries, those
  of the principal or of "User:*", from the client's host or "*", count.
- A counting DENY for the operation (or for ALL) refuses, whatever allows it.
- Else a counting ALLOW for the operation allows it; ALLOW ALL allows everything, ALLOW
  READ, WRITE, DELETE or ALTER also allows DESCRIBE, and ALLOW ALTER_CONFIGS also allows
  DESCRIBE_CONFIGS (only ALLOWs imply: DENY READ does not deny DESCRIBE).
- Else, when no ACL at all applies to the resource (whoever it names),
  `allow.everyone.if.no.acl.found` decides; when some do, the answer is no.

The index is by resource type, then by exact name for LITERAL patterns ("*" included) and
by prefix for PREFIXED ones, then by principal: an authorization is a few dict look-ups
(one per distinct prefix length of the type) and a scan of the principal's own entries.
Single-threaded, like the rest of the broker: call it from the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable

from oncelog.security.acl import (
    CONCRETE_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    supported_operations,
    validate_new_binding,
)

__all__ = ["StandardAuthorizer"]

_DENY = AclPermissionType.DENY
_ALLOW = AclPermissionType.ALLOW
_ALL = AclOperation.ALL

# For each operation a request needs: the operations of the ALLOW entries that grant it,
# and of the DENY entries that refuse it.
_IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER})
_ALLOWED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    operation: frozenset({operation, _ALL})
    | (_IMPLIES_DESCRIBE if operation is AclOperation.DESCRIBE else frozenset())
    | ({AclOperation.ALTER_CONFIGS} if operation is AclOperation.DESCRIBE_CONFIGS else frozenset())
    for operation in CONCRETE_OPERATIONS
}
_DENIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    operation: frozenset({operation, _ALL}) for operation in CONCRETE_OPERATIONS
}

# (host, operation, permission type) of one ACL, under its pattern and principal.
_Entry = tuple[str, AclOperation, AclPermissionType]
_EntriesByPrincipal = dict[str, list[_Entry]]


class _TypeIndex:
    """The ACLs of one resource type."""

    __slots__ = ("literal", "prefix_lengths", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, _EntriesByPrincipal] = {}  # by resource name, "*" included
        self.prefixed: dict[str, _EntriesByPrincipal] = {}  # by prefix
        self.prefix_lengths: tuple[int, ...] = ()  # of the prefixes, ascending

    def names(self, pattern_type: PatternType) -> dict[str, _EntriesByPrincipal]:
        return self.literal if pattern_type is PatternType.LITERAL else self.prefixed


class StandardAuthorizer:
    def __init__(self, super_users: frozenset[str], allow_everyone_if_no_acl_found: bool,
                 bindings: Iterable[AclBinding] = ()) -> None:
        """`super_users`: principals ("User:admin") allowed everything (`super.users`)."""
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: dict[AclBinding, None] = {}  # an insertion-ordered set
        self._types: dict[ResourceType, _TypeIndex] = {}
        self.replace_all(bindings)

    def __len__(self) -> int:
        return len(self._bindings)

    # -- decisions (the request path) --

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """May `principal`, connected from `host`, perform `operation` on the resource
        (`resource_type`, `name`)?"""
        if principal in self.super_users:
            return True
        try:
            allowing, denying = _ALLOWED_BY[operation], _DENIED_BY[operation]
        except KeyError:
            raise ValueError(f"cannot authorize operation {operation!r}: not a concrete operation") from None
        index = self._types.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        # The ACL groups that apply to the resource, by principal.
        groups = []
        group = index.literal.get(name)
        if group is not None:
            groups.append(group)
        if name != WILDCARD_RESOURCE:
            group = index.literal.get(WILDCARD_RESOURCE)
            if group is not None:
                groups.append(group)
        if index.prefix_lengths:
            prefixed = index.prefixed
            name_length = len(name)
            for length in index.prefix_lengths:
                if length > name_length:
                    break
                group = prefixed.get(name[:length])
                if group is not None:
                    groups.append(group)
        if not groups:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for group in groups:
            for entries in (group.get(principal), group.get(WILDCARD_PRINCIPAL)):
                if entries is None:
                    continue
                for acl_host, acl_operation, permission_type in entries:
                    if acl_host != host and acl_host != WILDCARD_HOST:
                        continue
                    if permission_type is _DENY:
                        if acl_operation in denying:
                            return False  # a DENY is final
                    elif acl_operation in allowing:
                        allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Is there any resource of `resource_type` on which `principal` may perform
        `operation`? Kafka's default Authorizer.authorizeByResourceType (KIP-679: an
        idempotent producer needs WRITE on some topic rather than IDEMPOTENT_WRITE on
        the cluster), with its approximations: no implied operations; a literal ALLOW
        counts unless a DENY of the same literal name or of a prefix of it exists; a
        prefixed ALLOW unless a prefixed DENY of a prefix of it exists; a "*" DENY refuses
        and a "*" ALLOW allows."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type needs a concrete resource type, not {resource_type.name}")
        if operation not in _DENIED_BY:
            raise ValueError(f"authorize_by_resource_type needs a concrete operation, not {operation.name}")
        # Kafka asks about a made-up name first, so that a super user (and, when no ACL
        # applies to that name, allow.everyone.if.no.acl.found) is allowed whatever the DENYs.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        denied_literals: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed_literals: set[str] = set()
        allowed_prefixes: set[str] = set()
        wildcard_allowed = False
        for binding in self._bindings:
            pattern, entry = binding.pattern, binding.entry
            if pattern.resource_type is not resource_type:
                continue
            if entry.host != host and entry.host != WILDCARD_HOST:
                continue
            if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
                continue
            if entry.operation is not operation and entry.operation is not _ALL:
                continue
            literal = pattern.pattern_type is PatternType.LITERAL
            if entry.permission_type is _DENY:
                if literal and pattern.name == WILDCARD_RESOURCE:
                    return False
                (denied_literals if literal else denied_prefixes).add(pattern.name)
            elif entry.permission_type is _ALLOW:
                if literal and pattern.name == WILDCARD_RESOURCE:
                    wildcard_allowed = True  # wins over every DENY but a "*" one
                else:
                    (allowed_literals if literal else allowed_prefixes).add(pattern.name)
        if wildcard_allowed:
            return True

        def denied_by_prefix(name: str) -> bool:
            return any(name[:length] in denied_prefixes for length in range(1, len(name) + 1))

        if any(name not in denied_literals and not denied_by_prefix(name) for name in allowed_literals):
            return True
        return any(not denied_by_prefix(name) for name in allowed_prefixes)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[AclOperation]:
        """The operations of the resource's type that `principal` may perform on it (for
        the authorized-operations fields of Metadata, DescribeGroups, DescribeCluster...)."""
        return frozenset(operation for operation in supported_operations(resource_type)
                         if self.authorize(principal, host, operation, resource_type, name))

    # -- the ACLs (the admin path) --

    def describe(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings `binding_filter` matches, in the order they were added."""
        return [binding for binding in self._bindings if binding_filter.matches(binding)]

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Add `bindings` (those already present are left as they are). Raises
        ValueError, adding none, when one is not a valid binding (validate_new_binding
        is the caller's check)."""
        new = [binding for binding in dict.fromkeys(bindings) if binding not in self._bindings]
        for binding in new:
            _check(binding)
        touched = set()
        for binding in new:
            self._bindings[binding] = None
            self._index(binding)
            touched.add(binding.pattern.resource_type)
        self._refresh_prefix_lengths(touched)

    def remove(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove the bindings `binding_filter` matches; returns them."""
        removed = self.describe(binding_filter)
        touched = set()
        for binding in removed:
            del self._bindings[binding]
            self._unindex(binding)
            touched.add(binding.pattern.resource_type)
        self._refresh_prefix_lengths(touched)
        return removed

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        """Make `bindings` the whole set (a load from a store, a change seen by a watch).
        Raises ValueError, changing nothing, when one is not a valid binding."""
        new = dict.fromkeys(bindings)
        for binding in new:
            _check(binding)
        self._bindings, self._types = new, {}
        for binding in new:
            self._index(binding)
        self._refresh_prefix_lengths(set(self._types))

    def _index(self, binding: AclBinding) -> None:
        pattern, entry = binding.pattern, binding.entry
        index = self._types.get(pattern.resource_type)
        if index is None:
            index = self._types[pattern.resource_type] = _TypeIndex()
        by_principal = index.names(pattern.pattern_type).setdefault(pattern.name, {})
        by_principal.setdefault(entry.principal, []).append((entry.host, entry.operation, entry.permission_type))

    def _unindex(self, binding: AclBinding) -> None:
        pattern, entry = binding.pattern, binding.entry
        index = self._types[pattern.resource_type]
        names = index.names(pattern.pattern_type)
        by_principal = names[pattern.name]
        entries = by_principal[entry.principal]
        entries.remove((entry.host, entry.operation, entry.permission_type))
        # Empty groups go: an empty group would still count as "an ACL applies here".
        if not entries:
            del by_principal[entry.principal]
            if not by_principal:
                del names[pattern.name]
                if not index.literal and not index.prefixed:
                    del self._types[pattern.resource_type]

    def _refresh_prefix_lengths(self, resource_types: set[ResourceType]) -> None:
        for resource_type in resource_types:
            index = self._types.get(resource_type)
            if index is not None:
                index.prefix_lengths = tuple(sorted({len(prefix) for prefix in index.prefixed}))


def _check(binding: AclBinding) -> None:
    error = validate_new_binding(binding)
    if error is not None:
        raise ValueError(f"invalid ACL binding ({binding}): {error}")
