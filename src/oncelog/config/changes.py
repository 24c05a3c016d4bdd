"""What AlterConfigs and IncrementalAlterConfigs ask for, as a new override set.

Domain code: it sees a resource's current overrides and the requested changes, never the
wire. Both APIs end the same way: the resource's whole override set, to be validated and
stored by its owner (the topic's log manager, or the metadata store in cluster mode).

- `replaced` (AlterConfigs, deprecated in Kafka since 2.3): the request's keys become the
  whole set; a key left out returns to its default. A null value is INVALID_REQUEST.
- `changed` (IncrementalAlterConfigs, KIP-339): per key SET (0), DELETE (1), APPEND (2) or
  SUBTRACT (3). APPEND and SUBTRACT work on list keys only (INVALID_CONFIG otherwise, with
  Kafka's message) and start, as Kafka's controller does, from the resource's own value of
  the key, else the key's built-in default (not a value the resource inherits: the result
  must not depend on which broker answered). APPEND skips items already there; SUBTRACT
  removes every copy of each item. A null value is INVALID_REQUEST except for DELETE.
- Either way a key named twice in one resource is INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeVar

from oncelog.pacing import Steps, run_steps
from oncelog.protocol.messages import ErrorCode

T = TypeVar("T", bound=tuple)


class ConfigOperation(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigChangeError(Exception):
    """A change refused with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class PlannedChange:
    """A resource's changes, checked in the request's order before its owner reads its
    overrides: then `apply` costs the overrides and the keys set, with no pass in Python
    over what the request lists (a request may list a million). Every refusal here is
    the request's alone (not the overrides'): raised when applied, as the owner asks."""

    refusal: ConfigChangeError | None = None
    assigned: Mapping[str, str] = field(default_factory=dict)  # in the request's order
    deleted: frozenset[str] = frozenset()
    list_operations: Mapping[str, tuple[ConfigOperation, str]] = field(default_factory=dict)
    whole_set: bool = False  # AlterConfigs: `assigned` is the whole override set

    def apply(self, current: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
        """The override set after the changes. `current`: the overrides now; `defaults`:
        the keys' built-in defaults (where APPEND and SUBTRACT start when the key has no
        override)."""
        if self.refusal is not None:
            raise self.refusal
        if self.whole_set:
            return dict(self.assigned)
        overrides = dict(current)
        for name in self.deleted & current.keys():
            del overrides[name]
        overrides.update(self.assigned)  # a key set keeps its place, a new one goes last, in order
        for name, (operation, value) in self.list_operations.items():
            items = _items(current.get(name, defaults.get(name)))
            requested = _items(value)
            if operation == ConfigOperation.APPEND:
                items += [item for item in dict.fromkeys(requested) if item not in items]
            else:
                items = [item for item in items if item not in requested]
            overrides[name] = ",".join(items)
        return overrides


_OPERATIONS = {operation.value: operation for operation in ConfigOperation}


def _duplicates() -> ConfigChangeError:
    return ConfigChangeError(ErrorCode.invalid_request, "Error due to duplicate config keys")


def replaced(changes: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """The override set an AlterConfigs resource asks for."""
    return run_steps(plan_replaced(changes)).apply({}, {})


def changed(current: Mapping[str, str], defaults: Mapping[str, str],
            changes: Sequence[tuple[str, int, str | None]], list_keys: frozenset[str]) -> dict[str, str]:
    """The override set after an IncrementalAlterConfigs resource's changes. `current`:
    the overrides now; `defaults`: the keys' built-in defaults (where APPEND and SUBTRACT
    start when the key has no override)."""
    return run_steps(plan_changed(changes, list_keys)).apply(current, defaults)


def plan_replaced(changes: Iterable[tuple[str, str | None]]) -> Steps[PlannedChange]:
    """`replaced`, planned as steps (oncelog.pacing): a step per change."""
    listed = yield from _listed(changes)
    if listed is None:
        return PlannedChange(_duplicates())
    overrides: dict[str, str] = {}
    for name, value in listed:
        yield
        if value is None:
            return PlannedChange(ConfigChangeError(ErrorCode.invalid_request, f"Null value not supported for : {name}"))
        overrides[name] = value
    return PlannedChange(assigned=overrides, whole_set=True)


def plan_changed(changes: Iterable[tuple[str, int, str | None]], list_keys: frozenset[str]) -> Steps[PlannedChange]:
    """`changed`, planned as steps (oncelog.pacing): a step per change."""
    listed = yield from _listed(changes)
    if listed is None:
        return PlannedChange(_duplicates())
    assigned: dict[str, str] = {}
    deleted: set[str] = set()
    list_operations: dict[str, tuple[ConfigOperation, str]] = {}
    for name, code, value in listed:
        yield
        operation = _OPERATIONS.get(code)
        if operation is None:
            return PlannedChange(ConfigChangeError(ErrorCode.invalid_request,
                                                   f"Unknown operation type {code} for {name}"))
        if operation == ConfigOperation.DELETE:
            deleted.add(name)
            continue
        if value is None:
            return PlannedChange(ConfigChangeError(ErrorCode.invalid_request, f"Null value not supported for : {name}"))
        assigned[name] = value
        if operation != ConfigOperation.SET:
            if name not in list_keys:
                return PlannedChange(ConfigChangeError(
                    ErrorCode.invalid_config, f"Can't {operation.name} to key {name} because its type is not LIST."))
            list_operations[name] = (operation, value)
    return PlannedChange(assigned=assigned, deleted=frozenset(deleted), list_operations=list_operations)


def _listed(changes: Iterable[T]) -> Steps[list[T] | None]:
    """The changes in a list, or None when a key is named twice."""
    listed = []
    names: set[str] = set()
    for change in changes:
        yield
        listed.append(change)
        names.add(change[0])
    return listed if len(names) == len(listed) else None


def _items(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]
