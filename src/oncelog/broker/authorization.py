"""The broker's ACLs: `authorizer.class.name` turns on Kafka's StandardAuthorizer
(oncelog.security.authorizer) over the ACLs CreateAcls and DeleteAcls change.

`Acls` owns the authorizer and its persistence: a standalone broker keeps the ACLs in
`<first log dir>/__acls.json`, written (atomically, fsynced) before CreateAcls or
DeleteAcls answers, and loaded at start. Handlers ask through `RequestContext.authorize`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.security.acl import AclBinding, AclBindingFilter, validate_filter, validate_new_binding
from oncelog.security.acl_store import FileAclStore
from oncelog.security.authorizer import StandardAuthorizer

log = logging.getLogger("oncelog.security")

ACLS_FILE = "__acls.json"
# The class names Kafka users set; each selects the built-in StandardAuthorizer.
AUTHORIZER_CLASS_NAMES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
})

# Kafka's error codes of the ACL APIs.
NONE, INVALID_REQUEST = 0, 42


@dataclass(frozen=True, slots=True)
class AclResult:
    error_code: int
    message: str | None = None


class Acls:
    def __init__(self, authorizer: StandardAuthorizer, store: FileAclStore) -> None:
        self.authorizer = authorizer
        self._store = store

    @classmethod
    def from_config(cls, config: BrokerConfig, directory: Path) -> Acls | None:
        """None when `authorizer.class.name` is empty (no ACLs: everything is allowed)."""
        class_name = config["authorizer.class.name"]
        if not class_name:
            return None
        if class_name not in AUTHORIZER_CLASS_NAMES:
            raise ConfigError(f"authorizer.class.name: {class_name} is not an authorizer oncelog has; use "
                              "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
        super_users = frozenset(user.strip() for user in config["super.users"].split(";") if user.strip())
        store = FileAclStore(directory / ACLS_FILE)
        bindings = store.load()
        authorizer = StandardAuthorizer(super_users, config["allow.everyone.if.no.acl.found"], bindings)
        log.info("authorizer on: %d ACLs, super users %s", len(bindings), ", ".join(sorted(super_users)) or "none")
        return cls(authorizer, store)

    def create(self, bindings: list[AclBinding]) -> list[AclResult]:
        """CreateAcls: each binding's result; the valid ones are stored before this returns."""
        results = []
        accepted = []
        for binding in bindings:
            problem = validate_new_binding(binding)
            if problem is not None:
                results.append(AclResult(INVALID_REQUEST, problem))
            else:
                accepted.append(binding)
                results.append(AclResult(NONE))
        new = [binding for binding in dict.fromkeys(accepted) if not self.authorizer.describe(binding.as_filter())]
        if new:
            self._store.save([*self.authorizer.describe(AclBindingFilter()), *new])
            self.authorizer.add(new)
            for binding in new:
                log.info("ACL added: %s", binding)
        return results

    def delete(self, filters: list[AclBindingFilter]) -> list[tuple[AclResult, list[AclBinding]]]:
        """DeleteAcls: per filter, its result and the bindings it removed."""
        everything = self.authorizer.describe(AclBindingFilter())
        removed: dict[AclBinding, None] = {}
        results: list[tuple[AclResult, list[AclBinding]]] = []
        for binding_filter in filters:
            problem = validate_filter(binding_filter)
            if problem is not None:
                results.append((AclResult(INVALID_REQUEST, problem), []))
                continue
            matched = [binding for binding in everything if binding_filter.matches(binding)]
            removed.update(dict.fromkeys(matched))
            results.append((AclResult(NONE), matched))
        if removed:
            self._store.save([binding for binding in everything if binding not in removed])
            self.authorizer.replace_all(binding for binding in everything if binding not in removed)
            for binding in removed:
                log.info("ACL removed: %s", binding)
        return results

    def describe(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        return self.authorizer.describe(binding_filter)
