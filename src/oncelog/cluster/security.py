"""ACLs and SCRAM credentials in cluster mode: kept in the metadata quorum and shared by
every broker, as Kafka keeps them as records of its metadata log. Standalone brokers keep
them in files (oncelog.kernel.authorization, oncelog.security.scram_credentials).

    acls                {"v":1,"acls":[binding, ...]}      (acl_store.binding_to_json)
    scram-credentials   {"v":1,"users":{user:{mechanism:{"salt","stored_key","server_key","iterations"}}}}
                        (scram_credentials.credentials_to_json: salts and keys, never a password)

**Writes.** CreateAcls, DeleteAcls and AlterUserScramCredentials read the key, plan the
change on what it holds (never on this broker's copy, which may lag behind), and put the
result under the compare "the key is still at the revision read" ("does not exist yet"
for the first write). A failed compare means another broker wrote meanwhile: read again,
plan again, so two brokers changing the same set at once both get their change in. A
write whose answer was lost (etcd's indeterminate outcome) is read back: if the key
holds what was sent, it was applied. A quorum that does not answer gives
REQUEST_TIMED_OUT, for each ACL or user of the request; retrying is safe.

**Reads.** Every broker applies both keys from its metadata watch (`MetadataImage.acls`
and `.scram_credentials`, their `MetadataDelta` flags) to its authorizer and its
credential store. The broker that wrote waits until its own image has the write before
it answers, so its answer means it acts on the change; the others follow within their
watch's lag: milliseconds on a healthy cluster, a few seconds for a broker whose watch
was cut off from its quorum member (noticed after 3 s of silence, then resumed on another
member). A connection that already authenticated stays authenticated, as in Kafka.

**Start.** A broker reads both keys once before its listeners open, so that no request is
authorized, and no client authenticated, against an empty set (Kafka's brokers also wait
for their authorizer to load before they accept requests).

Each set is one etcd value, rewritten whole by every change: etcd takes requests up to
1.5 MiB, which is some thousands of ACLs or SCRAM users; a larger set is refused by etcd
("request is too large"), answered UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.cluster.etcd import Compare, EtcdError, EtcdUnavailable, Op
from oncelog.cluster.image import (
    MetadataDelta,
    MetadataImage,
    decode_acls,
    decode_scram_credentials,
    encode_acls,
    encode_scram_credentials,
)
from oncelog.cluster.kv import KeyValue
from oncelog.cluster.metadata_store import CAS_ATTEMPTS
from oncelog.config.broker import BrokerConfig
from oncelog.kernel.authorization import AclPlan, Acls, AclsNotStored, log_authorizer, new_authorizer
from oncelog.pacing import Pace, unpaced
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import AclBinding
from oncelog.security.acl_store import binding_from_json, binding_to_json
from oncelog.security.authorizer import StandardAuthorizer
from oncelog.security.scram_credentials import (
    FORMAT_VERSION,
    AlterationResult,
    Credentials,
    ScramCredentialStore,
    credentials_from_json,
    credentials_to_json,
    plan_alteration_paced,
)

if TYPE_CHECKING:
    from oncelog.cluster.runtime import ClusterRuntime

log = logging.getLogger("oncelog.security")

QUORUM_RETRY_PAUSE_S = 0.5  # between reads at start while the quorum does not answer


class NotStored(Exception):
    """A change was not stored, or whether it was is unknown. `retriable`: the quorum did
    not answer (REQUEST_TIMED_OUT); otherwise it refused or the key cannot be read."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class SharedDocument:
    """One key of the metadata store, changed only by compare-and-swap."""

    def __init__(self, runtime: ClusterRuntime, key: str, what: str) -> None:
        self._runtime = runtime
        self.key = key
        self.what = what

    async def read(self) -> KeyValue | None:
        """The key as the quorum has it now, waiting for the quorum if need be (start-up)."""
        while True:
            try:
                return await self._runtime.client.get(self.key)
            except EtcdUnavailable as error:
                log.info("waiting for the metadata quorum to read %s: %s", self.what, error)
                await asyncio.sleep(QUORUM_RETRY_PAUSE_S)

    async def change(self, plan: Callable[[KeyValue | None], Awaitable[bytes | None]]) -> None:
        """Put `await plan(stored key)` under a compare on what was read (nothing when it
        is None), retrying on conflicts with a fresh read, then wait until this broker's
        image has it. `plan` may run several times and must be pure but for remembering
        its last outcome, which is the one stored; it should be idempotent too (a set
        union or removal, as every plan here): a write whose answer was lost and that
        etcd applies only after the read meant to check it is then planned on once more.
        A plan may pace itself (oncelog.pacing): the compare catches any write meanwhile.
        Raises NotStored."""
        client = self._runtime.client
        lost: set[bytes] = set()  # values of writes whose answers were lost
        revision = 0
        for _ in range(CAS_ATTEMPTS):
            try:
                stored = await client.get(self.key)
            except EtcdUnavailable as error:
                raise self._unavailable(error, lost) from None
            if stored is not None and stored.value in lost:
                revision = stored.mod_revision  # a lost answer's write was applied
                break
            try:
                value = await plan(stored)
            except ValueError as error:  # MetadataFormatError too: written by a version this one cannot read
                raise NotStored(f"{self.what} in the metadata quorum cannot be read: {error}",
                                retriable=False) from None
            if value is None:  # nothing to change: answer once this broker acts on what made it so
                revision = stored.mod_revision if stored is not None else 0
                break
            compare = (Compare.mod_revision(self.key, "=", stored.mod_revision) if stored is not None
                       else Compare.create_revision(self.key, "=", 0))
            try:
                result = await client.txn([compare], [Op.put(self.key, value)])
            except EtcdUnavailable as error:
                if not error.indeterminate:
                    raise self._unavailable(error, lost) from None
                lost.add(value)  # read back: applied, or planned again
                continue
            except EtcdError as error:  # e.g. "request is too large"
                raise NotStored(f"the metadata quorum refused {self.what}: {error.message}", retriable=False) from None
            if result.succeeded:
                revision = result.revision
                break
            # Another broker wrote meanwhile: plan again on what it wrote.
        else:
            raise NotStored(f"{self.what} kept changing during {CAS_ATTEMPTS} attempts", retriable=True)
        if not await self._runtime.wait_for_revision(revision):
            log.warning("%s stored at revision %d, but this broker's metadata watch has not reached it yet; "
                        "it acts on the change once it does", self.what, revision)

    def _unavailable(self, error: EtcdUnavailable, lost: set[bytes]) -> NotStored:
        outcome = " (an earlier attempt may have been stored)" if lost else ""
        return NotStored(f"the metadata quorum did not answer: {error.message}{outcome}", retriable=True)


def _warn_unused(path: Path, what: str) -> None:
    if path.exists():
        log.warning("%s is not read in cluster mode: the cluster keeps its %s in the metadata quorum (create "
                    "them again through any broker to keep them)", path, what)


# ---- ACLs ------------------------------------------------------------------------------------


def _bindings_of(document: Mapping[str, Any]) -> list[AclBinding]:
    """The ACLs of `MetadataImage.acls` (or decode_acls). Raises ValueError."""
    return [binding_from_json(binding) for binding in document.get("acls", ())]


class ClusterAclStore:
    """The cluster's ACLs for `Acls`: changed by CAS on the `acls` key, applied to this
    broker's authorizer from the metadata watch."""

    def __init__(self, runtime: ClusterRuntime, authorizer: StandardAuthorizer) -> None:
        self._authorizer = authorizer
        self._document = SharedDocument(runtime, runtime.keys.acls, "the ACLs")
        runtime.add_listener(self._metadata_changed)

    async def load(self) -> None:
        """Take the ACLs as the quorum has them now (before the listeners open). Raises
        MetadataFormatError or ValueError when they cannot be read: a broker must not
        start with fewer ACLs than the cluster has."""
        stored = await self._document.read()
        if stored is not None:
            self._authorizer.replace_all(_bindings_of(decode_acls(stored)))

    async def change(self, plan: AclPlan) -> None:
        async def plan_stored(stored: KeyValue | None) -> bytes | None:
            changed = await plan([] if stored is None else _bindings_of(decode_acls(stored)))
            return None if changed is None else encode_acls(binding_to_json(binding) for binding in changed)

        try:
            await self._document.change(plan_stored)
        except NotStored as error:
            raise AclsNotStored(str(error), retriable=error.retriable) from None

    def _metadata_changed(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if not delta.acls_changed:
            return
        try:
            bindings = _bindings_of(image.acls)
        except ValueError as error:
            log.error("the ACLs in the metadata quorum (revision %d) cannot be read, the previous ones stay: %s",
                      image.revision, error)
            return
        self._authorizer.replace_all(bindings)
        log.info("ACLs from the metadata quorum: %d (revision %d)", len(bindings), image.revision)


async def shared_acls(config: BrokerConfig, runtime: ClusterRuntime, unused_file: Path) -> Acls | None:
    """The cluster's ACLs, loaded; None without `authorizer.class.name`. `unused_file`:
    where a standalone broker keeps them (warned about when it exists)."""
    authorizer = new_authorizer(config)
    if authorizer is None:
        return None
    store = ClusterAclStore(runtime, authorizer)
    await store.load()
    log_authorizer(authorizer, "the metadata quorum")
    _warn_unused(unused_file, "ACLs")
    return Acls(authorizer, store)


# ---- SCRAM credentials --------------------------------------------------------------------------


def _credentials_of(document: Mapping[str, Any]) -> Credentials:
    """The credentials of `MetadataImage.scram_credentials` (or decode_scram_credentials).
    Raises ValueError."""
    return credentials_from_json({"version": FORMAT_VERSION, "users": dict(document.get("users", {}))})


class ClusterScramCredentialStore(ScramCredentialStore):
    """The cluster's SCRAM credentials: `store_alteration` changes them by CAS on the
    `scram-credentials` key; lookups and descriptions read this broker's copy, replaced
    from the metadata watch. `alter` (local only) refuses, changing nothing."""

    def __init__(self, runtime: ClusterRuntime) -> None:
        super().__init__(persist=self._refuse_local_change)
        self._document = SharedDocument(runtime, runtime.keys.scram_credentials, "the SCRAM credentials")
        runtime.add_listener(self._metadata_changed)

    @staticmethod
    def _refuse_local_change(_credentials: Credentials) -> None:
        raise RuntimeError("in cluster mode SCRAM credentials change through store_alteration (the metadata "
                           "quorum), not alter")

    async def load(self) -> None:
        """Take the credentials as the quorum has them now (before the listeners open).
        Raises MetadataFormatError or ValueError when they cannot be read."""
        stored = await self._document.read()
        if stored is not None:
            self.replace(_credentials_of(decode_scram_credentials(stored)))

    async def store_alteration(self, deletions: Iterable[tuple[str, str]],
                               upsertions: Iterable[tuple[str, str, int, bytes, bytes]], *,
                               pace: Pace = unpaced) -> dict[str, AlterationResult]:
        deletions, upsertions = list(deletions), list(upsertions)  # planned again on each conflict
        results: dict[str, AlterationResult] = {}

        async def plan(stored: KeyValue | None) -> bytes | None:
            nonlocal results
            current = {} if stored is None else _credentials_of(decode_scram_credentials(stored))
            altered, results = await plan_alteration_paced(current, deletions, upsertions, pace)
            return None if altered == current else encode_scram_credentials(credentials_to_json(altered)["users"])

        try:
            await self._document.change(plan)
        except NotStored as error:
            log.warning("AlterUserScramCredentials not stored: %s", error)
            code = ErrorCode.request_timed_out if error.retriable else ErrorCode.unknown_server_error
            users = dict.fromkeys([user for user, *_ in deletions] + [user for user, *_ in upsertions])
            return dict.fromkeys(users, (code, str(error)))
        return results

    def _metadata_changed(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if not delta.scram_credentials_changed:
            return
        try:
            credentials = _credentials_of(image.scram_credentials)
        except ValueError as error:
            log.error("the SCRAM credentials in the metadata quorum (revision %d) cannot be read, the previous ones "
                      "stay: %s", image.revision, error)
            return
        self.replace(credentials)
        log.info("SCRAM credentials from the metadata quorum: %d user(s) (revision %d)", len(credentials),
                 image.revision)


async def shared_scram_credentials(runtime: ClusterRuntime, unused_file: Path) -> ClusterScramCredentialStore:
    """The cluster's SCRAM credentials, loaded. `unused_file`: where a standalone broker
    keeps them (warned about when it exists)."""
    store = ClusterScramCredentialStore(runtime)
    await store.load()
    _warn_unused(unused_file, "SCRAM credentials")
    return store
