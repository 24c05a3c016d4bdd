"""ACL values: wire codes, filters, CreateAcls/DeleteAcls validation, supported operations,
and the JSON file a standalone broker keeps them in."""

import json
import os
import stat

import pytest

from oncelog.security.acl import (
    AUTHORIZED_OPERATIONS_OMITTED,
    NO_AUTHORIZER_OPERATIONS_BITS,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    authorized_operations_bits,
    supported_operations,
    validate_filter,
    validate_new_binding,
)
from oncelog.security.acl_store import FileAclStore, binding_from_json, binding_to_json
from oncelog.storage.errors import CorruptLogError, StorageError

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED, MATCH, ANY = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def binding(resource_type=TOPIC, name="orders", pattern_type=LITERAL, principal="User:alice", host="*",
            operation=Op.READ, permission_type=ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission_type))


# -- wire codes --


def test_enums_carry_kafkas_wire_codes():
    assert [(t.name, int(t)) for t in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4), ("TRANSACTIONAL_ID", 5),
        ("DELEGATION_TOKEN", 6), ("USER", 7)]
    assert [(t.name, int(t)) for t in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4)]
    assert [(t.name, int(t)) for t in AclPermissionType] == [("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3)]
    assert [o.name for o in AclOperation] == [
        "UNKNOWN", "ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS",
        "TWO_PHASE_COMMIT"]
    assert [int(o) for o in AclOperation] == list(range(16))


def test_an_unknown_code_decodes_as_unknown_as_kafkas_from_code_does():
    assert ResourceType.from_code(2) is ResourceType.TOPIC
    assert ResourceType.from_code(99) is ResourceType.UNKNOWN
    assert PatternType.from_code(-1) is PatternType.UNKNOWN
    assert AclOperation.from_code(16) is AclOperation.UNKNOWN
    assert AclPermissionType.from_code(3) is AclPermissionType.ALLOW


def test_a_binding_reads_like_a_sentence():
    assert str(binding(name="pay-", pattern_type=PREFIXED, operation=Op.WRITE, permission_type=DENY)) == (
        "User:alice is DENY WRITE from host * on TOPIC:PREFIXED:pay-")


# -- filters --


@pytest.mark.parametrize(("pattern_filter", "pattern", "matches"), [
    # name None, ANY types: everything
    (ResourcePatternFilter(), ResourcePattern(GROUP, "g", PREFIXED), True),
    (ResourcePatternFilter(TOPIC), ResourcePattern(TOPIC, "x", LITERAL), True),
    (ResourcePatternFilter(TOPIC), ResourcePattern(GROUP, "x", LITERAL), False),
    (ResourcePatternFilter(pattern_type=PREFIXED), ResourcePattern(TOPIC, "x", PREFIXED), True),
    (ResourcePatternFilter(pattern_type=PREFIXED), ResourcePattern(TOPIC, "x", LITERAL), False),
    # ANY pattern type with a name: that exact name, either pattern type
    (ResourcePatternFilter(TOPIC, "orders", ANY), ResourcePattern(TOPIC, "orders", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, "orders", ANY), ResourcePattern(TOPIC, "orders", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "orders", ANY), ResourcePattern(TOPIC, "*", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "orders", ANY), ResourcePattern(TOPIC, "ord", PREFIXED), False),
    # a concrete pattern type: that exact pattern; "*" is just a name then
    (ResourcePatternFilter(TOPIC, "orders", LITERAL), ResourcePattern(TOPIC, "orders", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "orders", LITERAL), ResourcePattern(TOPIC, "orders", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "orders", LITERAL), ResourcePattern(TOPIC, "*", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "*", LITERAL), ResourcePattern(TOPIC, "*", LITERAL), True),
    # MATCH: every pattern that applies to the named resource
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "orders", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "*", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "ord", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "orders", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "orders-eu", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "order", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(TOPIC, "*", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "orders", MATCH), ResourcePattern(GROUP, "*", LITERAL), False),
    (ResourcePatternFilter(ResourceType.ANY, "orders", MATCH), ResourcePattern(GROUP, "ord", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, None, MATCH), ResourcePattern(TOPIC, "anything", PREFIXED), True),
    # MATCH for the name "*": only the wildcard itself
    (ResourcePatternFilter(TOPIC, "*", MATCH), ResourcePattern(TOPIC, "*", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "*", MATCH), ResourcePattern(TOPIC, "orders", LITERAL), False),
])
def test_resource_pattern_filter(pattern_filter, pattern, matches):
    assert pattern_filter.matches(pattern) is matches


@pytest.mark.parametrize(("entry_filter", "matches"), [
    (AccessControlEntryFilter(), True),
    (AccessControlEntryFilter("User:alice"), True),
    (AccessControlEntryFilter("User:bob"), False),
    (AccessControlEntryFilter("User:*"), False),  # a filter compares principals exactly
    (AccessControlEntryFilter(host="10.0.0.1"), True),
    (AccessControlEntryFilter(host="*"), False),
    (AccessControlEntryFilter(operation=Op.WRITE), True),
    (AccessControlEntryFilter(operation=Op.ALL), False),
    (AccessControlEntryFilter(operation=Op.READ), False),
    (AccessControlEntryFilter(permission_type=ALLOW), True),
    (AccessControlEntryFilter(permission_type=DENY), False),
    (AccessControlEntryFilter("User:alice", "10.0.0.1", Op.WRITE, ALLOW), True),
])
def test_access_control_entry_filter(entry_filter, matches):
    entry = AccessControlEntry("User:alice", "10.0.0.1", Op.WRITE, ALLOW)
    assert entry_filter.matches(entry) is matches


def test_a_binding_filter_needs_both_halves_to_match():
    acl = binding(operation=Op.WRITE)
    assert AclBindingFilter().matches(acl)
    assert AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", MATCH),
                            AccessControlEntryFilter(principal="User:alice")).matches(acl)
    assert not AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", MATCH),
                                AccessControlEntryFilter(principal="User:bob")).matches(acl)
    assert not AclBindingFilter(ResourcePatternFilter(GROUP),
                                AccessControlEntryFilter(principal="User:alice")).matches(acl)


def test_a_bindings_own_filter_matches_it_alone():
    acl = binding()
    assert acl.as_filter().matches(acl)
    assert not acl.as_filter().matches(binding(host="10.0.0.1"))
    assert not acl.as_filter().matches(binding(pattern_type=PREFIXED))


# -- validation --


@pytest.mark.parametrize(("acl", "error"), [
    (binding(), None),
    (binding(name="ord", pattern_type=PREFIXED, operation=Op.ALL, permission_type=DENY), None),
    (binding(name="*"), None),
    (binding(CLUSTER, "kafka-cluster", operation=Op.IDEMPOTENT_WRITE), None),
    (binding(principal="User:"), None),  # Kafka's parser accepts an empty name
    (binding(principal="Group:ops:team"), None),  # split at the first colon
    (binding(name="*", pattern_type=PREFIXED), None),  # Kafka accepts it: names starting with '*'
    (binding(CLUSTER, "my-cluster"), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(CLUSTER, ""), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(name=""), "Invalid empty resource name"),
    (binding(ResourceType.ANY), "Invalid resourceType ANY"),
    (binding(ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (binding(pattern_type=MATCH), "Invalid patternType MATCH"),
    (binding(pattern_type=ANY), "Invalid patternType ANY"),
    (binding(pattern_type=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (binding(operation=Op.ANY), "Invalid operation ANY"),
    (binding(operation=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (binding(permission_type=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (binding(permission_type=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (binding(principal="alice"), "expected a string in format principalType:principalName but got alice"),
    (binding(principal=""), "expected a string in format principalType:principalName but got "),
])
def test_what_create_acls_refuses(acl, error):
    assert validate_new_binding(acl) == error


@pytest.mark.parametrize(("binding_filter", "error"), [
    (AclBindingFilter(), None),
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", MATCH)), None),
    (AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)), "Unknown patternFilter."),
    (AclBindingFilter(ResourcePatternFilter(pattern_type=PatternType.UNKNOWN)), "Unknown patternFilter."),
    (AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=Op.UNKNOWN)), "Unknown entryFilter."),
    (AclBindingFilter(entry_filter=AccessControlEntryFilter(permission_type=AclPermissionType.UNKNOWN)),
     "Unknown entryFilter."),
])
def test_what_delete_acls_refuses(binding_filter, error):
    assert validate_filter(binding_filter) == error


# -- operations per resource type --


def test_supported_operations_per_resource_type():
    assert supported_operations(TOPIC) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                           Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert supported_operations(GROUP) == {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert supported_operations(CLUSTER) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                             Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    assert supported_operations(ResourceType.TRANSACTIONAL_ID) == {Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT}
    assert supported_operations(ResourceType.DELEGATION_TOKEN) == {Op.DESCRIBE}
    assert supported_operations(ResourceType.USER) == {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}
    with pytest.raises(ValueError, match="ANY is not a concrete resource type"):
        supported_operations(ResourceType.ANY)


def test_authorized_operations_are_a_bit_per_operation_code():
    assert authorized_operations_bits([]) == 0
    assert authorized_operations_bits([Op.READ, Op.DESCRIBE]) == (1 << 3) | (1 << 8)
    assert authorized_operations_bits([Op.TWO_PHASE_COMMIT]) == 32768


def test_without_an_authorizer_every_supported_operation_is_authorized():
    assert dict(NO_AUTHORIZER_OPERATIONS_BITS) == {
        TOPIC: 3576, GROUP: 3400, CLUSTER: 8096, ResourceType.TRANSACTIONAL_ID: 33040,
        ResourceType.DELEGATION_TOKEN: 256, ResourceType.USER: 24576}
    assert AUTHORIZED_OPERATIONS_OMITTED == -2147483648


# -- the JSON encoding and the file store --


def test_a_binding_survives_its_json_encoding():
    acl = binding(GROUP, "app-", PREFIXED, "User:*", "10.0.0.1", Op.DELETE, DENY)
    document = binding_to_json(acl)
    assert document == {"resource_type": "GROUP", "name": "app-", "pattern_type": "PREFIXED",
                        "principal": "User:*", "host": "10.0.0.1", "operation": "DELETE",
                        "permission_type": "DENY"}
    assert binding_from_json(json.loads(json.dumps(document))) == acl


@pytest.mark.parametrize(("change", "message"), [
    ({"operation": "READS"}, "AclOperation 'READS' is unknown"),
    ({"resource_type": 2}, "ResourceType 2 is unknown"),
    ({"name": None}, "None is not a string"),
    ({"pattern_type": "MATCH"}, "Invalid patternType MATCH"),
    ({"principal": "alice"}, "principalType:principalName"),
    ({"host": ["*"]}, "is not a string"),
])
def test_a_bad_json_binding_is_refused(change, message):
    document = {**binding_to_json(binding()), **change}
    with pytest.raises(ValueError, match=message):
        binding_from_json(document)


def test_a_json_binding_missing_a_field_is_refused():
    document = binding_to_json(binding())
    del document["host"]
    with pytest.raises(ValueError, match="has no 'host'"):
        binding_from_json(document)


def test_the_store_starts_empty_and_round_trips(tmp_path):
    store = FileAclStore(tmp_path / "__acls.json")
    assert store.load() == []
    acls = [binding(), binding(name="pay-", pattern_type=PREFIXED, permission_type=DENY),
            binding(CLUSTER, "kafka-cluster", operation=Op.ALTER, principal="User:ops")]
    store.save(acls)
    assert FileAclStore(tmp_path / "__acls.json").load() == acls
    store.save([])
    assert store.load() == []


def test_a_crash_before_the_rename_leaves_the_old_file(tmp_path):
    path = tmp_path / "__acls.json"
    store = FileAclStore(path)
    store.save([binding()])
    # What a crash mid-write leaves behind: a torn temporary file beside the old one.
    (tmp_path / "__acls.json.tmp").write_bytes(b'{"version": 1, "acls": [{"resource_ty')
    assert store.load() == [binding()]
    store.save([binding(), binding(operation=Op.WRITE)])  # the next save is not put off by it
    assert store.load() == [binding(), binding(operation=Op.WRITE)]
    assert not (tmp_path / "__acls.json.tmp").exists()


def test_a_failed_rename_raises_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "__acls.json"
    store = FileAclStore(path)
    store.save([binding()])

    def failing_replace(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StorageError, match="cannot write"):
        store.save([binding(operation=Op.WRITE)])
    monkeypatch.undo()
    assert store.load() == [binding()]


def test_the_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(source, destination):
        events.append("rename")
        real_replace(source, destination)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    FileAclStore(tmp_path / "__acls.json").save([binding()])
    assert events == ["fsync file", "rename", "fsync directory"]


@pytest.mark.parametrize("content", [
    b"", b"not json", b"[]", b'{"version": 2, "acls": []}', b'{"version": 1}', b'{"version": 1, "acls": {}}',
    b'{"version": 1, "acls": [{"resource_type": "TOPIC"}]}',
])
def test_a_corrupt_file_refuses_to_load(tmp_path, content):
    path = tmp_path / "__acls.json"
    path.write_bytes(content)
    with pytest.raises(CorruptLogError, match=r"__acls\.json"):
        FileAclStore(path).load()


def test_the_file_is_readable_json(tmp_path):
    path = tmp_path / "__acls.json"
    FileAclStore(path).save([binding()])
    assert json.loads(path.read_text()) == {"version": 1, "acls": [binding_to_json(binding())]}
