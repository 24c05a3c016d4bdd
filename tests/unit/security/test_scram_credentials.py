"""SCRAM credential store: AlterUserScramCredentials' validations and error codes as
Kafka's ScramControlManager, DescribeUserScramCredentials as Kafka's ScramImage, and the
credentials file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from oncelog.security.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    salted_password,
    scram_credential_from_password,
)
from oncelog.security.scram_credentials import (
    FileScramCredentialStore,
    ScramCredentialStore,
    ScramCredentialUpsertion,
    UserScramCredentialsDescription,
    credentials_from_json,
    credentials_to_json,
    load_fake_salt_key,
    plan_alteration,
)
from oncelog.storage.errors import CorruptLogError

NONE, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 0, 91, 92, 93
UNSUPPORTED_SASL_MECHANISM = 33
SALT = b"2x6nduhq3mu7nyr5dikeoqwwmc"
DUPLICATE = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")


def upsertion(user: str, mechanism: str = SCRAM_SHA_256, iterations: int = 4096,
              password: str = "pw") -> tuple[str, str, int, bytes, bytes]:
    return user, mechanism, iterations, SALT, salted_password(mechanism, password, SALT, iterations)


def test_upsert_then_lookup_matches_a_credential_from_the_password():
    store = ScramCredentialStore()
    assert store.alter([], [upsertion("alice", SCRAM_SHA_512, 8192, "alice-secret")]) == {"alice": (NONE, None)}
    assert store.lookup("alice", SCRAM_SHA_512) == scram_credential_from_password(SCRAM_SHA_512, "alice-secret",
                                                                                  8192, SALT)
    assert store.lookup("alice", SCRAM_SHA_256) is None
    assert store.lookup("bob", SCRAM_SHA_512) is None


def test_describe_all_and_named_users():
    store = ScramCredentialStore()
    store.alter([], [upsertion("bob"), upsertion("alice", SCRAM_SHA_512, 8192)])
    store.alter([], [upsertion("alice", SCRAM_SHA_256, 4096)])
    everyone = [UserScramCredentialsDescription(user="alice", credentials=((SCRAM_SHA_256, 4096),
                                                                          (SCRAM_SHA_512, 8192))),
                UserScramCredentialsDescription(user="bob", credentials=((SCRAM_SHA_256, 4096),))]
    assert store.describe(None) == everyone
    assert store.describe([]) == everyone
    assert store.describe(["bob", "carol", "alice", "alice"]) == [
        UserScramCredentialsDescription(user="bob", credentials=((SCRAM_SHA_256, 4096),)),
        UserScramCredentialsDescription(
            user="carol", error_code=RESOURCE_NOT_FOUND,
            error_message="Attempt to describe a user credential that does not exist: carol"),
        UserScramCredentialsDescription(
            user="alice", error_code=DUPLICATE_RESOURCE,
            error_message="Cannot describe SCRAM credentials for the same user twice in a single request: alice"),
    ]


def test_delete():
    store = ScramCredentialStore()
    store.alter([], [upsertion("alice")])
    assert store.alter([("alice", SCRAM_SHA_256)], []) == {"alice": (NONE, None)}
    assert store.lookup("alice", SCRAM_SHA_256) is None
    assert store.describe(None) == []
    assert store.alter([("alice", SCRAM_SHA_256)], []) == {
        "alice": (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}


def test_deleting_one_mechanism_keeps_the_other():
    store = ScramCredentialStore()
    store.alter([], [upsertion("alice", SCRAM_SHA_256)])
    store.alter([], [upsertion("alice", SCRAM_SHA_512)])
    store.alter([("alice", SCRAM_SHA_512)], [])
    assert store.describe(["alice"])[0].credentials == ((SCRAM_SHA_256, 4096),)
    assert store.alter([("alice", SCRAM_SHA_512)], [])["alice"][0] == RESOURCE_NOT_FOUND


@pytest.mark.parametrize("alteration, result", [
    (upsertion("alice", iterations=4095), (UNACCEPTABLE_CREDENTIAL, "Too few iterations")),
    (upsertion("alice", iterations=16385), (UNACCEPTABLE_CREDENTIAL, "Too many iterations")),
    (upsertion(""), (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")),
    (("alice", "UNKNOWN", 4096, SALT, b"x" * 32), (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")),
    (("alice", SCRAM_SHA_256, 4096, b"", b"x" * 32), (UNACCEPTABLE_CREDENTIAL, "Salt must not be empty")),
    (("alice", SCRAM_SHA_256, 4096, SALT, b""), (UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty")),
])
def test_upsertion_validations(alteration, result):
    store = ScramCredentialStore()
    user = alteration[0]
    assert store.alter([], [alteration]) == {user: result}
    assert store.describe(None) == []


def test_iteration_bounds_are_inclusive():
    store = ScramCredentialStore()
    assert store.alter([], [upsertion("a", iterations=4096), upsertion("b", iterations=16384)]) == {
        "a": (NONE, None), "b": (NONE, None)}


def test_deletion_validations():
    store = ScramCredentialStore()
    assert store.alter([("", SCRAM_SHA_256), ("alice", "SCRAM-SHA-1")], []) == {
        "": (UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "alice": (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")}


def test_a_user_altered_twice_fails_and_neither_alteration_applies():
    store = ScramCredentialStore()
    store.alter([], [upsertion("alice"), upsertion("bob")])
    results = store.alter(
        [("alice", SCRAM_SHA_256), ("bob", SCRAM_SHA_256)],
        [upsertion("alice", SCRAM_SHA_512), upsertion("carol"), upsertion("carol", SCRAM_SHA_512), upsertion("dave")])
    assert results == {"alice": DUPLICATE, "bob": (NONE, None), "carol": DUPLICATE, "dave": (NONE, None)}
    assert store.lookup("alice", SCRAM_SHA_256) is not None  # the deletion did not apply
    assert store.lookup("alice", SCRAM_SHA_512) is None
    assert store.lookup("bob", SCRAM_SHA_256) is None
    assert store.lookup("carol", SCRAM_SHA_256) is None and store.lookup("carol", SCRAM_SHA_512) is None
    assert store.lookup("dave", SCRAM_SHA_256) is not None


def test_a_users_first_error_is_its_result():
    store = ScramCredentialStore()
    results = store.alter([("alice", SCRAM_SHA_256), ("alice", SCRAM_SHA_256)], [upsertion("alice")])
    assert results == {"alice": (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}
    assert store.describe(None) == []


def test_plan_alteration_leaves_its_input_alone():
    credential = scram_credential_from_password(SCRAM_SHA_256, "pw")
    current = {"alice": {SCRAM_SHA_256: credential}}
    altered, results = plan_alteration(current, [("alice", SCRAM_SHA_256)], [upsertion("bob")])
    assert current == {"alice": {SCRAM_SHA_256: credential}}
    assert set(altered) == {"bob"}
    assert results == {"alice": (NONE, None), "bob": (NONE, None)}


def test_persist_hook_runs_before_the_change_and_can_refuse_it():
    persisted: list[dict[str, dict[str, ScramCredential]]] = []
    store = ScramCredentialStore(persist=persisted.append)
    store.alter([], [upsertion("alice")])
    assert list(persisted[-1]) == ["alice"]
    store.alter([("nobody", SCRAM_SHA_256)], [])  # nothing changes: nothing persisted
    assert len(persisted) == 1

    def refuse(_credentials):
        raise OSError("disk full")

    failing = ScramCredentialStore(persist=refuse)
    with pytest.raises(OSError):
        failing.alter([], [upsertion("alice")])
    assert failing.lookup("alice", SCRAM_SHA_256) is None


def test_upsertions_never_show_the_salted_password():
    alteration = ScramCredentialUpsertion(*upsertion("alice"))
    assert repr(alteration) == "ScramCredentialUpsertion('alice', 'SCRAM-SHA-256', iterations=4096)"


def test_json_round_trip():
    credentials = {"alice": {SCRAM_SHA_256: scram_credential_from_password(SCRAM_SHA_256, "a"),
                             SCRAM_SHA_512: scram_credential_from_password(SCRAM_SHA_512, "b", 8192)},
                   "a,b=c": {SCRAM_SHA_512: scram_credential_from_password(SCRAM_SHA_512, "c")}}
    document = credentials_to_json(credentials)
    assert credentials_from_json(json.loads(json.dumps(document))) == credentials
    assert document["version"] == 1
    assert set(document["users"]["alice"][SCRAM_SHA_256]) == {"salt", "stored_key", "server_key", "iterations"}


@pytest.mark.parametrize("document", [
    None, [], {"version": 2, "users": {}}, {"version": 1}, {"version": 1, "users": []},
    {"version": 1, "users": {"a": []}},
    {"version": 1, "users": {"a": {"SCRAM-SHA-1": {}}}},
    {"version": 1, "users": {"a": {SCRAM_SHA_256: {"salt": "AA==", "stored_key": "AA==", "server_key": "AA=="}}}},
    {"version": 1, "users": {"a": {SCRAM_SHA_256: {"salt": "!", "stored_key": "AA==", "server_key": "AA==",
                                                   "iterations": 4096}}}},
    {"version": 1, "users": {"a": {SCRAM_SHA_256: {"salt": "AA==", "stored_key": "AA==", "server_key": "AA==",
                                                   "iterations": "4096"}}}},
], ids=repr)
def test_malformed_json_documents(document):
    with pytest.raises(ValueError):
        credentials_from_json(document)


def test_file_store_persists_and_reloads(tmp_path):
    path = tmp_path / "scram-credentials.json"
    store = FileScramCredentialStore(path)
    assert store.describe(None) == [] and not path.exists()
    store.alter([], [upsertion("alice", SCRAM_SHA_512, 8192, "alice-secret"), upsertion("bob")])
    store.alter([("bob", SCRAM_SHA_256)], [])
    reloaded = FileScramCredentialStore(path)
    assert reloaded.snapshot() == store.snapshot()
    assert reloaded.lookup("alice", SCRAM_SHA_512) == scram_credential_from_password(SCRAM_SHA_512, "alice-secret",
                                                                                     8192, SALT)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not (tmp_path / "scram-credentials.json.tmp").exists()
    text = path.read_text()
    assert "alice-secret" not in text
    assert salted_password(SCRAM_SHA_512, "alice-secret", SALT, 8192).hex() not in text


def test_file_store_refuses_a_corrupt_file(tmp_path):
    path = tmp_path / "scram-credentials.json"
    path.write_text('{"version": 1, "users": {"a": ')
    with pytest.raises(CorruptLogError, match="not a SCRAM credentials file"):
        FileScramCredentialStore(path)


def test_the_fake_salt_key_is_made_once_private_and_kept(tmp_path):
    key = load_fake_salt_key(tmp_path)
    path = tmp_path / "scram-fake-salt.key"
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_fake_salt_key(tmp_path) == key  # the next start reads it back
    other = tmp_path / "other"
    other.mkdir()
    assert load_fake_salt_key(other) != key  # another broker, another key
    path.write_bytes(key[:7])
    with pytest.raises(CorruptLogError, match="32 bytes"):
        load_fake_salt_key(tmp_path)
