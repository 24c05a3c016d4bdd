"""Where a standalone broker keeps its ACLs: one JSON file, replaced crash-safely
(temporary file, fsync, rename, fsync of the directory), so that a crash leaves the old
set or the new one, never a torn file.

    {"version": 1,
     "acls": [{"resource_type": "TOPIC", "name": "orders", "pattern_type": "LITERAL",
               "principal": "User:alice", "host": "*", "operation": "READ",
               "permission_type": "ALLOW"}, ...]}

Enum values are spelled by name, as kafka-acls prints them. `binding_to_json` and
`binding_from_json` are the encoding of one binding, shared with the cluster's store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeVar

from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_new_binding,
)
from oncelog.storage.errors import CorruptLogError, StorageError
from oncelog.storage.framed_file import replace_file

FILE_NAME = "__acls.json"  # in the first log dir, beside __broker_configs.meta
VERSION = 1

_E = TypeVar("_E", bound=IntEnum)


def binding_to_json(binding: AclBinding) -> dict[str, str]:
    pattern, entry = binding.pattern, binding.entry
    return {
        "resource_type": pattern.resource_type.name,
        "name": pattern.name,
        "pattern_type": pattern.pattern_type.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.name,
        "permission_type": entry.permission_type.name,
    }


def binding_from_json(document: Mapping[str, Any]) -> AclBinding:
    """The binding `document` (from binding_to_json) describes. Raises ValueError when it
    is malformed or not a binding CreateAcls would accept."""
    try:
        binding = AclBinding(
            ResourcePattern(_member(ResourceType, document["resource_type"]), _string(document["name"]),
                            _member(PatternType, document["pattern_type"])),
            AccessControlEntry(_string(document["principal"]), _string(document["host"]),
                               _member(AclOperation, document["operation"]),
                               _member(AclPermissionType, document["permission_type"])),
        )
    except KeyError as missing:
        raise ValueError(f"ACL binding {document!r} has no {missing}") from None
    except TypeError:
        raise ValueError(f"ACL binding {document!r} is not an object") from None
    error = validate_new_binding(binding)
    if error is not None:
        raise ValueError(f"ACL binding {document!r} is invalid: {error}")
    return binding


def _member(enum: type[_E], name: Any) -> _E:
    try:
        return enum[name]
    except (KeyError, TypeError):
        raise ValueError(f"{enum.__name__} {name!r} is unknown") from None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


class FileAclStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[AclBinding]:
        """The saved bindings; none when the file does not exist. Raises CorruptLogError
        when it cannot be understood (a broker must not start with fewer ACLs than it had),
        StorageError when it cannot be read."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(str(self.path), f"cannot read: {exc.strerror}", exc.errno) from exc
        try:
            document = json.loads(data)
            if not isinstance(document, dict) or document.get("version") != VERSION:
                raise ValueError(f"not a version {VERSION} ACL file")
            acls = document["acls"]
            if not isinstance(acls, list):
                raise ValueError('"acls" is not a list')
            return [binding_from_json(acl) for acl in acls]
        except (ValueError, KeyError) as exc:  # json.JSONDecodeError is a ValueError
            raise CorruptLogError(str(self.path), str(exc)) from None

    def save(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the saved bindings with `bindings`, durably (blocks for two fsyncs).
        Raises StorageError, leaving the old file in place."""
        document = {"version": VERSION, "acls": [binding_to_json(binding) for binding in bindings]}
        replace_file(self.path, json.dumps(document, indent=1).encode() + b"\n")
