"""The SCRAM credentials of the cluster's users, and their changes through Kafka's
DescribeUserScramCredentials and AlterUserScramCredentials.

`ScramCredentialStore` holds {user: {mechanism: ScramCredential}} in memory and applies
an alteration with the validations and error codes of Kafka's ScramControlManager (and
ScramImage for describing); `plan_alteration` is the same as a pure function, for a store
that must compare-and-set the result (etcd in cluster mode). A persistence hook runs
before a change is applied in memory: if it raises, nothing changed.
`FileScramCredentialStore` persists to one JSON file, written crash-safely and readable
by its owner only; `credentials_to_json` / `credentials_from_json` are its format:

    {"version": 1,
     "users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "stored_key": "<base64>",
                                           "server_key": "<base64>", "iterations": 8192}}}}

Only salts, StoredKeys and ServerKeys are kept; never a password or SaltedPassword.
`load_fake_salt_key` keeps the broker's secret for the salts shown to unknown users
(oncelog.security.sasl.scram), in a file of its own next to them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from oncelog.pacing import Pace, Steps, run_paced, run_steps, sorted_steps, unpaced
from oncelog.protocol.messages import ErrorCode
from oncelog.security.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    scram_credential_from_salted_password,
)
from oncelog.storage.errors import CorruptLogError, StorageError
from oncelog.storage.framed_file import TEMP_SUFFIX, fsync_directory

FORMAT_VERSION = 1
CREDENTIALS_FILE = "scram-credentials.json"  # a standalone broker's, in its first log dir
FAKE_SALT_KEY_FILE = "scram-fake-salt.key"  # in the first log dir, next to the credentials
FAKE_SALT_KEY_BYTES = 32

Credentials = dict[str, dict[str, ScramCredential]]  # {user: {mechanism: credential}}
# The result of one user's alteration: (error code, error message), (0, None) for success.
AlterationResult = tuple[int, str | None]

_DUPLICATE_ALTERATION = "A user credential cannot be altered twice in the same request"
_DUPLICATE_DESCRIPTION = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_UNKNOWN_DESCRIPTION = "Attempt to describe a user credential that does not exist: "
_UNKNOWN_DELETION = "Attempt to delete a user credential that does not exist"


class ScramCredentialDeletion(NamedTuple):
    user: str
    mechanism: str  # a SCRAM mechanism name (scram_mechanism_name of the wire type)


class ScramCredentialUpsertion(NamedTuple):
    user: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes  # as good as the password for logging in: never in a repr

    def __repr__(self) -> str:
        return f"ScramCredentialUpsertion({self.user!r}, {self.mechanism!r}, iterations={self.iterations})"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialsDescription:
    """One user of a DescribeUserScramCredentials response: its (mechanism, iterations)
    pairs, or an error."""

    user: str
    credentials: tuple[tuple[str, int], ...] = ()
    error_code: int = ErrorCode.none
    error_message: str | None = None


def describe_credentials(credentials: Mapping[str, Mapping[str, ScramCredential]],
                         users: Sequence[str] | None) -> list[UserScramCredentialsDescription]:
    """Every user with credentials (sorted) when `users` is None or empty, else each user
    asked for once, in request order, with RESOURCE_NOT_FOUND or DUPLICATE_RESOURCE."""
    return run_steps(_describe_steps(credentials, users))


def _describe_steps(credentials: Mapping[str, Mapping[str, ScramCredential]],
                    users: Sequence[str] | None) -> Steps[list[UserScramCredentialsDescription]]:
    if not users:
        users = yield from sorted_steps(user for user, mechanisms in credentials.items() if mechanisms)
    counts: dict[str, int] = {}
    for user in users:
        yield
        counts[user] = counts.get(user, 0) + 1
    results = []
    for user, count in counts.items():
        yield
        mechanisms = credentials.get(user, {})
        if count > 1:
            results.append(UserScramCredentialsDescription(user=user, error_code=ErrorCode.duplicate_resource,
                                                           error_message=_DUPLICATE_DESCRIPTION + user))
        elif not mechanisms:
            results.append(UserScramCredentialsDescription(user=user, error_code=ErrorCode.resource_not_found,
                                                           error_message=_UNKNOWN_DESCRIPTION + user))
        else:
            described = tuple((mechanism, mechanisms[mechanism].iterations)
                              for mechanism in SCRAM_MECHANISMS if mechanism in mechanisms)
            results.append(UserScramCredentialsDescription(user=user, credentials=described))
    return results


def _user_and_mechanism_error(user: str, mechanism: str) -> AlterationResult | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in SCRAM_MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _upsertion_error(upsertion: ScramCredentialUpsertion) -> AlterationResult | None:
    error = _user_and_mechanism_error(upsertion.user, upsertion.mechanism)
    if error is not None:
        return error
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    # Kafka fails these with UNKNOWN_SERVER_ERROR (an empty HMAC key); said plainly here.
    if not upsertion.salt:
        return ErrorCode.unacceptable_credential, "Salt must not be empty"
    if not upsertion.salted_password:
        return ErrorCode.unacceptable_credential, "Salted password must not be empty"
    return None


def plan_alteration(credentials: Mapping[str, Mapping[str, ScramCredential]],
                    deletions: Iterable[tuple[str, str]],
                    upsertions: Iterable[tuple[str, str, int, bytes, bytes]],
                    ) -> tuple[Credentials, dict[str, AlterationResult]]:
    """(the credentials after the alteration, {user: (error code, message)}), as Kafka's
    ScramControlManager.alterCredentials: a user may be altered once per request (a second
    deletion or upsertion of it fails the user with DUPLICATE_RESOURCE, and the first is
    not applied); a user's first failure is its result; the users that pass are applied,
    whatever happens to the others. Results are in the order users first appear."""
    return run_steps(_alteration_steps(credentials, deletions, upsertions))


async def plan_alteration_paced(credentials: Mapping[str, Mapping[str, ScramCredential]],
                                deletions: Iterable[tuple[str, str]],
                                upsertions: Iterable[tuple[str, str, int, bytes, bytes]], pace: Pace,
                                ) -> tuple[Credentials, dict[str, AlterationResult]]:
    """`plan_alteration`, with `pace` between the deletions, upsertions and users."""
    return await run_paced(_alteration_steps(credentials, deletions, upsertions), pace)


def _alteration_steps(credentials: Mapping[str, Mapping[str, ScramCredential]],
                      deletions: Iterable[tuple[str, str]],
                      upsertions: Iterable[tuple[str, str, int, bytes, bytes]],
                      ) -> Steps[tuple[Credentials, dict[str, AlterationResult]]]:
    deletion_list = []
    for deletion in deletions:
        yield
        deletion_list.append(ScramCredentialDeletion(*deletion))
    upsertion_list = []
    for upsertion in upsertions:
        yield
        upsertion_list.append(ScramCredentialUpsertion(*upsertion))
    order: dict[str, None] = {}
    for user in [deletion.user for deletion in deletion_list] + [upsertion.user for upsertion in upsertion_list]:
        yield
        order[user] = None
    errors: dict[str, AlterationResult] = {}
    to_delete: dict[str, ScramCredentialDeletion] = {}
    to_upsert: dict[str, ScramCredentialUpsertion] = {}
    for deletion in deletion_list:
        yield
        if deletion.user in errors:
            continue
        if to_delete.pop(deletion.user, None) is not None:
            errors[deletion.user] = ErrorCode.duplicate_resource, _DUPLICATE_ALTERATION
            continue
        error = _user_and_mechanism_error(deletion.user, deletion.mechanism)
        if error is None and deletion.mechanism not in credentials.get(deletion.user, {}):
            error = ErrorCode.resource_not_found, _UNKNOWN_DELETION
        if error is None:
            to_delete[deletion.user] = deletion
        else:
            errors[deletion.user] = error
    for upsertion in upsertion_list:
        yield
        if upsertion.user in errors:
            continue
        if to_delete.pop(upsertion.user, None) is not None or to_upsert.pop(upsertion.user, None) is not None:
            errors[upsertion.user] = ErrorCode.duplicate_resource, _DUPLICATE_ALTERATION
            continue
        error = _upsertion_error(upsertion)
        if error is None:
            to_upsert[upsertion.user] = upsertion
        else:
            errors[upsertion.user] = error
    altered: Credentials = {user: dict(mechanisms) for user, mechanisms in credentials.items()}
    for deletion in to_delete.values():
        yield
        del altered[deletion.user][deletion.mechanism]
        if not altered[deletion.user]:
            del altered[deletion.user]
    for upsertion in to_upsert.values():
        yield
        altered.setdefault(upsertion.user, {})[upsertion.mechanism] = scram_credential_from_salted_password(
            upsertion.mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations)
    results = {}
    for user in order:
        yield
        results[user] = errors.get(user, (ErrorCode.none, None))
    return altered, results


class ScramCredentialStore:
    """The credentials in memory. `persist(credentials)`, if given, runs with the altered
    credentials before they replace the current ones, and may raise to refuse them."""

    def __init__(self, credentials: Mapping[str, Mapping[str, ScramCredential]] | None = None, *,
                 persist: Callable[[Credentials], None] | None = None) -> None:
        self._credentials: Credentials = {user: dict(mechanisms) for user, mechanisms in (credentials or {}).items()}
        self._persist = persist
        self._altering = asyncio.Lock()  # one store_alteration at a time: each is planned at its pace

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The SCRAM server's lookup."""
        return self._credentials.get(user, {}).get(mechanism)

    def snapshot(self) -> Credentials:
        return {user: dict(mechanisms) for user, mechanisms in self._credentials.items()}

    def describe(self, users: Sequence[str] | None) -> list[UserScramCredentialsDescription]:
        return describe_credentials(self._credentials, users)

    async def describe_paced(self, users: Sequence[str] | None, pace: Pace) -> list[UserScramCredentialsDescription]:
        """`describe` at `pace`, of the credentials as they are now (an alteration replaces
        them, it does not change them in place)."""
        return await run_paced(_describe_steps(self._credentials, users), pace)

    def alter(self, deletions: Iterable[tuple[str, str]], upsertions: Iterable[tuple[str, str, int, bytes, bytes]],
              ) -> dict[str, AlterationResult]:
        """AlterUserScramCredentials: see `plan_alteration`. Raises what `persist` raises,
        with nothing changed."""
        altered, results = plan_alteration(self._credentials, deletions, upsertions)
        self._apply(altered)
        return results

    def _apply(self, altered: Credentials) -> None:
        if altered != self._credentials:
            if self._persist is not None:
                self._persist(altered)
            self._credentials = altered

    async def store_alteration(self, deletions: Iterable[tuple[str, str]],
                               upsertions: Iterable[tuple[str, str, int, bytes, bytes]], *,
                               pace: Pace = unpaced) -> dict[str, AlterationResult]:
        """AlterUserScramCredentials as its handler runs it: the alteration, planned at
        `pace` and stored where these credentials are kept, before this returns. Here that
        is `alter`'s (raises what `persist` raises), one alteration at a time; in cluster
        mode the metadata quorum, which may take a while
        (oncelog.cluster.security.ClusterScramCredentialStore)."""
        async with self._altering:
            altered, results = await plan_alteration_paced(self._credentials, deletions, upsertions, pace)
            self._apply(altered)
            return results

    def replace(self, credentials: Mapping[str, Mapping[str, ScramCredential]]) -> None:
        """Take `credentials` as they are where they are kept (the cluster's metadata
        quorum): no `persist`, no validation."""
        self._credentials = {user: dict(mechanisms) for user, mechanisms in credentials.items()}


class FileScramCredentialStore(ScramCredentialStore):
    """Credentials kept in the JSON file at `path` (loaded now if it exists; a corrupt file
    raises CorruptLogError, an unreadable one StorageError)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(load_credentials_file(path), persist=self._write)

    def _write(self, credentials: Credentials) -> None:
        write_credentials_file(self.path, credentials)


def credentials_to_json(credentials: Mapping[str, Mapping[str, ScramCredential]]) -> dict[str, Any]:
    """A JSON-safe document of the credentials (bytes as base64)."""
    def encode(value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    return {
        "version": FORMAT_VERSION,
        "users": {
            user: {
                mechanism: {"salt": encode(credential.salt), "stored_key": encode(credential.stored_key),
                            "server_key": encode(credential.server_key), "iterations": credential.iterations}
                for mechanism, credential in sorted(mechanisms.items())
            }
            for user, mechanisms in sorted(credentials.items())
        },
    }


def credentials_from_json(document: Any) -> Credentials:
    """The credentials of a `credentials_to_json` document; ValueError if it is not one."""
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} SCRAM credentials document")
    users = document.get("users")
    if not isinstance(users, dict):
        raise ValueError("'users' is not an object")
    credentials: Credentials = {}
    for user, mechanisms in users.items():
        if not isinstance(mechanisms, dict):
            raise ValueError(f"the credentials of user {user!r} are not an object")
        for mechanism, fields in mechanisms.items():
            if mechanism not in SCRAM_MECHANISMS:
                raise ValueError(f"user {user!r}: unknown SCRAM mechanism {mechanism!r}")
            try:
                iterations = fields["iterations"]
                if not isinstance(iterations, int) or isinstance(iterations, bool):
                    raise TypeError("iterations is not an integer")
                credential = ScramCredential(
                    salt=base64.b64decode(fields["salt"], validate=True),
                    stored_key=base64.b64decode(fields["stored_key"], validate=True),
                    server_key=base64.b64decode(fields["server_key"], validate=True),
                    iterations=iterations,
                )
            except (KeyError, TypeError, binascii.Error) as error:
                raise ValueError(f"user {user!r}, {mechanism}: malformed credential ({error})") from None
            credentials.setdefault(user, {})[mechanism] = credential
    return credentials


def load_credentials_file(path: Path) -> Credentials:
    """The credentials in `path`, {} if it does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StorageError(str(path), f"cannot read: {exc.strerror}", exc.errno) from exc
    try:
        return credentials_from_json(json.loads(data))
    except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptLogError(str(path), f"not a SCRAM credentials file: {error}") from None


def write_credentials_file(path: Path, credentials: Mapping[str, Mapping[str, ScramCredential]]) -> None:
    """Replace `path` crash-safely (temporary file, fsync, rename, fsync of the directory),
    readable by its owner only. Raises StorageError."""
    _write_private_file(path, json.dumps(credentials_to_json(credentials), indent=1, sort_keys=True).encode() + b"\n")


def load_fake_salt_key(directory: Path) -> bytes:
    """The broker's secret the salts shown to unknown SCRAM users are derived from
    (`ScramSaslServer`'s `fake_salt_key`): `directory`/scram-fake-salt.key, made on first
    use (FAKE_SALT_KEY_BYTES from `secrets`, readable by its owner only). It outlives
    restarts: a salt that changed when the broker restarted would tell an unknown user
    from a stored one, whose salt stays. Raises CorruptLogError for a file of another
    size, StorageError when it cannot be read or written."""
    path = directory / FAKE_SALT_KEY_FILE
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = secrets.token_bytes(FAKE_SALT_KEY_BYTES)
        _write_private_file(path, key)
        return key
    except OSError as exc:
        raise StorageError(str(path), f"cannot read: {exc.strerror}", exc.errno) from exc
    if len(key) != FAKE_SALT_KEY_BYTES:
        raise CorruptLogError(str(path), f"a SCRAM fake-salt key is {FAKE_SALT_KEY_BYTES} bytes, this file has "
                                         f"{len(key)}")
    return key


def _write_private_file(path: Path, data: bytes) -> None:
    """Replace `path` with `data` crash-safely (temporary file, fsync, rename, fsync of the
    directory), readable by its owner only. Raises StorageError."""
    temporary = path.with_name(path.name + TEMP_SUFFIX)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # a temporary file left by an older process may have other bits
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        raise StorageError(str(path), f"cannot write: {exc.strerror}", exc.errno) from exc
    fsync_directory(path.parent)
