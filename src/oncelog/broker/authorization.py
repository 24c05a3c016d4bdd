"""The broker's ACLs: `authorizer.class.name` turns on Kafka's StandardAuthorizer
(oncelog.security.authorizer) over the ACLs CreateAcls and DeleteAcls change.

`Acls` owns the authorizer and the ACL changes; an `AclStore` keeps the ACLs. A
standalone broker keeps them in `<first log dir>/__acls.json` (`LocalAclStore`), written
(atomically, fsynced) before CreateAcls or DeleteAcls answers, and loaded at start. In
cluster mode they are one document in the metadata quorum, shared by every broker
(oncelog.cluster.security). Handlers ask through `RequestContext.authorize`.

A change is planned on the ACLs as the store holds them (`plan(current)` returns the
new set, or None for no change); a store may run the plan again on a fresh read (the
cluster's compare-and-swap), so plans are pure (but for remembering their last result) and
idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
UNKNOWN_SERVER_ERROR, NONE, REQUEST_TIMED_OUT, INVALID_REQUEST = -1, 0, 7, 42

AclPlan = Callable[[list[AclBinding]], list[AclBinding] | None]


@dataclass(frozen=True, slots=True)
class AclResult:
    error_code: int
    message: str | None = None


class AclsNotStored(Exception):
    """The store did not take a change, or cannot tell whether it did. `retriable`: the
    metadata quorum did not answer (REQUEST_TIMED_OUT; retrying the same change is safe);
    otherwise it refused the change or its ACLs cannot be read (UNKNOWN_SERVER_ERROR)."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable

    @property
    def result(self) -> AclResult:
        return AclResult(REQUEST_TIMED_OUT if self.retriable else UNKNOWN_SERVER_ERROR, str(self))


class AclStore(Protocol):
    async def change(self, plan: AclPlan) -> None:
        """Store `plan(current ACLs)` unless it is None, and have the authorizer act on it
        before returning. Raises AclsNotStored, or StorageError from a local file."""


class LocalAclStore:
    """A standalone broker's ACLs: the file, and the authorizer that acts on them."""

    def __init__(self, file: FileAclStore, authorizer: StandardAuthorizer) -> None:
        self._file = file
        self._authorizer = authorizer

    async def change(self, plan: AclPlan) -> None:
        changed = plan(self._authorizer.describe(AclBindingFilter()))
        if changed is not None:
            self._file.save(changed)  # blocks for two fsyncs, as every standalone metadata write
            self._authorizer.replace_all(changed)


def new_authorizer(config: BrokerConfig) -> StandardAuthorizer | None:
    """The authorizer `authorizer.class.name` asks for, with no ACLs yet; None when it is
    empty (no ACLs: everything is allowed). Raises ConfigError for another class name."""
    class_name = config["authorizer.class.name"]
    if not class_name:
        return None
    if class_name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"authorizer.class.name: {class_name} is not an authorizer oncelog has; use "
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    super_users = frozenset(user.strip() for user in config["super.users"].split(";") if user.strip())
    return StandardAuthorizer(super_users, config["allow.everyone.if.no.acl.found"])


def log_authorizer(authorizer: StandardAuthorizer, where: str) -> None:
    log.info("authorizer on: %d ACLs (%s), super users %s", len(authorizer), where,
             ", ".join(sorted(authorizer.super_users)) or "none")


class Acls:
    def __init__(self, authorizer: StandardAuthorizer, store: AclStore) -> None:
        self.authorizer = authorizer
        self._store = store

    @classmethod
    def from_config(cls, config: BrokerConfig, directory: Path) -> Acls | None:
        """A standalone broker's ACLs, from `directory`/__acls.json; None when
        `authorizer.class.name` is empty (no ACLs: everything is allowed)."""
        authorizer = new_authorizer(config)
        if authorizer is None:
            return None
        file = FileAclStore(directory / ACLS_FILE)
        authorizer.replace_all(file.load())
        log_authorizer(authorizer, str(file.path))
        return cls(authorizer, LocalAclStore(file, authorizer))

    async def create(self, bindings: list[AclBinding]) -> list[AclResult]:
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
        added: list[AclBinding] = []

        def plan(current: list[AclBinding]) -> list[AclBinding] | None:
            nonlocal added
            present = set(current)
            added = [binding for binding in dict.fromkeys(accepted) if binding not in present]
            return [*current, *added] if added else None

        if accepted:
            try:
                await self._store.change(plan)
            except AclsNotStored as error:
                log.warning("CreateAcls not stored: %s", error)
                return [error.result if result.error_code == NONE else result for result in results]
        for binding in added:
            log.info("ACL added: %s", binding)
        return results

    async def delete(self, filters: list[AclBindingFilter]) -> list[tuple[AclResult, list[AclBinding]]]:
        """DeleteAcls: per filter, its result and the bindings it removed."""
        problems = [validate_filter(binding_filter) for binding_filter in filters]
        valid = [binding_filter for binding_filter, problem in zip(filters, problems, strict=True) if problem is None]
        matches: list[list[AclBinding]] = [[] for _ in valid]
        removed: dict[AclBinding, None] = {}

        def plan(current: list[AclBinding]) -> list[AclBinding] | None:
            nonlocal matches, removed
            matches = [[binding for binding in current if binding_filter.matches(binding)] for binding_filter in valid]
            removed = {binding: None for matched in matches for binding in matched}
            return [binding for binding in current if binding not in removed] if removed else None

        failure: AclResult | None = None
        if valid:
            try:
                await self._store.change(plan)
            except AclsNotStored as error:
                log.warning("DeleteAcls not stored: %s", error)
                failure = error.result
                matches = [[] for _ in valid]
        if failure is None:
            for binding in removed:
                log.info("ACL removed: %s", binding)
        results: list[tuple[AclResult, list[AclBinding]]] = []
        matched_by_valid = iter(matches)
        for problem in problems:
            if problem is not None:
                results.append((AclResult(INVALID_REQUEST, problem), []))
            else:
                results.append((failure or AclResult(NONE), next(matched_by_valid)))
        return results

    def describe(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        return self.authorizer.describe(binding_filter)
