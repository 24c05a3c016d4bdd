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

from collections.abc import Mapping, Sequence
from enum import IntEnum

from oncelog.protocol.messages import ErrorCode


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


def _no_duplicates(names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        raise ConfigChangeError(ErrorCode.invalid_request, "Error due to duplicate config keys")


def replaced(changes: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """The override set an AlterConfigs resource asks for."""
    _no_duplicates([name for name, _ in changes])
    overrides: dict[str, str] = {}
    for name, value in changes:
        if value is None:
            raise ConfigChangeError(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        overrides[name] = value
    return overrides


def changed(current: Mapping[str, str], defaults: Mapping[str, str],
            changes: Sequence[tuple[str, int, str | None]], list_keys: frozenset[str]) -> dict[str, str]:
    """The override set after an IncrementalAlterConfigs resource's changes. `current`:
    the overrides now; `defaults`: the keys' built-in defaults (where APPEND and SUBTRACT
    start when the key has no override)."""
    _no_duplicates([name for name, _, _ in changes])
    overrides = dict(current)
    for name, code, value in changes:
        try:
            operation = ConfigOperation(code)
        except ValueError:
            raise ConfigChangeError(ErrorCode.invalid_request, f"Unknown operation type {code} for {name}") from None
        if operation == ConfigOperation.DELETE:
            overrides.pop(name, None)
            continue
        if value is None:
            raise ConfigChangeError(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        if operation == ConfigOperation.SET:
            overrides[name] = value
        else:
            if name not in list_keys:
                raise ConfigChangeError(ErrorCode.invalid_config,
                                        f"Can't {operation.name} to key {name} because its type is not LIST.")
            base = overrides.get(name, defaults.get(name))
            items = _items(base)
            requested = _items(value)
            if operation == ConfigOperation.APPEND:
                items += [item for item in dict.fromkeys(requested) if item not in items]
            else:
                items = [item for item in items if item not in requested]
            overrides[name] = ",".join(items)
    return overrides


def _items(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]
