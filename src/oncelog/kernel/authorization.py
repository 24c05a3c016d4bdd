"""The broker's ACLs: `authorizer.class.name` turns on Kafka's StandardAuthorizer
(oncelog.security.authorizer) over the ACLs CreateAcls and DeleteAcls change.

`Acls` owns the authorizer and the ACL changes; an `AclStore` keeps the ACLs. A
standalone broker keeps them in `<first log dir>/__acls.json` (`LocalAclStore`), written
(atomically, fsynced) before CreateAcls or DeleteAcls answers, and loaded at start. In
cluster mode they are one document in the metadata quorum, shared by every broker
(oncelog.cluster.security). Handlers ask through `RequestContext.authorize`.

A change is planned on the ACLs as the store holds them (`await plan(current)` returns
the new set, or None for no change); a store may run the plan again on a fresh read (the
cluster's compare-and-swap), so plans are pure (but for remembering their last result) and
idempotent. A plan paces itself over the request's bindings and filters (oncelog.pacing):
the standalone store makes one change at a time, the cluster's compare catches any other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.pacing import Pace, paced, unpaced
from oncelog.security.acl import AclBinding, AclBindingFilter, PatternType, validate_filter, validate_new_binding
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

AclPlan = Callable[[list[AclBinding]], Awaitable[list[AclBinding] | None]]


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
        self._changing = asyncio.Lock()  # one change at a time: a plan paces, on the ACLs as they are

    async def change(self, plan: AclPlan) -> None:
        async with self._changing:
            changed = await plan(self._authorizer.describe(AclBindingFilter()))
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

    async def create(self, bindings: list[AclBinding], pace: Pace = unpaced) -> list[AclResult]:
        """CreateAcls: each binding's result; the valid ones are stored before this returns.
        `pace` between the bindings."""
        results = []
        accepted: dict[AclBinding, None] = {}  # each once, in order
        for binding in bindings:
            await pace()
            problem = validate_new_binding(binding)
            if problem is not None:
                results.append(AclResult(INVALID_REQUEST, problem))
            else:
                accepted[binding] = None
                results.append(AclResult(NONE))
        added: list[AclBinding] = []

        async def plan(current: list[AclBinding]) -> list[AclBinding] | None:
            nonlocal added
            present = set(current)
            added = [binding async for binding in paced(accepted, pace) if binding not in present]
            return [*current, *added] if added else None

        if accepted:
            try:
                await self._store.change(plan)
            except AclsNotStored as error:
                log.warning("CreateAcls not stored: %s", error)
                return [error.result if result.error_code == NONE else result async for result in paced(results, pace)]
        for binding in added:
            await pace()
            log.info("ACL added: %s", binding)
        return results

    async def delete(self, filters: list[AclBindingFilter], pace: Pace = unpaced
                     ) -> list[tuple[AclResult, list[AclBinding]]]:
        """DeleteAcls: per filter, its result and the bindings it removed. `pace` between
        the filters."""
        problems = [validate_filter(binding_filter) async for binding_filter in paced(filters, pace)]
        valid = [binding_filter async for binding_filter, problem in paced(zip(filters, problems, strict=True), pace)
                 if problem is None]
        matches: list[list[AclBinding]] = [[] for _ in valid]
        removed: dict[AclBinding, None] = {}

        async def plan(current: list[AclBinding]) -> list[AclBinding] | None:
            nonlocal matches, removed
            # A filter naming a resource (but for MATCH) looks at the bindings of that name only.
            by_name: dict[str, list[AclBinding]] = {}
            for binding in current:
                by_name.setdefault(binding.pattern.name, []).append(binding)
            matches = []
            for binding_filter in valid:
                await pace()
                name, pattern_type = binding_filter.pattern_filter.name, binding_filter.pattern_filter.pattern_type
                candidates = by_name.get(name, []) if name is not None and pattern_type is not PatternType.MATCH \
                    else current
                matches.append([binding for binding in candidates if binding_filter.matches(binding)])
            removed = {}
            for matched in matches:
                await pace()
                removed.update(dict.fromkeys(matched))
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
                await pace()
                log.info("ACL removed: %s", binding)
        results: list[tuple[AclResult, list[AclBinding]]] = []
        matched_by_valid = iter(matches)
        for problem in problems:
            await pace()
            if problem is not None:
                results.append((AclResult(INVALID_REQUEST, problem), []))
            else:
                results.append((failure or AclResult(NONE), next(matched_by_valid)))
        return results

    def describe(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        return self.authorizer.describe(binding_filter)
